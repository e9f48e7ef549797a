/*
 * swiglu: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, fp32 math, one fp16 rounding.
 * The exponential and the reciprocal are single special-function instructions (ex2.approx,
 * rcp.approx): in an fp32 emulation at their error bounds the worst element after the fp16
 * rounding uses 0.49 of the tolerance, as exact math would. Grid-stride, 16-byte vectors when
 * aligned (see elementwise.cuh). Also the activation step of swiglu_ffn (ts::launch_swiglu).
 */
#include "elementwise.cuh"

namespace {

struct SwiGLUOp {
    __device__ __forceinline__ float operator()(float g, float u) const { return ts::silu_mul(g, u); }
};

} // namespace

int ts::launch_swiglu(const char *op, __half *out, const __half *gate, const __half *up, int64_t n,
                      cudaStream_t stream) {
    return launch_binary<SwiGLUOp>(op, out, gate, up, n, stream);
}

extern "C" int ts_swiglu(void *out, const void *gate, const void *up, const ts_elementwise_config *cfg, void *stream) {
    return ts::binary_entry<SwiGLUOp>("swiglu", "gate", "up", out, gate, up, cfg, stream);
}
