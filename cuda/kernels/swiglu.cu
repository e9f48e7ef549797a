/*
 * swiglu: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, fp32 math, one fp16 rounding.
 * The exponential and the reciprocal are single special-function instructions (ex2.approx,
 * rcp.approx): in an fp32 emulation at their error bounds the worst element after the fp16
 * rounding uses 0.49 of the tolerance, as exact math would. Grid-stride, 16-byte vectors when
 * aligned (see elementwise.cuh). Also the activation step of swiglu_ffn (ts::launch_swiglu).
 */
#include "elementwise.cuh"

namespace {

struct SwiGLUOp {
    __device__ __forceinline__ float operator()(float g, float u) const {
        /* exp(-g) = 2^(-g log2(e)); 1 / inf = 0 for g < -88, where the value is < 1e-36. */
        return g * ts::rcp_approx(1.0f + ts::ex2_approx(g * -1.44269504088896341f)) * u;
    }
};

template <bool VEC>
__global__ void __launch_bounds__(ts::kElementwiseThreads)
    swiglu_kernel(__half *out, const __half *gate, const __half *up, int64_t n) {
    ts::binary_body<VEC>(out, gate, up, n, SwiGLUOp{});
}

} // namespace

int ts::launch_swiglu(const char *op, __half *out, const __half *gate, const __half *up, int64_t n,
                      cudaStream_t stream) {
    const bool vec = aligned16(out) && aligned16(gate) && aligned16(up);
    const int threads = kElementwiseThreads;
    const char *d = dims("n=%lld vec=%d", (long long)n, (int)vec);
    if (vec) {
        auto kernel = swiglu_kernel<true>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, elementwise_grid(op, kernel, n, true, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, gate, up, n);
    } else {
        auto kernel = swiglu_kernel<false>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, elementwise_grid(op, kernel, n, false, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, gate, up, n);
    }
    return TS_OK;
}

extern "C" int ts_swiglu(void *out, const void *gate, const void *up, const ts_elementwise_config *cfg,
                         void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("swiglu");
    v.ptr(out, "out");
    v.ptr(gate, "gate");
    v.ptr(up, "up");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_f16(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::launch_swiglu(v.op(), static_cast<__half *>(out), static_cast<const __half *>(gate),
                             static_cast<const __half *>(up), cfg->n, st);
}
