/*
 * attention_decode_fp8: attention_decode over an FP8 E4M3 KV cache (vLLM's and FlashInfer's
 * `kv_cache_dtype="fp8"`): k/v caches [batch, max_len, n_kv_heads, head_dim] of E4M3 codes
 * standing for code * k_scale and code * v_scale (one fp32 scale, or one a kv head), q and out in
 * the storage type T (touchstone.h states the contract).
 *
 * The kernel is attention_decode's tensor-core flash-decoding body (decode_mma.cuh) with an E4M3
 * cache: each lane's cache piece is half the bytes, held as codes (twice the keys a warp step, so
 * as many bytes in flight as the 16-bit kernel) and converted to T pair by pair where the mma
 * reads it (exact: every E4M3 value is an fp16 and a bf16 value), so Q K^T and P V run on the
 * same m16n8k16 mma; the key scale multiplies the scores' scale and the value scale the output,
 * once each. The cache read,
 * the bound at decode, is half the 16-bit one. Head dims 32, 64, 96 and 128 (every model family
 * here); others are refused as unsupported by name.
 */
#include "decode_mma.cuh"
#include "internal.h"

namespace {

using namespace ts_decode;

template <int D, int MAXG, int UNROLL, bool CAP, typename T>
__global__ void __launch_bounds__(kMmaThreads, D <= 64 ? 4 : 1)
    attention_decode_fp8_kernel(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q,
                                const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
                                const float *k_scale, const float *v_scale, int scale_heads, int max_len, int nh,
                                int nkv, int group, int hchunks, int chunk, int nsplit, float scale, int window,
                                float softcap, int len_fault, KVPages pages, int table_fault, ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_mma_body<D, MAXG, UNROLL, false, CAP, unsigned char, T>(out, part_acc, part_ml, counters, q, kc, vc, lens,
                                                                   k_scale, v_scale, scale_heads, max_len, nh, nkv,
                                                                   group, hchunks, chunk, nsplit, scale, window,
                                                                   softcap, len_fault, pages, table_fault, fault);
}

template <int D, bool CAP, typename T>
int launch_dc(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
              const float *ks, const float *vs, const ts_decode_fp8_config &c, cudaStream_t stream) {
    const DecodeShape shape{c.batch, c.max_len, c.n_heads, c.n_kv_heads, c.head_dim, c.scale, 0, c.softcap};
    constexpr int U = decode_unroll_fp8(D);
    const char *op = "attention_decode_fp8";
    const int fault = ts::FAULT_DECODE_FP8_CACHE_LEN;
    if (c.n_heads / c.n_kv_heads <= 8)
        return launch_mma<D, 8, U, CAP>(op, attention_decode_fp8_kernel<D, 8, U, CAP, T>, out, q, kc, vc, lens, ks,
                                        vs, c.scale_heads, fault, shape, stream);
    return launch_mma<D, 16, U, CAP>(op, attention_decode_fp8_kernel<D, 16, U, CAP, T>, out, q, kc, vc, lens, ks, vs,
                                     c.scale_heads, fault, shape, stream);
}

/* The soft cap is the kernel's template argument CAP (decode_mma.cuh). */
template <int D, typename T>
int launch_d(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *lens,
             const float *ks, const float *vs, const ts_decode_fp8_config &c, cudaStream_t stream) {
    if (c.softcap > 0.0f) return launch_dc<D, true>(out, q, kc, vc, lens, ks, vs, c, stream);
    return launch_dc<D, false>(out, q, kc, vc, lens, ks, vs, c, stream);
}

template <typename T>
int launch(T *out, const T *q, const unsigned char *kc, const unsigned char *vc, const int32_t *lens, const float *ks,
           const float *vs, const ts_decode_fp8_config &c, cudaStream_t stream) {
    switch (c.head_dim) {
    case 32:
        return launch_d<32>(out, q, kc, vc, lens, ks, vs, c, stream);
    case 64:
        return launch_d<64>(out, q, kc, vc, lens, ks, vs, c, stream);
    case 96:
        return launch_d<96>(out, q, kc, vc, lens, ks, vs, c, stream);
    default:
        return launch_d<128>(out, q, kc, vc, lens, ks, vs, c, stream);
    }
}

} // namespace

extern "C" int ts_attention_decode_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                       const int32_t *cache_lens, const float *k_scale, const float *v_scale,
                                       const ts_decode_fp8_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator val("attention_decode_fp8");
    val.ptr(out, "out");
    val.ptr(q, "q");
    val.ptr(k_cache, "k_cache");
    val.ptr(v_cache, "v_cache");
    val.ptr(cache_lens, "cache_lens");
    val.ptr(k_scale, "k_scale");
    val.ptr(v_scale, "v_scale");
    val.ptr(cfg, "cfg");
    if (!val.ok()) return val.status();
    const DecodeShape shape{cfg->batch, cfg->max_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale, 0,
                            cfg->softcap};
    check_decode(val, cfg->dtype, shape, out, q, k_cache, v_cache);
    if (val.ok() && cfg->scale_heads != 1 && cfg->scale_heads != cfg->n_kv_heads)
        val.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale_heads = %d: want 1 (per tensor) or cfg->n_kv_heads = %d (per head)",
                 cfg->scale_heads, cfg->n_kv_heads);
    if (val.ok() && cfg->head_dim != 32 && cfg->head_dim != 64 && cfg->head_dim != 96 && cfg->head_dim != 128)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: an E4M3 cache is read for head dims 32, 64, 96 and 128",
                 cfg->head_dim);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<T *>(out), static_cast<const T *>(q), static_cast<const unsigned char *>(k_cache),
                      static_cast<const unsigned char *>(v_cache), cache_lens, k_scale, v_scale, *cfg, st);
    });
}
