/*
 * elementwise.cuh — everything the elementwise ops (residual_add, swiglu, geglu, gelu, gelu_tanh,
 * gelu_scale, and logit_softcap over 16-bit logits) share: loop bodies, kernels, launchers and ABI
 * entries, generic over the op's math and the storage type T (__half or __nv_bfloat16,
 * internal.h). Each op's .cu file holds its functor (its math, with the why of its numerics) and a
 * one-line ts_* entry (gelu_scale, whose functor carries its scale, geglu, whose config picks its
 * functor, and logit_softcap, with its fp32 kernel, entries of their own).
 *
 * Grid-stride loops over n elements. VEC (every pointer 16-byte aligned): 16-byte accesses of
 * 8 values, kElementwiseUnroll of them in flight per thread, then a scalar tail of n % 8
 * elements. Otherwise (a misaligned pointer) scalar.
 * Math in fp32, one rounding to T (to nearest even) per output. out may equal an input: every
 * element is read and written by the same thread.
 */
#ifndef TOUCHSTONE_ELEMENTWISE_CUH
#define TOUCHSTONE_ELEMENTWISE_CUH

#include "internal.h"

namespace ts {

constexpr int kElementwiseThreads = 256;
/* 16-byte vectors per thread (all loaded before the first is used). Measured on an H100
 * (2026-11-24; docs/PERF.md, "Memory-bound kernels"): one vector a thread on a grid that covers the tensor once
 * (many waves of blocks) reaches 87-91% of copy bandwidth at 16M elements, two 84-90%, where a
 * persistent grid of every resident thread with 4 in flight reached 72-85% (8: slower still;
 * streaming cache hints, 128 or 512 threads a block changed nothing): with a fresh block taking
 * each retired one's place, loads of the next blocks overlap the math and stores of the last,
 * which a persistent thread's next step only begins after them. */
constexpr int kElementwiseUnroll = 1;

/* NT threads in all. Step s of thread t takes vectors t + (s * U + u) * NT, u < U: each load
 * instruction is coalesced across the grid (on the grid elementwise_grid sizes, one step). A
 * thread reads all its vectors of a step before writing any, and writes only the elements it
 * read, so out == x stays correct. */
template <bool VEC, class F, typename T>
__device__ __forceinline__ void unary_body(T *out, const T *x, int64_t n, F f) {
    constexpr int U = kElementwiseUnroll;
    const int64_t NT = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t base = tid; base < nv; base += U * NT) {
            uint4 r[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (base + u * NT < nv) r[u] = *reinterpret_cast<const uint4 *>(x + (base + u * NT) * 8);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t i = base + u * NT;
                if (i < nv) {
                    float v[8];
                    unpack8<T>(r[u], v);
#pragma unroll
                    for (int k = 0; k < 8; ++k) v[k] = f(v[k]);
                    *reinterpret_cast<uint4 *>(out + i * 8) = pack8<T>(v);
                }
            }
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += NT) out[i] = from_float<T>(f(to_float(x[i])));
}

template <bool VEC, class F, typename T>
__device__ __forceinline__ void binary_body(T *out, const T *a, const T *b, int64_t n, F f) {
    constexpr int U = kElementwiseUnroll;
    const int64_t NT = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t start = 0;
    if (VEC) {
        const int64_t nv = n / 8;
        for (int64_t base = tid; base < nv; base += U * NT) {
            uint4 ra[U], rb[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * NT < nv) {
                    ra[u] = *reinterpret_cast<const uint4 *>(a + (base + u * NT) * 8);
                    rb[u] = *reinterpret_cast<const uint4 *>(b + (base + u * NT) * 8);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t i = base + u * NT;
                if (i < nv) {
                    float va[8], vb[8];
                    unpack8<T>(ra[u], va);
                    unpack8<T>(rb[u], vb);
#pragma unroll
                    for (int k = 0; k < 8; ++k) va[k] = f(va[k], vb[k]);
                    *reinterpret_cast<uint4 *>(out + i * 8) = pack8<T>(va);
                }
            }
        }
        start = nv * 8;
    }
    for (int64_t i = start + tid; i < n; i += NT) out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
}

/* Blocks of kElementwiseThreads for n elements: enough for one step of every thread (see
 * kElementwiseUnroll); the loops still stride, so a grid clipped to the launch limit stays correct. */
inline unsigned elementwise_grid(int64_t n, bool vec) {
    const int64_t per_block = (int64_t)kElementwiseThreads * (vec ? kElementwiseUnroll : 1);
    int64_t g = ceil_div(vec ? n / 8 : n, per_block);
    if (g > 0x7fffffff) g = 0x7fffffff;
    return (unsigned)(g < 1 ? 1 : g);
}

/* The kernels, launchers and ABI entries of the elementwise ops, generic over the op's math F
 * (a functor of one or two floats), so each op's file holds only its math and its name, and over
 * the storage type T. A unary functor travels by value as a kernel argument, so it may carry
 * parameters (gelu_scale's scale); the others are empty. */

template <bool VEC, class F, typename T>
__global__ void __launch_bounds__(kElementwiseThreads) unary_kernel(T *out, const T *x, int64_t n, F f) {
    ts::pdl_wait();
    unary_body<VEC>(out, x, n, f);
}

template <bool VEC, class F, typename T>
__global__ void __launch_bounds__(kElementwiseThreads) binary_kernel(T *out, const T *a, const T *b, int64_t n) {
    ts::pdl_wait();
    binary_body<VEC>(out, a, b, n, F{});
}

/* One launch on the grid elementwise_grid sizes. */
template <typename Kernel, typename... Args>
int launch_elementwise(const char *op, Kernel kernel, int64_t n, bool vec, cudaStream_t stream, Args... args) {
    const unsigned grid = elementwise_grid(n, vec);
    const char *d = dims("n=%lld vec=%d", (long long)n, (int)vec);
    TS_LAUNCH(op, kernel, grid, kElementwiseThreads, 0, stream, d, args...);
    return TS_OK;
}

/* out = f(x): 16-byte vectors when every pointer is 16-byte aligned, else scalar. */
template <class F, typename T>
int launch_unary(const char *op, T *out, const T *x, int64_t n, cudaStream_t stream, F f = F{}) {
    if (aligned16(out) && aligned16(x))
        return launch_elementwise(op, unary_kernel<true, F, T>, n, true, stream, out, x, n, f);
    return launch_elementwise(op, unary_kernel<false, F, T>, n, false, stream, out, x, n, f);
}

/* out = F(a, b). */
template <class F, typename T>
int launch_binary(const char *op, T *out, const T *a, const T *b, int64_t n, cudaStream_t stream) {
    if (aligned16(out) && aligned16(a) && aligned16(b))
        return launch_elementwise(op, binary_kernel<true, F, T>, n, true, stream, out, a, b, n);
    return launch_elementwise(op, binary_kernel<false, F, T>, n, false, stream, out, a, b, n);
}

/* Validates the arguments of an elementwise entry before anything runs. */
inline int check_elementwise(Validator &v, const ts_elementwise_config *cfg) {
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    return v.ok() ? TS_OK : v.status();
}

/* The ABI entry of a unary op: out = F(x). */
template <class F>
int unary_entry(const char *op, void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    Validator v(op);
    v.ptr(out, "out");
    v.ptr(x, "x");
    int s = check_elementwise(v, cfg);
    if (s != TS_OK) return s;
    cudaStream_t st;
    if ((s = ready(op, stream, &st)) != TS_OK) return s;
    return with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_unary<F>(op, static_cast<T *>(out), static_cast<const T *>(x), cfg->n, st);
    });
}

/* The ABI entry of a binary op: out = F(a, b); a_name and b_name name the inputs in errors. */
template <class F>
int binary_entry(const char *op, const char *a_name, const char *b_name, void *out, const void *a, const void *b,
                 const ts_elementwise_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    Validator v(op);
    v.ptr(out, "out");
    v.ptr(a, a_name);
    v.ptr(b, b_name);
    int s = check_elementwise(v, cfg);
    if (s != TS_OK) return s;
    cudaStream_t st;
    if ((s = ready(op, stream, &st)) != TS_OK) return s;
    return with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_binary<F>(op, static_cast<T *>(out), static_cast<const T *>(a), static_cast<const T *>(b),
                                cfg->n, st);
    });
}

} // namespace ts

#endif /* TOUCHSTONE_ELEMENTWISE_CUH */
