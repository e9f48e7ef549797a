/*
 * attention_decode_paged: attention_decode over a paged KV cache (touchstone.h states the
 * contract): the same two kernels, reading each key and value row through the sequence's block
 * table (decode_mma.cuh's KVPages). The tensor-core kernel (head_dim 32, 64, 96, 128) reads the
 * page of every key it loads from the table (an L1 hit after the first key of a page: a 16-key
 * tile spans one page or, at block sizes under 16, a few); the split kernel (other head dims)
 * stages each tile's rows from their pages with cp.async. Before any key is read, every block
 * checks the table entries its sequence's length reaches, so all blocks of a sequence with a
 * bad page return together and the cross-split merge is never left waiting for one.
 */
#include "decode_mma.cuh"
#include "decode_split.cuh"
#include "internal.h"
#include "mma.cuh"

namespace {

using namespace ts_decode;

template <int D, int MAXG, int UNROLL, bool CAP, typename T>
__global__ void __launch_bounds__(kMmaThreads, D <= 64 ? 4 : 1)
    attention_decode_paged_kernel(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q, const T *kc,
                                  const T *vc, const int32_t *lens, const float *k_scale, const float *v_scale,
                                  int scale_heads, int max_len, int nh, int nkv, int group, int hchunks, int chunk,
                                  int nsplit, float scale, int window, float softcap, int len_fault, KVPages pages,
                                  int table_fault, ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_mma_body<D, MAXG, UNROLL, true, CAP, T, T>(out, part_acc, part_ml, counters, q, kc, vc, lens, k_scale,
                                                      v_scale, scale_heads, max_len, nh, nkv, group, hchunks, chunk,
                                                      nsplit, scale, window, softcap, len_fault, pages, table_fault,
                                                      fault);
}

constexpr const char *kOp = "attention_decode_paged";

template <int D, bool CAP, typename T>
int launch_mma_dc(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const DecodeShape &shape,
                  const KVPages &pages, cudaStream_t stream) {
    constexpr int U = decode_unroll(D);
    const int lf = ts::FAULT_PAGED_CACHE_LEN, tf = ts::FAULT_PAGED_BLOCK_TABLE;
    if (shape.n_heads / shape.n_kv_heads <= 8)
        return launch_mma<D, 8, U, CAP>(kOp, attention_decode_paged_kernel<D, 8, U, CAP, T>, out, q, kc, vc, lens,
                                        nullptr, nullptr, 1, lf, shape, stream, pages, tf);
    return launch_mma<D, 16, U, CAP>(kOp, attention_decode_paged_kernel<D, 16, U, CAP, T>, out, q, kc, vc, lens,
                                     nullptr, nullptr, 1, lf, shape, stream, pages, tf);
}

/* The soft cap is the kernel's template argument CAP (decode_mma.cuh). */
template <int D, typename T>
int launch_mma_d(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const DecodeShape &shape,
                 const KVPages &pages, cudaStream_t stream) {
    if (shape.softcap > 0.0f) return launch_mma_dc<D, true>(out, q, kc, vc, lens, shape, pages, stream);
    return launch_mma_dc<D, false>(out, q, kc, vc, lens, shape, pages, stream);
}

template <typename T>
int launch(T *out, const T *q, const T *kc, const T *vc, const int32_t *table, const int32_t *lens,
           const ts_paged_decode_config &c, cudaStream_t stream) {
    int shift = 0;
    while ((1 << shift) < c.block_size) ++shift;
    const KVPages pages{table, c.table_width, shift, c.num_blocks};
    /* The decode kernels' max_len is what a sequence can reach: its row of the table, full. */
    const DecodeShape shape{c.batch, c.table_width * c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, c.scale,
                            c.window, c.softcap};
    switch (c.head_dim) {
    case 32:
        return launch_mma_d<32>(out, q, kc, vc, lens, shape, pages, stream);
    case 64:
        return launch_mma_d<64>(out, q, kc, vc, lens, shape, pages, stream);
    case 96:
        return launch_mma_d<96>(out, q, kc, vc, lens, shape, pages, stream);
    case 128:
        return launch_mma_d<128>(out, q, kc, vc, lens, shape, pages, stream);
    default:
        return launch_split_for_group(kOp, out, q, kc, vc, lens, shape, ts::FAULT_PAGED_CACHE_LEN, pages,
                                      ts::FAULT_PAGED_BLOCK_TABLE, stream);
    }
}

} // namespace

extern "C" int ts_attention_decode_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                                         const int32_t *block_table, const int32_t *cache_lens,
                                         const ts_paged_decode_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val(kOp);
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(block_table, "block_table");
    val.ptr(cache_lens, "cache_lens");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    ts_decode::check_pages(val, cfg->num_blocks, cfg->block_size, cfg->table_width);
    if (!val.ok()) return val.status();
    /* The shared decode checks (dtype, sizes, scale, heads, q, grid, alignment) with a page as
     * the cache's length, then the pool and the table by their own shapes. */
    const DecodeShape shape{cfg->batch, cfg->block_size, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale,
                            cfg->window, cfg->softcap};
    check_decode(val, cfg->dtype, shape, out, q, k_cache, v_cache);
    val.elements("k_cache", {cfg->num_blocks, cfg->block_size, cfg->n_kv_heads, cfg->head_dim});
    val.elements("block_table", {cfg->batch, cfg->table_width});
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const T *>(k_cache),
                      static_cast<const T *>(v_cache), block_table, cache_lens, *cfg, st);
    });
}
