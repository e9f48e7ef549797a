/*
 * philox.cuh — Philox4x32-10 and the sampling uniform of docs/sampling.md, shared by
 * kernels/philox.cu (the raw stream, for checking it bit for bit) and kernels/sample.cu (the
 * draw), so the stream that is checked is the very code that samples.
 *
 * Host and device: the host side lets a host test (or a debugger) compute the same words.
 */
#ifndef TOUCHSTONE_PHILOX_CUH
#define TOUCHSTONE_PHILOX_CUH

#include <cstdint>

#include <cuda_runtime.h>

namespace ts {

/* Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC11), with the
 * Random123 constants: multipliers M0, M1 and the Weyl key increments W0, W1. */
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

/* High and low 32-bit halves of the 64-bit product a * b. */
__host__ __device__ __forceinline__ void philox_mulhilo(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo) {
#ifdef __CUDA_ARCH__
    hi = __umulhi(a, b);
    lo = a * b;
#else
    const uint64_t p = (uint64_t)a * b;
    hi = (uint32_t)(p >> 32);
    lo = (uint32_t)p;
#endif
}

/* Ten rounds of Philox4x32 on counter c under key (k0, k1); the key is bumped before rounds 2
 * to 10 (the Random123 schedule). Known answers: docs/sampling.md. */
__host__ __device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint32_t k0, uint32_t k1) {
#ifdef __CUDA_ARCH__ /* the host compiler does not know the pragma (and warnings are errors) */
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        uint32_t hi0, lo0, hi1, lo1;
        philox_mulhilo(kPhiloxM0, c.x, hi0, lo0);
        philox_mulhilo(kPhiloxM1, c.z, hi1, lo1);
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

/* The words of one sampling draw: key (seed mod 2^32, seed >> 32), counter (step mod 2^32,
 * step >> 32, row, 0). */
__host__ __device__ __forceinline__ uint4 philox_words(uint64_t seed, uint64_t step, uint32_t row) {
    return philox4x32_10(make_uint4((uint32_t)step, (uint32_t)(step >> 32), row, 0u), (uint32_t)seed,
                         (uint32_t)(seed >> 32));
}

/* The uniform in [0, 1) with 53 random bits: ((x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53. The integer
 * is below 2^53, so its conversion and the scaling by a power of two are exact: every
 * implementation gets the same bits. */
__host__ __device__ __forceinline__ double philox_uniform(uint4 w) {
    const uint64_t bits = ((uint64_t)(w.x >> 5) << 26) | (uint64_t)(w.y >> 6);
    return (double)bits * 0x1p-53;
}

} // namespace ts

#endif /* TOUCHSTONE_PHILOX_CUH */
