/*
 * attention_prefill: causal (or full) GQA attention over whole sequences, flash-attention 2.
 * q [batch, seq, n_heads, D], k/v [batch, seq, n_kv_heads, D], out like q; query head h reads kv
 * head h / (n_heads / n_kv_heads). Every tensor in the storage type T (fp16 or bf16, the kernel's
 * last template argument): the tensor cores take either (mma.cuh), with the same fragments.
 *
 * One block of 4 warps per (query tile, batch, head); blocks are numbered heaviest causal tile
 * first across every head, and a KV group's heads are adjacent (their K/V tiles meet in L2).
 * Each warp owns 16 or 32 query rows (one or two m16 tiles: Flash, pick_two_mtiles) and keeps
 * everything of them in registers:
 *  - Q, K and V tiles are staged in shared memory by 16-byte cp.async copies (rows past the
 *    sequence and columns past D zero-filled, D padded to DP, a multiple of 16); each staged row
 *    is padded by 16 bytes, so the 8 row addresses of an ldmatrix hit distinct banks.
 *  - S = Q K^T with mma.sync m16n8k16 (T x T, fp32 accumulate); Q's fragments stay in
 *    registers for DP <= 128 and are re-read from shared memory above that (register budget).
 *  - an online softmax in fp32 on the S accumulators: scores scaled by scale * log2(e) and
 *    exponentiated with ex2 (one FMA and one SFU op a score), running max and sum per row, the
 *    4 lanes of a row reduced with two shuffles; keys past the causal diagonal or the sequence
 *    end are -inf (probability 0); tiles wholly past the diagonal are never loaded.
 *  - O += P V, m16n8k16 again: the S accumulators of two adjacent 8-key tiles are exactly P's A
 *    fragment once rounded to T (no shared-memory round trip); V's B fragments come from
 *    ldmatrix.trans. O stays in fp32 registers, rescaled per tile.
 * The pipeline overlaps the copies with the math (one K and one V buffer): V_j is fetched while
 * S_j is computed, K_{j+1} while the softmax and P V_j run. Output: O / l rounded once to T.
 * P is rounded to T for the tensor cores, the rounding the tolerance allows for (the running sum
 * adds the fp32 values; over a row's many keys the roundings of P average out, and the two differ
 * by far less than the rounding of the output to T: for bf16 both are 8 times coarser than for
 * fp16, which bf16's tolerance budgets).
 */
#include "internal.h"
#include "mma.cuh"
#include "prefill_flash.cuh"

namespace {

using namespace ts_prefill;

/* The minimum-blocks hint of 1 for one m-tile changes only ptxas's register allocation (64:
 * 178 registers against 168, two blocks an SM rather than three): Qwen2.5's causal S=2048 runs in
 * 0.0503 ms with it, 0.0530 without (H100, both in one job). Two m-tiles keep the default, which
 * was faster for them (non-causal S=2048 0.0668 against 0.0707). */
template <int DP, int MT, bool CAP, typename T>
__global__ void __launch_bounds__(kThreads, MT == 1 ? 1 : 0)
    attention_prefill_kernel(T *out, const T *q, const T *k, const T *v, int seq, int nh, int nkv, int D, int causal,
                             int window, float scale_log2, float softcap, float scale, int q_tiles) {
    ts::pdl_wait();
    const int bhs = (int)(gridDim.x / (unsigned)q_tiles); /* batch x heads */
    const int tile = q_tiles - 1 - (int)(blockIdx.x / (unsigned)bhs);
    const int bh = (int)(blockIdx.x % (unsigned)bhs);
    const int h = bh % nh, b = bh / nh;
    const int kvh = h / (nh / nkv);
    const int64_t q_stride = (int64_t)nh * D, kv_stride = (int64_t)nkv * D;
    const int64_t seq_q = (int64_t)b * seq * nh + h, seq_kv = (int64_t)b * seq * nkv + kvh;
    prefill_body<DP, MT, false, CAP, T>(out + seq_q * D, q + seq_q * D, q_stride, k + seq_kv * D, v + seq_kv * D,
                                        kv_stride, ts_decode::KVPages{nullptr, 0, 0, 0}, nullptr,
                                        tile * Flash<DP, MT>::kBr, seq, seq, 0, causal, window, D, scale_log2, softcap,
                                        scale);
}

template <int DP, int MT, bool CAP, typename T>
int launch_dp(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c, cudaStream_t stream) {
    const char *op = "attention_prefill";
    const size_t smem = Flash<DP, MT>::bytes;
    if (smem > (size_t)ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "attention_prefill: cfg->head_dim = %d: needs %zu bytes of shared memory per block, the "
                             "device allows %d",
                             c.head_dim, smem, ts::max_shared_optin());
    auto kernel = attention_prefill_kernel<DP, MT, CAP, T>;
    static std::atomic<int> smem_allowed_on{-1};
    if (smem > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, kernel, smem_allowed_on));
    const int q_tiles = (int)ts::ceil_div(c.seq_len, Flash<DP, MT>::kBr);
    const unsigned grid = (unsigned)((int64_t)q_tiles * c.n_heads * c.batch);
    /* ex2 of scale * log2(e) * s: the product rounded once, in double first. */
    const float scale_log2 = (float)((double)c.scale * 1.4426950408889634);
    const char *d = ts::dims("batch=%d seq_len=%d n_heads=%d n_kv_heads=%d head_dim=%d (padded %d, %d rows a warp) causal=%d window=%d scale=%g softcap=%g",
                             c.batch, c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim, DP, 16 * MT, c.causal, c.window, c.scale,
                             c.softcap);
    TS_LAUNCH(op, kernel, grid, kThreads, smem, stream, d, out, q, k, v, c.seq_len, c.n_heads, c.n_kv_heads,
              c.head_dim, c.causal != 0 ? 1 : 0, c.window, scale_log2, c.softcap, c.scale, q_tiles);
    return TS_OK;
}

/* Two m-tiles per warp (32 query rows) pay wherever no block's length decides the time: always
 * without the causal mask, and with it when the grid holds enough long rows to balance (H100,
 * S = 2048: 1.1-1.3x faster at 32 heads, 1.08x slower at Qwen2.5-0.5B's 14; slower at S <= 256,
 * where one wave of short blocks is all there is). */
bool pick_two_mtiles(const ts_attention_config &c) {
    if (c.head_dim > 128) return false;
    return c.causal == 0 || (c.seq_len >= 1024 && (int64_t)c.batch * c.n_heads >= 24);
}

template <int DP, bool CAP, typename T>
int launch_mt(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c, cudaStream_t stream) {
    if constexpr (DP <= 128) {
        if (pick_two_mtiles(c)) return launch_dp<DP, 2, CAP>(out, q, k, v, c, stream);
    }
    return launch_dp<DP, 1, CAP>(out, q, k, v, c, stream);
}

template <bool CAP, typename T>
int launch_head_dim(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c, cudaStream_t stream) {
    const int d = c.head_dim;
    if (d <= 32) return launch_mt<32, CAP>(out, q, k, v, c, stream);
    if (d <= 64) return launch_mt<64, CAP>(out, q, k, v, c, stream);
    if (d <= 80) return launch_mt<80, CAP>(out, q, k, v, c, stream);
    if (d <= 96) return launch_mt<96, CAP>(out, q, k, v, c, stream);
    if (d <= 128) return launch_mt<128, CAP>(out, q, k, v, c, stream);
    if (d <= 160) return launch_mt<160, CAP>(out, q, k, v, c, stream);
    if (d <= 192) return launch_mt<192, CAP>(out, q, k, v, c, stream);
    return launch_mt<256, CAP>(out, q, k, v, c, stream);
}

/* The soft cap is the kernels' template argument CAP (prefill_flash.cuh): the uncapped
 * instances compile to the kernel without it. */
template <typename T>
int launch_attention_prefill(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c,
                             cudaStream_t stream) {
    if (c.softcap > 0.0f) return launch_head_dim<true>(out, q, k, v, c, stream);
    return launch_head_dim<false>(out, q, k, v, c, stream);
}

} // namespace

extern "C" int ts_attention_prefill(void *out, const void *q, const void *k, const void *v,
                                    const ts_attention_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val("attention_prefill");
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k, "k");
    val.ptr(v, "v");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    val.dtype_storage(cfg->dtype, "cfg->dtype");
    val.positive(cfg->batch, "cfg->batch");
    val.positive(cfg->seq_len, "cfg->seq_len");
    val.positive(cfg->n_heads, "cfg->n_heads");
    val.positive(cfg->n_kv_heads, "cfg->n_kv_heads");
    val.positive(cfg->head_dim, "cfg->head_dim");
    val.scale(cfg->scale, "cfg->scale");
    ts::check_window(val, cfg->window, cfg->causal != 0);
    ts::check_softcap(val, cfg->softcap);
    ts::check_heads(val, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    val.elements("q", {cfg->batch, cfg->seq_len, cfg->n_heads, cfg->head_dim});
    if (val.ok() && ts::ceil_div(cfg->seq_len, kMinBr) * cfg->n_heads * cfg->batch > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->batch = %d: batch x n_heads x ceil(seq_len / %d) exceeds the grid limit",
                 cfg->batch, kMinBr);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k) && ts::aligned16(v)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k/v = %p/%p/%p/%p: this build needs 16-byte aligned buffers", out, q, k,
                 v);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_attention_prefill(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const T *>(k),
                                        static_cast<const T *>(v), *cfg, st);
    });
}
