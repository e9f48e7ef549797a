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

/* The dynamic quantisation of docs/quantization.md, shared by quant_fp8 and the fused
 * quantisers (rmsnorm_quant_fp8, swiglu_quant_fp8), which must write the same bytes for the same
 * values. A group's amax is taken over the bits of |v| (abs_bits): for non-negative floats the
 * unsigned order is the numeric one, and every NaN's bits lie above +inf's, so the unsigned
 * maximum is the amax with NaN propagating (fmaxf would drop it) and one max instruction a step. */
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

/* A group's scale from the maximum of its abs_bits: NaN when the group holds a NaN, else
 * max(amax, 1e-10) / 448 with a correctly rounded division (__fdiv_rn: the default division under
 * --use_fast_math would not be one, and amax * (1 / 448) rounds twice). */
__device__ __forceinline__ float quant_scale(unsigned amax_bits) {
    if (amax_bits > 0x7f800000u) return __int_as_float(0x7fffffff);
    return __fdiv_rn(fmaxf(__uint_as_float(amax_bits), kQuantEps), kE4M3Max);
}

/* q = e4m3(v / s), the division correctly rounded (v * (1 / s) rounds twice and moves values
 * across an FP8 rounding boundary). */
__device__ __forceinline__ unsigned char quant_code(float v, float s) { return e4m3(__fdiv_rn(v, s)); }

} // namespace ts
