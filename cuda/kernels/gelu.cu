/*
 * gelu: exact GELU, out = 0.5 x (1 + erf(x / sqrt(2))) = 0.5 x erfc(-x / sqrt(2)): fp32 math with erfcf (not an
 * approximation: the tanh form differs by > 1% in the negative tail, which the tolerances see),
 * one fp16 rounding. Grid-stride, 16-byte vectors when aligned (see elementwise.cuh); out may
 * equal x.
 */
#include "elementwise.cuh"

namespace {

struct GeluOp {
    __device__ __forceinline__ float operator()(float x) const {
        // 1 + erf(z) == erfc(-z), and erfc keeps full relative precision in the negative tail,
        // where 1 + erff(z) cancels to a handful of bits (x = -5: 1 + erf = 5.7e-7, while
        // fp32 steps by 6e-8 near 1).
        return 0.5f * x * erfcf(-x * 0.70710678118654752f);
    }
};

template <bool VEC>
__global__ void __launch_bounds__(ts::kElementwiseThreads) gelu_kernel(__half *out, const __half *x, int64_t n) {
    ts::unary_body<VEC>(out, x, n, GeluOp{});
}

int launch_gelu(__half *out, const __half *x, int64_t n, cudaStream_t stream) {
    const char *op = "gelu";
    const bool vec = ts::aligned16(out) && ts::aligned16(x);
    const int threads = ts::kElementwiseThreads;
    const unsigned grid = ts::grid_for(ts::elementwise_work(n, vec), threads);
    const char *d = ts::dims("n=%lld vec=%d", (long long)n, (int)vec);
    if (vec) {
        auto kernel = gelu_kernel<true>;
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, n);
    } else {
        auto kernel = gelu_kernel<false>;
        TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, n);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_gelu(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gelu");
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
    return launch_gelu(static_cast<__half *>(out), static_cast<const __half *>(x), cfg->n, st);
}
