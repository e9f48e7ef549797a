/*
 * gelu_tanh: tanh GELU (GPT-2 gelu_new), out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
 * computed as x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), in fp32, one fp16 rounding.
 * The exponential and the reciprocal are single special-function instructions (ex2.approx,
 * rcp.approx; a reciprocal of 0 once the denominator passes 2^126, where the true value is below
 * 1e-37): checked in an fp32 emulation over every finite fp16 input at their error bounds, the
 * worst element after the fp16 rounding uses 0.487 of the tolerance, as exact math would. With
 * expf, an IEEE division and one 16-byte load in flight per thread the kernel reached 62% of copy
 * bandwidth on the H200, with these and 4 (elementwise.cuh) 76-78%.
 * Grid-stride, 16-byte vectors when aligned (see elementwise.cuh); out may equal x.
 */
#include "elementwise.cuh"

namespace {

struct GeluTanhOp {
    __device__ __forceinline__ float operator()(float x) const {
        // 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)): the same function without the cancellation of
        // 1 + tanhf(u) for negative u, which loses most bits of the tiny outputs of the tail.
        // exp(-2u) = 2^(x (c1 + c2 x^2)), c1 = -2 sqrt(2/pi) log2(e), c2 = 0.044715 c1.
        const float e = ts::ex2_approx(x * fmaf(x * x, -0.102943240f, -2.302208198f));
        return x * ts::rcp_approx(1.0f + e); /* 1 / inf = 0: x < -10, where the value is < 1e-37 */
    }
};

template <bool VEC>
__global__ void __launch_bounds__(ts::kElementwiseThreads)
    gelu_tanh_kernel(__half *out, const __half *x, int64_t n) {
    ts::unary_body<VEC>(out, x, n, GeluTanhOp{});
}

int launch_gelu_tanh(__half *out, const __half *x, int64_t n, cudaStream_t stream) {
    const char *op = "gelu_tanh";
    const bool vec = ts::aligned16(out) && ts::aligned16(x);
    const int threads = ts::kElementwiseThreads;
    const char *d = ts::dims("n=%lld vec=%d", (long long)n, (int)vec);
    if (vec) {
        auto kernel = gelu_tanh_kernel<true>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, ts::elementwise_grid(op, kernel, n, true, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, n);
    } else {
        auto kernel = gelu_tanh_kernel<false>;
        static std::atomic<uint64_t> occupancy{0};
        unsigned grid = 1;
        TS_CHECK(op, ts::elementwise_grid(op, kernel, n, false, occupancy, &grid));
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, n);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_gelu_tanh(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gelu_tanh");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_f16(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_gelu_tanh(static_cast<__half *>(out), static_cast<const __half *>(x), cfg->n, st);
}
