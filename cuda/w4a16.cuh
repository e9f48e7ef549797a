/*
 * What gemm_w4a16's two decode gemvs share (cuda/kernels/gemm_w4a16.cu over the packed formats,
 * cuda/kernels/gemm_w4a16_tiled.cu over the tiled layout) and the tiler (w4a16_tile.cu): reading
 * a packed code, turning nibbles into pairs of T, the contract's rounding of a pair, x's row
 * pieces, the streamed 16-byte load, and the split-K sum.
 */
#pragma once

#include <cstdint>
#include <cstring>

#include "internal.h"

namespace {

/* The nibble of an AWQ word that holds column c % 8 of its eight (touchstone.h: nibble j is column
 * (0, 2, 4, 6, 1, 3, 5, 7)[j]). */
__device__ __forceinline__ int w4_awq_nibble(int c) {
    constexpr unsigned kReverse = 0x73625140u; /* (0, 4, 1, 5, 2, 6, 3, 7), one per nibble */
    return (kReverse >> (4 * (c & 7))) & 0xF;
}

/* Code `nibble` of a packed word, unsigned. */
__device__ __forceinline__ int w4_code(int32_t word, int nibble) { return ((uint32_t)word >> (4 * nibble)) & 0xF; }

/* Two T whose bits are 0x6400 (1024) in fp16 or 0x4300 (128) in bf16: OR-ing a code (or a zero
 * point up to 16) into the low bits gives that number + it exactly (its unit in the last place is 1). */
template <typename T>
struct W4Magic;
template <>
struct W4Magic<__half> {
    static constexpr uint32_t kPair = 0x64006400u;
};
template <>
struct W4Magic<__nv_bfloat16> {
    static constexpr uint32_t kPair = 0x43004300u;
};

/* (v & 0x000F000F) | magic: a pair of nibbles as magic + code. One LOP3 with the mask as its
 * immediate and magic in a register (written as C, the two constants made it two LOP3s). */
__device__ __forceinline__ uint32_t w4_nibble_pair(uint32_t v, uint32_t magic) {
    uint32_t r;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(r) : "r"(v), "r"(magic));
    return r;
}

/* ((q - z) * s) for a pair of T: q and z hold magic + code (the subtraction is exact), s the
 * scales; the product rounded once to T, as the contract's weight is. */
template <typename T>
__device__ __forceinline__ uint32_t w4_dequant2(uint32_t q, uint32_t z, uint32_t s) {
    using P = typename ts::Storage<T>::Pair;
    P qp, zp, sp;
    memcpy(&qp, &q, 4);
    memcpy(&zp, &z, 4);
    memcpy(&sp, &s, 4);
    const P r = __hmul2(__hsub2(qp, zp), sp);
    uint32_t out;
    memcpy(&out, &r, 4);
    return out;
}

/* 16 bytes of weight streamed: read once, not kept in L1. */
__device__ __forceinline__ uint4 w4_load_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* x's 8 values at rows r.. of row pointer xr (zeros when !ok): one vector when x is 16-byte
 * aligned (vec). */
__device__ __forceinline__ uint4 w4_load_x8(const void *xr, int r, bool ok, bool vec) {
    const auto *h = static_cast<const unsigned short *>(xr);
    if (!ok) return make_uint4(0, 0, 0, 0);
    if (vec) return *reinterpret_cast<const uint4 *>(h + r);
    uint32_t v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = (uint32_t)h[r + 2 * i] | (uint32_t)h[r + 2 * i + 1] << 16;
    return make_uint4(v[0], v[1], v[2], v[3]);
}

/* out [m, n] = the splits' fp32 partials summed in split order, rounded once to T. */
template <typename T>
__global__ void __launch_bounds__(256) w4a16_reduce_kernel(T *out, const float *partial, int m, int n, int splits) {
    ts::pdl_wait();
    const int64_t total = (int64_t)m * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; ++s) v += partial[s * total + i];
        out[i] = ts::from_float<T>(v);
    }
}

/* The reduce after a decode gemv that split k (splits > 1). */
template <typename T>
int w4a16_launch_reduce(const char *op, T *out, const float *partial, int m, int n, int splits, cudaStream_t stream) {
    const int64_t total = (int64_t)m * n;
    const char *rd = ts::dims("m=%d n=%d splits=%d out=%s", m, n, splits, ts::Storage<T>::name);
    auto reduce = w4a16_reduce_kernel<T>;
    TS_LAUNCH(op, reduce, ts::grid_for(total, 256), 256, 0, stream, rd, out, partial, m, n, splits);
    return TS_OK;
}

} // namespace
