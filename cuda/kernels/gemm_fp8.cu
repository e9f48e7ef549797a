/*
 * gemm_fp8: out [m, n] = dequant(x) . dequant(w)^T for f8e4m3 x [m, k] and w [n, k] with block
 * (1x128 / 128x128) or per-channel fp32 scales; touchstone.h states the contract. Three paths:
 *
 *  - decode (m <= 16, k % 16 == 0, x and w 16-byte aligned): gemm_fp8_decode_kernel, a
 *    tensor-core gemv. At decode the op is bound by the weight read (n * k bytes): each warp
 *    owns 16 output columns and streams their weight rows in 16-byte vectors, two 128-wide k
 *    blocks ahead, into the A operand of fp16 m16n8k16 mmas (e4m3 converts to fp16 exactly;
 *    sm_90 has no FP8 mma.sync, and ptxas lowers one to the same HMMAs with both operands
 *    converted, x's rows again for every column tile); x's at most 16 rows are the B operand,
 *    from L1. The k range is split over warps where the columns alone would leave resident
 *    warps idle, and gemm_fp8_reduce_kernel then sums the splits' fp32 partials in split order
 *    and rounds once.
 *  - prefill (k % 128 == 0, aligned): cuBLASLt's FP8 GEMM with the scales in its block modes
 *    (VEC128 for x's 1x128 groups and for per-token scales, BLK128x128 for w's blocks, VEC128
 *    for per-channel weight scales), fp32 accumulation without FAST_ACCUM: each 128-wide block's
 *    partial is scaled and summed in fp32, as DeepSeek-V3's recipe requires. fp8_lt_scales_kernel
 *    lays the scales out as cuBLASLt reads them, in a workspace.
 *  - otherwise (k % 128 != 0 past 16 rows, misaligned operands, or no cuBLASLt algorithm):
 *    gemm_fp8_kernel, 64x64 output tiles on CUDA cores, the reference path of the op.
 *
 * Every path accumulates each 128-wide k block's products in fp32 and adds the block's partial
 * times its two scales (block scales) or sums the whole row and scales it once (per channel).
 */
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "blaslt.cuh"
#include "internal.h"

namespace {

constexpr int kTile = 64;   /* rows of x and rows of w per block */
constexpr int kBlock = 128; /* the scale blocks' side */
constexpr int kStep = 64;   /* k per step: half a scale block (two 64x64 fp32 tiles fit the 48 KB of static shared memory) */
constexpr int kThreads = 256;

__device__ __forceinline__ float decode_e4m3(unsigned char b) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(__half(h));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) gemm_fp8_kernel(T *out, const unsigned char *x, const float *xs,
                                                            const unsigned char *w, const float *ws, int m, int n,
                                                            int k, int block) {
    ts::pdl_wait();
    __shared__ float sx[kTile][kStep + 1];
    __shared__ float sw[kTile][kStep + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
    const int kb_count = k / kBlock;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < k; k0 += kStep) {
        for (int i = threadIdx.x; i < kTile * kStep; i += kThreads) {
            const int r = i / kStep, c = i % kStep;
            const int gr = row0 + r, gc = col0 + r, kk = k0 + c;
            sx[r][c] = gr < m && kk < k ? decode_e4m3(x[(int64_t)gr * k + kk]) : 0.0f;
            sw[r][c] = gc < n && kk < k ? decode_e4m3(w[(int64_t)gc * k + kk]) : 0.0f;
        }
        __syncthreads();
        float part[4][4] = {};
        for (int c = 0; c < kStep; ++c) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = sx[ty + 16 * i][c];
                b[i] = sw[tx + 16 * i][c];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
        }
        const int kb = k0 / kBlock;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + ty + 16 * i;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = col0 + tx + 16 * j;
                if (block) {
                    if (r < m && c < n)
                        acc[i][j] += part[i][j] * xs[(int64_t)r * kb_count + kb] * ws[(int64_t)(c / kBlock) * kb_count + kb];
                } else {
                    acc[i][j] += part[i][j];
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = col0 + tx + 16 * j;
            if (r < m && c < n) {
                const float v = block ? acc[i][j] : acc[i][j] * xs[r] * ws[c];
                out[(int64_t)r * n + c] = ts::from_float<T>(v);
            }
        }
    }
}

/* ---- decode: the tensor-core gemv ------------------------------------------------------ */

constexpr int kDecodeCols = 16;                 /* output columns a warp owns: the mma's M (weight rows) */
constexpr int kDecodeRows = 16;                 /* x rows: two n8 halves of the mma, rows past m are zeros */
constexpr int kDecodeThreads = 256;             /* 8 warps a block, each on work items of its own */
constexpr int kDecodeWarps = kDecodeThreads / 32;

/* d += a . b: m16n8k16, fp16 operands, fp32 accumulators. */
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four e4m3 codes (the bytes of v) as two f16x2, exactly (every e4m3 value is an fp16 value):
 * bytes 0, 1 into lo and 2, 3 into hi, the lower byte in the lower half. One conversion each,
 * the high half read in place (F2FP's .H1 operand, where a shift first would cost one more). */
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t v, uint32_t &lo, uint32_t &hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(v));
}

/* 16 weight bytes, streamed: read once, not kept in L1. */
__device__ __forceinline__ uint4 load_stream(const unsigned char *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

constexpr int kDepth = 2; /* 128-wide k blocks of weight a lane has in flight ahead of its mma */

/* A lane's 16 bytes at kk and kk + 64 of each of its two weight rows (g and g + 8 of the tile),
 * or of x's rows g and g + 8 (zeros past the range or past m). */
struct Block16 {
    uint4 lo0, lo1, hi0, hi1;
};

/* Loads at p + 0 and p + 64 while the lane's k offset kk (of p) is inside the range; the
 * pointers then advance a block (running pointers: recomputing row * k + kk a load cost ptxas
 * some forty instructions a block). */
__device__ __forceinline__ void w_load(Block16 &b, const unsigned char *&wlo, const unsigned char *&whi, int kk,
                                       int k_len) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    const bool in0 = kk < k_len, in1 = kk + 64 < k_len;
    b.lo0 = in0 ? load_stream(wlo) : z;
    b.hi0 = in0 ? load_stream(whi) : z;
    b.lo1 = in1 ? load_stream(wlo + 64) : z;
    b.hi1 = in1 ? load_stream(whi + 64) : z;
    wlo += kBlock;
    whi += kBlock;
}

/* x through L1: every warp of a split reads the same slice. Rows 8-15 only when HI. */
template <bool HI>
__device__ __forceinline__ Block16 x_load(const unsigned char *&xlo, const unsigned char *&xhi, bool lo_ok, bool hi_ok,
                                          int kk, int k_len) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    Block16 b{z, z, z, z};
    const bool in0 = kk < k_len, in1 = kk + 64 < k_len;
    if (lo_ok && in0) b.lo0 = *reinterpret_cast<const uint4 *>(xlo);
    if (lo_ok && in1) b.lo1 = *reinterpret_cast<const uint4 *>(xlo + 64);
    if (HI && hi_ok && in0) b.hi0 = *reinterpret_cast<const uint4 *>(xhi);
    if (HI && hi_ok && in1) b.hi1 = *reinterpret_cast<const uint4 *>(xhi + 64);
    xlo += kBlock;
    if (HI) xhi += kBlock;
    return b;
}

/* One 64-wide half: four m16n8k16, the weight tile as A (16 rows: the lane's rows g and g + 8),
 * x as B (8 rows a half). The mma's k order is a permutation of memory's: lane t's logical k
 * {2t, 2t+1, 2t+8, 2t+9} of the j-th mma are bytes 16t + 4j .. 16t + 4j + 3 of the half, for
 * the weight and x alike, and a dot product does not depend on the order. Only the weight is
 * unpacked for the tensor cores beyond x's own 16 bytes a lane (no x row converted per mma). */
template <bool HI>
__device__ __forceinline__ void decode_half(float (&lo)[4], float (&hi)[4], const uint4 &wl, const uint4 &wh,
                                            const uint4 &xl, const uint4 &xh) {
    const uint32_t wlv[4] = {wl.x, wl.y, wl.z, wl.w}, whv[4] = {wh.x, wh.y, wh.z, wh.w};
    const uint32_t xlv[4] = {xl.x, xl.y, xl.z, xl.w}, xhv[4] = {xh.x, xh.y, xh.z, xh.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a0, a1, a2, a3, b0, b1;
        e4m3x4_to_f16x2(wlv[j], a0, a2);
        e4m3x4_to_f16x2(whv[j], a1, a3);
        e4m3x4_to_f16x2(xlv[j], b0, b1);
        mma_f16(lo, a0, a1, a2, a3, b0, b1);
        if constexpr (HI) {
            e4m3x4_to_f16x2(xhv[j], b0, b1);
            mma_f16(hi, a0, a1, a2, a3, b0, b1);
        }
    }
}

/* Work item i (a warp at a time, grid-stride) is columns [16 (i % tiles), +16) over k in
 * [slice (i / tiles), +slice) (slice % 128 == 0): consecutive warps share a split, so x's slice
 * stays in L1. Lane (g, t) streams weight rows col0 + g and col0 + g + 8, 16 bytes of each a
 * 64-wide half, kDepth 128-wide blocks ahead of the one it multiplies (the weight read is
 * latency-bound without them), and x's rows g (and g + 8 when HI) one block ahead. Block scales
 * are applied per 128-wide k block (the tile's 16 columns share a weight block). One split:
 * out [m, n] in T directly (per-channel scales applied, one rounding); several: fp32 partial
 * [splits, m, n] for gemm_fp8_reduce_kernel. */
template <bool BLOCK, bool HI, typename T>
__global__ void __launch_bounds__(kDecodeThreads) gemm_fp8_decode_kernel(T *out, float *partial, const unsigned char *x,
                                                                         const float *xs, const unsigned char *w,
                                                                         const float *ws, int m, int n, int k,
                                                                         int slice, int tiles, int splits) {
    ts::pdl_wait();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kbs = k / kBlock; /* block scales: k % 128 == 0 */
    const int64_t items = (int64_t)tiles * splits;
    for (int64_t item = (int64_t)blockIdx.x * kDecodeWarps + (threadIdx.x >> 5); item < items;
         item += (int64_t)gridDim.x * kDecodeWarps) {
        const int col0 = (int)(item % tiles) * kDecodeCols, split = (int)(item / tiles);
        const int k_begin = split * slice, k_span = min(slice, k - k_begin), k_len = k_span - t * 16;
        /* A column past n reads row n - 1 (in bounds); its results are never stored. */
        const unsigned char *wlo = w + (int64_t)min(col0 + g, n - 1) * k + k_begin + t * 16;
        const unsigned char *whi = w + (int64_t)min(col0 + g + 8, n - 1) * k + k_begin + t * 16;
        const unsigned char *xlo = x + (int64_t)min(g, m - 1) * k + k_begin + t * 16;
        const unsigned char *xhi = x + (int64_t)min(g + 8, m - 1) * k + k_begin + t * 16;
        const bool lo_ok = g < m, hi_ok = g + 8 < m;
        /* The accumulators' x rows (tokens): 2t and 2t + 1, and 8 more for the hi half. */
        const int r0 = 2 * t, r1 = 2 * t + 1;
        /* Block scales from the split's first block on: w's for the tile, x's rows r0, r1, r0 + 8,
         * r1 + 8 (null past m: scale 0). */
        const int kb0 = k_begin / kBlock;
        const float *sw_p = BLOCK ? ws + (int64_t)(col0 / kBlock) * kbs + kb0 : nullptr;
        auto xs_row = [&](int r) { return BLOCK && r < m ? xs + (int64_t)r * kbs + kb0 : nullptr; };
        const float *sx0 = xs_row(r0), *sx1 = xs_row(r1), *sx2 = HI ? xs_row(r0 + 8) : nullptr,
                    *sx3 = HI ? xs_row(r1 + 8) : nullptr;

        float acc_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        Block16 wb[kDepth];
#pragma unroll
        for (int d = 0; d < kDepth; ++d) w_load(wb[d], wlo, whi, d * kBlock, k_len);
        Block16 xb = x_load<HI>(xlo, xhi, lo_ok, hi_ok, 0, k_len);
        /* Block scales one block ahead too, as loaded (w's; x's rows r0, r1 and, when HI, r0 + 8,
         * r1 + 8; 0 past m): used at once, their L2 round trip stalled every block. */
        auto block_scales = [&](int kk) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float s_w = 0.0f;
            if (BLOCK && kk < k_span) {
                const int kb = kk / kBlock;
                s_w = sw_p[kb];
                if (sx0) v.x = sx0[kb];
                if (sx1) v.y = sx1[kb];
                if (HI && sx2) v.z = sx2[kb];
                if (HI && sx3) v.w = sx3[kb];
            }
            return make_float4(v.x * s_w, v.y * s_w, v.z * s_w, v.w * s_w);
        };
        float4 sb = block_scales(0);
        for (int k0 = 0; k0 < k_span; k0 += kDepth * kBlock) {
#pragma unroll
            for (int d = 0; d < kDepth; ++d) {
                const int kk = k0 + d * kBlock;
                if (kk < k_span) {
                    const Block16 xn = x_load<HI>(xlo, xhi, lo_ok, hi_ok, kk + kBlock, k_len);
                    const float4 sn = block_scales(kk + kBlock);
                    /* The tensor cores' partial of one 128-wide block, promoted to fp32 after it. */
                    float part_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, part_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    decode_half<HI>(part_lo, part_hi, wb[d].lo0, wb[d].hi0, xb.lo0, xb.hi0);
                    decode_half<HI>(part_lo, part_hi, wb[d].lo1, wb[d].hi1, xb.lo1, xb.hi1);
                    w_load(wb[d], wlo, whi, kk + kDepth * kBlock, k_len);
                    if constexpr (BLOCK) {
                        /* Accumulator i is column g (i < 2) or g + 8, x row r0 (even i) or r1. */
                        acc_lo[0] += part_lo[0] * sb.x;
                        acc_lo[1] += part_lo[1] * sb.y;
                        acc_lo[2] += part_lo[2] * sb.x;
                        acc_lo[3] += part_lo[3] * sb.y;
                        if constexpr (HI) {
                            acc_hi[0] += part_hi[0] * sb.z;
                            acc_hi[1] += part_hi[1] * sb.w;
                            acc_hi[2] += part_hi[2] * sb.z;
                            acc_hi[3] += part_hi[3] * sb.w;
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            acc_lo[i] += part_lo[i];
                            if constexpr (HI) acc_hi[i] += part_hi[i];
                        }
                    }
                    xb = xn;
                    sb = sn;
                }
            }
        }
        /* Accumulator i of a half holds output column col0 + g (i < 2) or col0 + g + 8, for x row
         * 2t + (i & 1) (plus 8 in the hi half). */
#pragma unroll
        for (int h = 0; h < (HI ? 2 : 1); ++h) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = 8 * h + 2 * t + (i & 1), c = col0 + g + (i >= 2 ? 8 : 0);
                const float a = h ? acc_hi[i] : acc_lo[i];
                if (r < m && c < n) {
                    if (splits > 1)
                        partial[(int64_t)split * m * n + (int64_t)r * n + c] = a;
                    else
                        out[(int64_t)r * n + c] = ts::from_float<T>(BLOCK ? a : a * xs[r] * ws[c]);
                }
            }
        }
    }
}

/* out [m, n] = the splits' partials summed in split order, times x's and w's channel scales (per
 * channel), rounded once to T. */
template <bool BLOCK, typename T>
__global__ void __launch_bounds__(256) gemm_fp8_reduce_kernel(T *out, const float *partial, const float *xs,
                                                              const float *ws, int m, int n, int splits) {
    ts::pdl_wait();
    const int64_t total = (int64_t)m * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; ++s) v += partial[s * total + i];
        if constexpr (!BLOCK) v *= xs[i / n] * ws[i % n];
        out[i] = ts::from_float<T>(v);
    }
}

bool decode_applies(const void *x, const void *w, const ts_gemm_fp8_config &c) {
    return c.m <= kDecodeRows && c.k % 16 == 0 && ts::aligned16(x) && ts::aligned16(w);
}

/* Warps of one decode kernel instantiation resident on the whole GPU at once (occupancy, once
 * per process and instantiation: 72-128 registers, two or three blocks an SM). */
template <bool BLOCK, bool HI, typename T>
int decode_resident_warps() {
    static std::atomic<int> cached{0};
    int w = cached.load();
    if (w > 0) return w;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_fp8_decode_kernel<BLOCK, HI, T>, kDecodeThreads,
                                                      0) != cudaSuccess ||
        blocks < 1) {
        (void)cudaGetLastError();
        blocks = 1;
    }
    w = blocks * kDecodeWarps * ts::sm_count();
    cached.store(w);
    return w;
}

/* The split count aims to keep every resident warp streaming (full = 1): at half of them
 * (Llama-3.2-1B's gate/up projection at four rows, one split) the weight read ran at 63% of
 * copy bandwidth against 73% with two splits and all of them busy. */
template <bool BLOCK, bool HI, typename T>
int launch_decode_as(const char *op, T *out, const unsigned char *x, const float *xs, const unsigned char *w,
                     const float *ws, const ts_gemm_fp8_config &c, cudaStream_t stream) {
    const int resident = decode_resident_warps<BLOCK, HI, T>();
    const int want = ts::splitk_count(ts::ceil_div(c.n, kDecodeCols), ts::ceil_div(c.k, kBlock),
                                      1.0 * kDecodeCols * kBlock, (double)c.m * c.n, resident, 1.0);
    const int slice = (int)ts::ceil_div(ts::ceil_div(c.k, kBlock), want) * kBlock;
    const int splits = (int)ts::ceil_div(c.k, slice);
    const int tiles = (int)ts::ceil_div(c.n, kDecodeCols);
    void *part = nullptr;
    if (splits > 1) TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)splits * c.m * c.n * sizeof(float), &part));
    float *partial = static_cast<float *>(part);
    const int64_t items = (int64_t)tiles * splits;
    const unsigned grid = (unsigned)std::min<int64_t>(ts::ceil_div(items, kDecodeWarps), resident / kDecodeWarps);
    const char *d = ts::dims("m=%d n=%d k=%d slice=%d splits=%d block=%d", c.m, c.n, c.k, slice, splits,
                             c.block_scales);
    auto kernel = gemm_fp8_decode_kernel<BLOCK, HI, T>;
    TS_LAUNCH(op, kernel, grid, kDecodeThreads, 0, stream, d, out, partial, x, xs, w, ws, c.m, c.n, c.k, slice, tiles,
              splits);
    if (splits == 1) return TS_OK;
    const int64_t total = (int64_t)c.m * c.n;
    const unsigned rgrid = ts::grid_for(total, 256);
    const char *rd = ts::dims("m=%d n=%d splits=%d out=%s", c.m, c.n, splits, ts::Storage<T>::name);
    auto reduce = gemm_fp8_reduce_kernel<BLOCK, T>;
    TS_LAUNCH(op, reduce, rgrid, 256, 0, stream, rd, out, partial, xs, ws, c.m, c.n, splits);
    return TS_OK;
}

template <typename T>
int launch_decode(const char *op, T *out, const unsigned char *x, const float *xs, const unsigned char *w,
                  const float *ws, const ts_gemm_fp8_config &c, cudaStream_t stream) {
    const bool hi = c.m > 8;
    if (c.block_scales)
        return hi ? launch_decode_as<true, true>(op, out, x, xs, w, ws, c, stream)
                  : launch_decode_as<true, false>(op, out, x, xs, w, ws, c, stream);
    return hi ? launch_decode_as<false, true>(op, out, x, xs, w, ws, c, stream)
              : launch_decode_as<false, false>(op, out, x, xs, w, ws, c, stream);
}

/* ---- prefill: cuBLASLt ------------------------------------------------------------------ */

constexpr size_t kLtWorkspaceBytes = (size_t)32 << 20;

/* cuBLASLt's scale tensors, built from the op's in a workspace: x's as VEC128 [kbs][m] (m
 * fastest; a per-token scale repeated in each k block), w's 128x128 blocks as BLK128x128
 * [ceil(n/128)][l4] (k blocks fastest, the row padded to l4 = kbs rounded up to 4), w's
 * per-channel scales as VEC128 [kbs][n]. Per-channel scales go in as 1x128 blocks because the
 * block modes make cuBLASLt scale each 128-wide k block's partial sum in fp32, while with
 * OUTER_VEC scales its FP8 products accumulate over the whole k in the tensor cores'
 * reduced-precision accumulator (seen: 2.7x gemm's allowance at k = 256 on an H100). */
__global__ void __launch_bounds__(256) fp8_lt_scales_kernel(float *xs_t, float *ws_t, const float *xs,
                                                            const float *ws, int m, int n, int kbs, int block,
                                                            int l4) {
    ts::pdl_wait();
    const int64_t total_x = (int64_t)m * kbs;
    const int64_t total_w = block ? (int64_t)(n + kBlock - 1) / kBlock * l4 : (int64_t)n * kbs;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total_x + total_w;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (i < total_x) {
            const int64_t kb = i / m, r = i % m;
            xs_t[i] = block ? xs[r * kbs + kb] : xs[r];
        } else if (block) {
            const int64_t j = i - total_x, nb = j / l4, kb = j % l4;
            ws_t[j] = kb < kbs ? ws[nb * kbs + kb] : 1.0f;
        } else {
            const int64_t j = i - total_x;
            ws_t[j] = ws[j % n];
        }
    }
}

struct LtChoice {
    bool found;
    cublasLtMatmulHeuristicResult_t result;
};
using LtKey = std::tuple<int, int, int, int, int, uint32_t, uint32_t, uint32_t>;
std::mutex g_lt_mu;
std::map<LtKey, LtChoice> g_lt_cache;

/* *unsupported = true (and TS_OK) where cuBLASLt has no FP8 algorithm for this problem (odd k,
 * unaligned operands, a cuBLAS without block scales): the caller falls back. */
template <typename T>
int lt_gemm_fp8(const char *op, T *out, const unsigned char *x, const float *xs, const unsigned char *w,
                const float *ws, const ts_gemm_fp8_config &c, cudaStream_t stream, bool *unsupported) {
    constexpr cudaDataType_t out_type = ts::Storage<T>::cuda_type;
    *unsupported = false;
    const uint32_t al_w = ts::alignment_of(w), al_x = ts::alignment_of(x), al_out = ts::alignment_of(out);
    /* cuBLASLt's FP8 GEMMs need 16-byte aligned operands and leading dimensions; its scale
     * modes here are 1x128 and 128x128 blocks, so k % 128 == 0. */
    if (c.k % kBlock != 0 || al_w < 16 || al_x < 16) {
        *unsupported = true;
        return TS_OK;
    }
    ts::LtDescs d;
    TS_CHECK(op, cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const int32_t mode_a = c.block_scales ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                          : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a));
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b));
    /* Column-major, as stored: w is k x n (transposed by the op), x is k x m, out is n x m. */
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, c.k, c.n, c.k));
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, c.k, c.m, c.k));
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.c, out_type, c.n, c.m, c.n));
    /* The scale pointers before the heuristic, which refuses a scale mode without its pointer
     * (CUBLAS_STATUS_INVALID_VALUE). */
    const int kbs = c.k / kBlock, l4 = (kbs + 3) / 4 * 4;
    const int64_t x_floats = (int64_t)c.m * kbs;
    const int64_t w_floats = c.block_scales ? ts::ceil_div(c.n, kBlock) * l4 : (int64_t)c.n * kbs;
    const int64_t x_padded = (x_floats + 3) / 4 * 4; /* w's tensor 16-byte aligned after x's */
    void *t = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)(x_padded + w_floats) * sizeof(float), &t));
    float *xs_t = static_cast<float *>(t), *ws_t = xs_t + x_padded;
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws_t, sizeof ws_t));
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs_t, sizeof xs_t));

    const LtKey key{(int)out_type, c.block_scales, c.m, c.n, c.k, al_w, al_x, al_out};
    LtChoice choice{};
    bool cached = false;
    {
        std::lock_guard<std::mutex> lk(g_lt_mu);
        auto it = g_lt_cache.find(key);
        if (it != g_lt_cache.end()) {
            choice = it->second;
            cached = true;
        }
    }
    if (!cached) {
        TS_CHECK(op, cublasLtMatmulPreferenceCreate(&d.pref));
        const size_t ws_bytes = kLtWorkspaceBytes;
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                          sizeof ws_bytes));
        const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; /* split-K sums in fp32 only */
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                          &reduction, sizeof reduction));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w,
                                                          sizeof al_w));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x,
                                                          sizeof al_x));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_out,
                                                          sizeof al_out));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_out,
                                                          sizeof al_out));
        int count = 0;
        const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ts::cublaslt_handle(), d.op, d.a, d.b, d.c, d.c,
                                                                 d.pref, 1, &choice.result, &count);
        if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED && hs != CUBLAS_STATUS_INVALID_VALUE)
            TS_CHECK(op, hs);
        choice.found = hs == CUBLAS_STATUS_SUCCESS && count > 0 && choice.result.state == CUBLAS_STATUS_SUCCESS;
        if (!choice.found && ts::debug_enabled())
            std::fprintf(stderr,
                         "touchstone: %s: cuBLASLt offers no FP8 algorithm for m=%d n=%d k=%d block=%d (heuristic "
                         "status %d, %d results): the CUDA-core kernel runs\n",
                         op, c.m, c.n, c.k, c.block_scales, (int)hs, count);
        std::lock_guard<std::mutex> lk(g_lt_mu);
        g_lt_cache[key] = choice;
    }
    if (!choice.found) {
        *unsupported = true;
        return TS_OK;
    }
    {
        const unsigned grid = ts::grid_for(x_floats + w_floats, 256);
        auto kernel = fp8_lt_scales_kernel;
        TS_LAUNCH(op, kernel, grid, 256, 0, stream, ts::dims("m=%d n=%d kbs=%d block=%d", c.m, c.n, kbs, c.block_scales),
                  xs_t, ws_t, xs, ws, c.m, c.n, kbs, c.block_scales, l4);
    }
    void *lt_ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_CUBLASLT, kLtWorkspaceBytes, &lt_ws));
    const float alpha = 1.0f, beta = 0.0f;
    ts::log_library_call(op, c.block_scales ? "cublasLtMatmul(fp8, 1x128 x 128x128 block scales)"
                                            : "cublasLtMatmul(fp8, per-channel scales as 1x128 blocks)",
                         ts::dims("m=%d n=%d k=%d out=%s", c.m, c.n, c.k, ts::Storage<T>::name));
    std::lock_guard<std::mutex> lk(ts::blas_mutex());
    TS_CHECK(op, cublasLtMatmul(ts::cublaslt_handle(), d.op, &alpha, w, d.a, x, d.b, &beta, out, d.c, out, d.c,
                                &choice.result.algo, lt_ws, kLtWorkspaceBytes, stream));
    TS_CHECK(op, ts::after_launch(op, stream));
    return TS_OK;
}

/* ---- the CUDA-core fallback ------------------------------------------------------------- */

template <typename T>
int launch(T *out, const unsigned char *x, const float *xs, const unsigned char *w, const float *ws,
           const ts_gemm_fp8_config &c, cudaStream_t stream) {
    const dim3 grid((unsigned)ts::ceil_div(c.n, kTile), (unsigned)ts::ceil_div(c.m, kTile));
    const char *d = ts::dims("m=%d n=%d k=%d block=%d out=%s", c.m, c.n, c.k, c.block_scales,
                             ts::Storage<T>::name);
    auto kernel = gemm_fp8_kernel<T>;
    TS_LAUNCH("gemm_fp8", kernel, grid, kThreads, 0, stream, d, out, x, xs, w, ws, c.m, c.n, c.k, c.block_scales);
    return TS_OK;
}

} // namespace

void ts::gemm_fp8_release() {
    std::lock_guard<std::mutex> lk(g_lt_mu);
    g_lt_cache.clear();
}

extern "C" int ts_gemm_fp8(void *out, const void *x, const float *x_scales, const void *w, const float *w_scales,
                           const ts_gemm_fp8_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gemm_fp8");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(x_scales, "x_scales");
    v.ptr(w, "w");
    v.ptr(w_scales, "w_scales");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->out_dtype, "cfg->out_dtype");
    v.positive(cfg->m, "cfg->m");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.elements("x", {cfg->m, cfg->k});
    v.elements("w", {cfg->n, cfg->k});
    if (v.ok() && cfg->block_scales != 0 && cfg->block_scales != 1)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->block_scales = %d: want 0 (per channel) or 1 (128x128 blocks)",
               cfg->block_scales);
    if (v.ok() && cfg->block_scales && cfg->k % kBlock != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->k = %d: block scales need k %% 128 == 0", cfg->k);
    if (v.ok() && ts::ceil_div(cfg->m, kTile) > 65535)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->m = %d: at most 65535 tiles of %d rows", cfg->m, kTile);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    const auto *xq = static_cast<const unsigned char *>(x);
    const auto *wq = static_cast<const unsigned char *>(w);
    return ts::with_storage(cfg->out_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T *o = static_cast<T *>(out);
        if (decode_applies(x, w, *cfg)) return launch_decode(v.op(), o, xq, x_scales, wq, w_scales, *cfg, st);
        bool unsupported = true;
        TS_CHECK(v.op(), lt_gemm_fp8(v.op(), o, xq, x_scales, wq, w_scales, *cfg, st, &unsupported));
        if (!unsupported) return (int)TS_OK;
        return launch(o, xq, x_scales, wq, w_scales, *cfg, st);
    });
}
