/*
 * gelu: exact GELU, out = x Phi(x) = 0.5 x erfc(-x / sqrt(2)), one rounding to the storage type
 * (fp16 or bf16). Phi comes from
 * e = Phi(-|x|) = 0.5 erfc(|x| / sqrt(2)), Phi(x) = e for x < 0 and 1 - e otherwise, so it is never
 * formed as 1 + erf(z), which cancels in the negative tail (x = -5: 1 + erf = 5.7e-7 while fp32
 * steps by 6e-8 near 1). erfc(a) for a >= 0 is Numerical Recipes' erfcc, t exp(-a^2 + P(t)),
 * t = 1 / (1 + a / 2), P of degree 9: fractional error < 1.2e-7 for every a (erfc, not the tanh
 * form, which differs by > 1% in the negative tail). It costs one approximate reciprocal and one
 * approximate 2^x (rcp.approx, ex2.approx: ~17 instructions per element in all): checked in an
 * fp32 emulation over every finite fp16 input, with those two at their error bounds, the result is
 * within 1.2e-5 relative of the fp64 reference (3e-6 where |x| < 6; beyond, the outputs are below
 * 1e-8), and after the fp16 rounding the worst element uses 0.485 of the tolerance, as exact math
 * would. bf16 rounds 8 times more coarsely (u = 2^-8), so the 1.2e-5 matters less still; its inputs
 * beyond fp16's range only push the exponential to 0 (a^2 overflows to inf from |x| ~ 2e19), where
 * Phi is 0 or 1 as it should be. The libm erfcf this replaces cost ~40 instructions per element
 * (SASS); with it and one 16-byte load in flight per thread the kernel reached 43% of copy
 * bandwidth on the H200, with this and 4 (elementwise.cuh) 72-73%. Grid-stride, 16-byte vectors
 * when aligned; out may equal x.
 */
#include "elementwise.cuh"
#include "gelu.cuh"

namespace {

struct GeluOp {
    __device__ __forceinline__ float operator()(float x) const { return ts::gelu_erf(x); }
};

} // namespace

extern "C" int ts_gelu(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    return ts::unary_entry<GeluOp>("gelu", out, x, cfg, stream);
}
