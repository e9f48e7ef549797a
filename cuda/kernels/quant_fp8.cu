/*
 * quant_fp8: x [rows, hidden] (fp16, bf16 or fp32) into f8e4m3, bit for bit as
 * docs/quantization.md defines it (touchstone.h states the contract).
 *
 * Dynamic, group_size 128 (fine-grained FP8's 1x128 groups) with aligned x and out: a warp per
 * group, four values a lane from one 8- or 16-byte load, the amax by shuffles alone, the four
 * codes stored as one 32-bit word; eight groups a block. Any other dynamic case: one block per
 * group (a row cut into groups of group_size), which reads its group once into registers (at
 * most kMaxPerThread values a thread; a longer group re-reads x in the second pass) and takes
 * the amax with a warp reduction and shared memory. Both take the amax as the largest bit
 * pattern of |x| (a NaN anywhere makes the scale NaN), and the scale and codes from fp8.cuh
 * (quant_scale, quant_code: correctly rounded divisions). Static: a grid-stride loop,
 * q = e4m3(x / scale).
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

__device__ __forceinline__ void load4(const float *p, float (&v)[4]) {
    const float4 f = *reinterpret_cast<const float4 *>(p);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ __forceinline__ void load4(const __half *p, float (&v)[4]) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void load4(const __nv_bfloat16 *p, float (&v)[4]) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

constexpr int kGroup128 = 128;
constexpr int kGroupsPerBlock = kThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kThreads) quant_g128_kernel(unsigned char *out, float *scales, const T *x,
                                                              int64_t groups) {
    ts::pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * kGroupsPerBlock + threadIdx.x / 32;
    if (g >= groups) return;
    const int lane = threadIdx.x & 31;
    const int64_t base = g * kGroup128 + lane * 4;
    float v[4];
    load4(x + base, v);
    unsigned amax = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) amax = max(amax, ts::abs_bits(v[k]));
    const float s = ts::quant_scale(__reduce_max_sync(0xffffffffu, amax));
    if (lane == 0) scales[g] = s;
    uint32_t codes = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) codes |= (uint32_t)ts::quant_code(v[k], s) << (8 * k);
    *reinterpret_cast<uint32_t *>(out + base) = codes;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) quant_dynamic_kernel(unsigned char *out, float *scales, const T *x,
                                                                 int group_size) {
    ts::pdl_wait();
    const int64_t g = blockIdx.x;
    const int64_t base = g * (int64_t)group_size;
    float v[kMaxPerThread];
    unsigned amax = 0; /* the largest abs_bits: the amax, NaN above every number (fp8.cuh) */
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        v[k] = 0.0f;
        if (i < group_size) {
            v[k] = load_x(x, base + i);
            amax = max(amax, ts::abs_bits(v[k]));
        }
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x)
        amax = max(amax, ts::abs_bits(load_x(x, base + i)));
    amax = __reduce_max_sync(0xffffffffu, amax);
    __shared__ unsigned warp_max[kThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_max[warp] = amax;
    __syncthreads();
    amax = 0;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) amax = max(amax, warp_max[w]);
    const float s = ts::quant_scale(amax);
    if (threadIdx.x == 0) scales[g] = s;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < group_size) out[base + i] = ts::quant_code(v[k], s);
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x)
        out[base + i] = ts::quant_code(load_x(x, base + i), s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) quant_static_kernel(unsigned char *out, const T *x, const float *scale,
                                                                int64_t n) {
    ts::pdl_wait();
    const float s = *scale;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = ts::quant_code(load_x(x, i), s);
}

template <typename T>
int launch(unsigned char *out, float *scales, const T *x, const float *scale, const ts_quant_config &c,
           cudaStream_t stream) {
    const char *op = "quant_fp8";
    const char *name = ts::dtype_name(c.in_dtype);
    if (scale == nullptr) {
        const int64_t groups = (int64_t)c.rows * (c.hidden / c.group_size);
        if (c.group_size == kGroup128 && ts::aligned16(x) && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
            const char *d = ts::dims("rows=%d hidden=%d group=128 in=%s", c.rows, c.hidden, name);
            auto kernel = quant_g128_kernel<T>;
            TS_LAUNCH(op, kernel, (unsigned)ts::ceil_div(groups, kGroupsPerBlock), kThreads, 0, stream, d, out, scales,
                      x, groups);
            return TS_OK;
        }
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
    v.quant_outputs(scales, scale, cfg->hidden, cfg->group_size);
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
