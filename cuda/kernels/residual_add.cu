/*
 * residual_add: out = x + residual over n elements of the storage type (fp16 or bf16); out may
 * equal x (in place). Grid-stride, 16-byte vectors of 8 values when every pointer is 16-byte
 * aligned, fp32 add (exact for two values of either type), one rounding to the storage type.
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
