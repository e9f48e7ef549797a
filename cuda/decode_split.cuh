/*
 * decode_split.cuh: the second flash-decoding kernel of attention_decode and
 * attention_decode_paged, for head dims the tensor-core kernel (decode_mma.cuh) does not take
 * (80, 256, ...): attention_decode.cu describes it ("Fallback kernel"). Its twin
 * attention_decode_paged_split_kernel reads the caches through a block table (KVPages); the
 * combine kernel that merges the splits serves both.
 */
#ifndef TOUCHSTONE_DECODE_SPLIT_CUH
#define TOUCHSTONE_DECODE_SPLIT_CUH

#include "decode_mma.cuh"
#include "internal.h"

namespace ts_decode {

constexpr int kThreads = 128, kTile = 64; /* kTile == kThreads / 2: two threads per key */

struct DecodeLayout {
    int ldk;       /* 2-byte elements a staged K / V row */
    int ngroups;   /* key groups of the accumulation (kThreads / (D / 8)) */
    int q_off;     /* float [maxg][D] */
    int p_off;     /* float [maxg][kTile] */
    int alpha_off; /* float [maxg] */
    int ml_off;    /* float [maxg][2] */
    int kv_off;    /* K and V, two buffers each: [2][kTile][ldk] elements; after the loop: float [ngroups][maxg][D] */
    int bytes;
};

__host__ __device__ inline int align16(int v) { return (v + 15) & ~15; }

__host__ __device__ inline DecodeLayout decode_layout(int D, int maxg) {
    DecodeLayout L;
    L.ldk = D + 8;
    L.ngroups = kThreads / (D / 8);
    L.q_off = 0;
    L.p_off = align16(L.q_off + maxg * D * 4);
    L.alpha_off = align16(L.p_off + maxg * kTile * 4);
    L.ml_off = align16(L.alpha_off + maxg * 4);
    L.kv_off = align16(L.ml_off + maxg * 8);
    const int kv = 2 * 2 * kTile * L.ldk * 2; /* K, V x double buffer x 2-byte elements */
    const int red = L.ngroups * maxg * D * 4;
    L.bytes = align16(L.kv_off + (kv > red ? kv : red));
    return L;
}

/* The split kernel's body; PAGED reads the caches through pages' block table (KVPages), CAP
 * soft-caps the scores (the instance launched when softcap > 0). CAP = false compiles no trace
 * of the cap: a uniform runtime branch on softcap, even never taken, changes ptxas's allocation
 * of the uncapped instances (MAXG 4: 96 registers and 28/36 bytes of spill stores/loads rather
 * than 109 and none). ptxas -v (sm_90, nvcc 13.0): the CAP = false instances have the registers
 * and spill of the kernel without the cap; the CAP = true ones 72-128 registers, spill 8/24 at
 * MAXG 2 paged, 28/36 at MAXG 4 and 4/8 at MAXG 8 contiguous (the uncapped twin 8/8). */
template <int MAXG, bool PAGED, bool CAP, typename T>
__device__ __forceinline__ void decode_split_body(T *out, float *part_acc, float2 *part_ml, const T *q, const T *kc,
                                                  const T *vc, const int32_t *lens, int max_len, int nh, int nkv,
                                                  int D, int group, int hchunks, int chunk, int nsplit, float scale,
                                                  int window, float softcap, int len_fault, KVPages pages,
                                                  int table_fault, ts::FaultRecord *fault) {
    extern __shared__ __align__(16) unsigned char smem[];
    const DecodeLayout L = decode_layout(D, MAXG);
    float *q_s = reinterpret_cast<float *>(smem + L.q_off);
    float *p_s = reinterpret_cast<float *>(smem + L.p_off);
    float *alpha_s = reinterpret_cast<float *>(smem + L.alpha_off);
    float *ml_s = reinterpret_cast<float *>(smem + L.ml_off);
    T *kv_s = reinterpret_cast<T *>(smem + L.kv_off); /* K buf 0, K buf 1, V buf 0, V buf 1 */
    float *red_s = reinterpret_cast<float *>(smem + L.kv_off);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    DecodeWork w;
    decode_place<MAXG>(w, nkv, group, hchunks);
    if (!decode_len<MAXG>(w, lens, max_len, fault, len_fault)) return;
    if constexpr (PAGED) {
        if (!decode_pages_ok(w, pages, fault, table_fault)) return;
    }
    const int b = w.b, kvh = w.kvh, split = w.split, h0 = w.h0, ng = w.ng, len = w.len;
    /* A sliding window's keys are [len - window, len): the splits start there. */
    const int start = (window > 0 ? max(0, len - window) : 0) + split * chunk;
    const int end = min(len, start + chunk);

    for (int i = tid; i < MAXG * D; i += kThreads) {
        const int g = i / D, d = i - g * D;
        q_s[i] = g < ng ? ts::to_float(q[((int64_t)b * nh + h0 + g) * D + d]) : 0.0f;
    }

    constexpr int kHeadsPerWarp = (MAXG + 3) / 4;
    float m_run[kHeadsPerWarp], l_run[kHeadsPerWarp];
#pragma unroll
    for (int t = 0; t < kHeadsPerWarp; ++t) {
        m_run[t] = -INFINITY;
        l_run[t] = 0.0f;
    }

    const int nchunk = D / 8;
    const int my_c = tid % nchunk, my_jg = tid / nchunk;
    const bool acc_on = my_jg < L.ngroups;
    float acc[MAXG][8];
#pragma unroll
    for (int g = 0; g < MAXG; ++g)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;

    const int64_t row_stride = (int64_t)nkv * D;
    const int64_t seq_base = PAGED ? 0 : (int64_t)b * max_len * nkv;
    const T *kbase = kc + (seq_base + kvh) * D;
    const T *vbase = vc + (seq_base + kvh) * D;
    const int32_t *trow = PAGED ? pages.table + (int64_t)b * pages.width : nullptr;

    const int tile_elems = kTile * L.ldk;
    /* Stage rows [k0, k0 + n) of K and V into buffer buf with cp.async (one commit group). */
    auto issue_tile = [&](int k0, int n, int buf) {
        T *ks = kv_s + buf * tile_elems, *vs = kv_s + (2 + buf) * tile_elems;
        for (int i = tid; i < n * nchunk; i += kThreads) {
            const int r = i / nchunk, c = (i - r * nchunk) * 8;
            const int64_t src = kv_row<PAGED>(pages, trow, k0 + r) * row_stride + c;
            ts::cp_async16(ks + r * L.ldk + c, kbase + src);
            ts::cp_async16(vs + r * L.ldk + c, vbase + src);
        }
    };
    if (start < end) issue_tile(start, min(kTile, end - start), 0);
    ts::cp_async_commit();

    int buf = 0;
    for (int k0 = start; k0 < end; k0 += kTile, buf ^= 1) {
        const int nvalid = min(kTile, end - k0);
        __syncthreads(); /* the previous tile is consumed: its buffer and p_s are free; q_s visible */
        /* Prefetch the next tile into the other buffer while this one is used. */
        if (k0 + kTile < end) issue_tile(k0 + kTile, min(kTile, end - k0 - kTile), buf ^ 1);
        ts::cp_async_commit();
        ts::cp_async_wait<1>(); /* this thread's copies of the current tile have landed */
        __syncthreads();        /* ... and everyone's */
        const T *k_s = kv_s + buf * tile_elems;
        const T *v_s = kv_s + (2 + buf) * tile_elems;

        /* Scores: key j = tid / 2, the two threads of a key take alternate 8-dim chunks. */
        {
            const int j = tid >> 1, part = tid & 1;
            float s[MAXG];
#pragma unroll
            for (int g = 0; g < MAXG; ++g) s[g] = 0.0f;
            if (j < nvalid) {
                for (int c = part; c < nchunk; c += 2) {
                    float kf[8];
                    ts::load8(k_s + j * L.ldk + c * 8, kf);
#pragma unroll
                    for (int g = 0; g < MAXG; ++g) {
                        const float4 qa = *reinterpret_cast<const float4 *>(q_s + g * D + c * 8);
                        const float4 qb = *reinterpret_cast<const float4 *>(q_s + g * D + c * 8 + 4);
                        s[g] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] +
                                qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < MAXG; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], 1);
            if (part == 0) {
#pragma unroll
                for (int g = 0; g < MAXG; ++g) p_s[g * kTile + j] = j < nvalid ? s[g] * scale : -INFINITY;
            }
        }
        __syncthreads();

        /* Online softmax: warp w owns heads w, w + 4; lanes take keys lane and lane + 32. */
#pragma unroll
        for (int t = 0; t < kHeadsPerWarp; ++t) {
            const int g = warp + 4 * t;
            if (g < MAXG) {
                float x0 = p_s[g * kTile + lane], x1 = p_s[g * kTile + lane + 32];
                /* CAP: cap · tanh(s / cap) of the scaled scores, the masked keys (-inf) left
                 * masked, as capping before the mask does (touchstone.h). */
                if constexpr (CAP) {
                    const float inv_cap = 1.0f / softcap;
                    if (x0 != -INFINITY) x0 = ts::softcap_score(x0, softcap, inv_cap);
                    if (x1 != -INFINITY) x1 = ts::softcap_score(x1, softcap, inv_cap);
                }
                const float mx = ts::warp_max(fmaxf(x0, x1));
                const float m_new = fmaxf(m_run[t], mx); /* finite: the tile has a valid key */
                const float alpha = expf(m_run[t] - m_new);
                const float p0 = expf(x0 - m_new), p1 = expf(x1 - m_new);
                l_run[t] = l_run[t] * alpha + ts::warp_sum(p0 + p1);
                m_run[t] = m_new;
                p_s[g * kTile + lane] = p0;
                p_s[g * kTile + lane + 32] = p1;
                if (lane == 0) alpha_s[g] = alpha;
            }
        }
        __syncthreads();

        /* P . V: this thread's 8 dims, keys my_jg, my_jg + ngroups, ..., every head. */
        if (acc_on) {
#pragma unroll
            for (int g = 0; g < MAXG; ++g) {
                const float a = alpha_s[g];
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[g][e] *= a;
            }
            for (int j = my_jg; j < nvalid; j += L.ngroups) {
                float vf[8];
                ts::load8(v_s + j * L.ldk + my_c * 8, vf);
#pragma unroll
                for (int g = 0; g < MAXG; ++g) {
                    const float p = p_s[g * kTile + j];
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[g][e] += p * vf[e];
                }
            }
        }
    }

    ts::cp_async_wait<0>(); /* nothing in flight into the K / V region (the last group is empty) */
    __syncthreads();        /* K / V / P no longer read: red_s reuses the K / V region */
#pragma unroll
    for (int t = 0; t < kHeadsPerWarp; ++t) {
        const int g = warp + 4 * t;
        if (g < MAXG && lane == 0) {
            ml_s[2 * g] = m_run[t];
            ml_s[2 * g + 1] = l_run[t];
        }
    }
    if (acc_on) {
#pragma unroll
        for (int g = 0; g < MAXG; ++g)
#pragma unroll
            for (int e = 0; e < 8; ++e) red_s[(my_jg * MAXG + g) * D + my_c * 8 + e] = acc[g][e];
    }
    __syncthreads();
    for (int i = tid; i < ng * D; i += kThreads) {
        const int g = i / D, d = i - g * D;
        float a = 0.0f;
        for (int jg = 0; jg < L.ngroups; ++jg) a += red_s[(jg * MAXG + g) * D + d];
        const int64_t bh = (int64_t)b * nh + h0 + g;
        if (nsplit == 1) {
            out[bh * D + d] = ts::from_float<T>(a / ml_s[2 * g + 1]);
        } else {
            part_acc[(bh * nsplit + split) * D + d] = a;
            if (d == 0) part_ml[bh * nsplit + split] = make_float2(ml_s[2 * g], ml_s[2 * g + 1]);
        }
    }
}

template <int MAXG, bool CAP, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_split_kernel(T *out, float *part_acc, float2 *part_ml, const T *q, const T *kc, const T *vc,
                                  const int32_t *lens, int max_len, int nh, int nkv, int D, int group, int hchunks,
                                  int chunk, int nsplit, float scale, int window, float softcap, int len_fault,
                                  KVPages pages, int table_fault, ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_split_body<MAXG, false, CAP, T>(out, part_acc, part_ml, q, kc, vc, lens, max_len, nh, nkv, D, group, hchunks,
                                           chunk, nsplit, scale, window, softcap, len_fault, pages, table_fault, fault);
}

template <int MAXG, bool CAP, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_paged_split_kernel(T *out, float *part_acc, float2 *part_ml, const T *q, const T *kc,
                                        const T *vc, const int32_t *lens, int max_len, int nh, int nkv, int D,
                                        int group, int hchunks, int chunk, int nsplit, float scale, int window,
                                        float softcap, int len_fault, KVPages pages, int table_fault,
                                        ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_split_body<MAXG, true, CAP, T>(out, part_acc, part_ml, q, kc, vc, lens, max_len, nh, nkv, D, group, hchunks,
                                          chunk, nsplit, scale, window, softcap, len_fault, pages, table_fault, fault);
}

/* out[b, h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the splits (empty ones have
 * m_s = -inf and weigh 0). One block per (sequence, head). */
template <typename T>
__global__ void __launch_bounds__(256)
    attention_decode_combine_kernel(T *out, const float *part_acc, const float2 *part_ml, const int32_t *lens,
                                    int max_len, int nh, int D, int nsplit) {
    ts::pdl_wait();
    const int64_t bh = blockIdx.x;
    const int len = lens[bh / nh];
    if (len < 1 || len > max_len) return; /* reported by the split kernel */
    const float2 *ml = part_ml + bh * nsplit;
    float mx = -INFINITY;
    for (int s = 0; s < nsplit; ++s) mx = fmaxf(mx, ml[s].x);
    float den = 0.0f;
    for (int s = 0; s < nsplit; ++s)
        if (ml[s].x != -INFINITY) den += expf(ml[s].x - mx) * ml[s].y;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float num = 0.0f;
        for (int s = 0; s < nsplit; ++s)
            if (ml[s].x != -INFINITY) num += expf(ml[s].x - mx) * part_acc[(bh * nsplit + s) * D + d];
        out[bh * D + d] = ts::from_float<T>(num / den);
    }
}

/* Launches the split kernel (attention_decode_split_kernel, or its paged twin when pages.table is
 * set; CAP: the soft-capping instance) and, with several splits, the combine kernel. */
template <int MAXG, bool CAP, typename T>
int launch_split(const char *op, T *out, const T *q, const T *kc, const T *vc, const int32_t *lens,
                 const DecodeShape &c, int len_fault, KVPages pages, int table_fault, cudaStream_t stream) {
    const int D = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const int hchunks = (group + MAXG - 1) / MAXG;
    const DecodeLayout L = decode_layout(D, MAXG);
    if (L.bytes > ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "%s: cfg->head_dim = %d: needs %d bytes of shared memory per block, the "
                             "device allows %d",
                             op, D, L.bytes, ts::max_shared_optin());
    auto split_kernel =
        pages.table ? attention_decode_paged_split_kernel<MAXG, CAP, T> : attention_decode_split_kernel<MAXG, CAP, T>;
    static std::atomic<int> smem_allowed_on{-1}, paged_smem_allowed_on{-1};
    if (L.bytes > 48 * 1024)
        TS_CHECK(op, ts::allow_max_shared(op, split_kernel, pages.table ? paged_smem_allowed_on : smem_allowed_on));

    /* Splits: enough blocks for ~4 per SM, at least one 64-key tile per split; batch-invariant
     * mode splits every sequence as a batch of one would. */
    const int64_t groups = (int64_t)c.batch * c.n_kv_heads * hchunks;
    const int64_t split_groups = ts::batch_invariant() ? (int64_t)c.n_kv_heads * hchunks : groups;
    const int64_t target = 4LL * ts::sm_count();
    const int64_t tiles = ts::ceil_div(c.max_len, kTile);
    int64_t nsplit = ts::ceil_div(target, split_groups);
    if (nsplit > tiles) nsplit = tiles;
    if (nsplit < 1) nsplit = 1;
    const int64_t chunk = ts::ceil_div(ts::ceil_div(c.max_len, nsplit), kTile) * kTile;
    nsplit = ts::ceil_div(c.max_len, chunk);

    float *part_acc = nullptr;
    float2 *part_ml = nullptr;
    if (nsplit > 1) {
        const size_t rows = (size_t)c.batch * c.n_heads * (size_t)nsplit;
        const size_t acc_bytes = (rows * D * sizeof(float) + 255) & ~(size_t)255;
        void *ws = nullptr;
        TS_CHECK(op, ts::workspace(op, ts::WS_DECODE, acc_bytes + rows * sizeof(float2), &ws));
        part_acc = static_cast<float *>(ws);
        part_ml = reinterpret_cast<float2 *>(static_cast<char *>(ws) + acc_bytes);
    }
    const dim3 grid((unsigned)groups, (unsigned)nsplit);
    const char *d = ts::dims("batch=%d max_len=%d n_heads=%d n_kv_heads=%d head_dim=%d group=%d maxg=%d splits=%lld "
                             "chunk=%lld scale=%g window=%d softcap=%g%s",
                             c.batch, c.max_len, c.n_heads, c.n_kv_heads, D, group, MAXG, (long long)nsplit,
                             (long long)chunk, c.scale, c.window, c.softcap, pages.table ? " (paged)" : "");
    TS_LAUNCH(op, split_kernel, grid, kThreads, (size_t)L.bytes, stream, d, out, part_acc, part_ml, q, kc, vc, lens,
              c.max_len, c.n_heads, c.n_kv_heads, D, group, hchunks, (int)chunk, (int)nsplit, c.scale, c.window,
              c.softcap, len_fault, pages, table_fault, ts::fault_record());
    if (nsplit > 1) {
        const int threads = D >= 256 ? 256 : ts::round_up(D, 32);
        const unsigned cgrid = (unsigned)((int64_t)c.batch * c.n_heads);
        const char *dc = ts::dims("batch=%d n_heads=%d head_dim=%d splits=%lld", c.batch, c.n_heads, D,
                                  (long long)nsplit);
        auto combine_kernel = attention_decode_combine_kernel<T>;
        TS_LAUNCH(op, combine_kernel, cgrid, threads, 0, stream, dc, out, part_acc, part_ml, lens, c.max_len,
                  c.n_heads, D, (int)nsplit);
    }
    return TS_OK;
}


/* launch_split with the smallest head group (MAXG 1, 2, 4, 8) that holds the query heads of a
 * KV head. */
template <bool CAP, typename T>
int launch_split_group(const char *op, T *out, const T *q, const T *kc, const T *vc, const int32_t *lens,
                       const DecodeShape &c, int len_fault, KVPages pages, int table_fault, cudaStream_t stream) {
    const int group = c.n_heads / c.n_kv_heads;
    if (group <= 1) return launch_split<1, CAP>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
    if (group <= 2) return launch_split<2, CAP>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
    if (group <= 4) return launch_split<4, CAP>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
    return launch_split<8, CAP>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
}

/* launch_split_group with the soft-capping instances when softcap > 0. */
template <typename T>
int launch_split_for_group(const char *op, T *out, const T *q, const T *kc, const T *vc, const int32_t *lens,
                           const DecodeShape &c, int len_fault, KVPages pages, int table_fault, cudaStream_t stream) {
    if (c.softcap > 0.0f)
        return launch_split_group<true>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
    return launch_split_group<false>(op, out, q, kc, vc, lens, c, len_fault, pages, table_fault, stream);
}

} // namespace ts_decode

#endif /* TOUCHSTONE_DECODE_SPLIT_CUH */
