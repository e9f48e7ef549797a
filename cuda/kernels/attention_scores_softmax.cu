/*
 * attention_scores_softmax: probs [batch, n_heads, seq_q, seq_k] (fp32) = softmax(scale q k^T +
 * causal mask) per head, for q [batch, seq_q, n_heads, head_dim] and k [batch, seq_k, n_kv_heads,
 * head_dim] in the storage type T (fp16 or bf16, the kernel's template argument; read into fp32,
 * nothing rounded back), query head h reading kv head h / (n_heads / n_kv_heads). The queries are the last
 * seq_q positions of the keys: causal query i sees keys 0 .. seq_k - seq_q + i, every later key
 * gets probability 0. The probabilities themselves, for a model that needs them (attention
 * outputs, a custom mask, analysis), where attention_prefill never stores them.
 *
 * One block per 2 query rows of one head and batch: each key row is read once for both (a warp
 * per key, lanes over head_dim), and the scores, fp32 dot products reduced by shuffles, go straight
 * into their rows of probs, which then serve as the scratch of the softmax: per row the max,
 * exp(s - max) and its sum, one scaling. The
 * scores never leave the row the block owns (L1/L2-resident at any model's seq_k), where the
 * unfused form writes a [seq_q, seq_k] fp32 score matrix per head and reads it back.
 */
#include "internal.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 256;
constexpr int kRows = 2; /* query rows per block, each key row read once for both: measured on an H100 against 1 and 8 (docs/PERF.md, 2026-11-24) */

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scores_softmax_kernel(float *probs, const T *q, const T *k, int seq_q, int seq_k, int n_heads, int n_kv_heads,
                          int head_dim, int causal, float scale, float softcap) {
    ts::pdl_wait();
    __shared__ float qs[kRows][kMaxHeadDim];
    __shared__ float scratch[32];
    const int i0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
    const int rows = min(kRows, seq_q - i0);
    const int kvh = h / (n_heads / n_kv_heads);
    for (int e = threadIdx.x; e < kRows * head_dim; e += blockDim.x) { /* rows past the last: zeros */
        const int r = e / head_dim, t = e - r * head_dim;
        qs[r][t] = r < rows ? ts::to_float(q[(((int64_t)b * seq_q + i0 + r) * n_heads + h) * head_dim + t]) : 0.0f;
    }
    __syncthreads();
    /* Query i0 + r sees keys [0, visible(r)): >= 1, since seq_q <= seq_k. */
    auto visible = [&](int r) { return causal ? seq_k - seq_q + i0 + r + 1 : seq_k; };
    float *rows_out = probs + (((int64_t)b * n_heads + h) * seq_q + i0) * seq_k;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    float mx[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) mx[r] = -INFINITY;
    const int last = visible(rows - 1);
    for (int j = warp; j < last; j += warps) {
        const T *krow = k + (((int64_t)b * seq_k + j) * n_kv_heads + kvh) * head_dim;
        float acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
        for (int t = lane; t < head_dim; t += 32) {
            const float kv = ts::to_float(krow[t]);
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[r] = fmaf(qs[r][t], kv, acc[r]);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float s = ts::warp_sum(acc[r]) * scale;
            /* softcap > 0 (a uniform branch): cap · tanh(s / cap), before the mask (touchstone.h). */
            if (softcap > 0.0f) s = ts::softcap_score(s, softcap, 1.0f / softcap);
            if (r < rows && j < visible(r)) {
                if (lane == 0) rows_out[(int64_t)r * seq_k + j] = s;
                mx[r] = fmaxf(mx[r], s);
            }
        }
    }
    for (int r = 0; r < rows; ++r) {
        float *row = rows_out + (int64_t)r * seq_k;
        const int vis = visible(r);
        const float m = ts::block_max(mx[r], scratch); /* its barriers also publish the scores */
        float sum = 0.0f;
        for (int j = threadIdx.x; j < vis; j += blockDim.x) {
            const float e = expf(row[j] - m);
            row[j] = e;
            sum += e;
        }
        const float inv = 1.0f / ts::block_sum(sum, scratch);
        /* Each thread scales the entries it exponentiated above. */
        for (int j = threadIdx.x; j < seq_k; j += blockDim.x) row[j] = j < vis ? row[j] * inv : 0.0f;
    }
}

} // namespace

extern "C" int ts_attention_scores_softmax(void *probs, const void *q, const void *k, const ts_scores_config *cfg,
                                           void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("attention_scores_softmax");
    v.ptr(probs, "probs");
    v.ptr(q, "q");
    v.ptr(k, "k");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->batch, "cfg->batch");
    v.positive(cfg->seq_q, "cfg->seq_q");
    v.positive(cfg->seq_k, "cfg->seq_k");
    v.positive(cfg->n_heads, "cfg->n_heads");
    v.positive(cfg->n_kv_heads, "cfg->n_kv_heads");
    v.positive(cfg->head_dim, "cfg->head_dim");
    v.scale(cfg->scale, "cfg->scale");
    ts::check_softcap(v, cfg->softcap);
    if (v.ok() && cfg->n_heads % cfg->n_kv_heads != 0)
        v.fail(TS_ERR_SHAPE_MISMATCH, "cfg->n_kv_heads = %d: must divide n_heads (%d)", cfg->n_kv_heads, cfg->n_heads);
    if (v.ok() && cfg->seq_q > cfg->seq_k)
        v.fail(TS_ERR_SHAPE_MISMATCH, "cfg->seq_q = %d: must not exceed seq_k (%d): the queries are the last keys' positions",
               cfg->seq_q, cfg->seq_k);
    if (v.ok() && cfg->head_dim > kMaxHeadDim)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: this build supports up to %d", cfg->head_dim, kMaxHeadDim);
    if (v.ok() && (cfg->n_heads > 65535 || cfg->batch > 65535))
        v.fail(TS_ERR_UNSUPPORTED, "cfg->n_heads = %d, cfg->batch = %d: this build supports up to 65535 of each",
               cfg->n_heads, cfg->batch);
    v.elements("q", {cfg->batch, cfg->seq_q, cfg->n_heads, cfg->head_dim});
    v.elements("k", {cfg->batch, cfg->seq_k, cfg->n_kv_heads, cfg->head_dim});
    v.elements("probs", {cfg->batch, cfg->n_heads, cfg->seq_q, cfg->seq_k});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    const char *op = v.op();
    const char *d = ts::dims("batch=%d seq_q=%d seq_k=%d heads=%d/%d head_dim=%d causal=%d softcap=%g", cfg->batch,
                             cfg->seq_q, cfg->seq_k, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->causal,
                             cfg->softcap);
    const dim3 grid((unsigned)ts::ceil_div(cfg->seq_q, kRows), cfg->n_heads, cfg->batch);
    return ts::with_storage(cfg->dtype, [&](auto tag) -> int {
        using T = typename decltype(tag)::type;
        auto kernel = scores_softmax_kernel<T>;
        TS_LAUNCH(op, kernel, grid, kThreads, 0, st, d, static_cast<float *>(probs), static_cast<const T *>(q),
                  static_cast<const T *>(k), cfg->seq_q, cfg->seq_k, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim,
                  cfg->causal, cfg->scale, cfg->softcap);
        return TS_OK;
    });
}
