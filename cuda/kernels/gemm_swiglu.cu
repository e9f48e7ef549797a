/*
 * gemm_swiglu: out = silu(x . w_gate^T) * (x . w_up^T) with w_gate_up = [w_gate; w_up] stacked
 * [2 ffn, hidden] (Phi-3's gate_up_proj layout; the engine stacks Qwen2's two projections the
 * same way): one cuBLAS GEMM over the stacked weight (fp32 accumulation) into an fp32 library
 * workspace [rows, 2 ffn], then the activation reads both halves of each accumulator row and
 * rounds once to the storage type T (fp16 or bf16, the kernel's template argument). Against the
 * unfused gemm(gate), gemm(up), swiglu: one GEMM launch and one pass over the weights instead of
 * two, and gate and up never rounded to T (so the result is nearer the fp64 reference than the
 * unfused composition, by up to ~2 ulp of T).
 */
#include "internal.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    gemm_swiglu_epilogue_kernel(T *__restrict__ out, const float *__restrict__ acc, int rows, int ffn) {
    ts::pdl_wait();
    const int64_t n = (int64_t)rows * ffn;
    for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kThreads) {
        const int64_t r = i / ffn, j = i - r * ffn;
        const float g = acc[r * 2 * ffn + j], u = acc[r * 2 * ffn + ffn + j];
        out[i] = ts::from_float<T>(ts::silu_mul(g, u));
    }
}

template <typename T>
int launch_gemm_swiglu(T *out, const T *x, const T *w, int rows, int hidden, int ffn, cudaStream_t stream) {
    const char *op = "gemm_swiglu";
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, (size_t)rows * 2 * ffn * sizeof(float), &ws));
    float *acc = static_cast<float *>(ws);
    TS_CHECK(op, ts::gemm_nt(op, acc, true, x, w, static_cast<const T *>(nullptr), rows, 2 * ffn, hidden, stream));
    const char *d = ts::dims("rows=%d ffn=%d out=%s", rows, ffn, ts::Storage<T>::name);
    auto kernel = gemm_swiglu_epilogue_kernel<T>;
    TS_LAUNCH(op, kernel, ts::grid_for((int64_t)rows * ffn, kThreads), kThreads, 0, stream, d, out, acc, rows, ffn);
    return TS_OK;
}

} // namespace

extern "C" int ts_gemm_swiglu(void *out, const void *x, const void *w_gate_up, const ts_ffn_config *cfg,
                              void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gemm_swiglu");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(w_gate_up, "w_gate_up");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->ffn, "cfg->ffn");
    v.elements("x", {cfg->rows, cfg->hidden});
    v.elements("out", {cfg->rows, cfg->ffn});
    v.elements("w_gate_up", {2 * (int64_t)cfg->ffn, cfg->hidden});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_gemm_swiglu(static_cast<T *>(out), static_cast<const T *>(x),
                                  static_cast<const T *>(w_gate_up), cfg->rows, cfg->hidden, cfg->ffn, st);
    });
}
