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
#include "internal.h"
#include "mma.cuh"

namespace {

using namespace ts_decode;

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

template <int MAXG, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_decode_split_kernel(T *out, float *part_acc, float2 *part_ml, const T *q, const T *kc, const T *vc,
                                  const int32_t *lens, int max_len, int nh, int nkv, int D,
                                  int group, int hchunks, int chunk, int nsplit, float scale,
                                  ts::FaultRecord *fault) {
    ts::pdl_wait();
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
    if (!decode_work<MAXG>(w, lens, max_len, nkv, group, hchunks, fault)) return;
    const int b = w.b, kvh = w.kvh, split = w.split, h0 = w.h0, ng = w.ng, len = w.len;
    const int start = split * chunk;
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
    const T *kbase = kc + ((int64_t)b * max_len * nkv + kvh) * D;
    const T *vbase = vc + ((int64_t)b * max_len * nkv + kvh) * D;

    const int tile_elems = kTile * L.ldk;
    /* Stage rows [k0, k0 + n) of K and V into buffer buf with cp.async (one commit group). */
    auto issue_tile = [&](int k0, int n, int buf) {
        T *ks = kv_s + buf * tile_elems, *vs = kv_s + (2 + buf) * tile_elems;
        for (int i = tid; i < n * nchunk; i += kThreads) {
            const int r = i / nchunk, c = (i - r * nchunk) * 8;
            const int64_t src = (int64_t)(k0 + r) * row_stride + c;
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
                const float x0 = p_s[g * kTile + lane], x1 = p_s[g * kTile + lane + 32];
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

template <int MAXG, typename T>
int launch_maxg(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const ts_decode_config &c,
                cudaStream_t stream) {
    const char *op = "attention_decode";
    const int D = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const int hchunks = (group + MAXG - 1) / MAXG;
    const DecodeLayout L = decode_layout(D, MAXG);
    if (L.bytes > ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "attention_decode: cfg->head_dim = %d: needs %d bytes of shared memory per block, the "
                             "device allows %d",
                             D, L.bytes, ts::max_shared_optin());
    auto split_kernel = attention_decode_split_kernel<MAXG, T>;
    static std::atomic<int> smem_allowed_on{-1};
    if (L.bytes > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, split_kernel, smem_allowed_on));

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
                             "chunk=%lld scale=%g",
                             c.batch, c.max_len, c.n_heads, c.n_kv_heads, D, group, MAXG, (long long)nsplit,
                             (long long)chunk, c.scale);
    TS_LAUNCH(op, split_kernel, grid, kThreads, (size_t)L.bytes, stream, d, out, part_acc, part_ml, q, kc, vc, lens,
              c.max_len, c.n_heads, c.n_kv_heads, D, group, hchunks, (int)chunk, (int)nsplit, c.scale,
              ts::fault_record());
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

/* ---- tensor-core kernel (decode_mma.cuh) -------------------------------------------------- */

/* At least 4 blocks (16 warps) per SM for D <= 64: the kernel is latency-bound there (Qwen2.5's
 * shape: 142 registers gave 3 blocks, 19% occupancy, 34% of DRAM bandwidth under ncu). */
template <int D, int MAXG, int UNROLL, typename T>
__global__ void __launch_bounds__(kMmaThreads, D <= 64 ? 4 : 1)
    attention_decode_mma_kernel(T *out, float *part_acc, float2 *part_ml, int *counters, const T *q, const T *kc,
                                const T *vc, const int32_t *lens, const float *k_scale, const float *v_scale,
                                int scale_heads, int max_len, int nh, int nkv, int group, int hchunks, int chunk,
                                int nsplit, float scale, int len_fault, ts::FaultRecord *fault) {
    ts::pdl_wait();
    decode_mma_body<D, MAXG, UNROLL, T, T>(out, part_acc, part_ml, counters, q, kc, vc, lens, k_scale, v_scale,
                                           scale_heads, max_len, nh, nkv, group, hchunks, chunk, nsplit, scale,
                                           len_fault, fault);
}

template <int D, typename T>
int launch_mma_d(T *out, const T *q, const T *kc, const T *vc, const int32_t *lens, const ts_decode_config &c,
                 cudaStream_t stream) {
    const DecodeShape shape{c.batch, c.max_len, c.n_heads, c.n_kv_heads, c.head_dim, c.scale};
    constexpr int U = decode_unroll(D);
    const int fault = ts::FAULT_DECODE_CACHE_LEN;
    if (c.n_heads / c.n_kv_heads <= 8)
        return launch_mma<D, 8, U>("attention_decode", attention_decode_mma_kernel<D, 8, U, T>, out, q, kc, vc, lens,
                                nullptr, nullptr, 1, fault, shape, stream);
    return launch_mma<D, 16, U>("attention_decode", attention_decode_mma_kernel<D, 16, U, T>, out, q, kc, vc, lens,
                             nullptr, nullptr, 1, fault, shape, stream);
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
    const int group = c.n_heads / c.n_kv_heads;
    if (group <= 1) return launch_maxg<1>(out, q, kc, vc, lens, c, stream);
    if (group <= 2) return launch_maxg<2>(out, q, kc, vc, lens, c, stream);
    if (group <= 4) return launch_maxg<4>(out, q, kc, vc, lens, c, stream);
    return launch_maxg<8>(out, q, kc, vc, lens, c, stream);
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
    const DecodeShape shape{cfg->batch, cfg->max_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale};
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
