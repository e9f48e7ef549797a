/*
 * attention_decode: one new query per sequence against its KV cache, flash-decoding.
 * q [batch, n_heads, D], k/v caches [batch, max_len, n_kv_heads, D], cache_lens int32 [batch];
 * sequence b attends to positions [0, cache_lens[b]) and never reads a position at or beyond it.
 * cache_lens are checked on the device: a length outside [1, max_len] is recorded in the fault
 * record (TS_ERR_INDEX at the next ts_synchronize / ts_copy_to_host) and that sequence is skipped.
 * q, the caches and out are in the storage type T (fp16 or bf16, every kernel's last template
 * argument); all math is fp32 and out is rounded to T once.
 *
 * Tensor-core kernel (D in {32, 64, 96, 128}): one block of 4 warps per (sequence, kv head, group
 * of up to 16 query heads, split of the cache length); each block reads each K/V row of its split
 * ONCE for every query head of its GQA group. The warps take 16-key tiles of the split in turn,
 * each with its own online softmax and no block barrier until the end:
 *  - S = Q K^T with mma.sync m16n8k16 (T in, fp32 accumulate): the group's heads are the 16
 *    rows (padded with zeros), 8 keys the columns. The dot product does not depend on the order
 *    of the dims, so k-slot 2t + e of k-step s stands for dim t * D/4 + 4s + e (and 2t + 8 + e for
 *    t * D/4 + 4s + 2 + e): lane (g, t) then needs dims [t D/4, (t+1) D/4) of key g, one
 *    contiguous piece, loaded straight from global memory with 16-byte loads (4 lanes cover a
 *    row), and Q uses the same permutation.
 *  - online softmax in fp32 (__expf of x - max; scores scaled first), per head row: the row's
 *    scores sit in the 4 lanes of one lane group, reduced with two shuffles.
 *  - O += P V, m16n8k16 again: the S accumulators are already P's A fragment. The output
 *    columns are permuted instead of the keys: n-tile j, column c stands for dim c * D/8 + j, so
 *    lane (g, t) needs dims [g D/8, (g+1) D/8) of keys 2t, 2t+1, 2t+8, 2t+9, contiguous again,
 *    paired into T x2 B fragments with byte permutes (16-bit moves: the same for both types). P
 *    is split into p_hi + p_lo, each rounded to T, and both are multiplied (two mma per tile): P V
 *    keeps near-fp32 accuracy (rounding P to fp16 once, as prefill does, is up to u * |v| per
 *    weight, more than this op's atol of 1e-4 allows). hi + lo is within 2^-22 |p| for fp16
 *    (above its subnormals) and 2^-16 |p| for bf16 (8 + 8 significant bits, with fp32's range:
 *    no subnormal loss), the latter still far below the rounding of the output to bf16 (2^-8).
 * The warps' (max, sum, O) merge through shared memory at the end. Splits (decode_splits): long
 * ones (2-4 steps of every warp) that put a block on every SM, or enough to fill the resident
 * blocks (from the occupancy calculator) in whole waves when there are more groups. With
 * one split with keys the block writes the output; otherwise it writes fp32 partials (max, sum,
 * unnormalised O) to a workspace, and the last block of its (sequence, kv head, head group) to
 * finish (a counter per group, reset by that block) merges them: no second kernel.
 * The previous kernel (the fallback below) used 143 registers for Qwen2.5's group of 7 (3 blocks
 * per SM, 1.3 waves), synchronised its block 3 times per 64-key tile and reached 18% of copy
 * bandwidth there.
 *
 * Fallback kernel (other head dims): one block of 128 threads per (sequence, kv head, group of
 * up to 8 query heads, split). Per 64-key tile: K and V rows are staged in shared memory with
 * 16-byte cp.async copies, double buffered; scores (fp32) by two threads per key over all the
 * group's heads; an online softmax per head (one warp per head); P . V accumulated in fp32
 * registers by threads that each own 8 dims of a strided subset of the keys, reduced across
 * threads at the end. Partials are merged by a combine kernel.
 */
#include "decode_mma.cuh"
#include "decode_split.cuh"
#include "internal.h"
#include "mma.cuh"

namespace {

using namespace ts_decode;

/* ---- tensor-core kernel (decode_mma.cuh) -------------------------------------------------- */

/* At least 4 blocks (16 warps) per SM for D <= 64: the kernel is latency-bound there (Qwen2.5's
 * shape: 142 registers gave 3 blocks, 19% occupancy, 34% of DRAM bandwidth under ncu). */
template <int D, int MAXG, int UNROLL, bool CAP, typename T>
__global__ void __launch_bounds__(kMmaThreads, D <= 64 ? 4 : 1)
    attention_decode_mma_kernel(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q, const T *kc,
                                const T *vc, const int32_t *lens, const float *k_scale, const float *v_scale,
                                int scale_heads, int max_len, int nh, int nkv, int group, int hchunks, int chunk,
                                int nsplit, float scale, int window, float softcap, int len_fault, KVPages pages,
                                int table_fault, ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_mma_body<D, MAXG, UNROLL, false, CAP, T, T>(out, part_acc, part_ml, counters, q, kc, vc, lens, k_scale,
                                                       v_scale, scale_heads, max_len, nh, nkv, group, hchunks, chunk,
                                                       nsplit, scale, window, softcap, len_fault, pages, table_fault,
                                                       fault);
}

template <int D, bool CAP, typename T>
int launch_mma_dc(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const ts_decode_config &c,
                  cudaStream_t stream) {
    const DecodeShape shape{c.batch, c.max_len, c.n_heads, c.n_kv_heads, c.head_dim, c.scale, c.window, c.softcap};
    constexpr int U = decode_unroll(D);
    const int fault = ts::FAULT_DECODE_CACHE_LEN;
    if (c.n_heads / c.n_kv_heads <= 8)
        return launch_mma<D, 8, U, CAP>("attention_decode", attention_decode_mma_kernel<D, 8, U, CAP, T>, out, q, kc,
                                        vc, lens, nullptr, nullptr, 1, fault, shape, stream);
    return launch_mma<D, 16, U, CAP>("attention_decode", attention_decode_mma_kernel<D, 16, U, CAP, T>, out, q, kc,
                                     vc, lens, nullptr, nullptr, 1, fault, shape, stream);
}

/* The soft cap is the kernel's template argument CAP (decode_mma.cuh). */
template <int D, typename T>
int launch_mma_d(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const ts_decode_config &c,
                 cudaStream_t stream) {
    if (c.softcap > 0.0f) return launch_mma_dc<D, true>(out, q, kc, vc, lens, c, stream);
    return launch_mma_dc<D, false>(out, q, kc, vc, lens, c, stream);
}

template <typename T>
int launch_attention_decode(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens,
                            const ts_decode_config &c, cudaStream_t stream) {
    switch (c.head_dim) {
    case 32:
        return launch_mma_d<32>(out, q, kc, vc, lens, c, stream);
    case 64:
        return launch_mma_d<64>(out, q, kc, vc, lens, c, stream);
    case 96:
        return launch_mma_d<96>(out, q, kc, vc, lens, c, stream);
    case 128:
        return launch_mma_d<128>(out, q, kc, vc, lens, c, stream);
    default:
        break;
    }
    const DecodeShape shape{c.batch, c.max_len, c.n_heads, c.n_kv_heads, c.head_dim, c.scale, c.window, c.softcap};
    return launch_split_for_group("attention_decode", out, q, kc, vc, lens, shape, ts::FAULT_DECODE_CACHE_LEN,
                                  KVPages{nullptr, 0, 0, 0}, 0, stream);
}

} // namespace

extern "C" int ts_attention_decode(void *out, const void *q, const void *k_cache, const void *v_cache,
                                   const int32_t *cache_lens, const ts_decode_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val("attention_decode");
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(cache_lens, "cache_lens");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    const DecodeShape shape{cfg->batch, cfg->max_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale,
                            cfg->window, cfg->softcap};
    check_decode(val, cfg->dtype, shape, out, q, k_cache, v_cache);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_attention_decode(static_cast<T *>(out), static_cast<const T *>(q),
                                       static_cast<const T *>(k_cache), static_cast<const T *>(v_cache), cache_lens,
                                       *cfg, st);
    });
}
