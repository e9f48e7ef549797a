/*
 * swiglu_ffn: out = (silu(x . w_gate^T) * (x . w_up^T)) . w_down^T, exactly the unfused sequence
 * gemm(gate), gemm(up), swiglu(act), gemm(out): three cuBLAS GEMMs (fp32 accumulation, fp16
 * outputs) and the swiglu kernel, so gate, up and the activation are each rounded to fp16 as
 * the reference does. The gate/up intermediates live in a library workspace grown to the
 * largest request and reused (never allocated per call, freed by ts_shutdown); the activation
 * overwrites gate in place.
 */
#include "internal.h"

namespace {

int launch_swiglu_ffn(__half *out, const __half *x, const __half *w_gate, const __half *w_up, const __half *w_down,
                      int rows, int hidden, int ffn, cudaStream_t stream) {
    const char *op = "swiglu_ffn";
    const size_t inter = (size_t)rows * ffn;
    const size_t inter_bytes = (inter * sizeof(__half) + 255) & ~(size_t)255; /* keep up 256-byte aligned */
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, 2 * inter_bytes, &ws));
    __half *gate = static_cast<__half *>(ws);
    __half *up = reinterpret_cast<__half *>(static_cast<char *>(ws) + inter_bytes);
    TS_CHECK(op, ts::gemm_nt(op, gate, CUDA_R_16F, x, w_gate, nullptr, rows, ffn, hidden, stream));
    TS_CHECK(op, ts::gemm_nt(op, up, CUDA_R_16F, x, w_up, nullptr, rows, ffn, hidden, stream));
    TS_CHECK(op, ts::launch_swiglu(op, gate, gate, up, (int64_t)inter, stream));
    TS_CHECK(op, ts::gemm_nt(op, out, CUDA_R_16F, gate, w_down, nullptr, rows, hidden, ffn, stream));
    return TS_OK;
}

} // namespace

extern "C" int ts_swiglu_ffn(void *out, const void *x, const void *w_gate, const void *w_up, const void *w_down,
                             const ts_ffn_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("swiglu_ffn");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(w_gate, "w_gate");
    v.ptr(w_up, "w_up");
    v.ptr(w_down, "w_down");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_f16(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->ffn, "cfg->ffn");
    v.elements("x", {cfg->rows, cfg->hidden});
    v.elements("gate", {cfg->rows, cfg->ffn});
    v.elements("w_gate", {cfg->ffn, cfg->hidden});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_swiglu_ffn(static_cast<__half *>(out), static_cast<const __half *>(x),
                             static_cast<const __half *>(w_gate), static_cast<const __half *>(w_up),
                             static_cast<const __half *>(w_down), cfg->rows, cfg->hidden, cfg->ffn, st);
}
