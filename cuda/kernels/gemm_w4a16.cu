/*
 * gemm_w4a16: out [m, n] = x [m, k] . W^T for a 4-bit weight in the AWQ or GPTQ packing
 * (touchstone.h states the contract; docs/quantization.md, "4-bit weights", the formats).
 *
 *  - decode (m <= 16): w4a16_decode_kernel, a tensor-core gemv that reads the packed weight once
 *    (k n / 2 bytes, the op's floor) and never writes a dequantised copy. A lane turns a word's
 *    nibbles into pairs of T with one bit operation each (a nibble q OR'd into the mantissa of
 *    1024 in fp16, 128 in bf16, is that number plus q exactly), subtracts the pair of (that number
 *    + z) exactly and multiplies by the scale pair: (q - z) * s rounded once to T, the contract's
 *    weight, two at a time. The m16n8k16 mma then multiplies by x (rows past m are zeros) with
 *    fp32 accumulation. The mma's k order is a permutation of memory's within each 32-row step
 *    (x's fragments use the same one): a dot product does not depend on it, and it lets a lane use
 *    the nibble pairs where the packing puts them. k is split over warps as gemm_fp8's decode
 *    kernel splits it (ts::splitk_count); w4a16_reduce_kernel sums the fp32 partials in split
 *    order and rounds once. Rows whose groups differ inside a lane's eight (GPTQ's act-order
 *    g_idx, a group size that is not a multiple of 8) take each pair's scales and zero points
 *    per row: correct, and slower than reordering at load time, which the ABI leaves to callers.
 *  - prefill (m > 16): w4a16_dequant_kernel writes W [n, k] in T ((q - z) * s rounded once) into
 *    a library workspace and the gemm op's dispatch multiplies it (cuBLAS, fp32 accumulation).
 *
 * GPTQ's g_idx is device data: an index outside [0, k / group_size) is reported through the
 * fault record (TS_ERR_INDEX at the next wait); the decode kernel reads group 0 for it and the
 * dequantiser writes its elements as 0 (out is not meaningful either way).
 */
#include "internal.h"
#include "mma.cuh"
#include "w4a16.cuh"

#include <atomic>
#include <cstring>

namespace {

/* The column (of its word's eight) that nibble j of an AWQ word holds: (0, 2, 4, 6, 1, 3, 5, 7)[j]. */
__device__ __forceinline__ int awq_column(int j) { return (j & 3) * 2 + (j >> 2); }


/* w [n, k] (W, a Linear weight) from the packed W^T [k, n], a 64 x 64 tile a block: the packed
 * words are read along their rows (AWQ: 8 words of a k row; GPTQ: 64 columns of a packed row),
 * each code dequantised ((q - z) * s rounded once to T) into a shared-memory tile [column][k],
 * and the tile written along W's rows in 16-byte pieces. (A thread per element of w, reading
 * across W^T's rows and writing along w's, ran at 0.6 TB/s.) FORMAT: TS_W4_AWQ or TS_W4_GPTQ. */
constexpr int kDqTile = 64, kDqStride = kDqTile + 8; /* the tile's row stride: 16-byte rows, fewer bank conflicts */

template <int FORMAT, typename T>
__global__ void __launch_bounds__(256) w4a16_dequant_kernel(T *w, const int32_t *qweight, const int32_t *qzeros,
                                                            const T *scales, const int32_t *g_idx, int n, int k,
                                                            int group_size, ts::FaultRecord *fault) {
    ts::pdl_wait();
    __shared__ __align__(16) T tile[kDqTile][kDqStride]; /* [column][k] */
    const int c0 = blockIdx.x * kDqTile, r0 = blockIdx.y * kDqTile;
    const int groups = k / group_size, words = n / 8;
    /* 512 words a tile, two a thread, consecutive threads on consecutive words of a row. */
    for (int task = threadIdx.x; task < 512; task += blockDim.x) {
        if constexpr (FORMAT == TS_W4_AWQ) {
            const int rr = task / 8, wi = task % 8; /* k row, word of the row's eight */
            const int r = r0 + rr, cw = c0 / 8 + wi;
            if (r >= k || cw >= words) continue;
            const int g = r / group_size;
            const int32_t word = qweight[(int64_t)r * words + cw];
            for (int j = 0; j < 8; ++j) {
                const int c = 8 * cw + awq_column(j);
                const int q = w4_code(word, j);
                const int z = w4_code(qzeros[(int64_t)g * words + c / 8], w4_awq_nibble(c));
                tile[c - c0][rr] = ts::from_float<T>((float)(q - z) * ts::to_float(scales[(int64_t)g * n + c]));
            }
        } else {
            const int pr = task / kDqTile, cc = task % kDqTile; /* packed row (8 k rows), column */
            const int c = c0 + cc;
            if (r0 + 8 * pr >= k || c >= n) continue;
            const int32_t word = qweight[(int64_t)(r0 / 8 + pr) * n + c];
            for (int i = 0; i < 8; ++i) {
                const int r = r0 + 8 * pr + i;
                int g;
                g = g_idx[r];
                if (g < 0 || g >= groups) {
                    if (c == 0) ts::report_fault(fault, ts::FAULT_W4A16_G_IDX, r, g, groups);
                    tile[cc][8 * pr + i] = ts::from_float<T>(0.0f);
                    continue;
                }
                const int z = w4_code(qzeros[(int64_t)g * words + c / 8], c % 8) + 1; /* stored z - 1 */
                tile[cc][8 * pr + i] =
                    ts::from_float<T>((float)(w4_code(word, i) - z) * ts::to_float(scales[(int64_t)g * n + c]));
            }
        }
    }
    __syncthreads();
    /* 64 columns x 8 pieces of 8 k values; k % 8 == 0, so a piece is all in or all out. */
    for (int piece = threadIdx.x; piece < kDqTile * 8; piece += blockDim.x) {
        const int cc = piece / 8, part = piece % 8;
        const int c = c0 + cc, r = r0 + 8 * part;
        if (c < n && r < k)
            *reinterpret_cast<uint4 *>(w + (int64_t)c * k + r) = *reinterpret_cast<const uint4 *>(&tile[cc][8 * part]);
    }
}

/* ---- decode: the fused tensor-core gemv ------------------------------------------------- */

constexpr int kDecodeRows = 16; /* the mma's M: x's rows past m are zeros */
constexpr int kThreads = 256;   /* 8 warps a block, each on work items of its own */
constexpr int kWarps = kThreads / 32;
constexpr int kStep = 32;   /* k rows a warp multiplies per step: lane (g, t) holds rows 8t..8t+7 */
constexpr int kBlock = 128; /* k rows a split's slice is a multiple of */

/* A warp's 64 columns and its loads, 8 words a lane a step. AWQ: lane (g, t) holds the word of
 * columns 8g..8g+7 in each of its 8 rows (8 loads of 4 bytes, a warp's 8 words of a row in one
 * 32-byte sector); tile j of the 8 mma tiles is nibble j. GPTQ: lane (g, t) holds 16 bytes at
 * packed row t (its 8 rows) for columns 4g..4g+3 and 16 for 32 + 4g..; tile j is column 4g + j
 * (j < 4) or 32 + 4g + j - 4. Two steps of words are in flight ahead of the one a lane multiplies
 * (a double buffer, no register moves), at two blocks an SM. */
constexpr int kCols = 64, kTiles = 8, kWords = 8;

/* GPTQ: the first column of a lane's half h (0: 4g.., 1: 32 + 4g..); past n it reads the last four
 * in bounds, and their results are never stored. */
__device__ __forceinline__ int gptq_col(int lane_col, int h, int n) { return min(lane_col + 32 * h, n - 4); }

/* The column whose weights tile j of a lane holds: AWQ's lane_col is its word column (in bounds),
 * GPTQ's its first column. */
template <int FORMAT>
__device__ __forceinline__ int tile_col(int lane_col, int j, int n) {
    return FORMAT == TS_W4_AWQ ? 8 * lane_col + awq_column(j) : gptq_col(lane_col, j / 4, n) + (j & 3);
}

/* A weight word streamed: read once, not kept in L1. */
__device__ __forceinline__ uint32_t load_word(const int32_t *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ bool is_aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__device__ __forceinline__ uint32_t bits16(const void *base, int64_t i) {
    return static_cast<const unsigned short *>(base)[i];
}

/* One lane's weight words of a step. */
struct Words {
    uint32_t w[kWords];
};

/* A lane's words of a step. AWQ: rows r0..r0+7 of its word column, from p (row r0's word, the
 * rows n / 8 words apart), which the caller advances a step at a time instead of rebuilding the
 * addresses from r0 (a 64-bit multiply a load). GPTQ: packed row r0 / 8, columns lane_col..+3
 * and lane_col + 32..+35, addressed from r0 (a running pointer there cost the kernel registers
 * it spilled). */
template <int FORMAT>
__device__ __forceinline__ Words load_step(const int32_t *p, const int32_t *qweight, int r0, bool ok, int n,
                                           int lane_col, bool vec) {
    Words v;
    if constexpr (FORMAT == TS_W4_AWQ) {
        const int words = n / 8;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v.w[i] = ok ? load_word(p) : 0u;
            p += words;
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int32_t *q = qweight + (int64_t)(r0 / 8) * n + gptq_col(lane_col, h, n);
            if (ok && vec) {
                const uint4 u = w4_load_stream(q);
                v.w[4 * h] = u.x, v.w[4 * h + 1] = u.y, v.w[4 * h + 2] = u.z, v.w[4 * h + 3] = u.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) v.w[4 * h + i] = ok ? load_word(q + i) : 0u;
            }
        }
    }
    return v;
}

/* The lane's zero-point pairs (magic + z, as T) and scale pairs of its 8 columns for two rows
 * in groups g_lo (low half) and g_hi. AWQ's tile j is nibble j of the lane's zero word; GPTQ's
 * columns are in order in theirs (stored z - 1), one word for tiles 0-3 and one for 4-7. */
template <int FORMAT, typename T>
__device__ __forceinline__ void group_pairs(uint32_t (&zp)[kTiles], uint32_t (&sp)[kTiles], const int32_t *qzeros,
                                            const T *scales, int n, int lane_col, int g_lo, int g_hi) {
    const int words = n / 8;
    const int add = FORMAT == TS_W4_AWQ ? 0 : 1;
    uint32_t z_lo[2], z_hi[2];
#pragma unroll
    for (int h = 0; h < (FORMAT == TS_W4_AWQ ? 1 : 2); ++h) {
        const int zcol = FORMAT == TS_W4_AWQ ? lane_col : gptq_col(lane_col, h, n) / 8;
        z_lo[h] = __ldg(qzeros + (int64_t)g_lo * words + zcol);
        z_hi[h] = g_hi == g_lo ? z_lo[h] : __ldg(qzeros + (int64_t)g_hi * words + zcol);
    }
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        const int c = tile_col<FORMAT>(lane_col, j, n), h = FORMAT == TS_W4_AWQ ? 0 : j / 4;
        const int nib = FORMAT == TS_W4_AWQ ? j : c & 7;
        zp[j] = (uint32_t)(w4_code(z_lo[h], nib) + add) | (uint32_t)(w4_code(z_hi[h], nib) + add) << 16 | W4Magic<T>::kPair;
        const uint32_t s_lo = bits16(scales, (int64_t)g_lo * n + c);
        sp[j] = s_lo | (g_hi == g_lo ? s_lo : bits16(scales, (int64_t)g_hi * n + c)) << 16;
    }
}

/* GPTQ: the groups of rows r0..r0+7 from g_idx (zeros when !ok). */
__device__ __forceinline__ void load_groups(int (&gr)[8], const int32_t *g_idx, int r0, bool ok, bool vec) {
    if (ok && vec) {
        const int4 a = __ldg(reinterpret_cast<const int4 *>(g_idx + r0));
        const int4 b = __ldg(reinterpret_cast<const int4 *>(g_idx + r0 + 4));
        gr[0] = a.x, gr[1] = a.y, gr[2] = a.z, gr[3] = a.w;
        gr[4] = b.x, gr[5] = b.y, gr[6] = b.z, gr[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) gr[i] = ok ? __ldg(g_idx + r0 + i) : 0;
    }
}

/* GPTQ: what a step needs of its lane's 8 groups before it runs: the first, whether all 8 are
 * that one, and whether any is outside [0, groups) (the step then rereads them). */
struct GroupInfo {
    int first;
    bool uniform, bad;
};

__device__ __forceinline__ GroupInfo group_info(const int32_t *g_idx, int r0, bool ok, bool vec, int groups) {
    int gr[8];
    load_groups(gr, g_idx, r0, ok, vec);
    GroupInfo gi{gr[0], true, false};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        gi.uniform = gi.uniform && gr[i] == gr[0];
        gi.bad = gi.bad || (unsigned)gr[i] >= (unsigned)groups;
    }
    return gi;
}

/* The mma's k order in a step, and x's fragments in it. AWQ pairs rows (4s + 2p, 4s + 2p + 1)
 * of two words (b0: p = 0, b1: p = 1 in step s); GPTQ pairs a word's nibbles (i, i + 4), rows
 * (2s, 2s + 4) in b0 and (2s + 1, 2s + 5) in b1. a0 and a2 hold x at the same rows. */
template <int FORMAT>
__device__ __forceinline__ void x_frag(uint32_t &a0, uint32_t &a2, const uint4 &xv, int s) {
    if constexpr (FORMAT == TS_W4_AWQ) {
        a0 = s ? xv.z : xv.x;
        a2 = s ? xv.w : xv.y;
    } else {
        const uint32_t lo = s ? xv.y : xv.x, hi = s ? xv.w : xv.z;
        a0 = __byte_perm(lo, hi, 0x5410);
        a2 = __byte_perm(lo, hi, 0x7632);
    }
}

/* The rows (of a lane's 8) of pair p in step s: low half, high half. */
template <int FORMAT>
__host__ __device__ constexpr int pair_row(int s, int p, bool hi) {
    return FORMAT == TS_W4_AWQ ? 4 * s + 2 * p + (hi ? 1 : 0) : 2 * s + p + (hi ? 4 : 0);
}

/* One step of a lane: its 8 rows r0.. (ok: in the slice) with weight words v, x's 8 values of
 * rows g (xl) and g + 8 (xh), into tile j's accumulators acc[j]. AWQ's groups follow from r0
 * (g_cur: the group of the last step's first row, g_end: where it ends; a division only when a
 * step passes g_end, not every step), GPTQ's from g_idx (gi, read a step ahead). zs, ss cache
 * the pairs of group `cached`; a step whose rows straddle groups takes each pair's own (AWQ groups
 * that are not a multiple of 8, GPTQ's act-order). */
template <int FORMAT, typename T>
__device__ __forceinline__ void decode_step(float (&acc)[kTiles][4], const Words &v, const uint4 &xl, const uint4 &xh,
                                            const GroupInfo &gi, const int32_t *g_idx, int r0, bool ok,
                                            int &cached, int &g_cur, int &g_end, uint32_t (&zs)[kTiles],
                                            uint32_t (&ss)[kTiles],
                                            const int32_t *qzeros, const T *scales, int n, int lane_col,
                                            int group_size, int groups, bool report, ts::FaultRecord *fault) {
    const uint32_t magic = W4Magic<T>::kPair;
    bool uniform = true;
    int g0 = cached;
    if constexpr (FORMAT == TS_W4_AWQ) {
        if (ok) {
            if (r0 >= g_end) { /* rows only grow within a slice: one division a group */
                g_cur = r0 / group_size;
                g_end = (g_cur + 1) * group_size;
            }
            g0 = g_cur;
            uniform = r0 + 7 < g_end;
        }
    } else if (ok) {
        g0 = gi.bad ? 0 : gi.first;
        uniform = gi.uniform && !gi.bad;
        if (gi.bad && report) {
#pragma unroll 1
            for (int i = 0; i < 8; ++i) {
                const int gv = __ldg(g_idx + r0 + i);
                if ((unsigned)gv >= (unsigned)groups) ts::report_fault(fault, ts::FAULT_W4A16_G_IDX, r0 + i, gv, groups);
            }
        }
    }
    if (g0 < 0) g0 = 0;
    if (!ok) {
        /* Rows past the slice (its last step only): scale pairs of +0 make their weights exactly
         * 0 whatever the words, zero points and x hold; the next item reloads its group. */
#pragma unroll
        for (int j = 0; j < kTiles; ++j) ss[j] = 0u;
        cached = -1;
    } else if (uniform && g0 != cached) {
        group_pairs<FORMAT, T>(zs, ss, qzeros, scales, n, lane_col, g0, g0);
        cached = g0;
    }
    /* A straddling step's group of its row `row`: AWQ's by division, GPTQ's read again (an L1 hit:
     * group_info read it a step ago), one outside the range taken as 0 (reported above). */
    auto group_of = [&](int row) {
        if constexpr (FORMAT == TS_W4_AWQ) {
            return (r0 + row) / group_size;
        } else {
            const int gv = __ldg(g_idx + r0 + row);
            return (unsigned)gv < (unsigned)groups ? gv : 0;
        }
    };
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        uint32_t a0, a1, a2, a3;
        x_frag<FORMAT>(a0, a2, xl, s);
        x_frag<FORMAT>(a1, a3, xh, s);
        uint32_t b[2][kTiles]; /* tile j's b0 (p = 0) and b1 */
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            uint32_t q[kTiles]; /* tile j's nibble pair as magic + code */
            if constexpr (FORMAT == TS_W4_AWQ) {
                const uint32_t w_lo = v.w[pair_row<FORMAT>(s, p, false)], w_hi = v.w[pair_row<FORMAT>(s, p, true)];
#pragma unroll
                for (int k4 = 0; k4 < 4; ++k4) {
                    const uint32_t pk = __byte_perm(w_lo, w_hi, k4 | k4 << 4 | (4 + k4) << 8 | (4 + k4) << 12);
                    q[2 * k4] = w4_nibble_pair(pk, magic);
                    q[2 * k4 + 1] = w4_nibble_pair(pk >> 4, magic);
                }
            } else {
#pragma unroll
                for (int j = 0; j < kTiles; ++j) q[j] = w4_nibble_pair(v.w[j] >> (8 * s + 4 * p), magic);
            }
            if (!uniform)
                group_pairs<FORMAT, T>(zs, ss, qzeros, scales, n, lane_col, group_of(pair_row<FORMAT>(s, p, false)),
                                       group_of(pair_row<FORMAT>(s, p, true)));
#pragma unroll
            for (int j = 0; j < kTiles; ++j) b[p][j] = w4_dequant2<T>(q[j], zs[j], ss[j]);
        }
#pragma unroll
        for (int j = 0; j < kTiles; ++j) ts::mma16816<T>(acc[j], a0, a1, a2, a3, b[0][j], b[1][j]);
    }
    if (!uniform) cached = -1; /* zs, ss hold the last pair's groups */
}

/* Work item i (a warp at a time, grid-stride) is the warp's 64 columns of tile i % tiles over k
 * in [slice (i / tiles), +slice) (slice % 128 == 0): consecutive warps share a split, so x's slice
 * stays in L1. The step loop is unrolled only by the double buffer's two steps: unrolled further
 * with every path inline, the loop was over 100 KB of code and ran at a tenth of the speed. x
 * and g_idx are read one step ahead. One split: out [m, n] in T directly; several: fp32
 * partial [splits, m, n] for w4a16_reduce_kernel. */
template <int FORMAT, bool HI, typename T>
__global__ void __launch_bounds__(kThreads, 2)
    w4a16_decode_kernel(T *out, float *partial, const T *x, const int32_t *qweight, const int32_t *qzeros,
                        const T *scales, const int32_t *g_idx, int m, int n, int k, int group_size, int slice,
                        int tiles, int splits, ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int words = n / 8, groups = k / group_size;
    const bool xvec = is_aligned16(x), wvec = is_aligned16(qweight), ivec = is_aligned16(g_idx);
    const int64_t items = (int64_t)tiles * splits;
    for (int64_t item = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); item < items;
         item += (int64_t)gridDim.x * kWarps) {
        const int tile = (int)(item % tiles), split = (int)(item / tiles);
        const int k_begin = split * slice, k_end = min(k, k_begin + slice);
        /* The lane's word column (AWQ: past n the last one in bounds, its results never stored) or
         * first column (GPTQ, clamped per half by gptq_col). */
        const int lane_col = FORMAT == TS_W4_AWQ ? min(tile * 8 + g, words - 1) : tile * kCols + 4 * g;
        const unsigned short *xlo = reinterpret_cast<const unsigned short *>(x) + (int64_t)min(g, m - 1) * k;
        const unsigned short *xhi = reinterpret_cast<const unsigned short *>(x) + (int64_t)min(g + 8, m - 1) * k;

        float acc[kTiles][4];
#pragma unroll
        for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        /* AWQ: the lane's word at its first step's first row (k_begin + 8 t), a step's rows on. */
        const int32_t *wp = qweight + (int64_t)(k_begin + 8 * t) * words + lane_col;
        Words buf[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r0 = k_begin + h * kStep + 8 * t;
            buf[h] = load_step<FORMAT>(wp, qweight, r0, r0 < k_end, n, lane_col, wvec);
            wp += (int64_t)kStep * words;
        }
        const int r_first = k_begin + 8 * t;
        uint4 x_next = w4_load_x8(xlo, r_first, r_first < k_end && g < m, xvec);
        uint4 xh_next = HI ? w4_load_x8(xhi, r_first, r_first < k_end && g + 8 < m, xvec) : make_uint4(0, 0, 0, 0);
        GroupInfo gi_next{0, true, false};
        if constexpr (FORMAT == TS_W4_GPTQ) gi_next = group_info(g_idx, r_first, r_first < k_end, ivec, groups);

        int cached = -1;          /* the group zs, ss hold (-1: none) */
        int g_cur = 0, g_end = 0; /* AWQ: the current group and where it ends */
        uint32_t zs[kTiles], ss[kTiles];
#pragma unroll 1
        for (int k0 = k_begin; k0 < k_end; k0 += 2 * kStep) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int ks = k0 + h * kStep;
                if (ks >= k_end) break; /* warp-uniform */
                const int r0 = ks + 8 * t;
                const Words v = buf[h];
                {
                    const int rn = r0 + 2 * kStep;
                    buf[h] = load_step<FORMAT>(wp, qweight, rn, rn < k_end, n, lane_col, wvec);
                    wp += (int64_t)kStep * words;
                }
                const uint4 xl = x_next, xh = xh_next;
                const GroupInfo gi = gi_next;
                {
                    const int rn = r0 + kStep;
                    x_next = w4_load_x8(xlo, rn, rn < k_end && g < m, xvec);
                    if (HI) xh_next = w4_load_x8(xhi, rn, rn < k_end && g + 8 < m, xvec);
                    if constexpr (FORMAT == TS_W4_GPTQ) gi_next = group_info(g_idx, rn, rn < k_end, ivec, groups);
                }
                decode_step<FORMAT, T>(acc, v, xl, xh, gi, g_idx, r0, r0 < k_end, cached, g_cur, g_end, zs, ss, qzeros,
                                       scales, n, lane_col, group_size, groups, tile == 0, fault);
            }
        }
        /* acc[j][i] holds row g (i < 2) or g + 8 of tile j's column for lane 2t + (i & 1). */
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = g + (i >= 2 ? 8 : 0), owner = 2 * t + (i & 1);
                int c;
                bool in;
                if constexpr (FORMAT == TS_W4_AWQ) {
                    const int wc = tile * 8 + owner;
                    c = 8 * wc + awq_column(j);
                    in = wc < words;
                } else {
                    c = tile * kCols + 4 * owner + (j < 4 ? j : 28 + j);
                    in = c < n;
                }
                if (r < m && in) {
                    if (splits > 1)
                        partial[(int64_t)split * m * n + (int64_t)r * n + c] = acc[j][i];
                    else
                        out[(int64_t)r * n + c] = ts::from_float<T>(acc[j][i]);
                }
            }
        }
    }
}

/* Warps of the decode kernel of FORMAT resident on the whole GPU at once (once per process). */
template <int FORMAT>
int decode_resident_warps() {
    static std::atomic<int> cached{0};
    int w = cached.load();
    if (w > 0) return w;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, w4a16_decode_kernel<FORMAT, true, __nv_bfloat16>,
                                                      kThreads, 0) != cudaSuccess ||
        blocks < 1) {
        (void)cudaGetLastError();
        blocks = 1;
    }
    w = blocks * kWarps * ts::sm_count();
    cached.store(w);
    return w;
}

template <int FORMAT, typename T>
int launch_decode(const char *op, T *out, const T *x, const int32_t *qweight, const int32_t *qzeros, const T *scales,
                  const int32_t *g_idx, const ts_w4a16_config &c, cudaStream_t stream) {
    const int resident = decode_resident_warps<FORMAT>();
    const int tiles = (int)ts::ceil_div(c.n, kCols);
    /* Slices are whole 128-row blocks: the usual group size, so at every size a slice of a k
     * split in groups of 32 or 64 changes group inside it (the cached pairs are exercised). */
    const int64_t blocks = ts::ceil_div(c.k, kBlock);
    const int want = ts::splitk_count(tiles, blocks, kCols * kBlock / 2.0, (double)c.m * c.n, resident, 1.0);
    const int slice = (int)ts::ceil_div(blocks, want) * kBlock;
    const int splits = (int)ts::ceil_div(c.k, slice);
    void *part = nullptr;
    if (splits > 1) TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)splits * c.m * c.n * sizeof(float), &part));
    float *partial = static_cast<float *>(part);
    const int64_t items = (int64_t)tiles * splits;
    const unsigned grid = (unsigned)std::min<int64_t>(ts::ceil_div(items, kWarps), resident / kWarps);
    const char *d = ts::dims("m=%d n=%d k=%d group=%d format=%d slice=%d splits=%d in=%s", c.m, c.n, c.k,
                             c.group_size, c.format, slice, splits, ts::Storage<T>::name);
    auto run = [&](auto kernel) {
        TS_LAUNCH(op, kernel, grid, kThreads, 0, stream, d, out, partial, x, qweight, qzeros, scales, g_idx, c.m, c.n,
                  c.k, c.group_size, slice, tiles, splits, ts::fault_record());
        return (int)TS_OK;
    };
    TS_CHECK(op, c.m > 8 ? run(w4a16_decode_kernel<FORMAT, true, T>) : run(w4a16_decode_kernel<FORMAT, false, T>));
    return splits == 1 ? TS_OK : w4a16_launch_reduce(op, out, partial, c.m, c.n, splits, stream);
}

template <typename T>
int launch(const char *op, T *out, const T *x, const int32_t *qweight, const int32_t *qzeros, const T *scales,
           const int32_t *g_idx, const ts_w4a16_config &c, cudaStream_t stream) {
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_W4A16, (size_t)c.n * c.k * sizeof(T), &ws));
    T *w = static_cast<T *>(ws);
    const dim3 grid((unsigned)ts::ceil_div(c.n, kDqTile), (unsigned)ts::ceil_div(c.k, kDqTile));
    const char *d = ts::dims("n=%d k=%d group=%d format=%d in=%s", c.n, c.k, c.group_size, c.format,
                             ts::Storage<T>::name);
    if (c.format == TS_W4_AWQ) {
        auto kernel = w4a16_dequant_kernel<TS_W4_AWQ, T>;
        TS_LAUNCH(op, kernel, grid, 256, 0, stream, d, w, qweight, qzeros, scales, g_idx, c.n, c.k, c.group_size,
                  ts::fault_record());
    } else {
        auto kernel = w4a16_dequant_kernel<TS_W4_GPTQ, T>;
        TS_LAUNCH(op, kernel, grid, 256, 0, stream, d, w, qweight, qzeros, scales, g_idx, c.n, c.k, c.group_size,
                  ts::fault_record());
    }
    return ts::gemm_nt(op, out, false, x, static_cast<const T *>(w), static_cast<const T *>(nullptr), c.m, c.n, c.k,
                       stream);
}

/* The config and pointers of a packed weight (TS_W4_AWQ, TS_W4_GPTQ). */
void check_packed(ts::Validator &v, const int32_t *qzeros, const void *scales, const int32_t *g_idx,
                  const ts_w4a16_config *cfg) {
    v.ptr(qzeros, "qzeros");
    v.ptr(scales, "scales");
    if (!v.ok()) return;
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->m, "cfg->m");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.positive(cfg->group_size, "cfg->group_size");
    if (!v.ok()) return;
    if (cfg->format != TS_W4_AWQ && cfg->format != TS_W4_GPTQ)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->format = %d: want TS_W4_AWQ (0), TS_W4_GPTQ (1) or TS_W4_TILED (2)", cfg->format);
    else if (cfg->k % cfg->group_size != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must divide cfg->k = %d", cfg->group_size, cfg->k);
    else if (cfg->k % 8 != 0 || cfg->n % 8 != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->k = %d, cfg->n = %d: both must be multiples of 8 (8 codes a word)",
               cfg->k, cfg->n);
    else if (cfg->format == TS_W4_GPTQ && g_idx == nullptr)
        v.fail(TS_ERR_INVALID_ARGUMENT, "g_idx = NULL: GPTQ needs each input's group");
    else if (cfg->format == TS_W4_AWQ && g_idx != nullptr)
        v.fail(TS_ERR_INVALID_ARGUMENT, "g_idx = %p: AWQ has none, must be NULL", (const void *)g_idx);
}

/* The config of a tiled weight (TS_W4_TILED): qweight holds codes, scales and zero points. */
void check_tiled(ts::Validator &v, const int32_t *qzeros, const void *scales, const int32_t *g_idx,
                 const ts_w4a16_config *cfg) {
    if (qzeros != nullptr || scales != nullptr || g_idx != nullptr)
        v.fail(TS_ERR_INVALID_ARGUMENT, "qzeros = %p, scales = %p, g_idx = %p: TS_W4_TILED holds them in qweight, "
               "pass NULL", (const void *)qzeros, scales, (const void *)g_idx);
    v.positive(cfg->m, "cfg->m");
    if (v.ok()) ts::check_w4a16_tileable(v, cfg);
}

} // namespace

extern "C" int ts_gemm_w4a16(void *out, const void *x, const int32_t *qweight, const int32_t *qzeros,
                             const void *scales, const int32_t *g_idx, const ts_w4a16_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gemm_w4a16");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(qweight, "qweight");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    const bool tiled = cfg->format == TS_W4_TILED;
    if (tiled)
        check_tiled(v, qzeros, scales, g_idx, cfg);
    else
        check_packed(v, qzeros, scales, g_idx, cfg);
    if (!v.ok()) return v.status();
    v.elements("x", {cfg->m, cfg->k});
    v.elements("out", {cfg->m, cfg->n});
    v.elements("w", {cfg->n, cfg->k});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    if (tiled) return ts::launch_gemm_w4a16_tiled(v.op(), out, x, qweight, *cfg, st);
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (cfg->m <= kDecodeRows) {
            const auto *xt = static_cast<const T *>(x);
            const auto *st_ = static_cast<const T *>(scales);
            return cfg->format == TS_W4_AWQ
                       ? launch_decode<TS_W4_AWQ>(v.op(), static_cast<T *>(out), xt, qweight, qzeros, st_, g_idx, *cfg, st)
                       : launch_decode<TS_W4_GPTQ>(v.op(), static_cast<T *>(out), xt, qweight, qzeros, st_, g_idx, *cfg,
                                                   st);
        }
        return launch(v.op(), static_cast<T *>(out), static_cast<const T *>(x), qweight, qzeros,
                      static_cast<const T *>(scales), g_idx, *cfg, st);
    });
}
