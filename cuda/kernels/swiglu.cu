/*
 * swiglu: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, fp32 math, one rounding to the
 * storage type (fp16 or bf16).
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

template <typename T>
int ts::launch_swiglu(const char *op, T *out, const T *gate, const T *up, int64_t n, cudaStream_t stream) {
    return launch_binary<SwiGLUOp>(op, out, gate, up, n, stream);
}
template int ts::launch_swiglu<__half>(const char *, __half *, const __half *, const __half *, int64_t, cudaStream_t);
template int ts::launch_swiglu<__nv_bfloat16>(const char *, __nv_bfloat16 *, const __nv_bfloat16 *,
                                              const __nv_bfloat16 *, int64_t, cudaStream_t);

extern "C" int ts_swiglu(void *out, const void *gate, const void *up, const ts_elementwise_config *cfg, void *stream) {
    return ts::binary_entry<SwiGLUOp>("swiglu", "gate", "up", out, gate, up, cfg, stream);
}
