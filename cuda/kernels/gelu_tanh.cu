/*
 * gelu_tanh: tanh GELU (GPT-2 gelu_new), out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
 * computed as x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), in fp32, one rounding to the
 * storage type (fp16 or bf16; bf16 inputs beyond fp16's range may overflow x^2 to inf, which gives
 * x for large positive x and -0 for large negative x, the limits of the function).
 * The exponential and the reciprocal are single special-function instructions (ex2.approx,
 * rcp.approx; a reciprocal of 0 once the denominator passes 2^126, where the true value is below
 * 1e-37): checked in an fp32 emulation over every finite fp16 input at their error bounds, the
 * worst element after the fp16 rounding uses 0.487 of the tolerance, as exact math would. With
 * expf, an IEEE division and one 16-byte load in flight per thread the kernel reached 62% of copy
 * bandwidth on the H200, with these and 4 (elementwise.cuh) 76-78%.
 * Grid-stride, 16-byte vectors when aligned (see elementwise.cuh); out may equal x.
 */
#include "elementwise.cuh"
#include "gelu.cuh"

namespace {

struct GeluTanhOp {
    __device__ __forceinline__ float operator()(float x) const { return ts::gelu_tanh(x); }
};

} // namespace

extern "C" int ts_gelu_tanh(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    return ts::unary_entry<GeluTanhOp>("gelu_tanh", out, x, cfg, stream);
}
