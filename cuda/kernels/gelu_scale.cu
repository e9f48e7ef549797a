/*
 * gelu_scale: out = gelu(x) * scale, the exact or the tanh GELU (cfg->gelu), scale any finite
 * float: an activation with a scale folded in (a residual or output multiplier, a quantisation
 * scale) in one pass over memory instead of two. The GELU is gelu.cuh's, the function the gelu and
 * gelu_tanh kernels apply (their header comments give the derivations and the measured error:
 * within 1.2e-5 relative of the fp64 reference); the product with scale is one more fp32 rounding
 * (2^-24 relative), and out is rounded to the storage type (fp16 or bf16) once. The unfused gelu
 * then a gemm by [[scale]] rounds the GELU to the storage type first, so it differs from this by up
 * to one ulp of the output (u relative), and by the rounding of scale where scale is not exact in
 * the storage type.
 *
 * The kind is a template argument (one functor type each, so the path table names them and a
 * kernel does not branch per element) and the scale a value the functor carries into the kernel
 * (elementwise.cuh). Grid-stride, 16-byte vectors when aligned; out may equal x.
 */
#include <cmath>

#include "elementwise.cuh"
#include "gelu.cuh"

namespace {

struct GeluScaleErfOp {
    float scale;
    __device__ __forceinline__ float operator()(float x) const { return ts::gelu_erf(x) * scale; }
};

struct GeluScaleTanhOp {
    float scale;
    __device__ __forceinline__ float operator()(float x) const { return ts::gelu_tanh(x) * scale; }
};

} // namespace

extern "C" int ts_gelu_scale(void *out, const void *x, const ts_gelu_scale_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "gelu_scale";
    ts::Validator v(op);
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.elements("cfg->n", {cfg->n});
    if (v.ok() && cfg->gelu != TS_GELU_ERF && cfg->gelu != TS_GELU_TANH)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->gelu = %d: must be TS_GELU_ERF (0) or TS_GELU_TANH (1)", (int)cfg->gelu);
    if (v.ok() && !std::isfinite(cfg->scale))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale = %g: must be finite", (double)cfg->scale);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T *o = static_cast<T *>(out);
        const T *in = static_cast<const T *>(x);
        if (cfg->gelu == TS_GELU_TANH) return ts::launch_unary(op, o, in, cfg->n, st, GeluScaleTanhOp{cfg->scale});
        return ts::launch_unary(op, o, in, cfg->n, st, GeluScaleErfOp{cfg->scale});
    });
}
