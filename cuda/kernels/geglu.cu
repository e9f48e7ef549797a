/*
 * geglu: out = gelu(gate) * up, the GELU of cfg->gelu (tanh: Gemma's gelu_pytorch_tanh MLP,
 * act_fn(gate_proj(x)) * up_proj(x); erf: the exact GELU of other GeGLU models), fp32 math from
 * the 16-bit inputs, one rounding to the storage type (fp16 or bf16).
 * The GELUs are gelu.cuh's, the functions the gelu and gelu_tanh kernels apply (their header
 * comments give the derivations and the measured error: within 1.2e-5 relative of the fp64
 * reference); the product with up is one more fp32 rounding (2^-24 relative). In an fp32
 * emulation of this kernel with ex2.approx and rcp.approx at their error bounds, over every
 * committed case (tools/gen-golden/selftest/gemma.py), the worst element after the rounding uses
 * 0.484 of the fp16 tolerance and 0.962 of bf16's (rtol 1.024u: one rounding is up to u), as
 * exact math would: the fp32 error is a few percent of u, the rounding the rest. Large |gate|
 * (the tails of tanh, and |gate| beyond fp16's range in bf16) gives gate or -0 times up, the
 * limits.
 *
 * The kind is a template argument (one functor type each, so the path table names them and a
 * kernel does not branch per element). Grid-stride, 16-byte vectors when aligned (see
 * elementwise.cuh); out may equal gate or up.
 */
#include "elementwise.cuh"
#include "gelu.cuh"

namespace {

struct GeGLUErfOp {
    __device__ __forceinline__ float operator()(float g, float u) const { return ts::gelu_erf(g) * u; }
};

struct GeGLUTanhOp {
    __device__ __forceinline__ float operator()(float g, float u) const { return ts::gelu_tanh(g) * u; }
};

} // namespace

extern "C" int ts_geglu(void *out, const void *gate, const void *up, const ts_geglu_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "geglu";
    ts::Validator v(op);
    v.ptr(out, "out");
    v.ptr(gate, "gate");
    v.ptr(up, "up");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    if (v.ok() && cfg->gelu != TS_GELU_ERF && cfg->gelu != TS_GELU_TANH)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->gelu = %d: must be TS_GELU_ERF (0) or TS_GELU_TANH (1)", (int)cfg->gelu);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T *o = static_cast<T *>(out);
        const T *g = static_cast<const T *>(gate), *u = static_cast<const T *>(up);
        if (cfg->gelu == TS_GELU_TANH) return ts::launch_binary<GeGLUTanhOp>(op, o, g, u, cfg->n, st);
        return ts::launch_binary<GeGLUErfOp>(op, o, g, u, cfg->n, st);
    });
}
