/*
 * logit_softcap: out = softcap · tanh(x / softcap) elementwise, Gemma 2's final logit
 * soft-capping (transformers' Gemma2ForCausalLM: logits / cap, tanh, * cap; cap 30 in every
 * published config), over fp32 logits (what the lm-head gemm writes) or 16-bit ones.
 *
 * The cap is internal.h's softcap_score, the attention kernels' formula, so the final and the
 * attention soft caps agree: x · (1 / cap) (one more rounding than the division, 2^-24
 * relative), tanh as 1 - 2 / (e^(2x) + 1) by ex2.approx and rcp.approx, within 2^-21 of the cap
 * absolute (its comment has the measurement; tools/gen-golden/selftest/logit_softcap.py emulates
 * it at the SFU's error bounds on every committed case: 1.42e-5 at cap 30, 2.26e-5 at 50). Past
 * |x / cap| = 44.4 the exponential over- or underflows and out is exactly ±cap, so ±1e4 logits
 * and ±inf give ±cap; NaN stays NaN. The error is absolute (the cancellation of
 * cap - 2cap/(e + 1) near 0), which is what logits need: softmax and sampling see differences of
 * logits, and 2^-21 of 30 is 1.4e-5. Then one rounding to the storage type (fp32: none).
 *
 * Memory-bound: one read and one write of each element, a few FLOPs and two SFU ops. 16-bit
 * storage takes elementwise.cuh's unary kernel (16-byte vectors of 8, a scalar tail of n % 8);
 * fp32 its own twin below, 16-byte vectors of 4 and a scalar tail of n % 4, on the same grid
 * rule (one vector a thread, a fresh block for each retired one; elementwise.cuh's comment says
 * why that reaches copy bandwidth). Every element is read and written by one thread, so out may
 * equal x.
 */
#include "elementwise.cuh"

namespace {

/* The cap and its reciprocal travel in the functor (a kernel argument), computed once per call. */
struct LogitSoftcapOp {
    float cap, inv_cap;
    __device__ __forceinline__ float operator()(float x) const { return ts::softcap_score(x, cap, inv_cap); }
};

/* fp32 logits: VEC (both pointers 16-byte aligned) takes n / 4 float4 vectors, one a thread
 * per grid step, then the n % 4 tail element by element; otherwise every element scalar. */
template <bool VEC>
__global__ void __launch_bounds__(ts::kElementwiseThreads)
    logit_softcap_f32_kernel(float *out, const float *x, int64_t n, LogitSoftcapOp f) {
    ts::pdl_wait();
    const int64_t NT = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 4;
        for (int64_t i = tid; i < nv; i += NT) {
            float4 v = reinterpret_cast<const float4 *>(x)[i];
            v.x = f(v.x), v.y = f(v.y), v.z = f(v.z), v.w = f(v.w);
            reinterpret_cast<float4 *>(out)[i] = v;
        }
        start = nv * 4;
    }
    for (int64_t i = start + tid; i < n; i += NT) out[i] = f(x[i]);
}

/* Blocks of kElementwiseThreads covering n / 4 vectors (vec) or n elements once; the loops
 * stride, so a grid clipped to the launch limit stays correct. */
unsigned f32_grid(int64_t n, bool vec) {
    int64_t g = ts::ceil_div(vec ? n / 4 : n, (int64_t)ts::kElementwiseThreads);
    if (g > 0x7fffffff) g = 0x7fffffff;
    return (unsigned)(g < 1 ? 1 : g);
}

int launch_f32(const char *op, float *out, const float *x, int64_t n, cudaStream_t st, LogitSoftcapOp f) {
    const bool vec = ts::aligned16(out) && ts::aligned16(x);
    const char *d = ts::dims("n=%lld vec=%d cap=%g", (long long)n, (int)vec, (double)f.cap);
    if (vec) {
        auto kernel = logit_softcap_f32_kernel<true>;
        TS_LAUNCH(op, kernel, f32_grid(n, true), ts::kElementwiseThreads, 0, st, d, out, x, n, f);
    } else {
        auto kernel = logit_softcap_f32_kernel<false>;
        TS_LAUNCH(op, kernel, f32_grid(n, false), ts::kElementwiseThreads, 0, st, d, out, x, n, f);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_logit_softcap(void *out, const void *x, const ts_logit_softcap_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "logit_softcap";
    ts::Validator v(op);
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_in(cfg->dtype, "cfg->dtype", {TS_F32, TS_F16, TS_BF16});
    if (v.ok() && cfg->n < 0) v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->n = %lld: must be >= 0", (long long)cfg->n);
    if (cfg->n > 0) v.elements("cfg->n", {cfg->n});
    v.scale(cfg->softcap, "cfg->softcap"); /* > 0 and finite */
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(op, stream, &st);
    if (s != TS_OK || cfg->n == 0) return s;
    const LogitSoftcapOp f{cfg->softcap, 1.0f / cfg->softcap};
    if (cfg->dtype == TS_F32) return launch_f32(op, static_cast<float *>(out), static_cast<const float *>(x), cfg->n, st, f);
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return ts::launch_unary(op, static_cast<T *>(out), static_cast<const T *>(x), cfg->n, st, f);
    });
}
