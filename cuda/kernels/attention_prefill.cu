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

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kMinBr = 16 * kWarps; /* the fewest query rows a block takes (the grid-size check) */

/* Tile shapes and shared-memory layout for padded head dim DP (a multiple of 16) and MT m16 tiles
 * (16 query rows each) per warp. On the H100 the mma.sync loop is bound by shared-memory reads
 * (an ldmatrix.x4 moves 512 bytes; one m16n8k16 is ~1.6 cycles of an SM's tensor cores): with
 * MT = 2 a warp owns 32 query rows and uses every K and V fragment it loads twice. But its blocks
 * are twice as long, which costs more than it saves when a causal grid is too small to balance
 * (the heaviest block is the critical path): see pick_two_mtiles. The register budget sets the rest:
 * S (MT x kBc/2 floats a lane), O (MT x DP/2) and, when held, Q's fragments (MT x DP/4 words). */
template <int DP, int MT>
struct Flash {
    static_assert(MT == 1 || (MT == 2 && DP <= 128), "two m-tiles per warp only up to head_dim 128");
    static constexpr int kBc = MT == 1 ? (DP <= 128 ? 64 : 32) : (DP <= 96 ? 64 : 32); /* keys per tile */
    static constexpr bool kQInRegs = MT == 1 ? DP <= 128 : DP <= 64;                   /* else re-read per use */
    static constexpr int kBr = 16 * MT * kWarps;                                       /* query rows per block */
    static constexpr int kLd = DP + 8;                                                 /* 2-byte elements a staged row */
    static constexpr size_t q_off = 0;
    static constexpr size_t k_off = q_off + (size_t)kBr * kLd * 2;
    static constexpr size_t v_off = k_off + (size_t)kBc * kLd * 2;
    static constexpr size_t bytes = v_off + (size_t)kBc * kLd * 2;
};

/* ROWS x DP tile into shared memory (pitch DP + 8) by cp.async: rows >= valid and columns >= D
 * are zero-filled (V rows past the sequence must be finite: their probability is 0, and 0 times
 * a stale NaN would not be). Not committed here. */
template <int DP, int ROWS, typename T>
__device__ __forceinline__ void load_tile_async(T *dst, const T *src, int64_t row_stride, int valid, int D) {
    constexpr int kC8 = DP / 8, kLd = DP + 8, kItems = ROWS * kC8;
#pragma unroll
    for (int it = 0; it < (kItems + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + (int)threadIdx.x;
        if (kItems % kThreads == 0 || i < kItems) {
            const int r = i / kC8, c = (i - r * kC8) * 8;
            const bool ok = r < valid && c < D;
            ts::cp_async16_zfill(dst + r * kLd + c, ok ? src + (int64_t)r * row_stride + c : src, ok);
        }
    }
}

template <int DP, int MT, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_kernel(T *out, const T *q, const T *k, const T *v, int seq, int nh, int nkv, int D, int causal,
                             float scale_log2, int q_tiles) {
    ts::pdl_wait();
    using F = Flash<DP, MT>;
    constexpr int kMt = MT, kBc = F::kBc, kBr = F::kBr, kLd = F::kLd;
    constexpr int kKSteps = DP / 16, kNt = kBc / 8, kDt = DP / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem + F::q_off);
    T *Ks = reinterpret_cast<T *>(smem + F::k_off);
    T *Vs = reinterpret_cast<T *>(smem + F::v_off);

    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, tq = lane & 3;
    const int bhs = (int)(gridDim.x / (unsigned)q_tiles); /* batch x heads */
    const int tile = q_tiles - 1 - (int)(blockIdx.x / (unsigned)bhs);
    const int bh = (int)(blockIdx.x % (unsigned)bhs);
    const int h = bh % nh, b = bh / nh;
    const int kvh = h / (nh / nkv);
    const int q0 = tile * kBr, q_valid = min(kBr, seq - q0);
    const int64_t q_stride = (int64_t)nh * D, kv_stride = (int64_t)nkv * D;
    const T *qb = q + (((int64_t)b * seq + q0) * nh + h) * D;
    const T *kb = k + ((int64_t)b * seq * nkv + kvh) * D;
    const T *vb = v + ((int64_t)b * seq * nkv + kvh) * D;
    const int kv_end = causal ? min(seq, q0 + kBr) : seq;
    const int n_tiles = (kv_end + kBc - 1) / kBc;

    load_tile_async<DP, kBr>(Qs, qb, q_stride, q_valid, D);
    load_tile_async<DP, kBc>(Ks, kb, kv_stride, min(kBc, seq), D);
    ts::cp_async_commit();

    /* ldmatrix row addresses: for A (Q) and V^T the four matrices are rows 0-7 / 8-15 by
     * columns 0-7 / 8-15 in a0..a3 (b0 dt, b1 dt, b0 dt+1, b1 dt+1 for V); for K the two
     * 8-key halves by the two 8-dim halves (b0, b1 of n-tile 2i, then of 2i + 1). */
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
    const int wrow = warp * 16 * kMt;   /* this warp's first row in the tile */
    const int row0 = q0 + wrow;         /* ... in the sequence */
    const int g8 = lane >> 2;           /* this lane's rows: row0 + 16 mt + g8 (+ 8) */

    float o[kMt][kDt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int i = 0; i < kDt; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    float m_run[kMt][2], l_run[kMt][2];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
    uint32_t qf[F::kQInRegs ? kMt : 1][F::kQInRegs ? kKSteps : 1][4];

    for (int j = 0; j < n_tiles; ++j) {
        const int k0 = j * kBc;
        /* A warp whose rows all precede the tile's first key (causal) has nothing to add. */
        const bool live = !causal || k0 <= row0 + 16 * kMt - 1;
        ts::cp_async_wait<0>(); /* K_j (and Q) landed */
        __syncthreads();        /* ... for every thread; every warp is done with V_{j-1} */
        if constexpr (F::kQInRegs) {
            if (j == 0) {
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                    for (int ks = 0; ks < kKSteps; ++ks)
                        ts::ldmatrix_x4(qf[mt][ks], Qs + (wrow + mt * 16 + a_row) * kLd + ks * 16 + a_col);
            }
        }
        load_tile_async<DP, kBc>(Vs, vb + (int64_t)k0 * kv_stride, kv_stride, min(kBc, seq - k0), D);
        ts::cp_async_commit();

        /* S = Q K_j^T for this warp's rows. */
        float s[kMt][kNt][4];
        if (live) {
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                for (int n = 0; n < kNt; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks) {
                uint32_t a[kMt][4];
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt) {
                    if constexpr (F::kQInRegs) {
                        a[mt][0] = qf[mt][ks][0], a[mt][1] = qf[mt][ks][1], a[mt][2] = qf[mt][ks][2],
                        a[mt][3] = qf[mt][ks][3];
                    } else {
                        ts::ldmatrix_x4(a[mt], Qs + (wrow + mt * 16 + a_row) * kLd + ks * 16 + a_col);
                    }
                }
#pragma unroll
                for (int np = 0; np < kNt / 2; ++np) {
                    uint32_t bk[4];
                    ts::ldmatrix_x4(bk, Ks + (np * 16 + k_row) * kLd + ks * 16 + k_col);
#pragma unroll
                    for (int mt = 0; mt < kMt; ++mt) {
                        ts::mma16816<T>(s[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[0], bk[1]);
                        ts::mma16816<T>(s[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[2], bk[3]);
                    }
                }
            }

            /* Masks: only the tiles that reach past the sequence end or this warp's diagonal. */
            if (k0 + kBc > seq || (causal && k0 + kBc - 1 > row0)) {
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                    for (int n = 0; n < kNt; ++n)
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            const int key = k0 + n * 8 + 2 * tq + (c & 1);
                            const int row = row0 + mt * 16 + g8 + (c >> 1) * 8;
                            const bool visible = key < seq && (!causal || key <= row);
                            if (!visible) s[mt][n][c] = -INFINITY;
                        }
            }

            /* Online softmax of this lane's rows over the tile. */
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int n = 0; n < kNt; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m_run[mt][r], mx * scale_log2);
                    const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing visible yet */
                    const float alpha = ts::ex2_approx(m_run[mt][r] - m_use);
                    m_run[mt][r] = m_new;
                    float sum = 0.0f;
#pragma unroll
                    for (int n = 0; n < kNt; ++n) {
                        s[mt][n][2 * r] = ts::ex2_approx(fmaf(s[mt][n][2 * r], scale_log2, -m_use));
                        s[mt][n][2 * r + 1] = ts::ex2_approx(fmaf(s[mt][n][2 * r + 1], scale_log2, -m_use));
                        sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
                    }
                    l_run[mt][r] = l_run[mt][r] * alpha + sum; /* this lane's part of the row sum */
#pragma unroll
                    for (int dt = 0; dt < kDt; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
                }
        }

        __syncthreads(); /* every warp is done with K_j */
        if (j + 1 < n_tiles)
            load_tile_async<DP, kBc>(Ks, kb + (int64_t)(k0 + kBc) * kv_stride, kv_stride, min(kBc, seq - k0 - kBc),
                                     D);
        ts::cp_async_commit(); /* possibly empty: the group count stays the same every tile */
        ts::cp_async_wait<1>(); /* V_j landed (K_{j+1} may still be in flight) */
        __syncthreads();

        /* O += P V_j: P's A fragments are the S accumulators of two adjacent 8-key tiles, rounded
         * to T (to nearest even: pack2). */
        if (live) {
#pragma unroll
            for (int kk = 0; kk < kBc / 16; ++kk) {
                uint32_t pf[kMt][4];
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt) {
                    pf[mt][0] = ts::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pf[mt][1] = ts::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pf[mt][2] = ts::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pf[mt][3] = ts::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < DP / 16; ++dp) {
                    uint32_t bv[4];
                    ts::ldmatrix_x4_trans(bv, Vs + (kk * 16 + a_row) * kLd + dp * 16 + a_col);
#pragma unroll
                    for (int mt = 0; mt < kMt; ++mt) {
                        ts::mma16816<T>(o[mt][2 * dp], pf[mt][0], pf[mt][1], pf[mt][2], pf[mt][3], bv[0], bv[1]);
                        ts::mma16816<T>(o[mt][2 * dp + 1], pf[mt][0], pf[mt][1], pf[mt][2], pf[mt][3], bv[2],
                                        bv[3]);
                    }
                }
            }
        }
    }
    ts::cp_async_wait<0>(); /* nothing may be in flight when the block exits */

#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = l_run[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = row0 + mt * 16 + g8 + r * 8;
            if (row >= seq) continue;
            const float inv = 1.0f / l;
            T *orow = out + (((int64_t)b * seq + row) * nh + h) * D;
#pragma unroll
            for (int dt = 0; dt < kDt; ++dt) {
                const int col = dt * 8 + 2 * tq; /* D % 8 == 0: col < D means col + 1 < D */
                if (col < D)
                    *reinterpret_cast<uint32_t *>(orow + col) =
                        ts::pack2<T>(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
            }
        }
}

template <int DP, int MT, typename T>
int launch_dp(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c, cudaStream_t stream) {
    const char *op = "attention_prefill";
    const size_t smem = Flash<DP, MT>::bytes;
    if (smem > (size_t)ts::max_shared_optin())
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "attention_prefill: cfg->head_dim = %d: needs %zu bytes of shared memory per block, the "
                             "device allows %d",
                             c.head_dim, smem, ts::max_shared_optin());
    auto kernel = attention_prefill_kernel<DP, MT, T>;
    static std::atomic<int> smem_allowed_on{-1};
    if (smem > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, kernel, smem_allowed_on));
    const int q_tiles = (int)ts::ceil_div(c.seq_len, Flash<DP, MT>::kBr);
    const unsigned grid = (unsigned)((int64_t)q_tiles * c.n_heads * c.batch);
    /* ex2 of scale * log2(e) * s: the product rounded once, in double first. */
    const float scale_log2 = (float)((double)c.scale * 1.4426950408889634);
    const char *d = ts::dims("batch=%d seq_len=%d n_heads=%d n_kv_heads=%d head_dim=%d (padded %d, %d rows a warp) causal=%d scale=%g",
                             c.batch, c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim, DP, 16 * MT, c.causal, c.scale);
    TS_LAUNCH(op, kernel, grid, kThreads, smem, stream, d, out, q, k, v, c.seq_len, c.n_heads, c.n_kv_heads,
              c.head_dim, c.causal != 0 ? 1 : 0, scale_log2, q_tiles);
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

template <int DP, typename T>
int launch_mt(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c, cudaStream_t stream) {
    if constexpr (DP <= 128) {
        if (pick_two_mtiles(c)) return launch_dp<DP, 2>(out, q, k, v, c, stream);
    }
    return launch_dp<DP, 1>(out, q, k, v, c, stream);
}

template <typename T>
int launch_attention_prefill(T *out, const T *q, const T *k, const T *v, const ts_attention_config &c,
                             cudaStream_t stream) {
    const int d = c.head_dim;
    if (d <= 32) return launch_mt<32>(out, q, k, v, c, stream);
    if (d <= 64) return launch_mt<64>(out, q, k, v, c, stream);
    if (d <= 80) return launch_mt<80>(out, q, k, v, c, stream);
    if (d <= 96) return launch_mt<96>(out, q, k, v, c, stream);
    if (d <= 128) return launch_mt<128>(out, q, k, v, c, stream);
    if (d <= 160) return launch_mt<160>(out, q, k, v, c, stream);
    if (d <= 192) return launch_mt<192>(out, q, k, v, c, stream);
    return launch_mt<256>(out, q, k, v, c, stream);
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
