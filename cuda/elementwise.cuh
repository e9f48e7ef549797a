/*
 * elementwise.cuh — loop bodies shared by the fp16 elementwise ops (residual_add, swiglu,
 * gelu, gelu_tanh). Each op's .cu file defines its own __global__ kernel around one of these
 * bodies with its functor, its launcher and its ts_* entry.
 *
 * Grid-stride loops over n elements. VEC (every pointer 16-byte aligned): 16-byte accesses of
 * 8 halves, then a scalar tail of n % 8 elements. Otherwise (a misaligned pointer) scalar.
 * Math in fp32, one __float2half_rn rounding per output. out may equal an input: every element
 * is read and written by the same thread.
 */
#ifndef TOUCHSTONE_ELEMENTWISE_CUH
#define TOUCHSTONE_ELEMENTWISE_CUH

#include "internal.h"

namespace ts {

constexpr int kElementwiseThreads = 256;

template <bool VEC, class F>
__device__ __forceinline__ void unary_body(__half *out, const __half *x, int64_t n, F f) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t i = tid; i < nv; i += stride) {
            float v[8];
            load8(x + i * 8, v);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = f(v[k]);
            store8(out + i * 8, v);
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += stride) out[i] = __float2half_rn(f(__half2float(x[i])));
}

template <bool VEC, class F>
__device__ __forceinline__ void binary_body(__half *out, const __half *a, const __half *b, int64_t n, F f) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t i = tid; i < nv; i += stride) {
            float va[8], vb[8];
            load8(a + i * 8, va);
            load8(b + i * 8, vb);
#pragma unroll
            for (int k = 0; k < 8; ++k) va[k] = f(va[k], vb[k]);
            store8(out + i * 8, va);
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += stride)
        out[i] = __float2half_rn(f(__half2float(a[i]), __half2float(b[i])));
}

/* Threads' work items for the grid size: vectors (plus the tail) or elements. */
inline int64_t elementwise_work(int64_t n, bool vec) { return vec ? n / 8 + n % 8 : n; }

} // namespace ts

#endif /* TOUCHSTONE_ELEMENTWISE_CUH */
