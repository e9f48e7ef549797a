/*
 * moe_router: each token's top_k experts from the router's logits, as transformers' MoE routers
 * choose them (touchstone.h states the contract): p = softmax(float(logits)), the top_k p in
 * descending order, renormalised to sum to 1 when asked.
 *
 * One warp per token. Softmax is monotone, so the top_k probabilities are the top_k logits:
 * the selection compares the logits themselves (exact, fp16 or bf16 widened to fp32), top_k
 * rounds of a warp arg-max in which equal logits rank the lower expert index first (the
 * contract's tie rule), each chosen expert then flagged in shared memory. The probabilities are
 * expf(l - max) / sum over all experts in fp32 (the row's max and sum warp reductions first);
 * renormalising divides by their sum in rank order. The row lives in shared memory (up to 1024
 * experts a warp: 4 KiB of logits and 1 KiB of flags).
 */
#include "internal.h"

#include <cfloat>

namespace {

constexpr int kRouterWarps = 4;
constexpr int kMaxExperts = 1024;

template <typename T>
__global__ void moe_router_kernel(float *weights, int32_t *ids, const T *logits, int tokens, int experts, int top_k,
                                  int renormalize) {
    ts::pdl_wait();
    __shared__ float row_s[kRouterWarps][kMaxExperts];
    __shared__ unsigned char taken_s[kRouterWarps][kMaxExperts];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * kRouterWarps + warp;
    if (t >= tokens) return;
    float *row = row_s[warp];
    unsigned char *taken = taken_s[warp];
    const T *src = logits + (int64_t)t * experts;
    float mx = -FLT_MAX;
    for (int e = lane; e < experts; e += 32) {
        row[e] = ts::to_float(src[e]);
        taken[e] = 0;
        mx = fmaxf(mx, row[e]);
    }
    mx = ts::warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < experts; e += 32) sum += expf(row[e] - mx);
    sum = ts::warp_sum(sum);
    __syncwarp();
    float chosen = 0.0f; /* lane 0: the chosen probabilities' sum, in rank order */
    for (int j = 0; j < top_k; ++j) {
        float best = -FLT_MAX;
        int best_e = experts;
        for (int e = lane; e < experts; e += 32) {
            if (!taken[e] && (row[e] > best || best_e == experts)) { /* ascending e: ties keep the lower */
                best = row[e];
                best_e = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
            if (oe < experts && (best_e == experts || ob > best || (ob == best && oe < best_e))) {
                best = ob;
                best_e = oe;
            }
        }
        if (lane == 0) {
            taken[best_e] = 1;
            const float p = expf(best - mx) / sum;
            chosen += p;
            weights[(int64_t)t * top_k + j] = p;
            ids[(int64_t)t * top_k + j] = best_e;
        }
        __syncwarp();
    }
    if (renormalize && lane == 0) {
        for (int j = 0; j < top_k; ++j) weights[(int64_t)t * top_k + j] /= chosen;
    }
}

} // namespace

extern "C" int ts_moe_router(float *weights, int32_t *ids, const void *logits, const ts_moe_router_config *cfg,
                             void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("moe_router");
    v.ptr(weights, "weights");
    v.ptr(ids, "ids");
    v.ptr(logits, "logits");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->tokens, "cfg->tokens");
    v.positive(cfg->experts, "cfg->experts");
    v.positive(cfg->top_k, "cfg->top_k");
    if (!v.ok()) return v.status();
    if (cfg->experts > kMaxExperts)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->experts = %d: at most %d", cfg->experts, kMaxExperts);
    else if (cfg->top_k > cfg->experts)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->top_k = %d: at most cfg->experts = %d", cfg->top_k, cfg->experts);
    else if (cfg->renormalize != 0 && cfg->renormalize != 1)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->renormalize = %d: want 0 or 1", cfg->renormalize);
    if (!v.ok()) return v.status();
    v.elements("logits", {cfg->tokens, cfg->experts});
    v.elements("weights", {cfg->tokens, cfg->top_k});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    const char *d = ts::dims("tokens=%d experts=%d top_k=%d renormalize=%d dtype=%s", cfg->tokens, cfg->experts,
                             cfg->top_k, cfg->renormalize, ts::dtype_name(cfg->dtype));
    return ts::with_storage(cfg->dtype, [&](auto tag) -> int {
        using T = typename decltype(tag)::type;
        auto kernel = moe_router_kernel<T>;
        TS_LAUNCH(v.op(), kernel, (unsigned)ts::ceil_div(cfg->tokens, kRouterWarps), kRouterWarps * 32, 0, st, d,
                  weights, ids, static_cast<const T *>(logits), cfg->tokens, cfg->experts, cfg->top_k,
                  cfg->renormalize);
        return TS_OK;
    });
}
