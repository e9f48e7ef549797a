/*
 * attention_decode_paged_fp8: attention_decode_paged over a paged E4M3 pool (vLLM's paged cache
 * with kv_cache_dtype "fp8"; touchstone.h states the contract). It is the tensor-core decode body
 * (decode_mma.cuh) that attention_decode_fp8 runs over a contiguous E4M3 cache, reading each key
 * and value row through the sequence's block table as attention_decode_paged does: codes held as
 * bytes, converted to T in registers where the mma reads them (exact), the key scale folded into
 * the scores' scale and the value scale applied to the output once. Head dims 32, 64, 96 and 128;
 * others are refused as unsupported by name (the 16-bit op's split kernel has no E4M3 form).
 */
#include "decode_mma.cuh"
#include "internal.h"

namespace {

using namespace ts_decode;

template <int D, int MAXG, int UNROLL, bool CAP, typename T>
__global__ void __launch_bounds__(kMmaThreads, D <= 64 ? 4 : 1)
    attention_decode_paged_fp8_kernel(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q,
                                      const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
                                      const float *k_scale, const float *v_scale, int scale_heads, int max_len,
                                      int nh, int nkv, int group, int hchunks, int chunk, int nsplit, float scale,
                                      int window, float softcap, int len_fault, KVPages pages, int table_fault,
                                      ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_mma_body<D, MAXG, UNROLL, true, CAP, unsigned char, T>(out, part_acc, part_ml, counters, q, kc, vc, lens,
                                                                  k_scale, v_scale, scale_heads, max_len, nh, nkv,
                                                                  group, hchunks, chunk, nsplit, scale, window,
                                                                  softcap, len_fault, pages, table_fault, fault);
}

constexpr const char *kOp = "attention_decode_paged_fp8";

template <int D, bool CAP, typename T>
int launch_dc(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
              const float *ks, const float *vs, int scale_heads, const DecodeShape &shape, const KVPages &pages,
              cudaStream_t stream) {
    constexpr int U = decode_unroll_fp8(D);
    const int lf = ts::FAULT_PAGED_FP8_CACHE_LEN, tf = ts::FAULT_PAGED_FP8_BLOCK_TABLE;
    if (shape.n_heads / shape.n_kv_heads <= 8)
        return launch_mma<D, 8, U, CAP>(kOp, attention_decode_paged_fp8_kernel<D, 8, U, CAP, T>, out, q, kc, vc, lens,
                                        ks, vs, scale_heads, lf, shape, stream, pages, tf);
    return launch_mma<D, 16, U, CAP>(kOp, attention_decode_paged_fp8_kernel<D, 16, U, CAP, T>, out, q, kc, vc, lens,
                                     ks, vs, scale_heads, lf, shape, stream, pages, tf);
}

/* The soft cap is the kernel's template argument CAP (decode_mma.cuh). */
template <int D, typename T>
int launch_d(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
             const float *ks, const float *vs, int scale_heads, const DecodeShape &shape, const KVPages &pages,
             cudaStream_t stream) {
    if (shape.softcap > 0.0f) return launch_dc<D, true>(out, q, kc, vc, lens, ks, vs, scale_heads, shape, pages, stream);
    return launch_dc<D, false>(out, q, kc, vc, lens, ks, vs, scale_heads, shape, pages, stream);
}

template <typename T>
int launch(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *table,
           const int32_t *lens, const float *ks, const float *vs, const ts_paged_decode_fp8_config &c,
           cudaStream_t stream) {
    int shift = 0;
    while ((1 << shift) < c.block_size) ++shift;
    const KVPages pages{table, c.table_width, shift, c.num_blocks};
    /* The decode kernels' max_len is what a sequence can reach: its row of the table, full. */
    const DecodeShape shape{c.batch, c.table_width * c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, c.scale,
                            c.window, c.softcap};
    switch (c.head_dim) {
    case 32:
        return launch_d<32>(out, q, kc, vc, lens, ks, vs, c.scale_heads, shape, pages, stream);
    case 64:
        return launch_d<64>(out, q, kc, vc, lens, ks, vs, c.scale_heads, shape, pages, stream);
    case 96:
        return launch_d<96>(out, q, kc, vc, lens, ks, vs, c.scale_heads, shape, pages, stream);
    default:
        return launch_d<128>(out, q, kc, vc, lens, ks, vs, c.scale_heads, shape, pages, stream);
    }
}

} // namespace

extern "C" int ts_attention_decode_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                             const int32_t *block_table, const int32_t *cache_lens,
                                             const float *k_scale, const float *v_scale,
                                             const ts_paged_decode_fp8_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val(kOp);
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(block_table, "block_table");
    val.ptr(cache_lens, "cache_lens");
    val.ptr(k_scale, "k_scale");
    val.ptr(v_scale, "v_scale");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    ts_decode::check_pages(val, cfg->num_blocks, cfg->block_size, cfg->table_width);
    if (!val.ok()) return val.status();
    /* attention_decode_paged's checks (a page as the cache's length), then the pool and the
     * table by their own shapes, the scales and the head dims the E4M3 body reads. */
    const DecodeShape shape{cfg->batch, cfg->block_size, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale,
                            cfg->window, cfg->softcap};
    check_decode(val, cfg->dtype, shape, out, q, k_cache, v_cache);
    val.elements("k_cache", {cfg->num_blocks, cfg->block_size, cfg->n_kv_heads, cfg->head_dim});
    val.elements("block_table", {cfg->batch, cfg->table_width});
    if (val.ok() && cfg->scale_heads != 1 && cfg->scale_heads != cfg->n_kv_heads)
        val.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale_heads = %d: want 1 (per tensor) or cfg->n_kv_heads = %d (per head)",
                 cfg->scale_heads, cfg->n_kv_heads);
    if (val.ok() && cfg->head_dim != 32 && cfg->head_dim != 64 && cfg->head_dim != 96 && cfg->head_dim != 128)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: a paged E4M3 cache is read for head dims 32, 64, 96 and 128",
                 cfg->head_dim);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const unsigned char *>(k_cache),
                      static_cast<const unsigned char *>(v_cache), block_table, cache_lens, k_scale, v_scale, *cfg, st);
    });
}
