/*
 * quant_fp8: x [rows, hidden] (fp16, bf16 or fp32) into f8e4m3, bit for bit as
 * docs/quantization.md defines it (touchstone.h states the contract).
 *
 * Dynamic: one block per group (a row cut into groups of group_size). The block reads its group
 * once into registers (at most kMaxPerThread values a thread), takes the fp32 amax with warp
 * shuffles and shared memory, a NaN anywhere making the scale NaN (fmaxf alone would drop it),
 * then writes q = e4m3(x / s) with a correctly rounded division (__fdiv_rn: the default
 * division under --use_fast_math would not be, and x * (1/s) rounds twice). A group too long for
 * the registers (per-token groups past 256 x kMaxPerThread elements) re-reads x in the second
 * pass. Static: a grid-stride loop, q = e4m3(x / scale).
 */
#include <algorithm>

#include "fp8.cuh"
#include "internal.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 16;

__device__ __forceinline__ float load_x(const float *x, int64_t i) { return x[i]; }
__device__ __forceinline__ float load_x(const __half *x, int64_t i) { return __half2float(x[i]); }
__device__ __forceinline__ float load_x(const __nv_bfloat16 *x, int64_t i) { return __bfloat162float(x[i]); }

template <typename T>
__global__ void __launch_bounds__(kThreads) quant_dynamic_kernel(unsigned char *out, float *scales, const T *x,
                                                                 int group_size) {
    ts::pdl_wait();
    const int64_t g = blockIdx.x;
    const int64_t base = g * (int64_t)group_size;
    float v[kMaxPerThread];
    float amax = 0.0f;
    bool nan = false;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        v[k] = 0.0f;
        if (i < group_size) {
            v[k] = load_x(x, base + i);
            nan |= v[k] != v[k];
            amax = fmaxf(amax, fabsf(v[k]));
        }
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x) {
        const float w = load_x(x, base + i);
        nan |= w != w;
        amax = fmaxf(amax, fabsf(w));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    nan = __any_sync(0xffffffffu, nan);
    __shared__ float warp_max[kThreads / 32];
    __shared__ int warp_nan[kThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        warp_max[warp] = amax;
        warp_nan[warp] = nan;
    }
    __syncthreads();
    amax = 0.0f;
    nan = false;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) {
        amax = fmaxf(amax, warp_max[w]);
        nan |= warp_nan[w] != 0;
    }
    const float s = nan ? __int_as_float(0x7fffffff) : __fdiv_rn(fmaxf(amax, ts::kQuantEps), ts::kE4M3Max);
    if (threadIdx.x == 0) scales[g] = s;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < group_size) out[base + i] = ts::e4m3(__fdiv_rn(v[k], s));
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x)
        out[base + i] = ts::e4m3(__fdiv_rn(load_x(x, base + i), s));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) quant_static_kernel(unsigned char *out, const T *x, const float *scale,
                                                                int64_t n) {
    ts::pdl_wait();
    const float s = *scale;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = ts::e4m3(__fdiv_rn(load_x(x, i), s));
}

template <typename T>
int launch(unsigned char *out, float *scales, const T *x, const float *scale, const ts_quant_config &c,
           cudaStream_t stream) {
    const char *op = "quant_fp8";
    const char *name = ts::dtype_name(c.in_dtype);
    if (scale == nullptr) {
        const int64_t groups = (int64_t)c.rows * (c.hidden / c.group_size);
        const int threads = c.group_size >= kThreads ? kThreads : ts::round_up(c.group_size, 32);
        const char *d = ts::dims("rows=%d hidden=%d group=%d in=%s", c.rows, c.hidden, c.group_size, name);
        auto kernel = quant_dynamic_kernel<T>;
        TS_LAUNCH(op, kernel, (unsigned)groups, threads, 0, stream, d, out, scales, x, c.group_size);
        return TS_OK;
    }
    const int64_t n = (int64_t)c.rows * c.hidden;
    const int64_t blocks = std::min<int64_t>(ts::ceil_div(n, kThreads), (int64_t)ts::sm_count() * 8);
    const char *d = ts::dims("rows=%d hidden=%d static in=%s", c.rows, c.hidden, name);
    auto kernel = quant_static_kernel<T>;
    TS_LAUNCH(op, kernel, (unsigned)blocks, kThreads, 0, stream, d, out, x, scale, n);
    return TS_OK;
}

} // namespace

extern "C" int ts_quant_fp8(void *out, float *scales, const void *x, const float *scale, const ts_quant_config *cfg,
                            void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("quant_fp8");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_in(cfg->in_dtype, "cfg->in_dtype", {TS_F16, TS_BF16, TS_F32});
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.elements("x", {cfg->rows, cfg->hidden});
    if (!v.ok()) return v.status();
    if (scale == nullptr) {
        v.ptr(scales, "scales");
        if (v.ok() && (cfg->group_size <= 0 || cfg->hidden % cfg->group_size != 0))
            v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must be positive and divide cfg->hidden = %d (dynamic)",
                   cfg->group_size, cfg->hidden);
    } else {
        if (cfg->group_size != 0)
            v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must be 0 with a static scale (one per tensor)",
                   cfg->group_size);
        else if (scales != nullptr)
            v.fail(TS_ERR_INVALID_ARGUMENT, "scales = %p: must be NULL with a static scale", (void *)scales);
    }
    if (v.ok() && scale == nullptr && (int64_t)cfg->rows * (cfg->hidden / cfg->group_size) > 0x7fffffff)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->rows x groups = %lld: one block per group, at most 2^31 - 1",
               (long long)cfg->rows * (cfg->hidden / cfg->group_size));
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    auto *q = static_cast<unsigned char *>(out);
    if (cfg->in_dtype == TS_F32) return launch(q, scales, static_cast<const float *>(x), scale, *cfg, st);
    return ts::with_storage(cfg->in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(q, scales, static_cast<const T *>(x), scale, *cfg, st);
    });
}
