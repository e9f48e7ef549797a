/*
 * softmax over the last dim of x [rows, n] (fp16 or fp32) into fp32 out. One block per row
 * (rows up to 151936 = a vocabulary are looped over). Pass 1: each thread keeps an online
 * (max, sum of exp(x - max)) pair over its elements, merged across the block with warp
 * shuffles and shared memory; pass 2: out = expf(x - max) / sum, re-reading the row (L2). -inf
 * entries contribute 0 and get probability 0. expf, not __expf. Vector path (n % 4 == 0 and
 * aligned pointers): 4 elements per access (float4, or 4 halves as 8 bytes).
 */
#include "internal.h"

namespace {

constexpr int kVec = 4;

__device__ __forceinline__ void load4(const float *p, float (&v)[kVec]) {
    const float4 u = *reinterpret_cast<const float4 *>(p);
    v[0] = u.x;
    v[1] = u.y;
    v[2] = u.z;
    v[3] = u.w;
}

__device__ __forceinline__ void load4(const __half *p, float (&v)[kVec]) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
    v[0] = a.x;
    v[1] = a.y;
    v[2] = b.x;
    v[3] = b.y;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

/* Adds one element to a running (max m, sum s of exp(x - m)). */
__device__ __forceinline__ void online_add(float &m, float &s, float x) {
    if (x == -INFINITY) return;
    if (x > m) {
        s = s * expf(m - x) + 1.0f; /* m = -inf: s is 0 and expf(-inf) = 0 */
        m = x;
    } else {
        s += expf(x - m);
    }
}

/* Merges (m2, s2) into (m, s). */
__device__ __forceinline__ void online_merge(float &m, float &s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return; /* both empty */
    s = (m == -INFINITY ? 0.0f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mx));
    m = mx;
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(1024) softmax_kernel(float *out, const T *x, int n) {
    __shared__ float sm_m[32], sm_s[32];
    const int64_t ro = (int64_t)blockIdx.x * n;
    const T *xr = x + ro;
    float *orow = out + ro;
    float m = -INFINITY, s = 0.0f;
    int tail = 0;
    if (VEC) {
        const int nv = n / kVec;
        int i = threadIdx.x;
        /* Four independent 16-byte loads in flight per thread before their use. */
        for (; i + 3 * (int)blockDim.x < nv; i += 4 * blockDim.x) {
            float v[4][kVec];
#pragma unroll
            for (int u = 0; u < 4; ++u) load4(xr + (int64_t)(i + u * blockDim.x) * kVec, v[u]);
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int k = 0; k < kVec; ++k) online_add(m, s, v[u][k]);
        }
        for (; i < nv; i += blockDim.x) {
            float v[kVec];
            load4(xr + (int64_t)i * kVec, v);
#pragma unroll
            for (int k = 0; k < kVec; ++k) online_add(m, s, v[k]);
        }
        tail = nv * kVec;
    }
    for (int i = tail + threadIdx.x; i < n; i += blockDim.x) online_add(m, s, to_float(xr[i]));

    /* Block merge: warps by shuffles, then the warp leaders through shared memory. */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? sm_m[lane] : -INFINITY;
    s = lane < nwarps ? sm_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const float row_max = m, row_sum = s;

    if (VEC) {
        const int nv = n / kVec;
#pragma unroll 4
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            float v[kVec];
            load4(xr + (int64_t)i * kVec, v);
            float4 r;
            r.x = expf(v[0] - row_max) / row_sum;
            r.y = expf(v[1] - row_max) / row_sum;
            r.z = expf(v[2] - row_max) / row_sum;
            r.w = expf(v[3] - row_max) / row_sum;
            *reinterpret_cast<float4 *>(orow + (int64_t)i * kVec) = r;
        }
    }
    for (int i = tail + threadIdx.x; i < n; i += blockDim.x) orow[i] = expf(to_float(xr[i]) - row_max) / row_sum;
}

template <typename T>
int launch_typed(float *out, const T *x, int rows, int n, cudaStream_t stream) {
    const char *op = "softmax";
    const bool vec = n % kVec == 0 && ts::aligned16(out) &&
                     (reinterpret_cast<uintptr_t>(x) % (sizeof(T) * kVec)) == 0;
    const int64_t units = vec ? n / kVec : n;
    const int threads = units >= 1024 ? 1024 : ts::round_up((int)units, 32);
    const char *d = ts::dims("rows=%d n=%d in=%s vec=%d", rows, n, sizeof(T) == 2 ? "f16" : "f32", (int)vec);
    if (vec) {
        auto kernel = softmax_kernel<T, true>;
        TS_LAUNCH(op, kernel, rows, threads, 0, stream, d, out, x, n);
    } else {
        auto kernel = softmax_kernel<T, false>;
        TS_LAUNCH(op, kernel, rows, threads, 0, stream, d, out, x, n);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_softmax(void *out, const void *x, const ts_softmax_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("softmax");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_one_of(cfg->in_dtype, "cfg->in_dtype", TS_F16, TS_F32);
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->n, "cfg->n");
    v.elements("x", {cfg->rows, cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    if (cfg->in_dtype == TS_F32)
        return launch_typed(static_cast<float *>(out), static_cast<const float *>(x), cfg->rows, cfg->n, st);
    return launch_typed(static_cast<float *>(out), static_cast<const __half *>(x), cfg->rows, cfg->n, st);
}
