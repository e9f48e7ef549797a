/*
 * Tensor-core building blocks shared by the attention kernels (sm_80+ PTX): the m16n8k16 MMA,
 * ldmatrix fragment loads from shared memory, and a zero-filling cp.async.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .f16 inputs; lane = 4g + t):
 *   A (16x16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B (16x8, col):  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C/D (16x8):     d0, d1 = D[g][2t], D[g][2t+1]; d2, d3 = D[g+8][2t], D[g+8][2t+1]
 * ldmatrix .x4 loads four 8x8 fp16 matrices; lanes 8i..8i+7 give the row addresses of matrix i,
 * and lane 4g + t receives row g, columns 2t and 2t+1 of each (with .trans: column g, rows 2t
 * and 2t+1), which is an A, B or C-shaped piece as above.
 */
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

namespace ts {

/* d += a . b, m16n8k16, fp16 inputs, fp32 accumulators. */
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half *row_addr) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half *row_addr) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* 16-byte global -> shared copy that writes zeros instead when `valid` is false (no global
 * read then: src-size 0), so padding rows and columns of a tile cost no traffic. */
__device__ __forceinline__ void cp_async16_zfill(void *smem_dst, const void *gmem_src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem_src), "r"(n) : "memory");
}

/* Two floats rounded to fp16 (round to nearest even) in one 32-bit word, lo in the low half. */
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

} // namespace ts
