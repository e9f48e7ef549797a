/*
 * decode_mma.cuh: the tensor-core flash-decoding kernel body that attention_decode (16-bit
 * caches) and attention_decode_fp8 (E4M3 caches) share, with its block placement, split rule and
 * launch. attention_decode.cu describes the algorithm; the FP8 twin differs only in its cache
 * loads (codes converted to the storage type in registers, load_cache) and in two scales: the
 * key scale multiplies the scores' scale, the value scale the output.
 */
#ifndef TOUCHSTONE_DECODE_MMA_CUH
#define TOUCHSTONE_DECODE_MMA_CUH

#include <cuda_fp8.h>

#include <atomic>
#include <type_traits>

#include "internal.h"
#include "mma.cuh"

namespace ts_decode {

/* One decode block's work: sequence b, KV head kvh, its chunk hc of at most MAXG query heads
 * (h0 .. h0 + ng - 1), key split `split`, and the sequence's cache length. */
struct DecodeWork {
    int b, kvh, hc, split, h0, ng, len;
};

/* Decodes blockIdx (x: batch x KV head x head chunk, y: key split) into the block's place. */
template <int MAXG>
__device__ __forceinline__ void decode_place(DecodeWork &w, int nkv, int group, int hchunks) {
    int idx = blockIdx.x;
    w.hc = idx % hchunks;
    idx /= hchunks;
    w.kvh = idx % nkv;
    w.b = idx / nkv;
    w.split = blockIdx.y;
    w.h0 = w.kvh * group + w.hc * MAXG;
    w.ng = min(MAXG, group - w.hc * MAXG);
}

/* Reads the cache length of the block placed by decode_place; false when it is outside
 * [1, max_len]: one block reports the fault and every block of that sequence must return
 * without writing. */
template <int MAXG>
__device__ __forceinline__ bool decode_len(DecodeWork &w, const int32_t *lens, int max_len, ts::FaultRecord *fault,
                                           int kind = ts::FAULT_DECODE_CACHE_LEN) {
    w.len = lens[w.b];
    if (w.len >= 1 && w.len <= max_len) return true;
    if (w.split == 0 && w.kvh == 0 && w.hc == 0 && threadIdx.x == 0)
        ts::report_fault(fault, kind, w.b, w.len, max_len);
    return false;
}

/* decode_place and decode_len. */
template <int MAXG>
__device__ __forceinline__ bool decode_work(DecodeWork &w, const int32_t *lens, int max_len, int nkv, int group,
                                            int hchunks, ts::FaultRecord *fault) {
    decode_place<MAXG>(w, nkv, group, hchunks);
    return decode_len<MAXG>(w, lens, max_len, fault);
}

/* Where a sequence's cache positions live. Contiguous caches [batch, max_len, nkv, D]: table is
 * null. A paged cache (attention_decode_paged, vLLM's layout): a pool [num_blocks, 1 << shift,
 * nkv, D] and a block table int32 [batch, width]; position p of sequence b is slot
 * p & (page - 1) of page table[b * width + (p >> shift)]. */
struct KVPages {
    const int32_t *table;
    int width, shift, num_blocks;
};

/* The row (of nkv * D elements) of position key from the sequence's base: the key itself in a
 * contiguous cache (the base is the sequence's), its page's slot in the pool (the base is the
 * pool's) through the sequence's table row trow. */
template <bool PAGED>
__device__ __forceinline__ int64_t kv_row(const KVPages &pg, const int32_t *trow, int key) {
    if constexpr (PAGED)
        return (int64_t)__ldg(trow + (key >> pg.shift)) << pg.shift | (key & ((1 << pg.shift) - 1));
    else
        return key;
}

/* Paged: whether the table entries that sequence b's first len positions reach are all in
 * [0, num_blocks). Call with every thread of the block (a block barrier); `reporter` (one block
 * of the sequence) reports the first bad entry its threads find. */
__device__ __forceinline__ bool paged_rows_ok(const KVPages &pg, int b, int len, bool reporter, ts::FaultRecord *fault,
                                              int kind) {
    const int pages = (len + (1 << pg.shift) - 1) >> pg.shift;
    const int32_t *trow = pg.table + (int64_t)b * pg.width;
    int bad = -1;
    for (int i = threadIdx.x; i < pages; i += blockDim.x) {
        const int32_t e = __ldg(trow + i);
        if ((unsigned)e >= (unsigned)pg.num_blocks && bad < 0) bad = i;
    }
    const bool any = __syncthreads_or(bad >= 0);
    if (any && bad >= 0 && reporter) ts::report_fault(fault, kind, b * pg.width + bad, trow[bad], pg.num_blocks);
    return !any;
}

/* paged_rows_ok for a decode block: every block of the sequence reads the whole used row (at
 * most max_len / page entries), so all of them agree and return together (the cross-split merge
 * counts only blocks that run); the sequence's first block reports. */
__device__ __forceinline__ bool decode_pages_ok(const DecodeWork &w, const KVPages &pg, ts::FaultRecord *fault,
                                                int kind) {
    return paged_rows_ok(pg, w.b, w.len, w.split == 0 && w.kvh == 0 && w.hc == 0, fault, kind);
}

constexpr int kMmaWarps = 4, kMmaThreads = 32 * kMmaWarps;

/* 16-key tiles a warp step loads before its math: a 16-bit cache's; an FP8 cache's pieces are
 * half the registers, so it loads more keys a step (three tiles at D <= 64, where four spill
 * under the 4-block bound; two above). */
__host__ __device__ constexpr int decode_unroll(int D) { return D <= 64 ? 2 : 1; }
__host__ __device__ constexpr int decode_unroll_fp8(int D) { return D <= 64 ? 3 : 2; }

/* W consecutive 32-bit words from p (16-byte aligned when W % 4 == 0, else 8-byte aligned): raw
 * 16-bit pairs of either storage type. */
template <int W>
__device__ __forceinline__ void load_words(uint32_t (&w)[W], const void *p) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int i = 0; i < W / 4; ++i) {
            const uint4 u = reinterpret_cast<const uint4 *>(p)[i];
            w[4 * i] = u.x;
            w[4 * i + 1] = u.y;
            w[4 * i + 2] = u.z;
            w[4 * i + 3] = u.w;
        }
    } else {
        static_assert(W % 2 == 0, "8-byte pieces");
#pragma unroll
        for (int i = 0; i < W / 2; ++i) {
            const uint2 u = reinterpret_cast<const uint2 *>(p)[i];
            w[2 * i] = u.x;
            w[2 * i + 1] = u.y;
        }
    }
}

/* (lo, hi) rounded to T as a T x2 word (lo in the low half), and the rounding error of each,
 * rounded to T again, as another. */
template <typename T>
__device__ __forceinline__ void split2(float lo, float hi, uint32_t &h, uint32_t &l) {
    using P = typename ts::Storage<T>::Pair;
    h = ts::pack2<T>(lo, hi);
    const float2 af = ts::to_float2(*reinterpret_cast<const P *>(&h));
    l = ts::pack2<T>(lo - af.x, hi - af.y);
}

/* A lane's cache piece as loaded: W words of T pairs (a 16-bit cache, load_words) or the same
 * dims as E4M3 codes in W / 2 words (an FP8 cache, converted at use by cache_word). The code
 * pieces are 16-byte aligned when their bytes are a multiple of 16 (K at D 64 and 128, V at 128),
 * 8-byte when of 8, else 4-byte (V at D 32 and 96). */
template <typename KV, int W>
__device__ __forceinline__ void load_raw(uint32_t (&w)[W], const KV *p) {
    if constexpr (sizeof(KV) == 2) {
        load_words(w, p);
    } else if constexpr ((4 * W) % 16 == 0) {
#pragma unroll
        for (int i = 0; i < W / 4; ++i) {
            const uint4 u = reinterpret_cast<const uint4 *>(p)[i];
            w[4 * i] = u.x, w[4 * i + 1] = u.y, w[4 * i + 2] = u.z, w[4 * i + 3] = u.w;
        }
    } else if constexpr ((4 * W) % 8 == 0) {
#pragma unroll
        for (int i = 0; i < W / 2; ++i) {
            const uint2 u = reinterpret_cast<const uint2 *>(p)[i];
            w[2 * i] = u.x, w[2 * i + 1] = u.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < W; ++i) w[i] = reinterpret_cast<const uint32_t *>(p)[i];
    }
}

/* Word j (T pair of dims 2j, 2j + 1 of the piece, the lower in the low half) of a loaded piece:
 * the 16-bit cache's own, or codes 2j and 2j + 1 converted, exactly (every E4M3 value is an fp16
 * and a bf16 value). */
template <typename KV, typename T, int W>
__device__ __forceinline__ uint32_t cache_word(const uint32_t (&raw)[W], int j) {
    if constexpr (sizeof(KV) == 2) {
        return raw[j];
    } else {
        const __nv_fp8x2_storage_t pair = (__nv_fp8x2_storage_t)(raw[j / 2] >> (16 * (j & 1)));
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
        if constexpr (std::is_same<T, __half>::value) {
            return (uint32_t)h.x | (uint32_t)h.y << 16;
        } else {
            const float lo = __half2float(__ushort_as_half(h.x)), hi = __half2float(__ushort_as_half(h.y));
            return ts::pack2<T>(lo, hi);
        }
    }
}

/* The body of attention_decode_mma_kernel and attention_decode_fp8_kernel (each file's
 * __global__ wrapper sets the launch bounds). CAP (the instance launched when softcap > 0)
 * soft-caps the scaled scores; CAP = false compiles no trace of the cap: a uniform runtime branch
 * on softcap, even never taken, makes the uncapped kernel at head_dim 64 (held to 128 registers
 * by its 4-blocks hint) spill 16/44 bytes. ptxas -v (sm_90, nvcc 13.0): every CAP = false
 * instance has the registers and spill of the kernel without the cap (prefill_body in
 * prefill_flash.cuh says more); the CAP = true instances use from 18 registers fewer to 25 more
 * than their twins and spill only at head_dim 64, where the uncapped twins spill too: paged
 * 16/16 to 88/108 bytes of spill stores/loads (at most the uncapped twins'), E4M3 with groups of
 * 16 36/32 (fp16) and 44/36 (bf16) against 20/24 and 36/32. */
template <int D, int MAXG, int UNROLL, bool PAGED, bool CAP, typename KV, typename T>
__device__ __forceinline__ void decode_mma_body(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q,
                                                const KV *kc, const KV *vc, const int32_t *lens, const float *k_scale,
                                                const float *v_scale, int scale_heads, int max_len, int nh, int nkv,
                                                int group, int hchunks, int chunk, int nsplit, float scale,
                                                int window, float softcap, int len_fault, KVPages pages,
                                                int table_fault, ts::FaultRecord *fault) {
    constexpr bool kFP8 = std::is_same<KV, unsigned char>::value;
    constexpr int KW = D / 8;       /* words of a lane's K (and Q) piece: D/4 dims */
    constexpr int NK = D / 16;      /* k-steps of S = Q K^T */
    constexpr int VW = D / 16;      /* words of a lane's V piece: D/8 dims */
    constexpr int NT = D / 8;       /* n-tiles of O */
    constexpr int ROWS = MAXG / 8;  /* head rows per lane: g (and g + 8) */
    constexpr int KEYS = 16 * UNROLL; /* keys per warp step */
    __shared__ float o_s[kMmaWarps][MAXG][D];
    __shared__ float ml_s[kMmaWarps][MAXG][2];
    __shared__ int last_s;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3; /* lane group (row / key / dim piece) and lane in it */
    DecodeWork w;
    decode_place<MAXG>(w, nkv, group, hchunks);
    const int b = w.b, kvh = w.kvh, split = w.split, h0 = w.h0, ng = w.ng;

    /* Q does not depend on the cache length: its loads are in flight with the length's. */
    uint32_t qa[ROWS][KW];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int hd = gq + 8 * r;
        if (hd < ng) {
            load_words(qa[r], q + ((int64_t)b * nh + h0 + hd) * D + tq * (D / 4));
        } else {
#pragma unroll
            for (int w = 0; w < KW; ++w) qa[r][w] = 0u;
        }
    }
    if (!decode_len<MAXG>(w, lens, max_len, fault, len_fault)) return;
    if constexpr (PAGED) {
        if (!decode_pages_ok(w, pages, fault, table_fault)) return;
    }
    /* An FP8 cache's keys and values are code * scale: the key scale goes into the scores' scale,
     * the value scale onto the output (both exact up to one fp32 rounding). */
    float sc = scale, vsc = 1.0f;
    if constexpr (kFP8) {
        const int hs = scale_heads == 1 ? 0 : kvh;
        sc *= k_scale[hs];
        vsc = v_scale[hs];
    }
    const float inv_cap = CAP ? 1.0f / softcap : 0.0f;
    const int len = w.len;
    /* A sliding window's keys are [lo, len); the splits start at lo rounded down to a 16-key tile
     * (a paged tile's keys share one page read), keys before lo are masked. */
    const int lo = window > 0 ? max(0, len - window) : 0, base = lo & ~15;
    const int start = base + split * chunk;
    if (start >= len) return; /* no keys: writes nothing and is not counted by the merge */
    const int end = min(len, start + chunk);
    const int nsplit_b = (len - base + chunk - 1) / chunk; /* splits of this sequence that have keys */
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    float m_run[ROWS], l_run[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
    }

    const int64_t row_stride = (int64_t)nkv * D;
    const int64_t seq_base = PAGED ? 0 : (int64_t)b * max_len * nkv;
    const KV *kbase = kc + (seq_base + kvh) * D + tq * (D / 4);
    const KV *vbase = vc + (seq_base + kvh) * D + gq * (D / 8);
    const int32_t *trow = PAGED ? pages.table + (int64_t)b * pages.width : nullptr;

    for (int k0 = start + warp * KEYS; k0 < end; k0 += kMmaWarps * KEYS) {
        /* Every load of the step first (UNROLL 16-key tiles), then the math. Keys at or past end
         * are never read; their words are 0 and their scores -inf. */
        constexpr int KR = kFP8 ? KW / 2 : KW, VR = kFP8 ? VW / 2 : VW; /* words as loaded */
        uint32_t kw[UNROLL][2][KR], vw[UNROLL][4][VR];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            /* Paged: a tile's 16 keys (16-aligned: chunk and KEYS are multiples of 16) share one
             * page when pages hold 16 or more, so one table read places them all; smaller pages
             * take each key's own entry. */
            const int tile0 = k0 + 16 * u;
            int64_t tile_row = 0;
            if constexpr (PAGED) {
                if (pages.shift >= 4 && tile0 < end) tile_row = kv_row<true>(pages, trow, tile0);
            }
            auto row = [&](int key) -> int64_t {
                if constexpr (PAGED)
                    return pages.shift < 4 ? kv_row<true>(pages, trow, key) : tile_row + (key - tile0);
                else
                    return key;
            };
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int key = k0 + 16 * u + 8 * nt + gq;
                if (key < end) {
                    load_raw(kw[u][nt], kbase + row(key) * row_stride);
                } else {
#pragma unroll
                    for (int w = 0; w < KR; ++w) kw[u][nt][w] = 0u;
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) { /* keys 2t, 2t + 1, 2t + 8, 2t + 9 of the tile */
                const int key = k0 + 16 * u + 2 * tq + (i & 1) + 8 * (i >> 1);
                if (key < end) {
                    load_raw(vw[u][i], vbase + row(key) * row_stride);
                } else {
#pragma unroll
                    for (int w = 0; w < VR; ++w) vw[u][i][w] = 0u;
                }
            }
        }

        /* S: s[u][nt][e], rows g (e = 0, 1) and g + 8 (e = 2, 3), key k0 + 16u + 8nt + 2t + (e & 1). */
        float s[UNROLL][2][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[u][nt][e] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < NK; ++ks)
                    ts::mma16816<T>(s[u][nt], qa[0][2 * ks], ROWS > 1 ? qa[ROWS - 1][2 * ks] : 0u, qa[0][2 * ks + 1],
                             ROWS > 1 ? qa[ROWS - 1][2 * ks + 1] : 0u, cache_word<KV, T>(kw[u][nt], 2 * ks),
                             cache_word<KV, T>(kw[u][nt], 2 * ks + 1));
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = k0 + 16 * u + 8 * nt + 2 * tq + (e & 1);
                    s[u][nt][e] = key >= lo && key < end ? s[u][nt][e] * sc : -INFINITY;
                }
            }
        /* CAP (softcap > 0): cap · tanh(s / cap) of the scaled scores, the masked keys (-inf)
         * left masked, as capping before the mask does (touchstone.h). */
        if constexpr (CAP) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (s[u][nt][e] != -INFINITY) s[u][nt][e] = ts::softcap_score(s[u][nt][e], softcap, inv_cap);
        }

        /* Online softmax per head row (every step has a visible key: a warp's steps start at or
         * past lo but for warp 0's first, whose first tile holds lo; so every max is finite). */
        float alpha[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) mx = fmaxf(mx, fmaxf(s[u][nt][2 * r], s[u][nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[r], mx);
            alpha[r] = __expf(m_run[r] - m_new); /* 0 on the first step (m_run = -inf) */
            m_run[r] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; ++e) {
                        s[u][nt][e] = __expf(s[u][nt][e] - m_new); /* -inf -> 0 */
                        sum += s[u][nt][e];
                    }
            l_run[r] = l_run[r] * alpha[r] + sum; /* this lane's keys; the 4 lanes add up at the end */
        }
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 2 * ROWS; ++e) o[j][e] *= alpha[e >> 1];

        /* O += P V per 16-key tile, P as p_hi + p_lo. */
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            uint32_t ah[4] = {0u, 0u, 0u, 0u}, al[4] = {0u, 0u, 0u, 0u};
            split2<T>(s[u][0][0], s[u][0][1], ah[0], al[0]); /* row g, keys 2t, 2t + 1 */
            split2<T>(s[u][1][0], s[u][1][1], ah[2], al[2]); /* row g, keys 2t + 8, 2t + 9 */
            if (ROWS > 1) {
                split2<T>(s[u][0][2], s[u][0][3], ah[1], al[1]); /* row g + 8 */
                split2<T>(s[u][1][2], s[u][1][3], ah[3], al[3]);
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                /* dim g * D/8 + j of keys (2t, 2t + 1) and (2t + 8, 2t + 9) */
                const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;
                const uint32_t b0 = __byte_perm(cache_word<KV, T>(vw[u][0], j >> 1), cache_word<KV, T>(vw[u][1], j >> 1), sel);
                const uint32_t b1 = __byte_perm(cache_word<KV, T>(vw[u][2], j >> 1), cache_word<KV, T>(vw[u][3], j >> 1), sel);
                ts::mma16816<T>(o[j], ah[0], ah[1], ah[2], ah[3], b0, b1);
                ts::mma16816<T>(o[j], al[0], al[1], al[2], al[3], b0, b1);
            }
        }
    }

    /* Merge the 4 warps: O row r, column c of n-tile j is dim c * D/8 + j. */
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = gq + 8 * r;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            o_s[warp][row][(2 * tq) * (D / 8) + j] = o[j][2 * r];
            o_s[warp][row][(2 * tq + 1) * (D / 8) + j] = o[j][2 * r + 1];
        }
        if (tq == 0) {
            ml_s[warp][row][0] = m_run[r];
            ml_s[warp][row][1] = l;
        }
    }
    __syncthreads();
    for (int i = tid; i < ng * D; i += kMmaThreads) {
        const int g = i / D, d = i - g * D;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kMmaWarps; ++w) mx = fmaxf(mx, ml_s[w][g][0]); /* finite: warp 0 had keys */
        float l = 0.0f, a = 0.0f;
#pragma unroll
        for (int w = 0; w < kMmaWarps; ++w) {
            if (ml_s[w][g][0] == -INFINITY) continue; /* a warp without keys */
            const float e = __expf(ml_s[w][g][0] - mx);
            l += e * ml_s[w][g][1];
            a += e * o_s[w][g][d];
        }
        const int64_t bh = (int64_t)b * nh + h0 + g;
        if (nsplit_b == 1) {
            out[bh * D + d] = ts::from_float<T>(a / l * vsc);
        } else {
            part_acc[(bh * nsplit + split) * D + d] = a;
            if (d == 0) part_ml[bh * nsplit + split] = make_float2(mx, l);
        }
    }
    if (nsplit_b == 1) return;

    /* The last block of this (sequence, kv head, head group) to finish merges the splits. */
    __threadfence(); /* this block's partials are visible device-wide before it is counted */
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(&counters[blockIdx.x], 1) == nsplit_b - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    for (int i = tid; i < ng * D; i += kMmaThreads) {
        const int g = i / D, d = i - g * D;
        const int64_t bh = (int64_t)b * nh + h0 + g;
        const float2 *ml = part_ml + bh * nsplit;
        const float *acc = part_acc + bh * nsplit * D + d;
        /* Online over the splits, kBatch of them per round: their loads are all issued before any
         * is used (one dependent L2 round trip per split made this merge the longest part of a
         * short kernel). Every partial here has keys, so its max is finite. */
        constexpr int kBatch = 8;
        float mx = -INFINITY, den = 0.0f, num = 0.0f;
        for (int s0 = 0; s0 < nsplit_b; s0 += kBatch) {
            float2 v[kBatch];
            float a[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                if (s0 + u < nsplit_b) {
                    v[u] = __ldcg(&ml[s0 + u]);
                    a[u] = __ldcg(&acc[(int64_t)(s0 + u) * D]);
                }
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                if (s0 + u < nsplit_b) {
                    if (v[u].x > mx) {
                        const float r = expf(mx - v[u].x); /* 0 while mx = -inf */
                        den *= r;
                        num *= r;
                        mx = v[u].x;
                    }
                    const float e = expf(v[u].x - mx);
                    den += e * v[u].y;
                    num += e * a[u];
                }
            }
        }
        out[bh * D + d] = ts::from_float<T>(num / den * vsc);
    }
    if (tid == 0) counters[blockIdx.x] = 0; /* ready for the next launch */
}

/* Key splits per (sequence, kv head, head group) of a cache of max_len keys, each at least one
 * warp step (step_keys keys; a block's 4 warps take steps in turn).
 *
 * Fewer groups than the GPU's resident blocks (`wave` of them): a split pays fixed costs
 * whatever its length (its Q load and first K/V round trip with nothing to overlap them, the
 * merge of its warps, its partials' write and its share of the cross-split merge, which reads
 * them 8 at a time), so splits are long: 4 steps of every warp, or down to 2 while that still
 * leaves SMs without a block; never more than fill one wave. Measured on an H100 against
 * the earlier rule (fill one wave, one warp step a split at the shortest; docs/PERF.md, 2026-11-25):
 * Qwen2.5 GQA B=16 L=4096 8 splits (was 16) 0.0272 ms (0.0303), B=1 L=4096 16 (32) 0.0167
 * (0.0208), B=16 L=1024 4 (8) 0.0151 (0.0157); longer splits (8 steps) were slower at all three.
 *
 * More groups than a wave: one split each can leave a last wave partly full, the rest of the
 * GPU idle for a whole block as long as the cache: the first count up to 8 whose waves are >= 90%
 * full (Phi-3-mini at B=16: 512 groups in 1.3 waves of one split, 80% of copy bandwidth; three
 * splits fill 3.9 waves, 91%; docs/PERF.md, 2026-11-24). */
inline int64_t decode_splits(int64_t groups, int64_t wave, int64_t sms, int64_t max_len, int64_t step_keys) {
    int64_t max_splits = ts::ceil_div(max_len, step_keys);
    if (max_splits > 65535) max_splits = 65535;
    if (groups < wave) {
        const int64_t four_steps = max_len / (4 * kMmaWarps * step_keys);
        const int64_t two_steps = max_len / (2 * kMmaWarps * step_keys);
        int64_t n = ts::ceil_div(sms, groups); /* a block on every SM */
        if (n < four_steps) n = four_steps;
        if (n > two_steps) n = two_steps;
        if (n > wave / groups) n = wave / groups;
        if (n > max_splits) n = max_splits;
        return n < 1 ? 1 : n;
    }
    for (int64_t k = 1; k <= 8 && k <= max_splits; ++k) {
        const int64_t blocks = groups * k, waves = ts::ceil_div(blocks, wave);
        if (blocks * 10 >= waves * wave * 9) return k;
    }
    return 1;
}

/* The shape of a decode launch (attention_decode's and attention_decode_fp8's configs); window
 * is the sliding window (0: none). */
struct DecodeShape {
    int batch, max_len, n_heads, n_kv_heads, head_dim;
    float scale;
    int window = 0;
    float softcap = 0.0f; /* 0: none; > 0: the scores' soft cap (touchstone.h) */
};

/* The checks both decode entries run on the shape and buffers after their pointer checks: the
 * storage dtype, positive sizes, the scale, the head layout, q's and the caches' element counts,
 * the grid limit and the 16-byte alignment the kernels' vector loads need. */
inline void check_decode(ts::Validator &val, ts_dtype dtype, const DecodeShape &c, const void *out, const void *q,
                         const void *k_cache, const void *v_cache) {
    val.dtype_storage(dtype, "cfg->dtype");
    val.positive(c.batch, "cfg->batch");
    val.positive(c.max_len, "cfg->max_len");
    val.positive(c.n_heads, "cfg->n_heads");
    val.positive(c.n_kv_heads, "cfg->n_kv_heads");
    val.positive(c.head_dim, "cfg->head_dim");
    val.scale(c.scale, "cfg->scale");
    ts::check_window(val, c.window, true);
    ts::check_softcap(val, c.softcap);
    ts::check_heads(val, c.n_heads, c.n_kv_heads, c.head_dim);
    val.elements("k_cache", {c.batch, c.max_len, c.n_kv_heads, c.head_dim});
    val.elements("q", {c.batch, c.n_heads, c.head_dim});
    if (val.ok() && (int64_t)c.batch * c.n_heads > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->batch = %d: batch x n_heads exceeds the grid limit", c.batch);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k_cache) && ts::aligned16(v_cache)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k_cache/v_cache = %p/%p/%p/%p: this build needs 16-byte aligned buffers",
                 out, q, k_cache, v_cache);
}

/* The page layout checks both paged entries run: a power-of-two page of 1-256 positions, a
 * table of at least one page a row whose reach (table_width x block_size) fits int32, a pool of
 * at least one page. */
inline void check_pages(ts::Validator &val, int num_blocks, int block_size, int table_width) {
    val.positive(num_blocks, "cfg->num_blocks");
    val.positive(table_width, "cfg->table_width");
    if (val.ok() && (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0))
        val.fail(TS_ERR_INVALID_ARGUMENT, "cfg->block_size = %d: must be a power of two in [1, 256]", block_size);
    if (val.ok() && (int64_t)table_width * block_size > 0x7fffffff)
        val.fail(TS_ERR_INVALID_ARGUMENT, "cfg->table_width = %d: table_width x block_size (%d) exceeds int32",
                 table_width, block_size);
}

/* Launches kernel (attention_decode_mma_kernel<D, MAXG, UNROLL, CAP, T> or its paged or FP8 twin,
 * which share decode_mma_body and one argument list) over the shape's blocks and splits. CAP is
 * the kernel's: the capped and uncapped instances' occupancies are cached apart. */
template <int D, int MAXG, int UNROLL, bool CAP, typename KV, typename T, typename Kernel>
int launch_mma(const char *op, Kernel kernel, T *out, const T *q, const KV *kc, const KV *vc, const int32_t *lens,
               const float *k_scale, const float *v_scale, int scale_heads, int len_fault, const DecodeShape &c,
               cudaStream_t stream, KVPages pages = KVPages{nullptr, 0, 0, 0}, int table_fault = 0) {
    constexpr int KEYS = 16 * UNROLL;
    static std::atomic<int> per_sm{0};
    if (per_sm.load(std::memory_order_relaxed) == 0) {
        int n = 0;
        TS_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kMmaThreads, 0));
        per_sm.store(n > 0 ? n : 1, std::memory_order_relaxed);
    }
    const int group = c.n_heads / c.n_kv_heads;
    const int hchunks = (group + MAXG - 1) / MAXG;
    const int64_t groups = (int64_t)c.batch * c.n_kv_heads * hchunks;
    const int64_t wave = (int64_t)per_sm.load(std::memory_order_relaxed) * ts::sm_count();
    /* Batch-invariant mode: every sequence's cache is split as a batch of one would split it. */
    const int64_t split_groups = ts::batch_invariant() ? (int64_t)c.n_kv_heads * hchunks : groups;
    int64_t nsplit = decode_splits(split_groups, wave, ts::sm_count(), c.max_len, KEYS);
    const int64_t chunk = ts::ceil_div(ts::ceil_div(c.max_len, nsplit), KEYS) * KEYS;
    nsplit = ts::ceil_div(c.max_len, chunk);

    float *part_acc = nullptr;
    float2 *part_ml = nullptr;
    int *counters = nullptr;
    if (nsplit > 1) {
        const size_t rows = (size_t)c.batch * c.n_heads * (size_t)nsplit;
        const size_t acc_bytes = (rows * D * sizeof(float) + 255) & ~(size_t)255;
        void *ws = nullptr, *cnt = nullptr;
        TS_CHECK(op, ts::workspace(op, ts::WS_DECODE, acc_bytes + rows * sizeof(float2), &ws));
        /* Zeroed when allocated; every launch leaves its counters at 0 again. */
        TS_CHECK(op, ts::workspace(op, ts::WS_DECODE_COUNTERS, (size_t)groups * sizeof(int), &cnt));
        part_acc = static_cast<float *>(ws);
        part_ml = reinterpret_cast<float2 *>(static_cast<char *>(ws) + acc_bytes);
        counters = static_cast<int *>(cnt);
    }
    const dim3 grid((unsigned)groups, (unsigned)nsplit);
    const char *d = ts::dims("batch=%d max_len=%d n_heads=%d n_kv_heads=%d head_dim=%d group=%d maxg=%d splits=%lld "
                             "chunk=%lld scale=%g window=%d softcap=%g (tensor cores%s%s)",
                             c.batch, c.max_len, c.n_heads, c.n_kv_heads, D, group, MAXG, (long long)nsplit,
                             (long long)chunk, c.scale, c.window, c.softcap, sizeof(KV) == 1 ? ", e4m3 cache" : "",
                             pages.table ? ", paged" : "");
    TS_LAUNCH(op, kernel, grid, kMmaThreads, 0, stream, d, out, part_acc, part_ml, counters, q, kc, vc, lens, k_scale,
              v_scale, scale_heads, c.max_len, c.n_heads, c.n_kv_heads, group, hchunks, (int)chunk, (int)nsplit,
              c.scale, c.window, c.softcap, len_fault, pages, table_fault, ts::fault_record());
    return TS_OK;
}

} // namespace ts_decode

#endif /* TOUCHSTONE_DECODE_MMA_CUH */
