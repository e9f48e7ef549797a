/*
 * fp8.cuh: the FP8 conversions of docs/quantization.md on the device, bit for bit as the
 * reference and the CPU backend compute them: saturation to the largest finite value, round to
 * nearest even (the hardware's cvt.rn.satfinite on sm_89 and later), every NaN to 0x7F.
 */
#pragma once

#include <cuda_fp8.h>

namespace ts {

/* e4m3(v): v clamped to [-448, 448], rounded to the nearest f8e4m3, ties to even; NaN is 0x7F
 * (the hardware's NaN output does not depend on the input's sign either, but the spec says it
 * here, not the instruction). */
__device__ __forceinline__ unsigned char e4m3(float v) {
    if (v != v) return 0x7F;
    return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* e5m2(v): v clamped to [-57344, 57344], rounded to the nearest f8e5m2, ties to even; NaN is 0x7F. */
__device__ __forceinline__ unsigned char e5m2(float v) {
    if (v != v) return 0x7F;
    return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
}

/* The spec's guard on a group's amax: an all-zero group gets a finite scale. */
constexpr float kQuantEps = 1e-10f;
constexpr float kE4M3Max = 448.0f;

} // namespace ts
