/*
 * swiglu_quant_fp8: y = T(silu(gate) * up), T the storage type (fp16 or bf16, the kernels' last
 * template argument), then out, scales = quant_fp8(y) (touchstone.h states the contract): a
 * SwiGLU FFN's activation quantised for its FP8 down projection, in one pass over memory. y is
 * swiglu's (ts::silu_mul, rounded to T where swiglu stores it) and the quantisation quant_fp8's
 * (fp8.cuh: quant_scale, quant_code), so the bytes and scales are what swiglu then quant_fp8
 * would write.
 *
 * Dynamic, group_size 128 (fine-grained FP8's 1x128 groups) with gate and up 16-byte and out
 * 8-byte aligned: 16 lanes a group, 8 values a lane from one 16-byte load of gate and of up, the
 * amax (the maximum of abs_bits, NaN propagating) by four shuffles, the 8 codes stored as one
 * 8-byte word; 16 groups a block. Any other dynamic case: one block per group (quant_fp8's
 * plan, up to 1024 threads, about 8 values a thread), which computes its group's y once into
 * registers (at most kMaxPerThread values a thread), takes the amax with warp reductions and shared memory, then writes the codes; a group
 * too long for the registers (per-token groups past 256 x kMaxPerThread values) recomputes the
 * rest of y from gate and up in the second pass, by the same arithmetic. Static: a grid-stride
 * loop. The last two load scalars, coalesced, so they take any alignment.
 */
#include <algorithm>

#include "fp8.cuh"
#include "internal.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxThreads = 1024; /* the one-block-a-group kernel's largest block */
constexpr int kMaxPerThread = 16;

/* swiglu's activation of element i, rounded to T as swiglu stores it. */
template <typename T>
__device__ __forceinline__ float act(const T *gate, const T *up, int64_t i) {
    return ts::round_to<T>(ts::silu_mul(ts::to_float(gate[i]), ts::to_float(up[i])));
}

constexpr int kGroup128 = 128;
constexpr int kLanesPerGroup = kGroup128 / 8;
constexpr int kGroupsPerBlock = kThreads / kLanesPerGroup;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_quant_g128_kernel(unsigned char *out, float *scales, const T *gate, const T *up, int64_t groups) {
    ts::pdl_wait();
    const int64_t g = (int64_t)blockIdx.x * kGroupsPerBlock + threadIdx.x / kLanesPerGroup;
    const int lane = threadIdx.x % kLanesPerGroup;
    /* lanes past the last group stay for the shuffles (full-warp masks) and store nothing */
    const bool live = g < groups;
    const int64_t base = g * kGroup128 + lane * 8;
    float v[8];
    unsigned a = 0u;
    if (live) {
        float u[8];
        ts::load8(gate + base, v);
        ts::load8(up + base, u);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            v[j] = ts::round_to<T>(ts::silu_mul(v[j], u[j]));
            a = max(a, ts::abs_bits(v[j]));
        }
    }
#pragma unroll
    for (int o = kLanesPerGroup / 2; o > 0; o >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (!live) return;
    const float s = ts::quant_scale(a);
    if (lane == 0) scales[g] = s;
    uint2 codes = make_uint2(0u, 0u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        codes.x |= (uint32_t)ts::quant_code(v[j], s) << (8 * j);
        codes.y |= (uint32_t)ts::quant_code(v[4 + j], s) << (8 * j);
    }
    *reinterpret_cast<uint2 *>(out + base) = codes;
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    swiglu_quant_dynamic_kernel(unsigned char *out, float *scales, const T *gate, const T *up, int group_size) {
    ts::pdl_wait();
    __shared__ unsigned warp_max[kMaxThreads / 32];
    const int64_t g = blockIdx.x;
    const int64_t base = g * (int64_t)group_size;
    float v[kMaxPerThread];
    unsigned a = 0u;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        v[k] = 0.0f;
        if (i < group_size) {
            v[k] = act(gate, up, base + i);
            a = max(a, ts::abs_bits(v[k]));
        }
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x)
        a = max(a, ts::abs_bits(act(gate, up, base + i)));
    a = __reduce_max_sync(0xffffffffu, a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_max[warp] = a;
    __syncthreads();
    a = 0u;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) a = max(a, warp_max[w]);
    const float s = ts::quant_scale(a);
    if (threadIdx.x == 0) scales[g] = s;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < group_size) out[base + i] = ts::quant_code(v[k], s);
    }
    for (int i = threadIdx.x + kMaxPerThread * blockDim.x; i < group_size; i += blockDim.x)
        out[base + i] = ts::quant_code(act(gate, up, base + i), s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_quant_static_kernel(unsigned char *out, const T *gate, const T *up, const float *scale, int64_t n) {
    ts::pdl_wait();
    const float s = *scale;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = ts::quant_code(act(gate, up, i), s);
}

template <typename T>
int launch(unsigned char *out, float *scales, const T *gate, const T *up, const float *scale,
           const ts_quant_config &c, cudaStream_t stream) {
    const char *op = "swiglu_quant_fp8";
    if (scale == nullptr) {
        const int64_t groups = (int64_t)c.rows * (c.hidden / c.group_size);
        if (c.group_size == kGroup128 && ts::aligned16(gate) && ts::aligned16(up) &&
            reinterpret_cast<uintptr_t>(out) % 8 == 0) {
            const char *d = ts::dims("rows=%d ffn=%d group=128 in=%s", c.rows, c.hidden, ts::Storage<T>::name);
            auto kernel = swiglu_quant_g128_kernel<T>;
            TS_LAUNCH(op, kernel, (unsigned)ts::ceil_div(groups, kGroupsPerBlock), kThreads, 0, stream, d, out, scales,
                      gate, up, groups);
            return TS_OK;
        }
        /* About 8 values a thread, 256 to 1024 threads: a per-token group of a decode step is a
         * whole row (14336 values for Llama-3-8B) and there are as few blocks as rows, so a row's
         * loads must be in flight at once (at 256 threads its last 40 values a thread were read
         * in two loops one at a time: 0.93x the eager torch composition). */
        const int threads = c.group_size < kThreads
                                ? ts::round_up(c.group_size, 32)
                                : std::min(kMaxThreads, std::max(kThreads, ts::round_up((int)ts::ceil_div(c.group_size, 8), 32)));
        const char *d = ts::dims("rows=%d ffn=%d group=%d threads=%d in=%s", c.rows, c.hidden, c.group_size, threads,
                                 ts::Storage<T>::name);
        auto kernel = swiglu_quant_dynamic_kernel<T>;
        TS_LAUNCH(op, kernel, (unsigned)groups, threads, 0, stream, d, out, scales, gate, up, c.group_size);
        return TS_OK;
    }
    const int64_t n = (int64_t)c.rows * c.hidden;
    const int64_t blocks = std::min<int64_t>(ts::ceil_div(n, kThreads), (int64_t)ts::sm_count() * 8);
    const char *d = ts::dims("rows=%d ffn=%d static in=%s", c.rows, c.hidden, ts::Storage<T>::name);
    auto kernel = swiglu_quant_static_kernel<T>;
    TS_LAUNCH(op, kernel, (unsigned)blocks, kThreads, 0, stream, d, out, gate, up, scale, n);
    return TS_OK;
}

} // namespace

extern "C" int ts_swiglu_quant_fp8(void *out, float *scales, const void *gate, const void *up, const float *scale,
                                   const ts_quant_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("swiglu_quant_fp8");
    v.ptr(out, "out");
    v.ptr(gate, "gate");
    v.ptr(up, "up");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->in_dtype, "cfg->in_dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.elements("gate", {cfg->rows, cfg->hidden});
    if (!v.ok()) return v.status();
    v.quant_outputs(scales, scale, cfg->hidden, cfg->group_size);
    if (v.ok() && scale == nullptr && (int64_t)cfg->rows * (cfg->hidden / cfg->group_size) > 0x7fffffff)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->rows x groups = %lld: one block per group, at most 2^31 - 1",
               (long long)cfg->rows * (cfg->hidden / cfg->group_size));
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<unsigned char *>(out), scales, static_cast<const T *>(gate),
                      static_cast<const T *>(up), scale, *cfg, st);
    });
}
