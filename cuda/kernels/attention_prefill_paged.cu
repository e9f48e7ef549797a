/*
 * attention_prefill_paged: new tokens against their sequences' paged caches (touchstone.h states
 * the contract): attention_prefill's flash kernel (prefill_flash.cuh) with each K/V row read
 * through the block table and the causal mask offset by the prefix. One block of 4 warps per (64
 * query rows of one sequence, head), placed by paged_prefill_block; the grid is the most tiles
 * total_q rows over `batch` sequences can take (ceil(total_q / 64) + batch per head).
 */
#include "decode_mma.cuh"
#include "internal.h"
#include "mma.cuh"
#include "prefill_flash.cuh"

namespace {

using namespace ts_prefill;
using ts_decode::KVPages;

constexpr const char *kOp = "attention_prefill_paged";

template <int DP, bool CAP, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_paged_kernel(T *out, const T *q, const T *kc, const T *vc, const int32_t *q_starts,
                                   const int32_t *kv_lens, KVPages pages, int batch, int total_q, int nh, int nkv,
                                   int D, int window, float scale_log2, float softcap, float scale,
                                   ts::FaultRecord *fault) {
    ts::pdl_wait();
    paged_prefill_block<DP, CAP, T, T>(out, q, kc, vc, q_starts, kv_lens, pages, batch, total_q, nh, nkv, D, window,
                                       scale_log2, softcap, scale, nullptr, nullptr, 1,
                                       {ts::FAULT_PREFILL_Q_STARTS, ts::FAULT_PREFILL_KV_LEN,
                                        ts::FAULT_PREFILL_BLOCK_TABLE},
                                       fault);
}

template <typename T>
int launch(T *out, const T *q, const T *kc, const T *vc, const int32_t *table, const int32_t *q_starts,
           const int32_t *kv_lens, const ts_paged_prefill_config &c, cudaStream_t stream) {
    int shift = 0;
    while ((1 << shift) < c.block_size) ++shift;
    const KVPages pages{table, c.table_width, shift, c.num_blocks};
    const float scale_log2 = (float)((double)c.scale * 1.4426950408889634);
    const char *d = ts::dims("batch=%d total_q=%d num_blocks=%d block_size=%d table_width=%d n_heads=%d n_kv_heads=%d "
                             "head_dim=%d window=%d scale=%g softcap=%g",
                             c.batch, c.total_q, c.num_blocks, c.block_size, c.table_width, c.n_heads, c.n_kv_heads,
                             c.head_dim, c.window, c.scale, c.softcap);
    auto kernel_for = [](auto dp, auto cap) {
        return attention_prefill_paged_kernel<decltype(dp)::value, decltype(cap)::value, T>;
    };
    return launch_paged_prefill(kOp, kernel_for, false, c.head_dim, c.softcap, c.total_q, c.batch, c.n_heads, d,
                                stream, out, q, kc, vc, q_starts, kv_lens, pages, c.batch, c.total_q, c.n_heads,
                                c.n_kv_heads, c.head_dim, c.window, scale_log2, c.softcap, c.scale,
                                ts::fault_record());
}

} // namespace

extern "C" int ts_attention_prefill_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                                          const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                                          const ts_paged_prefill_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val(kOp);
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(block_table, "block_table");
    val.ptr(q_starts, "q_starts");
    val.ptr(kv_lens, "kv_lens");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    check_paged_prefill(val, *cfg, out, q, k_cache, v_cache);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const T *>(k_cache),
                      static_cast<const T *>(v_cache), block_table, q_starts, kv_lens, *cfg, st);
    });
}
