/*
 * gemm_fp8: out [m, n] = dequant(x) . dequant(w)^T for f8e4m3 x [m, k] and w [n, k] with block
 * (1x128 / 128x128) or per-channel fp32 scales; touchstone.h states the contract. Three paths:
 *
 *  - decode (m <= 16, k % 16 == 0, x and w 16-byte aligned): gemm_fp8_decode_kernel, a
 *    tensor-core gemv. At decode the op is bound by the weight read (n * k bytes): each warp
 *    owns 8 output columns and streams their weight rows in 16-byte vectors, four 128-wide k
 *    blocks ahead, straight into FP8 mma.sync m16n8k32 operands (x's at most 16 rows from L1);
 *    the k range is split over warps where the columns alone would leave the GPU short of
 *    loads in flight, and gemm_fp8_reduce_kernel then sums the splits' fp32 partials in split
 *    order and rounds once.
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

constexpr int kDecodeRows = 16;                 /* the mma's M: rows past m are zeros */
constexpr int kDecodeThreads = 256;             /* 8 warps a block, each on work items of its own */
constexpr int kDecodeWarps = kDecodeThreads / 32;

/* d += a . b: m16n8k32, f8e4m3 operands (four per register), fp32 accumulators. */
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 16 weight bytes, streamed: read once, not kept in L1. */
__device__ __forceinline__ uint4 load_stream(const unsigned char *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

constexpr int kDepth = 4; /* 128-wide k blocks of weight a lane has in flight ahead of its mma */

/* x's 16 bytes at kk and kk + 64 of rows g (lo) and g + 8 (hi) for lane (g, t): zeros past m,
 * past the range, or for rows 8-15 when HI is false. Read through L1: every warp of a split
 * reads the same slice. */
struct XBlock {
    uint4 lo0, lo1, hi0, hi1;
};

template <bool HI>
__device__ __forceinline__ XBlock x_load(const unsigned char *xlo, const unsigned char *xhi, bool lo_ok, bool hi_ok,
                                         int kk, int k_len) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    XBlock b{z, z, z, z};
    const bool in0 = kk < k_len, in1 = kk + 64 < k_len;
    if (lo_ok && in0) b.lo0 = *reinterpret_cast<const uint4 *>(xlo + kk);
    if (lo_ok && in1) b.lo1 = *reinterpret_cast<const uint4 *>(xlo + kk + 64);
    if (HI && hi_ok && in0) b.hi0 = *reinterpret_cast<const uint4 *>(xhi + kk);
    if (HI && hi_ok && in1) b.hi1 = *reinterpret_cast<const uint4 *>(xhi + kk + 64);
    return b;
}

/* The weight's 16 bytes at kk and kk + 64 of the lane's row (zeros past the range). */
__device__ __forceinline__ void w_load(uint4 (&wv)[2], const unsigned char *wrow, int kk, int k_len) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    wv[0] = kk < k_len ? load_stream(wrow + kk) : z;
    wv[1] = kk + 64 < k_len ? load_stream(wrow + kk + 64) : z;
}

/* The two m16n8k32 of one 64-wide half. The mma's k order is a permutation of memory's (its
 * logical k 4t..4t+3 are bytes 16t..16t+3 of the half, 16+4t.. bytes 16t+4.., and so on): a dot
 * product does not depend on the order, and the x and w operands use the same one. */
__device__ __forceinline__ void decode_mma(float (&part)[4], const uint4 &lo, const uint4 &hi, const uint4 &wv) {
    mma_e4m3(part, lo.x, hi.x, lo.y, hi.y, wv.x, wv.y);
    mma_e4m3(part, lo.z, hi.z, lo.w, hi.w, wv.z, wv.w);
}

/* Work item i (a warp at a time, grid-stride) is columns [8 (i % tiles), +8) over k in
 * [slice (i / tiles), +slice) (slice % 128 == 0): consecutive warps share a split, so x's slice
 * stays in L1. Lane (g, t) streams weight row col0 + g, 16 bytes a 64-wide half, kDepth 128-wide
 * blocks ahead of the one it multiplies (the weight read is latency-bound without them), x one
 * block ahead. Block scales are applied per 128-wide k block. One split: out [m, n] in T
 * directly (per-channel scales applied, one rounding); several: fp32 partial [splits, m, n] for
 * gemm_fp8_reduce_kernel. */
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
        const int col0 = (int)(item % tiles) * 8, split = (int)(item / tiles);
        const int k_begin = split * slice, k_span = min(slice, k - k_begin), k_len = k_span - t * 16;
        /* A column past n reads row n - 1 (in bounds); its results are never stored. */
        const unsigned char *wrow = w + (int64_t)min(col0 + g, n - 1) * k + k_begin + t * 16;
        const unsigned char *xlo = x + (int64_t)g * k + k_begin + t * 16;
        const unsigned char *xhi = x + (int64_t)(g + 8) * k + k_begin + t * 16;
        const bool lo_ok = g < m, hi_ok = g + 8 < m;
        const float *ws_row = BLOCK ? ws + (int64_t)(col0 / kBlock) * kbs : nullptr;

        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        uint4 wb[kDepth][2];
#pragma unroll
        for (int d = 0; d < kDepth; ++d) w_load(wb[d], wrow, d * kBlock, k_len);
        XBlock xb = x_load<HI>(xlo, xhi, lo_ok, hi_ok, 0, k_len);
        /* Block scales one block ahead too, as loaded (w's, x's rows g and g + 8): used at once,
         * their L2 round trip stalled every block (ncu: long-scoreboard stalls 4.5 a issue). */
        auto block_scales = [&](int kk) {
            float3 v = make_float3(0.0f, 0.0f, 0.0f);
            if (BLOCK && kk < k_span) {
                const int kb = (k_begin + kk) / kBlock;
                v.x = ws_row[kb];
                if (lo_ok) v.y = xs[(int64_t)g * kbs + kb];
                if (hi_ok) v.z = xs[(int64_t)(g + 8) * kbs + kb];
            }
            return v;
        };
        float3 sb = block_scales(0);
        for (int k0 = 0; k0 < k_span; k0 += kDepth * kBlock) {
#pragma unroll
            for (int d = 0; d < kDepth; ++d) {
                const int kk = k0 + d * kBlock;
                if (kk < k_span) {
                    const XBlock xn = x_load<HI>(xlo, xhi, lo_ok, hi_ok, kk + kBlock, k_len);
                    const float3 sn = block_scales(kk + kBlock);
                    /* The tensor cores' partial of one 128-wide block, promoted to fp32 after it. */
                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    decode_mma(part, xb.lo0, xb.hi0, wb[d][0]);
                    decode_mma(part, xb.lo1, xb.hi1, wb[d][1]);
                    w_load(wb[d], wrow, kk + kDepth * kBlock, k_len);
                    if constexpr (BLOCK) {
                        const float s_lo = sb.y * sb.x, s_hi = sb.z * sb.x; /* 0 for rows past m */
                        acc[0] += part[0] * s_lo;
                        acc[1] += part[1] * s_lo;
                        acc[2] += part[2] * s_hi;
                        acc[3] += part[3] * s_hi;
                    } else {
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[i] += part[i];
                    }
                    xb = xn;
                    sb = sn;
                }
            }
        }
        /* Accumulator i holds row g (i < 2) or g + 8, column col0 + 2t + (i & 1). */
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = g + (i >= 2 ? 8 : 0), c = col0 + 2 * t + (i & 1);
            if (r < m && c < n) {
                if (splits > 1)
                    partial[(int64_t)split * m * n + (int64_t)r * n + c] = acc[i];
                else
                    out[(int64_t)r * n + c] = ts::from_float<T>(BLOCK ? acc[i] : acc[i] * xs[r] * ws[c]);
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

/* Warps of the decode kernel resident on the whole GPU at once (occupancy, once per process). */
int decode_resident_warps() {
    static std::atomic<int> cached{0};
    int w = cached.load();
    if (w > 0) return w;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_fp8_decode_kernel<true, true, __nv_bfloat16>, kDecodeThreads,
                                                      0) != cudaSuccess ||
        blocks < 1) {
        (void)cudaGetLastError();
        blocks = 1;
    }
    w = blocks * kDecodeWarps * ts::sm_count();
    cached.store(w);
    return w;
}

template <typename T>
int launch_decode(const char *op, T *out, const unsigned char *x, const float *xs, const unsigned char *w,
                  const float *ws, const ts_gemm_fp8_config &c, cudaStream_t stream) {
    const int resident = decode_resident_warps();
    const int want = ts::splitk_count(ts::ceil_div(c.n, 8), ts::ceil_div(c.k, kBlock), 8.0 * kBlock,
                                      (double)c.m * c.n, resident, 0.5);
    const int slice = (int)ts::ceil_div(ts::ceil_div(c.k, kBlock), want) * kBlock;
    const int splits = (int)ts::ceil_div(c.k, slice);
    const int tiles = (int)ts::ceil_div(c.n, 8);
    void *part = nullptr;
    if (splits > 1) TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)splits * c.m * c.n * sizeof(float), &part));
    float *partial = static_cast<float *>(part);
    const int64_t items = (int64_t)tiles * splits;
    const unsigned grid = (unsigned)std::min<int64_t>(ts::ceil_div(items, kDecodeWarps), resident / kDecodeWarps);
    const char *d = ts::dims("m=%d n=%d k=%d slice=%d splits=%d block=%d", c.m, c.n, c.k, slice, splits,
                             c.block_scales);
    const bool hi = c.m > 8;
    auto launch_main = [&](auto kernel) {
        TS_LAUNCH(op, kernel, grid, kDecodeThreads, 0, stream, d, out, partial, x, xs, w, ws, c.m, c.n, c.k, slice,
                  tiles, splits);
        return (int)TS_OK;
    };
    if (c.block_scales)
        TS_CHECK(op, hi ? launch_main(gemm_fp8_decode_kernel<true, true, T>)
                        : launch_main(gemm_fp8_decode_kernel<true, false, T>));
    else
        TS_CHECK(op, hi ? launch_main(gemm_fp8_decode_kernel<false, true, T>)
                        : launch_main(gemm_fp8_decode_kernel<false, false, T>));
    if (splits == 1) return TS_OK;
    const int64_t total = (int64_t)c.m * c.n;
    const unsigned rgrid = ts::grid_for(total, 256);
    const char *rd = ts::dims("m=%d n=%d splits=%d out=%s", c.m, c.n, splits, ts::Storage<T>::name);
    if (c.block_scales) {
        auto kernel = gemm_fp8_reduce_kernel<true, T>;
        TS_LAUNCH(op, kernel, rgrid, 256, 0, stream, rd, out, partial, xs, ws, c.m, c.n, splits);
    } else {
        auto kernel = gemm_fp8_reduce_kernel<false, T>;
        TS_LAUNCH(op, kernel, rgrid, 256, 0, stream, rd, out, partial, xs, ws, c.m, c.n, splits);
    }
    return TS_OK;
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
