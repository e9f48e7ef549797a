/*
 * attention_prefill_paged_fp8: attention_prefill_paged over a paged E4M3 pool (chunked prefill
 * and prefix caching against vLLM's paged cache with kv_cache_dtype "fp8"; touchstone.h states
 * the contract). The same flash kernel (prefill_flash.cuh's paged_prefill_block): each K and V
 * tile lands in shared memory as codes by cp.async, through the block table, and is converted to
 * T in place once it has landed (exact: every E4M3 value is an fp16 and a bf16 value), so Q K^T
 * and P V run on the same m16n8k16 mma as the 16-bit op; the key scale joins the scores' scale
 * and the value scale multiplies the output once. Head dims that are multiples of 8 up to 256.
 */
#include "decode_mma.cuh"
#include "internal.h"
#include "mma.cuh"
#include "prefill_flash.cuh"

namespace {

using namespace ts_prefill;
using ts_decode::KVPages;

constexpr const char *kOp = "attention_prefill_paged_fp8";

template <int DP, bool CAP, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_paged_fp8_kernel(T *out, const T *q, const unsigned char *kc, const unsigned char *vc,
                                       const int32_t *q_starts, const int32_t *kv_lens, KVPages pages, int batch,
                                       int total_q, int nh, int nkv, int D, int window, float scale,
                                       float softcap, const float *k_scale, const float *v_scale, int scale_heads,
                                       ts::FaultRecord *fault) {
    ts::pdl_wait();
    paged_prefill_block<DP, CAP, T, unsigned char>(out, q, kc, vc, q_starts, kv_lens, pages, batch, total_q, nh, nkv,
                                                   D, window, 0.0f, softcap, scale, k_scale, v_scale, scale_heads,
                                                   {ts::FAULT_PREFILL_FP8_Q_STARTS, ts::FAULT_PREFILL_FP8_KV_LEN,
                                                    ts::FAULT_PREFILL_FP8_BLOCK_TABLE},
                                                   fault);
}

template <typename T>
int launch(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *table,
           const int32_t *q_starts, const int32_t *kv_lens, const float *ks, const float *vs,
           const ts_paged_prefill_fp8_config &c, cudaStream_t stream) {
    int shift = 0;
    while ((1 << shift) < c.block_size) ++shift;
    const KVPages pages{table, c.table_width, shift, c.num_blocks};
    const char *d = ts::dims("batch=%d total_q=%d num_blocks=%d block_size=%d table_width=%d n_heads=%d n_kv_heads=%d "
                             "head_dim=%d window=%d scale=%g softcap=%g scale_heads=%d (e4m3 cache)",
                             c.batch, c.total_q, c.num_blocks, c.block_size, c.table_width, c.n_heads, c.n_kv_heads,
                             c.head_dim, c.window, c.scale, c.softcap, c.scale_heads);
    auto kernel_for = [](auto dp, auto cap) {
        return attention_prefill_paged_fp8_kernel<decltype(dp)::value, decltype(cap)::value, T>;
    };
    return launch_paged_prefill(kOp, kernel_for, true, c.head_dim, c.softcap, c.total_q, c.batch, c.n_heads, d,
                                stream, out, q, kc, vc, q_starts, kv_lens, pages, c.batch, c.total_q, c.n_heads,
                                c.n_kv_heads, c.head_dim, c.window, c.scale, c.softcap, ks, vs, c.scale_heads,
                                ts::fault_record());
}

} // namespace

extern "C" int ts_attention_prefill_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                              const int32_t *block_table, const int32_t *q_starts,
                                              const int32_t *kv_lens, const float *k_scale, const float *v_scale,
                                              const ts_paged_prefill_fp8_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val(kOp);
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(block_table, "block_table");
    val.ptr(q_starts, "q_starts");
    val.ptr(kv_lens, "kv_lens");
    val.ptr(k_scale, "k_scale");
    val.ptr(v_scale, "v_scale");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    check_paged_prefill(val, *cfg, out, q, k_cache, v_cache);
    if (val.ok() && cfg->scale_heads != 1 && cfg->scale_heads != cfg->n_kv_heads)
        val.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale_heads = %d: want 1 (per tensor) or cfg->n_kv_heads = %d (per head)",
                 cfg->scale_heads, cfg->n_kv_heads);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const unsigned char *>(k_cache),
                      static_cast<const unsigned char *>(v_cache), block_table, q_starts, kv_lens, k_scale, v_scale,
                      *cfg, st);
    });
}
