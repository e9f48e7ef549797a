/*
 * gelu.cuh: the two GELUs in fp32, shared by the elementwise ops (gelu.cu, gelu_tanh.cu: their
 * header comments give the derivations and the measured error), gelu_scale.cu, geglu.cu and
 * gpt_ffn's epilogue, so a fused op applies exactly the function the unfused gelu kernel does.
 */
#ifndef TOUCHSTONE_GELU_CUH
#define TOUCHSTONE_GELU_CUH

#include "internal.h"

namespace ts {

/* Exact GELU x Phi(x), Phi from erfc (Numerical Recipes' erfcc in base 2; gelu.cu). */
__device__ __forceinline__ float gelu_erf(float x) {
    /* e = Phi(-|x|) = 0.5 erfc(a) = 0.5 t exp(P(t) - a^2), a = |x| / sqrt(2), t = 1 / (1 + a / 2),
     * evaluated in base 2: e = t 2^(P'(t) - a'^2) with P' = log2(e) P - 1 (the 0.5) and
     * a' = a sqrt(log2(e)), so the exponential is one ex2 instruction. */
    const float ax = fabsf(x);
    const float a2 = ax * 0.849321800f;                       /* sqrt(log2(e) / 2) |x| */
    const float t = rcp_approx(fmaf(ax, 0.353553391f, 1.0f)); /* 1 / (1 + |x| / sqrt(8)) */
    float p = 2.465172979e-01f;
    p = fmaf(p, t, -1.186114945e+00f);
    p = fmaf(p, t, 2.147474464e+00f);
    p = fmaf(p, t, -1.637753152e+00f);
    p = fmaf(p, t, 4.023215817e-01f);
    p = fmaf(p, t, -2.687568603e-01f);
    p = fmaf(p, t, 1.396300565e-01f);
    p = fmaf(p, t, 5.397006155e-01f);
    p = fmaf(p, t, 1.442729204e+00f);
    p = fmaf(p, t, -2.825748218e+00f);
    const float e = t * ex2_approx(fmaf(-a2, a2, p)); /* 0 once it is below 2^-126 */
    return x * (x < 0.0f ? e : 1.0f - e);
}

/* tanh GELU (GPT-2 gelu_new) as x / (1 + exp(-2u)) (gelu_tanh.cu). */
__device__ __forceinline__ float gelu_tanh(float x) {
    // 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)): the same function without the cancellation of
    // 1 + tanhf(u) for negative u, which loses most bits of the tiny outputs of the tail.
    // exp(-2u) = 2^(x (c1 + c2 x^2)), c1 = -2 sqrt(2/pi) log2(e), c2 = 0.044715 c1.
    const float e = ex2_approx(x * fmaf(x * x, -0.102943240f, -2.302208198f));
    return x * rcp_approx(1.0f + e); /* 1 / inf = 0: x < -10, where the value is < 1e-37 */
}

} // namespace ts

#endif /* TOUCHSTONE_GELU_CUH */
