/*
 * prefill_flash.cuh: the flash-attention-2 prefill kernel body that attention_prefill
 * (contiguous sequences) and attention_prefill_paged (new tokens against paged caches, with a
 * prefix offset on the causal mask) share; attention_prefill.cu describes the algorithm. The
 * paged form reads each K/V row through its sequence's block table (decode_mma.cuh's KVPages)
 * and places a query row i at position prefix + i.
 */
#ifndef TOUCHSTONE_PREFILL_FLASH_CUH
#define TOUCHSTONE_PREFILL_FLASH_CUH

#include "decode_mma.cuh"
#include "internal.h"
#include "mma.cuh"

namespace ts_prefill {

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
    /* An E4M3 cache's K and V tiles land as codes (kBc x DP bytes each) after the T tiles, and
     * are converted into them (prefill_body). */
    static constexpr size_t kc_off = bytes;
    static constexpr size_t vc_off = kc_off + (size_t)kBc * DP;
    static constexpr size_t bytes_e4m3 = vc_off + (size_t)kBc * DP;
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


/* Paged: ROWS x DP tile of the pool rows of positions [k0, k0 + valid) (base at the KV head,
 * rows row_stride apart, each position's row through its page in trow) into shared memory as
 * load_tile_async stages it; rows >= valid and columns >= D are zero-filled and read nothing. */
template <int DP, int ROWS, typename T>
__device__ __forceinline__ void load_tile_paged(T *dst, const T *base, int64_t row_stride, const ts_decode::KVPages &pg,
                                                const int32_t *trow, int k0, int valid, int D) {
    constexpr int kC8 = DP / 8, kLd = DP + 8, kItems = ROWS * kC8;
#pragma unroll
    for (int it = 0; it < (kItems + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + (int)threadIdx.x;
        if (kItems % kThreads == 0 || i < kItems) {
            const int r = i / kC8, c = (i - r * kC8) * 8;
            const bool ok = r < valid && c < D;
            const T *src = ok ? base + ts_decode::kv_row<true>(pg, trow, k0 + r) * row_stride + c : base;
            ts::cp_async16_zfill(dst + r * kLd + c, src, ok);
        }
    }
}

/* Paged E4M3: ROWS x DP codes of the pool rows of positions [k0, k0 + valid) into shared memory
 * (pitch DP bytes) by 8-byte cp.async pieces, zero codes (+0) for rows >= valid and columns >= D,
 * which read nothing. */
template <int DP, int ROWS>
__device__ __forceinline__ void load_codes_paged(unsigned char *dst, const unsigned char *base, int64_t row_stride,
                                                 const ts_decode::KVPages &pg, const int32_t *trow, int k0, int valid,
                                                 int D) {
    constexpr int kC8 = DP / 8, kItems = ROWS * kC8;
#pragma unroll
    for (int it = 0; it < (kItems + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + (int)threadIdx.x;
        if (kItems % kThreads == 0 || i < kItems) {
            const int r = i / kC8, c = (i - r * kC8) * 8;
            const bool ok = r < valid && c < D;
            const unsigned char *src = ok ? base + ts_decode::kv_row<true>(pg, trow, k0 + r) * row_stride + c : base;
            ts::cp_async8_zfill(dst + r * DP + c, src, ok);
        }
    }
}

/* ROWS x DP codes (pitch DP bytes) into the T tile (pitch DP + 8), eight at a time: exact, every
 * E4M3 value is an fp16 and a bf16 value. */
template <int DP, int ROWS, typename T>
__device__ __forceinline__ void convert_codes(T *dst, const unsigned char *codes) {
    constexpr int kC8 = DP / 8, kLd = DP + 8, kItems = ROWS * kC8;
#pragma unroll
    for (int it = 0; it < (kItems + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + (int)threadIdx.x;
        if (kItems % kThreads == 0 || i < kItems) {
            const int r = i / kC8, c = (i - r * kC8) * 8;
            const uint2 u = *reinterpret_cast<const uint2 *>(codes + r * DP + c);
            const uint32_t raw[2] = {u.x, u.y};
            uint4 v;
            v.x = ts_decode::cache_word<unsigned char, T>(raw, 0);
            v.y = ts_decode::cache_word<unsigned char, T>(raw, 1);
            v.z = ts_decode::cache_word<unsigned char, T>(raw, 2);
            v.w = ts_decode::cache_word<unsigned char, T>(raw, 3);
            *reinterpret_cast<uint4 *>(dst + r * kLd + c) = v;
        }
    }
}

/* One block's query tile: rows [q0, q0 + kBr) of a sequence's q_len query rows (qrow0: its row 0
 * at this head, q_stride apart; out likewise), against keys [0, kv_len) of its cache (kb, vb at
 * this KV head: the sequence's contiguous rows, or the paged pool's through trow). Query row i is
 * at position prefix + i: causal, it sees keys 0 .. prefix + i; with a sliding window (window > 0,
 * causal) only keys prefix + i - window + 1 .. prefix + i, and tiles wholly before the block's
 * first row's window are never loaded. CAP (the instance launched when softcap > 0): each score
 * s = scale · q·k becomes softcap · tanh(s / softcap) before the mask (touchstone.h), then is
 * multiplied by log2(e) instead of scale_log2; CAP = false compiles no trace of the cap. A
 * template parameter, not a uniform runtime branch on softcap: the branch, even never taken,
 * changes ptxas's allocation of the uncapped kernels (spill where there was none) and slows
 * them. ptxas -v (sm_90, nvcc 13.0): every CAP = false instance, here and in decode_mma_body and
 * decode_split_body, has the registers and spill of the kernel without the cap, its SASS the
 * same but for the parameters' constant-bank offsets. The CAP = true prefill instances use from
 * 2 registers fewer to 48 more than their uncapped twins (DP 32 MT 2: 238 against 190); spill
 * stores/loads 20/20 bytes at DP 96 MT 2 (uncapped 4/4), 20/36 at DP 256 (16/32), 48/84 in the
 * paged kernel at DP 256 (none), none elsewhere. */
template <int DP, int MT, bool PAGED, bool CAP, typename T, typename KV = T>
__device__ __forceinline__ void prefill_body(T *orow0, const T *qrow0, int64_t q_stride, const KV *kb, const KV *vb,
                                             int64_t kv_stride, const ts_decode::KVPages &pages, const int32_t *trow,
                                             int q0, int q_len, int kv_len, int prefix, int causal, int window,
                                             int D, float scale_log2, float softcap, float scale, float v_mul = 1.0f) {
    /* KV = unsigned char: a paged E4M3 cache (attention_prefill_paged_fp8). Its tiles land as codes
     * and are converted into the T tiles once a tile has landed (one more block barrier each); the
     * key scale is in scale and scale_log2, the value scale v_mul multiplies the output. */
    constexpr bool kFP8 = std::is_same<KV, unsigned char>::value;
    static_assert(!kFP8 || PAGED, "an E4M3 cache is read through its pages");
    using F = Flash<DP, MT>;
    constexpr int kMt = MT, kBc = F::kBc, kBr = F::kBr, kLd = F::kLd;
    constexpr int kKSteps = DP / 16, kNt = kBc / 8, kDt = DP / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem + F::q_off);
    T *Ks = reinterpret_cast<T *>(smem + F::k_off);
    T *Vs = reinterpret_cast<T *>(smem + F::v_off);
    unsigned char *Kc = smem + F::kc_off, *Vc = smem + F::vc_off; /* E4M3 only: the codes as landed */

    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, tq = lane & 3;
    const int q_valid = min(kBr, q_len - q0);
    const T *qb = qrow0 + (int64_t)q0 * q_stride;
    const int kv_end = causal ? min(kv_len, prefix + q0 + kBr) : kv_len;
    const int n_tiles = (kv_end + kBc - 1) / kBc;
    /* The first tile any of the block's rows sees: the one holding its first row's window start. */
    const int j0 = window > 0 ? max(0, prefix + q0 - window + 1) / kBc : 0;
    /* K or V rows [k0, k0 + kBc) (those before kv_len) into dst: contiguous, or each row from its
     * page. */
    auto load_kv = [&](T *dst, const KV *base, int k0) {
        if constexpr (kFP8)
            load_codes_paged<DP, kBc>(dst == Ks ? Kc : Vc, base, kv_stride, pages, trow, k0, min(kBc, kv_len - k0), D);
        else if constexpr (PAGED)
            load_tile_paged<DP, kBc>(dst, base, kv_stride, pages, trow, k0, min(kBc, kv_len - k0), D);
        else
            load_tile_async<DP, kBc>(dst, base + (int64_t)k0 * kv_stride, kv_stride, min(kBc, kv_len - k0), D);
    };

    load_tile_async<DP, kBr>(Qs, qb, q_stride, q_valid, D);
    load_kv(Ks, kb, j0 * kBc);
    ts::cp_async_commit();

    /* ldmatrix row addresses: for A (Q) and V^T the four matrices are rows 0-7 / 8-15 by
     * columns 0-7 / 8-15 in a0..a3 (b0 dt, b1 dt, b0 dt+1, b1 dt+1 for V); for K the two
     * 8-key halves by the two 8-dim halves (b0, b1 of n-tile 2i, then of 2i + 1). */
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
    const int wrow = warp * 16 * kMt;   /* this warp's first row in the tile */
    const int row0 = q0 + wrow;         /* ... in the sequence's queries (at position prefix + row0) */
    const int g8 = lane >> 2;           /* this lane's rows: row0 + 16 mt + g8 (+ 8) */
    /* The softmax's multiplier into log2 units: scale · log2(e), or log2(e) for capped scores. */
    const float mul = CAP ? 1.4426950408889634f : scale_log2;

    float o[kMt][kDt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int i = 0; i < kDt; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    float m_run[kMt][2], l_run[kMt][2];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
    uint32_t qf[F::kQInRegs ? kMt : 1][F::kQInRegs ? kKSteps : 1][4];

    for (int j = j0; j < n_tiles; ++j) {
        const int k0 = j * kBc;
        /* A warp whose rows all precede the tile's first key (causal), or whose windows all start
         * after its last key, has nothing to add. */
        const bool live = (!causal || k0 <= prefix + row0 + 16 * kMt - 1) &&
                          (window <= 0 || k0 + kBc - 1 > prefix + row0 - window);
        ts::cp_async_wait<0>(); /* K_j (and Q) landed */
        __syncthreads();        /* ... for every thread; every warp is done with V_{j-1} */
        if constexpr (kFP8) {
            convert_codes<DP, kBc>(Ks, Kc);
            __syncthreads();
        }
        if constexpr (F::kQInRegs) {
            if (j == j0) {
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                    for (int ks = 0; ks < kKSteps; ++ks)
                        ts::ldmatrix_x4(qf[mt][ks], Qs + (wrow + mt * 16 + a_row) * kLd + ks * 16 + a_col);
            }
        }
        load_kv(Vs, vb, k0);
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

            /* Soft-capping in natural units (s = scale · q·k, cap · tanh(s / cap)), before the
             * mask; the softmax below then multiplies by log2(e) alone (mul). */
            if constexpr (CAP) {
                const float inv_cap = 1.0f / softcap;
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                    for (int n = 0; n < kNt; ++n)
#pragma unroll
                        for (int c = 0; c < 4; ++c)
                            s[mt][n][c] = ts::softcap_score(s[mt][n][c] * scale, softcap, inv_cap);
            }

            /* Masks: only the tiles that reach past the sequence end or this warp's diagonal, or
             * start before its last row's window. */
            if (k0 + kBc > kv_len || (causal && k0 + kBc - 1 > prefix + row0) ||
                (window > 0 && k0 <= prefix + row0 + 16 * kMt - 1 - window)) {
#pragma unroll
                for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
                    for (int n = 0; n < kNt; ++n)
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            const int key = k0 + n * 8 + 2 * tq + (c & 1);
                            const int row = row0 + mt * 16 + g8 + (c >> 1) * 8;
                            const bool visible = key < kv_len && (!causal || key <= prefix + row) &&
                                                 (window <= 0 || key > prefix + row - window);
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
                    const float m_new = fmaxf(m_run[mt][r], mx * mul);
                    const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing visible yet */
                    const float alpha = ts::ex2_approx(m_run[mt][r] - m_use);
                    m_run[mt][r] = m_new;
                    float sum = 0.0f;
#pragma unroll
                    for (int n = 0; n < kNt; ++n) {
                        s[mt][n][2 * r] = ts::ex2_approx(fmaf(s[mt][n][2 * r], mul, -m_use));
                        s[mt][n][2 * r + 1] = ts::ex2_approx(fmaf(s[mt][n][2 * r + 1], mul, -m_use));
                        sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
                    }
                    l_run[mt][r] = l_run[mt][r] * alpha + sum; /* this lane's part of the row sum */
#pragma unroll
                    for (int dt = 0; dt < kDt; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
                }
        }

        __syncthreads(); /* every warp is done with K_j */
        if (j + 1 < n_tiles) load_kv(Ks, kb, k0 + kBc);
        ts::cp_async_commit(); /* possibly empty: the group count stays the same every tile */
        ts::cp_async_wait<1>(); /* V_j landed (K_{j+1} may still be in flight) */
        __syncthreads();
        if constexpr (kFP8) {
            convert_codes<DP, kBc>(Vs, Vc);
            __syncthreads();
        }

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
            if (row >= q_len) continue;
            const float inv = (kFP8 ? v_mul : 1.0f) / l;
            T *orow = orow0 + (int64_t)row * q_stride;
#pragma unroll
            for (int dt = 0; dt < kDt; ++dt) {
                const int col = dt * 8 + 2 * tq; /* D % 8 == 0: col < D means col + 1 < D */
                if (col < D)
                    *reinterpret_cast<uint32_t *>(orow + col) =
                        ts::pack2<T>(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
            }
        }
}

/* The fault kinds a paged prefill reports: its own op's (the message names it). */
struct PagedPrefillFaults {
    int q_starts, kv_len, block_table;
};

/* A paged prefill block (attention_prefill_paged's and attention_prefill_paged_fp8's kernels):
 * one (64 query rows of one sequence, head) tile. Sequences' tiles are numbered in order, so a
 * block finds its sequence by walking q_starts (the batch's starts are checked on the way, by
 * every block alike, so all agree on a bad one); blocks past the last tile exit. KV = unsigned
 * char: an E4M3 pool whose kv head h stands for code * k_scale[h] and code * v_scale[h] (h = 0
 * when scale_heads is 1); the 16-bit pool ignores the scales. */
template <int DP, bool CAP, typename T, typename KV>
__device__ __forceinline__ void paged_prefill_block(T *out, const T *q, const KV *kc, const KV *vc,
                                                    const int32_t *q_starts, const int32_t *kv_lens,
                                                    const ts_decode::KVPages &pages, int batch, int total_q, int nh,
                                                    int nkv, int D, int window, float scale_log2, float softcap,
                                                    float scale, const float *k_scale, const float *v_scale,
                                                    int scale_heads, PagedPrefillFaults faults,
                                                    ts::FaultRecord *fault) {
    constexpr int kBr = Flash<DP, 1>::kBr;
    const int h = (int)(blockIdx.x % (unsigned)nh);
    int t = (int)(blockIdx.x / (unsigned)nh);
    const bool first_thread = blockIdx.x == 0 && threadIdx.x == 0;
    int prev = __ldg(q_starts);
    if (prev != 0) {
        if (first_thread) ts::report_fault(fault, faults.q_starts, 0, prev, total_q);
        return;
    }
    int b = -1, qs = 0, q_len = 0;
    for (int i = 0; i < batch; ++i) {
        const int next = __ldg(q_starts + i + 1);
        const int len = next - prev;
        if (len < 1 || next > total_q) {
            if (first_thread) ts::report_fault(fault, faults.q_starts, i + 1, next, total_q);
            return;
        }
        const int tiles = (len + kBr - 1) / kBr;
        if (b < 0 && t < tiles) {
            b = i, qs = prev, q_len = len;
        } else if (b < 0) {
            t -= tiles;
        }
        prev = next;
    }
    if (prev != total_q) {
        if (first_thread) ts::report_fault(fault, faults.q_starts, batch, prev, total_q);
        return;
    }
    if (b < 0) return; /* past the last tile */
    const int kv_len = __ldg(kv_lens + b), reach = pages.width << pages.shift;
    const bool reporter = t == 0 && h == 0; /* the sequence's first block */
    if (kv_len < q_len || kv_len > reach) {
        if (reporter && threadIdx.x == 0) ts::report_fault(fault, faults.kv_len, b, kv_len, reach);
        return;
    }
    if (!ts_decode::paged_rows_ok(pages, b, kv_len, reporter, fault, faults.block_table)) return;
    const int kvh = h / (nh / nkv);
    float v_mul = 1.0f;
    if constexpr (std::is_same<KV, unsigned char>::value) {
        /* code * k_scale: the key scale joins the scores' scale (one fp32 rounding each). */
        const int hs = scale_heads == 1 ? 0 : kvh;
        scale *= __ldg(k_scale + hs);
        scale_log2 = scale * 1.4426950408889634f;
        v_mul = __ldg(v_scale + hs);
    }
    const int64_t q_stride = (int64_t)nh * D, kv_stride = (int64_t)nkv * D;
    const int64_t row0 = (int64_t)qs * nh + h;
    prefill_body<DP, 1, true, CAP, T, KV>(out + row0 * D, q + row0 * D, q_stride, kc + (int64_t)kvh * D,
                                          vc + (int64_t)kvh * D, kv_stride, pages,
                                          pages.table + (int64_t)b * pages.width, t * kBr, q_len, kv_len,
                                          kv_len - q_len, 1, window, D, scale_log2, softcap, scale, v_mul);
}

/* The most query tiles `batch` sequences of total_q rows can take: ceil(rows / kBr) each. */
inline int64_t paged_prefill_tiles(int total_q, int batch, int kBr) { return ts::ceil_div(total_q, kBr) + batch; }

/* The host checks both paged prefill entries run after their pointer checks (C: their config,
 * whose shared fields have the same names). */
template <typename C>
inline void check_paged_prefill(ts::Validator &val, const C &c, const void *out, const void *q, const void *k_cache,
                                const void *v_cache) {
    val.dtype_storage(c.dtype, "cfg->dtype");
    val.positive(c.batch, "cfg->batch");
    val.positive(c.total_q, "cfg->total_q");
    ts_decode::check_pages(val, c.num_blocks, c.block_size, c.table_width);
    val.positive(c.n_heads, "cfg->n_heads");
    val.positive(c.n_kv_heads, "cfg->n_kv_heads");
    val.positive(c.head_dim, "cfg->head_dim");
    val.scale(c.scale, "cfg->scale");
    ts::check_window(val, c.window, true);
    ts::check_softcap(val, c.softcap);
    if (val.ok() && c.head_dim > 256)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: this build takes head dims up to 256", c.head_dim);
    if (val.ok()) ts::check_heads(val, c.n_heads, c.n_kv_heads, c.head_dim);
    /* Plain ints: nvcc's host pass mistranslates a braced list of a template argument's fields. */
    const int total_q = c.total_q, nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim, nb = c.num_blocks,
              bs = c.block_size, batch = c.batch, width = c.table_width;
    val.elements("q", {total_q, nh, hd});
    val.elements("k_cache", {nb, bs, nkv, hd});
    val.elements("block_table", {batch, width});
    if (val.ok() && paged_prefill_tiles(c.total_q, c.batch, kMinBr) * c.n_heads > 0x7fffffff)
        val.fail(TS_ERR_UNSUPPORTED, "cfg->total_q = %d: (ceil(total_q / %d) + batch) x n_heads exceeds the grid limit",
                 c.total_q, kMinBr);
    if (val.ok() && !(ts::aligned16(out) && ts::aligned16(q) && ts::aligned16(k_cache) && ts::aligned16(v_cache)))
        val.fail(TS_ERR_UNSUPPORTED, "out/q/k_cache/v_cache = %p/%p/%p/%p: this build needs 16-byte aligned buffers",
                 out, q, k_cache, v_cache);
}

/* Launches a paged prefill: kernel_for<DP, CAP>() is the op's kernel instance for the padded
 * head dim DP (32, 64, 80, 96, 128, 160, 192 or 256) and the cap, smem_for(DP) its dynamic shared
 * memory; args the kernel's arguments after out, q, kc, vc. */
template <typename KernelFor, typename... Args>
int launch_paged_prefill(const char *op, KernelFor kernel_for, bool e4m3, int head_dim, float softcap, int total_q,
                         int batch, int n_heads, const char *dims, cudaStream_t stream, Args... args) {
    auto run = [&](auto dp, auto cap) -> int {
        constexpr int DP = decltype(dp)::value;
        using F = Flash<DP, 1>;
        const size_t smem = e4m3 ? F::bytes_e4m3 : F::bytes;
        if (smem > (size_t)ts::max_shared_optin())
            return ts::set_error(TS_ERR_UNSUPPORTED,
                                 "%s: cfg->head_dim = %d: needs %zu bytes of shared memory per block, the device "
                                 "allows %d",
                                 op, head_dim, smem, ts::max_shared_optin());
        auto kernel = kernel_for(dp, cap);
        static std::atomic<int> smem_allowed_on{-1};
        if (smem > 48 * 1024) TS_CHECK(op, ts::allow_max_shared(op, kernel, smem_allowed_on));
        const unsigned grid = (unsigned)(paged_prefill_tiles(total_q, batch, F::kBr) * n_heads);
        TS_LAUNCH(op, kernel, grid, kThreads, smem, stream, dims, args...);
        return (int)TS_OK;
    };
    auto with_dp = [&](auto cap) -> int {
        const int d = head_dim;
        if (d <= 32) return run(std::integral_constant<int, 32>{}, cap);
        if (d <= 64) return run(std::integral_constant<int, 64>{}, cap);
        if (d <= 80) return run(std::integral_constant<int, 80>{}, cap);
        if (d <= 96) return run(std::integral_constant<int, 96>{}, cap);
        if (d <= 128) return run(std::integral_constant<int, 128>{}, cap);
        if (d <= 160) return run(std::integral_constant<int, 160>{}, cap);
        if (d <= 192) return run(std::integral_constant<int, 192>{}, cap);
        return run(std::integral_constant<int, 256>{}, cap);
    };
    /* The soft cap is the kernel's template argument CAP (prefill_body). */
    if (softcap > 0.0f) return with_dp(std::true_type{});
    return with_dp(std::false_type{});
}

} // namespace ts_prefill

#endif /* TOUCHSTONE_PREFILL_FLASH_CUH */
