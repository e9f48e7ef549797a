/*
 * residual_add: out = x + residual over n fp16 elements; out may equal x (in place).
 * Grid-stride, 16-byte vectors of 8 halves when every pointer is 16-byte aligned, fp32 add,
 * one fp16 rounding.
 */
#include "elementwise.cuh"

namespace {

struct AddOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

} // namespace

extern "C" int ts_residual_add(void *out, const void *x, const void *residual, const ts_elementwise_config *cfg,
                               void *stream) {
    return ts::binary_entry<AddOp>("residual_add", "x", "residual", out, x, residual, cfg, stream);
}
