/*
 * swiglu_ffn: out = (silu(x . w_gate^T) * (x . w_up^T)) . w_down^T, exactly the unfused sequence
 * gemm(gate), gemm(up), swiglu(act), gemm(out): three cuBLAS GEMMs (fp32 accumulation, outputs in
 * the storage type T, fp16 or bf16) and the swiglu kernel, so gate, up and the activation are each
 * rounded to T as the reference does. The gate/up intermediates live in a library workspace grown to the
 * largest request and reused (never allocated per call, freed by ts_shutdown); the activation
 * overwrites gate in place.
 */
#include "internal.h"

namespace {

template <typename T>
int launch_swiglu_ffn(T *out, const T *x, const T *w_gate, const T *w_up, const T *w_down, int rows, int hidden,
                      int ffn, cudaStream_t stream) {
    const char *op = "swiglu_ffn";
    const size_t inter = (size_t)rows * ffn;
    const size_t inter_bytes = (inter * sizeof(T) + 255) & ~(size_t)255; /* keep up 256-byte aligned */
    const T *no_bias = nullptr;
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, 2 * inter_bytes, &ws));
    T *gate = static_cast<T *>(ws);
    T *up = reinterpret_cast<T *>(static_cast<char *>(ws) + inter_bytes);
    TS_CHECK(op, ts::gemm_nt(op, gate, false, x, w_gate, no_bias, rows, ffn, hidden, stream));
    TS_CHECK(op, ts::gemm_nt(op, up, false, x, w_up, no_bias, rows, ffn, hidden, stream));
    TS_CHECK(op, ts::launch_swiglu(op, gate, gate, up, (int64_t)inter, stream));
    TS_CHECK(op, ts::gemm_nt(op, out, false, gate, w_down, no_bias, rows, hidden, ffn, stream));
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
    v.dtype_storage(cfg->dtype, "cfg->dtype");
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
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_swiglu_ffn(static_cast<T *>(out), static_cast<const T *>(x), static_cast<const T *>(w_gate),
                                 static_cast<const T *>(w_up), static_cast<const T *>(w_down), cfg->rows,
                                 cfg->hidden, cfg->ffn, st);
    });
}
