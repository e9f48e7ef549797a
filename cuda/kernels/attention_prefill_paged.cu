/*
 * attention_prefill_paged: new tokens against their sequences' paged caches (touchstone.h states
 * the contract): attention_prefill's flash kernel (prefill_flash.cuh) with each K/V row read
 * through the block table and the causal mask offset by the prefix. One block of 4 warps per (64
 * query rows of one sequence, head): sequences' tiles are numbered in order, so a block finds its
 * sequence by walking q_starts (the batch's starts are checked on the way, by every block alike,
 * so all agree on a bad one), and the grid is the most tiles total_q rows over `batch`
 * sequences can take (ceil(total_q / 64) + batch per head); blocks past the last tile exit.
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
    constexpr int kBr = Flash<DP, 1>::kBr;
    const int h = (int)(blockIdx.x % (unsigned)nh);
    int t = (int)(blockIdx.x / (unsigned)nh);
    const bool first_thread = blockIdx.x == 0 && threadIdx.x == 0;
    int prev = __ldg(q_starts);
    if (prev != 0) {
        if (first_thread) ts::report_fault(fault, ts::FAULT_PREFILL_Q_STARTS, 0, prev, total_q);
        return;
    }
    int b = -1, qs = 0, q_len = 0;
    for (int i = 0; i < batch; ++i) {
        const int next = __ldg(q_starts + i + 1);
        const int len = next - prev;
        if (len < 1 || next > total_q) {
            if (first_thread) ts::report_fault(fault, ts::FAULT_PREFILL_Q_STARTS, i + 1, next, total_q);
            return;
        }
        const int tiles = (len + kBr - 1) / kBr;
        if (b < 0 && t < tiles) {
            b = i, qs = prev, q_len = len;
        } else if (b < 0) {
            t -= tiles;
        }
        prev = next;
    }
    if (prev != total_q) {
        if (first_thread) ts::report_fault(fault, ts::FAULT_PREFILL_Q_STARTS, batch, prev, total_q);
        return;
    }
    if (b < 0) return; /* past the last tile */
    const int kv_len = __ldg(kv_lens + b), reach = pages.width << pages.shift;
    const bool reporter = t == 0 && h == 0; /* the sequence's first block */
    if (kv_len < q_len || kv_len > reach) {
        if (reporter && threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_PREFILL_KV_LEN, b, kv_len, reach);
        return;
    }
    if (!ts_decode::paged_rows_ok(pages, b, kv_len, reporter, fault, ts::FAULT_PREFILL_BLOCK_TABLE)) return;
    const int kvh = h / (nh / nkv);
    const int64_t q_stride = (int64_t)nh * D, kv_stride = (int64_t)nkv * D;
    const int64_t row0 = (int64_t)qs * nh + h;
    prefill_body<DP, 1, true, CAP, T>(out + row0 * D, q + row0 * D, q_stride, kc + (int64_t)kvh * D,
                                      vc + (int64_t)kvh * D, kv_stride, pages, pages.table + (int64_t)b * pages.width,
                                      t * kBr, q_len, kv_len, kv_len - q_len, 1, window, D, scale_log2, softcap, scale);
}

/* The most query tiles `batch` sequences of total_q rows can take: ceil(rows / kBr) each. */
inline int64_t max_tiles(int total_q, int batch, int kBr) { return ts::ceil_div(total_q, kBr) + batch; }

template <int DP, bool CAP, typename T>
int launch_dp(T *out, const T *q, const T *kc, const T *vc, const int32_t *table, const int32_t *q_starts,
              const int32_t *kv_lens, const ts_paged_prefill_config &c, cudaStream_t stream) {
    using F = Flash<DP, 1>;
    const size_t smem = F::bytes;
    if (smem > (size_t)ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "%s: cfg->head_dim = %d: needs %zu bytes of shared memory per block, the device allows %d",
                             kOp, c.head_dim, smem, ts::max_shared_optin());
    auto kernel = attention_prefill_paged_kernel<DP, CAP, T>;
    static std::atomic<int> smem_allowed_on{-1};
    if (smem > 48 * 1024) TS_CHECK(kOp, ts::allow_max_shared(kOp, kernel, smem_allowed_on));
    int shift = 0;
    while ((1 << shift) < c.block_size) ++shift;
    const KVPages pages{table, c.table_width, shift, c.num_blocks};
    const unsigned grid = (unsigned)(max_tiles(c.total_q, c.batch, F::kBr) * c.n_heads);
    const float scale_log2 = (float)((double)c.scale * 1.4426950408889634);
    const char *d = ts::dims("batch=%d total_q=%d num_blocks=%d block_size=%d table_width=%d n_heads=%d n_kv_heads=%d "
                             "head_dim=%d (padded %d) window=%d scale=%g softcap=%g",
                             c.batch, c.total_q, c.num_blocks, c.block_size, c.table_width, c.n_heads, c.n_kv_heads,
                             c.head_dim, DP, c.window, c.scale, c.softcap);
    TS_LAUNCH(kOp, kernel, grid, kThreads, smem, stream, d, out, q, kc, vc, q_starts, kv_lens, pages, c.batch, c.total_q,
              c.n_heads, c.n_kv_heads, c.head_dim, c.window, scale_log2, c.softcap, c.scale, ts::fault_record());
    return TS_OK;
}

template <bool CAP, typename T>
int launch_head_dim(T *out, const T *q, const T *kc, const T *vc, const int32_t *table, const int32_t *q_starts,
                    const int32_t *kv_lens, const ts_paged_prefill_config &c, cudaStream_t stream) {
    const int d = c.head_dim;
    if (d <= 32) return launch_dp<32, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 64) return launch_dp<64, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 80) return launch_dp<80, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 96) return launch_dp<96, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 128) return launch_dp<128, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 160) return launch_dp<160, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    if (d <= 192) return launch_dp<192, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    return launch_dp<256, CAP>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
}

/* The soft cap is the kernel's template argument CAP (prefill_flash.cuh). */
template <typename T>
int launch(T *out, const T *q, const T *kc, const T *vc, const int32_t *table, const int32_t *q_starts,
           const int32_t *kv_lens, const ts_paged_prefill_config &c, cudaStream_t stream) {
    if (c.softcap > 0.0f) return launch_head_dim<true>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
    return launch_head_dim<false>(out, q, kc, vc, table, q_starts, kv_lens, c, stream);
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
    val.dtype_storage(cfg->dtype, "cfg->dtype");
    val.positive(cfg->batch, "cfg->batch");
    val.positive(cfg->total_q, "cfg->total_q");
    ts_decode::check_pages(val, cfg->num_blocks, cfg->block_size, cfg->table_width);
    val.positive(cfg->n_heads, "cfg->n_heads");
    val.positive(cfg->n_kv_heads, "cfg->n_kv_heads");
    val.positive(cfg->head_dim, "cfg->head_dim");
    val.scale(cfg->scale, "cfg->scale");
    ts::check_window(val, cfg->window, true);
    ts::check_softcap(val, cfg->softcap);
    if (val.ok() && cfg->head_dim > 256)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: this build takes head dims up to 256", cfg->head_dim);
    if (val.ok()) ts::check_heads(val, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    val.elements("q", {cfg->total_q, cfg->n_heads, cfg->head_dim});
    val.elements("k_cache", {cfg->num_blocks, cfg->block_size, cfg->n_kv_heads, cfg->head_dim});
    val.elements("block_table", {cfg->batch, cfg->table_width});
    if (val.ok() && max_tiles(cfg->total_q, cfg->batch, kMinBr) * cfg->n_heads > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->total_q = %d: (ceil(total_q / %d) + batch) x n_heads exceeds the grid limit",
                 cfg->total_q, kMinBr);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k_cache) && ts::aligned16(v_cache)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k_cache/v_cache = %p/%p/%p/%p: this build needs 16-byte aligned buffers",
                 out, q, k_cache, v_cache);
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
