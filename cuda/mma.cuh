/*
 * Tensor-core building blocks shared by the attention kernels (sm_80+ PTX): the m16n8k16 MMA,
 * ldmatrix fragment loads from shared memory, and a zero-filling cp.async.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .f16 or .bf16 inputs, the same for both; lane = 4g + t):
 *   A (16x16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B (16x8, col):  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C/D (16x8):     d0, d1 = D[g][2t], D[g][2t+1]; d2, d3 = D[g+8][2t], D[g+8][2t+1]
 * ldmatrix .x4 loads four 8x8 matrices of 16-bit elements (.b16: any 16-bit type); lanes 8i..8i+7
 * give the row addresses of matrix i, and lane 4g + t receives row g, columns 2t and 2t+1 of each
 * (with .trans: column g, rows 2t and 2t+1), which is an A, B or C-shaped piece as above.
 */
#pragma once

#include <cstdint>

#include "internal.h"

namespace ts {

/* d += a . b, m16n8k16, inputs of the storage type T (the registers hold two T each, lo in the
 * low half: pack2<T>), fp32 accumulators. Only the instruction's input type differs: .f16 for
 * __half, .bf16 for __nv_bfloat16. */
template <typename T>
__device__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* row_addr: shared memory, 16-bit elements of either storage type. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row_addr) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *row_addr) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* 16-byte global -> shared copy that writes zeros instead when `valid` is false (no global
 * read then: src-size 0), so padding rows and columns of a tile cost no traffic. All-zero bits
 * are +0 in both storage types. */
__device__ __forceinline__ void cp_async16_zfill(void *smem_dst, const void *gmem_src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem_src), "r"(n) : "memory");
}

/* 8-byte global -> shared copy with cp_async16_zfill's zero fill (E4M3 code pieces of head dims
 * that are multiples of 8 but not of 16). */
__device__ __forceinline__ void cp_async8_zfill(void *smem_dst, const void *gmem_src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    const int n = valid ? 8 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem_src), "r"(n) : "memory");
}

} // namespace ts
