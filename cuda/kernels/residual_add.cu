/*
 * residual_add: out = x + residual over n fp16 elements; out may equal x (in place).
 * Grid-stride, 16-byte vectors of 8 halves when every pointer is 16-byte aligned, fp32 add,
 * one fp16 rounding.
 */
#include "elementwise.cuh"

namespace {

struct AddOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

template <bool VEC>
__global__ void __launch_bounds__(ts::kElementwiseThreads)
    residual_add_kernel(__half *out, const __half *x, const __half *residual, int64_t n) {
    ts::binary_body<VEC>(out, x, residual, n, AddOp{});
}

int launch_residual_add(__half *out, const __half *x, const __half *residual, int64_t n, cudaStream_t stream) {
    const char *op = "residual_add";
    const bool vec = ts::aligned16(out) && ts::aligned16(x) && ts::aligned16(residual);
    const int threads = ts::kElementwiseThreads;
    const char *d = ts::dims("n=%lld vec=%d", (long long)n, (int)vec);
    if (vec) {
        auto kernel = residual_add_kernel<true>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, ts::elementwise_grid(op, kernel, n, true, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, residual, n);
    } else {
        auto kernel = residual_add_kernel<false>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, ts::elementwise_grid(op, kernel, n, false, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, residual, n);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_residual_add(void *out, const void *x, const void *residual, const ts_elementwise_config *cfg,
                               void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("residual_add");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(residual, "residual");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_f16(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_residual_add(static_cast<__half *>(out), static_cast<const __half *>(x),
                               static_cast<const __half *>(residual), cfg->n, st);
}
