/*
 * attention_prefill: causal (or full) GQA attention over whole sequences, flash-attention style.
 * q [batch, seq, n_heads, D], k/v [batch, seq, n_kv_heads, D], out like q; query head h reads kv
 * head h / (n_heads / n_kv_heads).
 *
 * One block of 4 warps per (batch, head, 64-query tile), heaviest causal tiles scheduled first.
 * Q, K and V tiles (64 rows, D padded with zeros to DP, a multiple of 16) are staged in shared
 * memory with 16-byte loads; S = Q K^T and O += P V run on the tensor cores through WMMA
 * (fp16 x fp16, fp32 accumulate). Each warp owns 16 query rows: an online softmax in fp32
 * (running max and sum, two lanes per row) rescales its O rows (fp32, in shared memory) per key
 * tile; P is rounded to fp16 for the P V product and the running sum adds those same rounded
 * values, so the normalisation matches the weights used. Keys past the causal diagonal or the
 * sequence end are masked to -inf (probability 0), and tiles wholly past the diagonal are never
 * loaded. Output: O / l rounded once to fp16.
 */
#include <mma.h>

#include "internal.h"

namespace {

using namespace nvcuda;

constexpr int kBr = 64, kBc = 64, kThreads = 128;
constexpr int kLdS = kBc + 4; /* floats: S rows */
constexpr int kLdP = kBc + 8; /* halves: P rows */

/* Shared-memory layout for padded head dim DP; every region 128-byte aligned, every WMMA
 * pointer 32-byte aligned, row pitches padded against bank conflicts. */
template <int DP>
struct PrefillSmem {
    static constexpr int kLdH = DP + 8; /* halves: Q, K, V rows */
    static constexpr int kLdO = DP + 4; /* floats: O rows */
    static constexpr size_t q_off = 0;
    static constexpr size_t k_off = q_off + (size_t)kBr * kLdH * 2;
    static constexpr size_t v_off = k_off + (size_t)kBc * kLdH * 2;
    static constexpr size_t s_off = v_off + (size_t)kBc * kLdH * 2;
    static constexpr size_t p_off = s_off + (size_t)kBr * kLdS * 4;
    static constexpr size_t o_off = p_off + (size_t)kBr * kLdP * 2;
    static constexpr size_t bytes = o_off + (size_t)kBr * kLdO * 4;
};

/* rows x DP tile into shared memory (pitch LDH): rows >= valid and columns >= D are zero. */
template <int DP, int LDH>
__device__ __forceinline__ void load_tile(__half *dst, const __half *src, int64_t row_stride, int valid, int D) {
    constexpr int kC8 = DP / 8;
    for (int i = threadIdx.x; i < 64 * kC8; i += kThreads) {
        const int r = i / kC8, c = (i - r * kC8) * 8;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < valid && c < D) val = *reinterpret_cast<const uint4 *>(src + (int64_t)r * row_stride + c);
        *reinterpret_cast<uint4 *>(dst + r * LDH + c) = val;
    }
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_kernel(__half *out, const __half *q, const __half *k, const __half *v, int seq, int nh,
                             int nkv, int D, int causal, float scale, int q_tiles) {
    using L = PrefillSmem<DP>;
    constexpr int kLdH = L::kLdH, kLdO = L::kLdO;
    extern __shared__ __align__(128) unsigned char smem[];
    __half *Qs = reinterpret_cast<__half *>(smem + L::q_off);
    __half *Ks = reinterpret_cast<__half *>(smem + L::k_off);
    __half *Vs = reinterpret_cast<__half *>(smem + L::v_off);
    float *Ss = reinterpret_cast<float *>(smem + L::s_off);
    __half *Ps = reinterpret_cast<__half *>(smem + L::p_off);
    float *Os = reinterpret_cast<float *>(smem + L::o_off);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tile = q_tiles - 1 - (int)(blockIdx.x % q_tiles); /* heaviest (causal) first */
    const int bh = (int)(blockIdx.x / q_tiles);
    const int h = bh % nh, b = bh / nh;
    const int g = h / (nh / nkv);
    const int q0 = tile * kBr;
    const int q_valid = min(kBr, seq - q0);
    const int64_t q_stride = (int64_t)nh * D, kv_stride = (int64_t)nkv * D;
    const __half *qb = q + (((int64_t)b * seq + q0) * nh + h) * D;
    const __half *kb = k + ((int64_t)b * seq * nkv + g) * D;
    const __half *vb = v + ((int64_t)b * seq * nkv + g) * D;

    load_tile<DP, kLdH>(Qs, qb, q_stride, q_valid, D);
    for (int i = threadIdx.x; i < kBr * kLdO; i += kThreads) Os[i] = 0.0f;

    /* Softmax ownership: row r of the tile (this warp's 16 rows), columns c = 2i + hh. */
    const int r = warp * 16 + (lane >> 1), hh = lane & 1;
    const int qi = q0 + r;
    float m_run = -INFINITY, l_run = 0.0f;

    const int kv_end = causal ? min(seq, q0 + kBr) : seq;
    for (int k0 = 0; k0 < kv_end; k0 += kBc) {
        const int kv_valid = min(kBc, seq - k0);
        __syncthreads(); /* every warp is done with the previous K / V tile */
        load_tile<DP, kLdH>(Ks, kb + (int64_t)k0 * kv_stride, kv_stride, kv_valid, D);
        load_tile<DP, kLdH>(Vs, vb + (int64_t)k0 * kv_stride, kv_stride, kv_valid, D);
        __syncthreads();

        /* S = Q K^T for this warp's 16 rows. */
#pragma unroll
        for (int n = 0; n < kBc / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < DP / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bt;
                wmma::load_matrix_sync(a, Qs + warp * 16 * kLdH + kk * 16, kLdH);
                wmma::load_matrix_sync(bt, Ks + n * 16 * kLdH + kk * 16, kLdH);
                wmma::mma_sync(acc, a, bt, acc);
            }
            wmma::store_matrix_sync(Ss + warp * 16 * kLdS + n * 16, acc, kLdS, wmma::mem_row_major);
        }
        __syncwarp();

        /* Online softmax of row r over this tile. */
        float mx = -INFINITY;
#pragma unroll 8
        for (int i = 0; i < kBc / 2; ++i) {
            const int c = 2 * i + hh, kj = k0 + c;
            const bool visible = kj < seq && (!causal || kj <= qi);
            mx = fmaxf(mx, visible ? Ss[r * kLdS + c] * scale : -INFINITY);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m_run, mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing visible yet */
        const float alpha = expf(m_run - m_use);
        float sum = 0.0f;
#pragma unroll 8
        for (int i = 0; i < kBc / 2; ++i) {
            const int c = 2 * i + hh, kj = k0 + c;
            const bool visible = kj < seq && (!causal || kj <= qi);
            const __half p = __float2half_rn(visible ? expf(Ss[r * kLdS + c] * scale - m_use) : 0.0f);
            Ps[r * kLdP + c] = p;
            sum += __half2float(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * alpha + sum;
        m_run = m_new;
        for (int c = hh; c < DP; c += 2) Os[r * kLdO + c] *= alpha;
        __syncwarp();

        /* O += P V for this warp's 16 rows. */
#pragma unroll
        for (int n = 0; n < DP / 16; ++n) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            wmma::load_matrix_sync(o, Os + warp * 16 * kLdO + n * 16, kLdO, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < kBc / 16; ++kk) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vf;
                wmma::load_matrix_sync(pa, Ps + warp * 16 * kLdP + kk * 16, kLdP);
                wmma::load_matrix_sync(vf, Vs + kk * 16 * kLdH + n * 16, kLdH);
                wmma::mma_sync(o, pa, vf, o);
            }
            wmma::store_matrix_sync(Os + warp * 16 * kLdO + n * 16, o, kLdO, wmma::mem_row_major);
        }
        __syncwarp();
    }

    if (r < q_valid) {
        __half *orow = out + (((int64_t)b * seq + qi) * nh + h) * D;
        for (int c = hh; c < D; c += 2) orow[c] = __float2half_rn(Os[r * kLdO + c] / l_run);
    }
}

template <int DP>
int launch_dp(__half *out, const __half *q, const __half *k, const __half *v, const ts_attention_config &c,
              cudaStream_t stream) {
    const char *op = "attention_prefill";
    const size_t smem = PrefillSmem<DP>::bytes;
    if (smem > (size_t)ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "attention_prefill: cfg->head_dim = %d: needs %zu bytes of shared memory per block, the "
                             "device allows %d",
                             c.head_dim, smem, ts::max_shared_optin());
    auto kernel = attention_prefill_kernel<DP>;
    static std::atomic<int> smem_allowed_on{-1};
    if (smem > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, kernel, smem_allowed_on));
    const int q_tiles = (int)ts::ceil_div(c.seq_len, kBr);
    const unsigned grid = (unsigned)((int64_t)q_tiles * c.n_heads * c.batch);
    const char *d = ts::dims("batch=%d seq_len=%d n_heads=%d n_kv_heads=%d head_dim=%d (padded %d) causal=%d scale=%g",
                             c.batch, c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim, DP, c.causal, c.scale);
    TS_LAUNCH(op, kernel, grid, kThreads, smem, stream, d, out, q, k, v, c.seq_len, c.n_heads, c.n_kv_heads,
              c.head_dim, c.causal != 0 ? 1 : 0, c.scale, q_tiles);
    return TS_OK;
}

int launch_attention_prefill(__half *out, const __half *q, const __half *k, const __half *v,
                             const ts_attention_config &c, cudaStream_t stream) {
    const int d = c.head_dim;
    if (d <= 32) return launch_dp<32>(out, q, k, v, c, stream);
    if (d <= 64) return launch_dp<64>(out, q, k, v, c, stream);
    if (d <= 96) return launch_dp<96>(out, q, k, v, c, stream);
    if (d <= 128) return launch_dp<128>(out, q, k, v, c, stream);
    if (d <= 160) return launch_dp<160>(out, q, k, v, c, stream);
    if (d <= 192) return launch_dp<192>(out, q, k, v, c, stream);
    return launch_dp<256>(out, q, k, v, c, stream);
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
    val.dtype_f16(cfg->dtype, "cfg->dtype");
    val.positive(cfg->batch, "cfg->batch");
    val.positive(cfg->seq_len, "cfg->seq_len");
    val.positive(cfg->n_heads, "cfg->n_heads");
    val.positive(cfg->n_kv_heads, "cfg->n_kv_heads");
    val.positive(cfg->head_dim, "cfg->head_dim");
    val.scale(cfg->scale, "cfg->scale");
    ts::check_heads(val, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    val.elements("q", {cfg->batch, cfg->seq_len, cfg->n_heads, cfg->head_dim});
    if (val.ok() && ts::ceil_div(cfg->seq_len, kBr) * cfg->n_heads * cfg->batch > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->batch = %d: batch x n_heads x ceil(seq_len / %d) exceeds the grid limit",
                 cfg->batch, kBr);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k) && ts::aligned16(v)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k/v = %p/%p/%p/%p: this build needs 16-byte aligned buffers", out, q, k,
                 v);
    if (!val.ok()) return val.status();
    cudaStream_t st;
    const int s = ts::ready(val.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_attention_prefill(static_cast<__half *>(out), static_cast<const __half *>(q),
                                    static_cast<const __half *>(k), static_cast<const __half *>(v), *cfg, st);
}
