/*
 * attention_decode: one new query per sequence against its KV cache, flash-decoding.
 * q [batch, n_heads, D], k/v caches [batch, max_len, n_kv_heads, D], cache_lens int32 [batch];
 * sequence b attends to positions [0, cache_lens[b]) and never reads a position at or beyond it.
 *
 * Split kernel: one block of 128 threads per (sequence, kv head, group of up to 8 query heads,
 * split of the cache length). The block reads each K/V row of its range ONCE, for every query
 * head of its GQA group (7 in Qwen2.5), so bandwidth is not multiplied by the group size. Per
 * 64-key tile: K and V rows are staged in shared memory with 16-byte cp.async copies, double
 * buffered (the next tile streams in while this one is used); scores (fp32) by
 * two threads per key over all the group's heads; an online softmax per head (one warp per
 * head: running max / sum in fp32); P . V accumulated in fp32 registers by threads that each
 * own 8 dims of a strided subset of the keys, for all heads, reduced across threads at the end.
 * With one split the block writes the output; otherwise it writes fp32 partials (max, sum,
 * unnormalised accumulator) to a library workspace (grown on demand, reused) and a combine
 * kernel merges the splits per (sequence, head). cache_lens are checked on the device: a length
 * outside [1, max_len] is recorded in the fault record (TS_ERR_INDEX at the next ts_synchronize
 * / ts_copy_to_host) and that sequence is skipped.
 */
#include "internal.h"

namespace {

constexpr int kThreads = 128, kTile = 64; /* kTile == kThreads / 2: two threads per key */

struct DecodeLayout {
    int ldk;       /* halves per staged K / V row */
    int ngroups;   /* key groups of the accumulation (kThreads / (D / 8)) */
    int q_off;     /* float [maxg][D] */
    int p_off;     /* float [maxg][kTile] */
    int alpha_off; /* float [maxg] */
    int ml_off;    /* float [maxg][2] */
    int kv_off;    /* K and V, two buffers each: [2][kTile][ldk] halves; after the loop: float [ngroups][maxg][D] */
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
    const int kv = 2 * 2 * kTile * L.ldk * 2; /* K, V x double buffer x halves */
    const int red = L.ngroups * maxg * D * 4;
    L.bytes = align16(L.kv_off + (kv > red ? kv : red));
    return L;
}

template <int MAXG>
__global__ void __launch_bounds__(kThreads)
    attention_decode_split_kernel(__half *out, float *part_acc, float2 *part_ml, const __half *q, const __half *kc,
                                  const __half *vc, const int32_t *lens, int max_len, int nh, int nkv, int D,
                                  int group, int hchunks, int chunk, int nsplit, float scale,
                                  ts::FaultRecord *fault) {
    extern __shared__ __align__(16) unsigned char smem[];
    const DecodeLayout L = decode_layout(D, MAXG);
    float *q_s = reinterpret_cast<float *>(smem + L.q_off);
    float *p_s = reinterpret_cast<float *>(smem + L.p_off);
    float *alpha_s = reinterpret_cast<float *>(smem + L.alpha_off);
    float *ml_s = reinterpret_cast<float *>(smem + L.ml_off);
    __half *kv_s = reinterpret_cast<__half *>(smem + L.kv_off); /* K buf 0, K buf 1, V buf 0, V buf 1 */
    float *red_s = reinterpret_cast<float *>(smem + L.kv_off);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int idx = blockIdx.x;
    const int hc = idx % hchunks;
    idx /= hchunks;
    const int kvh = idx % nkv;
    const int b = idx / nkv;
    const int split = blockIdx.y;
    const int h0 = kvh * group + hc * MAXG;
    const int ng = min(MAXG, group - hc * MAXG);

    const int len = lens[b];
    if (len < 1 || len > max_len) {
        if (split == 0 && kvh == 0 && hc == 0 && tid == 0)
            ts::report_fault(fault, ts::FAULT_DECODE_CACHE_LEN, b, len, max_len);
        return;
    }
    const int start = split * chunk;
    const int end = min(len, start + chunk);

    for (int i = tid; i < MAXG * D; i += kThreads) {
        const int g = i / D, d = i - g * D;
        q_s[i] = g < ng ? __half2float(q[((int64_t)b * nh + h0 + g) * D + d]) : 0.0f;
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
    const __half *kbase = kc + ((int64_t)b * max_len * nkv + kvh) * D;
    const __half *vbase = vc + ((int64_t)b * max_len * nkv + kvh) * D;

    const int tile_elems = kTile * L.ldk;
    /* Stage rows [k0, k0 + n) of K and V into buffer buf with cp.async (one commit group). */
    auto issue_tile = [&](int k0, int n, int buf) {
        __half *ks = kv_s + buf * tile_elems, *vs = kv_s + (2 + buf) * tile_elems;
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
        const __half *k_s = kv_s + buf * tile_elems;
        const __half *v_s = kv_s + (2 + buf) * tile_elems;

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
            out[bh * D + d] = __float2half_rn(a / ml_s[2 * g + 1]);
        } else {
            part_acc[(bh * nsplit + split) * D + d] = a;
            if (d == 0) part_ml[bh * nsplit + split] = make_float2(ml_s[2 * g], ml_s[2 * g + 1]);
        }
    }
}

/* out[b, h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the splits (empty ones have
 * m_s = -inf and weigh 0). One block per (sequence, head). */
__global__ void __launch_bounds__(256)
    attention_decode_combine_kernel(__half *out, const float *part_acc, const float2 *part_ml, const int32_t *lens,
                                    int max_len, int nh, int D, int nsplit) {
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
        out[bh * D + d] = __float2half_rn(num / den);
    }
}

template <int MAXG>
int launch_maxg(__half *out, const __half *q, const __half *kc, const __half *vc, const int32_t *lens,
                const ts_decode_config &c, cudaStream_t stream) {
    const char *op = "attention_decode";
    const int D = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const int hchunks = (group + MAXG - 1) / MAXG;
    const DecodeLayout L = decode_layout(D, MAXG);
    if (L.bytes > ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "attention_decode: cfg->head_dim = %d: needs %d bytes of shared memory per block, the "
                             "device allows %d",
                             D, L.bytes, ts::max_shared_optin());
    auto split_kernel = attention_decode_split_kernel<MAXG>;
    static std::atomic<int> smem_allowed_on{-1};
    if (L.bytes > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, split_kernel, smem_allowed_on));

    /* Splits: enough blocks for ~4 per SM, at least one 64-key tile per split. */
    const int64_t groups = (int64_t)c.batch * c.n_kv_heads * hchunks;
    const int64_t target = 4LL * ts::sm_count();
    const int64_t tiles = ts::ceil_div(c.max_len, kTile);
    int64_t nsplit = ts::ceil_div(target, groups);
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
        auto combine_kernel = attention_decode_combine_kernel;
        TS_LAUNCH(op, combine_kernel, cgrid, threads, 0, stream, dc, out, part_acc, part_ml, lens, c.max_len,
                  c.n_heads, D, (int)nsplit);
    }
    return TS_OK;
}

int launch_attention_decode(__half *out, const __half *q, const __half *kc, const __half *vc, const int32_t *lens,
                            const ts_decode_config &c, cudaStream_t stream) {
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
    val.dtype_f16(cfg->dtype, "cfg->dtype");
    val.positive(cfg->batch, "cfg->batch");
    val.positive(cfg->max_len, "cfg->max_len");
    val.positive(cfg->n_heads, "cfg->n_heads");
    val.positive(cfg->n_kv_heads, "cfg->n_kv_heads");
    val.positive(cfg->head_dim, "cfg->head_dim");
    val.scale(cfg->scale, "cfg->scale");
    if (val.ok() && cfg->n_heads % cfg->n_kv_heads != 0)
        val.fail(TS_ERR_SHAPE_MISMATCH, "cfg->n_kv_heads = %d: must divide n_heads (%d)", cfg->n_kv_heads,
                 cfg->n_heads);
    if (val.ok() && (cfg->head_dim % 8 != 0 || cfg->head_dim > 256))
        val.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: this build supports multiples of 8 up to 256",
                 cfg->head_dim);
    val.elements("k_cache", {cfg->batch, cfg->max_len, cfg->n_kv_heads, cfg->head_dim});
    val.elements("q", {cfg->batch, cfg->n_heads, cfg->head_dim});
    if (val.ok() && (int64_t)cfg->batch * cfg->n_heads > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->batch = %d: batch x n_heads exceeds the grid limit", cfg->batch);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k_cache) && ts::aligned16(v_cache)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k_cache/v_cache = %p/%p/%p/%p: this build needs 16-byte aligned buffers",
                 out, q, k_cache, v_cache);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_attention_decode(static_cast<__half *>(out), static_cast<const __half *>(q),
                                   static_cast<const __half *>(k_cache), static_cast<const __half *>(v_cache),
                                   cache_lens, *cfg, st);
}
