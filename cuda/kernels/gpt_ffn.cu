/*
 * gpt_ffn: GPT-2's MLP, out [rows, hidden] = gelu(x . w1^T + b1) . w2^T + b2 with w1 [ffn, hidden],
 * w2 [hidden, ffn], biases optional, the exact or the tanh GELU (cfg->gelu), everything in the
 * storage type T (fp16 or bf16, the kernels' last template argument). The first product is not
 * rounded before the GELU (one rounding to T, of the activation, where the unfused gemm then gelu
 * round twice), the activation lives in a library workspace, the second product is gemm's.
 *
 * Decode (rows <= 16, hidden and ffn % 8 == 0, 16-byte aligned; wider than gemv_decode_applies's 4
 * rows and with no weight limit, because the GELU epilogue saves a launch besides: on an H100 the
 * fused op matched or beat its unfused form at 8 and 12 rows and at Phi-2's 52 MB up projection,
 * docs/PERF.md, 2026-11-24): one kernel copies x into shared
 * memory and streams w1 with the bias and the GELU in its epilogue (gemv.cuh), then gemm's path
 * (its gemv at these shapes) does the down projection: two launches where the unfused composition
 * takes three.
 * Otherwise: cuBLAS into an fp32 workspace, an epilogue kernel (bias, GELU, one rounding), and the
 * down projection.
 */
#include "gelu.cuh"
#include "gemv.cuh"

namespace {

template <bool TANH>
__device__ __forceinline__ float gelu_of(float v) {
    return TANH ? ts::gelu_tanh(v) : ts::gelu_erf(v);
}

template <bool TANH, typename T>
struct BiasGeluStore {
    T *act;
    const T *bias;
    int n;
    __device__ __forceinline__ void operator()(int m, int j, float acc) const {
        act[(int64_t)m * n + j] = ts::from_float<T>(gelu_of<TANH>(bias ? acc + ts::to_float(bias[j]) : acc));
    }
};

template <int MR, bool TANH, typename T>
__global__ void __launch_bounds__(ts::kGemvThreads)
    gelu_gemv_kernel(T *act, const T *x, const T *w1, const T *b1, int rows, int hidden, int ffn) {
    ts::pdl_wait();
    extern __shared__ uint4 smem_rows[];
    ts::gemv_load_rows(smem_rows, x, rows, hidden);
    ts::gemv_smem<MR>(reinterpret_cast<const T *>(smem_rows), w1, rows, hidden, ffn,
                      BiasGeluStore<TANH, T>{act, b1, ffn});
}

template <bool TANH, typename T>
__global__ void __launch_bounds__(256) bias_gelu_kernel(T *act, const float *acc, const T *b1, int rows, int ffn) {
    ts::pdl_wait();
    const int64_t n = (int64_t)rows * ffn;
    for (int64_t i = blockIdx.x * 256LL + threadIdx.x; i < n; i += (int64_t)gridDim.x * 256)
        act[i] = ts::from_float<T>(gelu_of<TANH>(b1 ? acc[i] + ts::to_float(b1[i % ffn]) : acc[i]));
}

template <int MR, bool TANH, typename T>
int launch_gemv(const char *op, T *act, const T *x, const T *w1, const T *b1, int rows, int hidden, int ffn,
                cudaStream_t stream) {
    static std::atomic<int> shared_done{-1};
    static std::atomic<uint64_t> occupancy{0};
    return ts::launch_gemv_kernel<T>(op, gelu_gemv_kernel<MR, TANH, T>, shared_done, occupancy, rows, hidden, ffn,
                                     stream,
                                     ts::dims("rows=%d hidden=%d ffn=%d tile=%d tanh=%d in=%s", rows, hidden, ffn, MR,
                                              (int)TANH, ts::Storage<T>::name),
                                     act, x, w1, b1, rows, hidden, ffn);
}

template <bool TANH, typename T>
int launch_up(const char *op, T *act, float *acc, const T *x, const T *w1, const T *b1, int rows, int hidden, int ffn,
              bool gemv, cudaStream_t stream) {
    if (gemv) {
        switch (ts::gemv_tile(rows)) {
        case 1: return launch_gemv<1, TANH>(op, act, x, w1, b1, rows, hidden, ffn, stream);
        case 2: return launch_gemv<2, TANH>(op, act, x, w1, b1, rows, hidden, ffn, stream);
        case 4: return launch_gemv<4, TANH>(op, act, x, w1, b1, rows, hidden, ffn, stream);
        case 8: return launch_gemv<8, TANH>(op, act, x, w1, b1, rows, hidden, ffn, stream);
        default: return launch_gemv<16, TANH>(op, act, x, w1, b1, rows, hidden, ffn, stream);
        }
    }
    TS_CHECK(op, ts::gemm_nt(op, acc, true, x, w1, static_cast<const T *>(nullptr), rows, ffn, hidden, stream));
    auto kernel = bias_gelu_kernel<TANH, T>;
    const char *d = ts::dims("rows=%d ffn=%d tanh=%d", rows, ffn, (int)TANH);
    TS_LAUNCH(op, kernel, ts::grid_for((int64_t)rows * ffn, 256), 256, 0, stream, d, act, acc, b1, rows, ffn);
    return TS_OK;
}

template <typename T>
int launch_gpt_ffn(T *out, const T *x, const T *w1, const T *b1, const T *w2, const T *b2, int rows, int hidden,
                   int ffn, bool tanh_gelu, cudaStream_t stream) {
    const char *op = "gpt_ffn";
    const bool gemv = rows <= ts::kGemvMaxRows && hidden % 8 == 0 && ffn % 8 == 0 && ts::aligned16(x) &&
                      ts::aligned16(w1) && ts::gemv_fits(rows, hidden);
    /* The activation, 256-byte aligned, then (the cuBLAS path) the fp32 accumulators. */
    const size_t act_bytes = ((size_t)rows * ffn * sizeof(T) + 255) & ~(size_t)255;
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, act_bytes + (gemv ? 0 : (size_t)rows * ffn * sizeof(float)), &ws));
    T *act = static_cast<T *>(ws);
    float *acc = reinterpret_cast<float *>(static_cast<char *>(ws) + act_bytes);
    TS_CHECK(op, tanh_gelu ? launch_up<true>(op, act, acc, x, w1, b1, rows, hidden, ffn, gemv, stream)
                           : launch_up<false>(op, act, acc, x, w1, b1, rows, hidden, ffn, gemv, stream));
    return ts::gemm_nt(op, out, false, act, w2, b2, rows, hidden, ffn, stream);
}

} // namespace

extern "C" int ts_gpt_ffn(void *out, const void *x, const void *w1, const void *b1, const void *w2, const void *b2,
                          const ts_gpt_ffn_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gpt_ffn");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(w1, "w1");
    v.ptr(w2, "w2");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->ffn, "cfg->ffn");
    if (v.ok() && cfg->gelu != TS_GELU_ERF && cfg->gelu != TS_GELU_TANH)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->gelu = %d: must be TS_GELU_ERF (0) or TS_GELU_TANH (1)", (int)cfg->gelu);
    v.elements("x", {cfg->rows, cfg->hidden});
    v.elements("act", {cfg->rows, cfg->ffn});
    v.elements("w1", {cfg->ffn, cfg->hidden});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_gpt_ffn(static_cast<T *>(out), static_cast<const T *>(x), static_cast<const T *>(w1),
                              static_cast<const T *>(b1), static_cast<const T *>(w2), static_cast<const T *>(b2),
                              cfg->rows, cfg->hidden, cfg->ffn, cfg->gelu == TS_GELU_TANH, st);
    });
}
