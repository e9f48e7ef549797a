/*
 * gemm_fp8: out [m, n] = dequant(x) . dequant(w)^T for f8e4m3 x [m, k] and w [n, k] with block
 * (1x128 / 128x128) or per-channel fp32 scales; touchstone.h states the contract.
 *
 * A first, CUDA-core kernel: a block computes a 64x64 tile of out in 16x16 threads of 4x4
 * outputs, walking k in steps of 64 (half a scale block). Each step stages x's and w's 64x64
 * bytes in shared memory, decodes them to fp32 (exact: every f8e4m3 value is one), accumulates
 * the step's 128 products per output in fp32, and adds the partial times the two blocks' scales
 * (block scales); with per-channel scales the sum over k is scaled once at the end. Tensor cores
 * (FP8 wgmma on Hopper) are the next step; this kernel is the reference path of the op.
 */
#include <cuda_fp8.h>

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
        return launch(static_cast<T *>(out), xq, x_scales, wq, w_scales, *cfg, st);
    });
}
