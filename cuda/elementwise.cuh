/*
 * elementwise.cuh — loop bodies shared by the fp16 elementwise ops (residual_add, swiglu,
 * gelu, gelu_tanh). Each op's .cu file defines its own __global__ kernel around one of these
 * bodies with its functor, its launcher and its ts_* entry.
 *
 * Grid-stride loops over n elements. VEC (every pointer 16-byte aligned): 16-byte accesses of
 * 8 halves, kElementwiseUnroll of them in flight per thread, then a scalar tail of n % 8
 * elements. Otherwise (a misaligned pointer) scalar.
 * Math in fp32, one __float2half_rn rounding per output. out may equal an input: every element
 * is read and written by the same thread.
 */
#ifndef TOUCHSTONE_ELEMENTWISE_CUH
#define TOUCHSTONE_ELEMENTWISE_CUH

#include "internal.h"

namespace ts {

constexpr int kElementwiseThreads = 256;
/* 16-byte vectors per thread per loop step: all of them are loaded before the first is used,
 * so each thread keeps kElementwiseUnroll loads (per input) in flight (one per step before:
 * 16 bytes per thread, too few to cover DRAM latency at 2048 threads per SM). */
constexpr int kElementwiseUnroll = 4;

/* The grid is every resident thread (elementwise_grid), T in all. Step s of thread t takes
 * vectors t + (s * U + u) * T, u < U: each load instruction is coalesced across the grid, and
 * every thread runs the same number of steps (the last one partly, evenly spread), so no SM
 * idles at the end. A thread reads all its vectors of a step before writing any, and writes only
 * the elements it read, so out == x stays correct. */
template <bool VEC, class F>
__device__ __forceinline__ void unary_body(__half *out, const __half *x, int64_t n, F f) {
    constexpr int U = kElementwiseUnroll;
    const int64_t T = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t base = tid; base < nv; base += U * T) {
            uint4 r[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (base + u * T < nv) r[u] = *reinterpret_cast<const uint4 *>(x + (base + u * T) * 8);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t i = base + u * T;
                if (i < nv) {
                    float v[8];
                    unpack8(r[u], v);
#pragma unroll
                    for (int k = 0; k < 8; ++k) v[k] = f(v[k]);
                    *reinterpret_cast<uint4 *>(out + i * 8) = pack8(v);
                }
            }
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += T) out[i] = __float2half_rn(f(__half2float(x[i])));
}

template <bool VEC, class F>
__device__ __forceinline__ void binary_body(__half *out, const __half *a, const __half *b, int64_t n, F f) {
    constexpr int U = kElementwiseUnroll;
    const int64_t T = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t base = tid; base < nv; base += U * T) {
            uint4 ra[U], rb[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * T < nv) {
                    ra[u] = *reinterpret_cast<const uint4 *>(a + (base + u * T) * 8);
                    rb[u] = *reinterpret_cast<const uint4 *>(b + (base + u * T) * 8);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t i = base + u * T;
                if (i < nv) {
                    float va[8], vb[8];
                    unpack8(ra[u], va);
                    unpack8(rb[u], vb);
#pragma unroll
                    for (int k = 0; k < 8; ++k) va[k] = f(va[k], vb[k]);
                    *reinterpret_cast<uint4 *>(out + i * 8) = pack8(va);
                }
            }
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += T) out[i] = __float2half_rn(f(__half2float(a[i]), __half2float(b[i])));
}

/* Blocks of kElementwiseThreads for n elements: every resident block of kernel (the occupancy
 * calculator's answer, remembered in cache), fewer when n needs less than one step of each
 * thread. (A fixed 8 blocks of 256 per SM is more than fit above 32 registers, gelu's kernel has
 * 40, and left part of a persistent grid to run as a second wave.) */
template <typename Kernel>
int elementwise_grid(const char *op, Kernel kernel, int64_t n, bool vec, std::atomic<uint64_t> &cache,
                     unsigned *grid) {
    int per_sm = 1;
    TS_CHECK(op, blocks_per_sm(op, kernel, kElementwiseThreads, 0, cache, &per_sm));
    const int64_t per_block = (int64_t)kElementwiseThreads * (vec ? kElementwiseUnroll : 1);
    int64_t g = ceil_div(vec ? n / 8 : n, per_block);
    const int64_t fill = (int64_t)per_sm * sm_count();
    if (g > fill) g = fill;
    *grid = (unsigned)(g < 1 ? 1 : g);
    return TS_OK;
}

} // namespace ts

#endif /* TOUCHSTONE_ELEMENTWISE_CUH */
