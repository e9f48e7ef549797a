/*
 * moe_shared_add: out[t] = routed[t] + sigmoid(x[t] . gate) * shared[t] for x, routed, shared and
 * out [tokens, hidden], gate [1, hidden]: Qwen2-MoE's gated shared expert (transformers'
 * Qwen2MoeSparseMoeBlock, `final + F.sigmoid(shared_expert_gate(x)) * shared_expert(x)`), one gate
 * value a token.
 *
 * One block per token, ts::plan_row's plan (the row kernels'): vec<VPT> when hidden % 8 == 0,
 * every pointer 16-byte aligned and hidden <= 4096 (1 or 2 16-byte vectors of each operand per
 * thread, one warp for hidden <= 256), else the generic kernel (scalar loads, up to 1024 threads).
 * The vec plans stop at 4096: the models with a gated shared expert are 2048 (Qwen1.5-MoE-A2.7B,
 * Qwen3-Next) and 3584 (Qwen2-57B-A14B) wide, and every instance needs a committed case in each
 * storage type. Memory-bound: x, routed and shared are read once, out written once, the gate row
 * (4 or 7 KB) comes from L2. The vec kernel issues all of a thread's loads (x and the gate for the
 * dot, routed and shared for the sum) before the block's reduction, so the row's reads are in
 * flight together, and keeps routed and shared in registers until the store.
 *
 * Numerics: the dot in fp32 (an fma chain over a thread's elements, then ts::block_sum), the
 * sigmoid 1 / (1 + expf(-z)) with the full-accuracy expf (2 fp32 ulps; not __expf, whose error
 * the CUDA guide gives as 2 + floor(|1.173 z|) ulps: a memory-bound kernel has no use for the
 * faster one) and an IEEE division, s within a few 2^-24 of sigmoid(z) relative; then
 * routed + s * shared as one fma, the one rounding of the contract to the storage type. expf of
 * z < -88 is inf and s exactly 0; of z > 88, 0 and s = 1: the saturated gate is exact.
 *
 * Every thread's reads of its token's x come before the block reduction's barrier and every
 * write after it, and each element of routed and shared is read and written by one thread: out
 * may equal routed (in place, as a decode step adds the shared expert into the experts' sum), x
 * or shared.
 */
#include "internal.h"

namespace {

/* The shared expert's gate: sigmoid(z) in fp32, full-accuracy expf and a correctly rounded
 * division (the library builds without --use_fast_math). */
__device__ __forceinline__ float shared_gate(float z) { return 1.0f / (1.0f + expf(-z)); }

template <int VPT, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    moe_shared_add_vec_kernel(T *out, const T *routed, const T *shared, const T *x, const T *gate, int hidden) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float r[VPT][8], s[VPT][8];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            float xv[8], gv[8];
            ts::load8(x + ro + c * 8, xv);
            ts::load8(gate + c * 8, gv);
            ts::load8(routed + ro + c * 8, r[k]);
            ts::load8(shared + ro + c * 8, s[k]);
#pragma unroll
            for (int j = 0; j < 8; ++j) dot = fmaf(xv[j], gv[j], dot);
        }
    }
    const float g = shared_gate(ts::block_sum(dot, scratch));
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < 8; ++j) r[k][j] = fmaf(g, s[k][j], r[k][j]);
            ts::store8(out + ro + c * 8, r[k]);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    moe_shared_add_generic_kernel(T *out, const T *routed, const T *shared, const T *x, const T *gate, int hidden) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float dot = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dot = fmaf(ts::to_float(x[ro + i]), ts::to_float(gate[i]), dot);
    const float g = shared_gate(ts::block_sum(dot, scratch));
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[ro + i] = ts::from_float<T>(fmaf(g, ts::to_float(shared[ro + i]), ts::to_float(routed[ro + i])));
}

template <typename T>
int launch(const char *op, T *out, const T *routed, const T *shared, const T *x, const T *gate, int tokens, int hidden,
           cudaStream_t stream) {
    const bool aligned = ts::aligned16(out) && ts::aligned16(routed) && ts::aligned16(shared) && ts::aligned16(x) &&
                         ts::aligned16(gate);
    ts::RowPlan plan = ts::plan_row(hidden, aligned);
    if (plan.vpt > 2) plan = ts::plan_row(hidden, false); /* past 4096: the generic kernel */
    const char *d = ts::dims("tokens=%d hidden=%d vpt=%d", tokens, hidden, plan.vpt);
    auto kernel = plan.vpt == 1   ? moe_shared_add_vec_kernel<1, T>
                  : plan.vpt == 2 ? moe_shared_add_vec_kernel<2, T>
                                  : moe_shared_add_generic_kernel<T>;
    TS_LAUNCH(op, kernel, tokens, plan.threads, 0, stream, d, out, routed, shared, x, gate, hidden);
    return TS_OK;
}

} // namespace

extern "C" int ts_moe_shared_add(void *out, const void *routed, const void *shared, const void *x, const void *gate,
                                 const ts_moe_shared_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("moe_shared_add");
    v.ptr(out, "out");
    v.ptr(routed, "routed");
    v.ptr(shared, "shared");
    v.ptr(x, "x");
    v.ptr(gate, "gate");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->tokens, "cfg->tokens");
    v.positive(cfg->hidden, "cfg->hidden");
    v.elements("x", {cfg->tokens, cfg->hidden});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(v.op(), static_cast<T *>(out), static_cast<const T *>(routed), static_cast<const T *>(shared),
                      static_cast<const T *>(x), static_cast<const T *>(gate), cfg->tokens, cfg->hidden, st);
    });
}
