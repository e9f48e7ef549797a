/*
 * gemm: out [m, n] = x [m, k] . w^T (w is [n, k], a Linear weight) + bias [n] (optional), inputs
 * and bias in the storage type T (fp16 or bf16: CUDA_R_16F or CUDA_R_16BF for cuBLAS, the
 * kernels' template argument), fp32 accumulation in cuBLAS (CUBLAS_COMPUTE_32F, no
 * reduced-precision split-K reductions), one rounding to out_dtype (T itself or TS_F32). Never a
 * hand-written GEMM; at decode (up to 4 rows, 16-bit out, k % 8 == 0, x and w 16-byte aligned, a
 * weight of at most 32 MiB) the gemv of gemv.cuh, which streams the weight faster than cuBLAS's
 * GEMV at those sizes, with the bias added before the one rounding as below.
 *
 * Row-major out[m, n] is column-major out^T [n, m] = w . x^T: cublasGemmEx(OP_T, OP_N, n, m, k,
 * w, lda = k, x, ldb = k, out, ldc = n).
 *  - no bias: cublasGemmEx straight into out;
 *  - fp32 out + bias: cublasGemmEx into out, then bias_add_kernel adds the bias in fp32 in place
 *    (the reference's order: fp32 product, + bias, no rounding);
 *  - 16-bit out + bias: cublasLt with the BIAS epilogue (bias, C and D in T), which adds the bias to
 *    the fp32 accumulator and rounds once; when cublasLt offers no algorithm, cublasGemmEx into an
 *    fp32 workspace and bias_add_kernel adds and rounds once. Never bias added to an already
 *    rounded 16-bit product.
 */
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "blaslt.cuh"
#include "gemv.cuh"

namespace {

/* The epilogue of an fp32-out gemv (the logits of a batch-invariant decode): out [rows, n] =
 * acc + bias[j], unrounded, as cuBLAS's fp32 GEMM and the bias add after it leave it. */
template <typename T>
struct GemvF32Store {
    float *out;
    const T *bias;
    int n;
    __device__ __forceinline__ void operator()(int m, int j, float acc) const {
        out[(int64_t)m * n + j] = bias ? acc + ts::to_float(bias[j]) : acc;
    }
};

/* T last, as in every kernel (internal.h): gemv_kernel<1, ts::GemvBiasStore<__half>, __half>. */
template <int MR, typename Store, typename T>
__global__ void __launch_bounds__(ts::kGemvThreads) gemv_kernel(Store store, const T *x, const T *w, int rows, int k,
                                                                int n) {
    ts::pdl_wait();
    extern __shared__ uint4 smem_rows[];
    ts::gemv_load_rows(smem_rows, x, rows, k);
    ts::gemv_smem<MR>(reinterpret_cast<const T *>(smem_rows), w, rows, k, n, store);
}

template <int MR, typename Store, typename T>
int launch_gemv(const char *op, Store store, const T *x, const T *w, int m, int n, int k, cudaStream_t stream) {
    static std::atomic<int> shared_done{-1};
    static std::atomic<uint64_t> occupancy{0};
    return ts::launch_gemv_kernel<T>(op, gemv_kernel<MR, Store, T>, shared_done, occupancy, m, k, n, stream,
                                     ts::dims("m=%d n=%d k=%d tile=%d in=%s", m, n, k, MR, ts::Storage<T>::name),
                                     store, x, w, m, k, n);
}

template <typename T>
bool gemv_applies(bool out_f32, const T *x, const T *w, int m, int n, int k) {
    return !out_f32 && ts::gemv_decode_applies(m, k, n, ts::aligned16(x) && ts::aligned16(w));
}

/* Batch-invariant mode: the gemv for any call of up to 16 rows (gemv.cuh), 16-bit or fp32 out. */
template <typename T>
int gemv_invariant(const char *op, void *out, bool out_f32, const T *x, const T *w, const T *bias, int m, int n, int k,
                   cudaStream_t stream) {
    return ts::gemv_by_chunks(m, k, [&](auto tile, int r0, int rows) {
        constexpr int MR = decltype(tile)::value;
        const T *xr = x + (int64_t)r0 * k;
        if (out_f32)
            return launch_gemv<MR>(op, GemvF32Store<T>{static_cast<float *>(out) + (int64_t)r0 * n, bias, n}, xr, w,
                                   rows, n, k, stream);
        return launch_gemv<MR>(op, ts::GemvBiasStore<T>{static_cast<T *>(out) + (int64_t)r0 * n, bias, n}, xr, w,
                               rows, n, k, stream);
    });
}

constexpr size_t kLtWorkspaceBytes = (size_t)32 << 20;
/* The cuBLAS handle's workspace (cublasSetWorkspace), 32 MiB as cuBLAS recommends for Hopper.
 * Library-owned rather than cuBLAS's internal pool because ts::workspace zeroes it once when it
 * is allocated: the split-K GEMMs write their partial sums there with TMA stores, which
 * compute-sanitizer's initcheck cannot see, and the split-K reduce kernel that reads them back
 * would otherwise be reported as reading uninitialised memory. */
constexpr size_t kBlasWorkspaceBytes = (size_t)32 << 20;

/* out[i] = OUT(acc[i] + bias[i % n]) with OUT the storage type T or float, bias in T; acc may
 * equal out (fp32 in place). */
template <typename OUT, typename T>
__global__ void __launch_bounds__(256) bias_add_kernel(OUT *out, const float *acc, const T *bias, int64_t total,
                                                       int n) {
    ts::pdl_wait();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float v = acc[i] + ts::to_float(bias[i % n]);
        if constexpr (std::is_same_v<OUT, float>)
            out[i] = v;
        else
            out[i] = ts::from_float<OUT>(v);
    }
}

template <typename OUT, typename T>
int launch_bias_add(const char *op, OUT *out, const float *acc, const T *bias, int m, int n, cudaStream_t stream) {
    const int64_t total = (int64_t)m * n;
    const int threads = 256;
    const unsigned grid = ts::grid_for(total, threads);
    const char *d = ts::dims("m=%d n=%d in=%s out=%s", m, n, ts::Storage<T>::name,
                             std::is_same_v<OUT, float> ? "f32" : ts::Storage<T>::name);
    auto kernel = bias_add_kernel<OUT, T>;
    TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, acc, bias, total, n);
    return TS_OK;
}

/* x, w in T; out in T, or fp32 with out_f32. */
template <typename T>
int gemm_ex(const char *op, void *out, bool out_f32, const T *x, const T *w, int m, int n, int k,
            cudaStream_t stream) {
    constexpr cudaDataType_t in_type = ts::Storage<T>::cuda_type;
    const cudaDataType_t out_type = out_f32 ? CUDA_R_32F : in_type;
    const float alpha = 1.0f, beta = 0.0f;
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_CUBLAS, kBlasWorkspaceBytes, &ws));
    ts::log_library_call(op, "cublasGemmEx",
                         ts::dims("m=%d n=%d k=%d in=%s out=%s", m, n, k, ts::Storage<T>::name,
                                  out_f32 ? "f32" : ts::Storage<T>::name));
    std::lock_guard<std::mutex> lk(ts::blas_mutex());
    cublasHandle_t h = ts::cublas_handle();
    TS_CHECK(op, cublasSetStream(h, stream));
    /* After cublasSetStream, which resets the handle to cuBLAS's own workspace pool. */
    TS_CHECK(op, cublasSetWorkspace(h, ws, kBlasWorkspaceBytes));
    TS_CHECK(op, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, in_type, k, x, in_type, k, &beta, out,
                              out_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    TS_CHECK(op, ts::after_launch(op, stream));
    return TS_OK;
}

/* Heuristic results of cublasLt per storage type, shape and alignment; found == false: no
 * algorithm. The type is part of the key: an fp16 algorithm is no answer for bf16. */
struct LtChoice {
    bool found;
    cublasLtMatmulHeuristicResult_t result;
};
using LtKey = std::tuple<int, int, int, int, uint32_t, uint32_t, uint32_t>;
std::mutex g_lt_mu;
std::map<LtKey, LtChoice> g_lt_cache;

/* T out = x . w^T + bias with the bias epilogue, everything in T (the epilogue's bias type is D's
 * by default). *unsupported = true (and TS_OK) when cublasLt has no algorithm for this problem:
 * the caller falls back. */
template <typename T>
int lt_gemm_bias(const char *op, T *out, const T *x, const T *w, const T *bias, int m, int n, int k,
                 cudaStream_t stream, bool *unsupported) {
    constexpr cudaDataType_t type = ts::Storage<T>::cuda_type;
    *unsupported = false;
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_CUBLASLT, kLtWorkspaceBytes, &ws));
    const uint32_t al_w = ts::alignment_of(w), al_x = ts::alignment_of(x), al_out = ts::alignment_of(out);

    ts::LtDescs d;
    TS_CHECK(op, cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    TS_CHECK(op, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    /* Column-major, as stored: w is k x n (transposed by the op), x is k x m, out is n x m. */
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.a, type, k, n, k));
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.b, type, k, m, k));
    TS_CHECK(op, cublasLtMatrixLayoutCreate(&d.c, type, n, m, n));

    const LtKey key{(int)type, m, n, k, al_w, al_x, al_out};
    LtChoice choice{};
    bool cached = false;
    {
        std::lock_guard<std::mutex> lk(g_lt_mu);
        auto it = g_lt_cache.find(key);
        if (it != g_lt_cache.end()) {
            choice = it->second;
            cached = true;
        }
    }
    if (!cached) {
        TS_CHECK(op, cublasLtMatmulPreferenceCreate(&d.pref));
        const size_t ws_bytes = kLtWorkspaceBytes;
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                          sizeof ws_bytes));
        /* Split-K partial sums only in fp32 (never reduced in the 16-bit output type). */
        const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                          &reduction, sizeof reduction));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w,
                                                          sizeof al_w));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x,
                                                          sizeof al_x));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_out,
                                                          sizeof al_out));
        TS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_out,
                                                          sizeof al_out));
        int count = 0;
        const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ts::cublaslt_handle(), d.op, d.a, d.b, d.c, d.c,
                                                                 d.pref, 1, &choice.result, &count);
        if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) TS_CHECK(op, hs);
        choice.found = hs == CUBLAS_STATUS_SUCCESS && count > 0 && choice.result.state == CUBLAS_STATUS_SUCCESS;
        std::lock_guard<std::mutex> lk(g_lt_mu);
        g_lt_cache[key] = choice;
    }
    if (!choice.found) {
        *unsupported = true;
        return TS_OK;
    }
    const float alpha = 1.0f, beta = 0.0f;
    ts::log_library_call(op, "cublasLtMatmul(epilogue=BIAS)",
                         ts::dims("m=%d n=%d k=%d in=out=%s", m, n, k, ts::Storage<T>::name));
    std::lock_guard<std::mutex> lk(ts::blas_mutex());
    TS_CHECK(op, cublasLtMatmul(ts::cublaslt_handle(), d.op, &alpha, w, d.a, x, d.b, &beta, out, d.c, out, d.c,
                                &choice.result.algo, ws, kLtWorkspaceBytes, stream));
    TS_CHECK(op, ts::after_launch(op, stream));
    return TS_OK;
}

} // namespace

void ts::gemm_release() {
    std::lock_guard<std::mutex> lk(g_lt_mu);
    g_lt_cache.clear();
}

template <typename T>
int ts::gemm_nt(const char *op, void *out, bool out_f32, const T *x, const T *w, const T *bias, int m, int n, int k,
                cudaStream_t stream) {
    if (ts::gemv_invariant_applies(m, k, ts::aligned16(x) && ts::aligned16(w)))
        return gemv_invariant(op, out, out_f32, x, w, bias, m, n, k, stream);
    if (gemv_applies(out_f32, x, w, m, n, k)) {
        const ts::GemvBiasStore<T> store{static_cast<T *>(out), bias, n};
        switch (ts::gemv_tile(m)) {
        case 1: return launch_gemv<1>(op, store, x, w, m, n, k, stream);
        case 2: return launch_gemv<2>(op, store, x, w, m, n, k, stream);
        default: return launch_gemv<4>(op, store, x, w, m, n, k, stream);
        }
    }
    if (bias == nullptr) return gemm_ex(op, out, out_f32, x, w, m, n, k, stream);
    if (out_f32) {
        float *o = static_cast<float *>(out);
        TS_CHECK(op, gemm_ex(op, o, true, x, w, m, n, k, stream));
        return launch_bias_add(op, o, o, bias, m, n, stream);
    }
    /* TOUCHSTONE_GEMM_LT=0 skips cublasLt's fused bias (read per call, so a test can switch
     * it): the fallback below, which runs by itself only where cublasLt has no algorithm. */
    const char *lt = std::getenv("TOUCHSTONE_GEMM_LT");
    bool unsupported = lt != nullptr && std::strcmp(lt, "0") == 0;
    if (!unsupported)
        TS_CHECK(op, lt_gemm_bias(op, static_cast<T *>(out), x, w, bias, m, n, k, stream, &unsupported));
    if (!unsupported) return TS_OK;
    void *acc = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)m * n * sizeof(float), &acc));
    TS_CHECK(op, gemm_ex(op, acc, true, x, w, m, n, k, stream));
    return launch_bias_add(op, static_cast<T *>(out), static_cast<const float *>(acc), bias, m, n, stream);
}
template int ts::gemm_nt<__half>(const char *, void *, bool, const __half *, const __half *, const __half *, int, int,
                                 int, cudaStream_t);
template int ts::gemm_nt<__nv_bfloat16>(const char *, void *, bool, const __nv_bfloat16 *, const __nv_bfloat16 *,
                                        const __nv_bfloat16 *, int, int, int, cudaStream_t);

extern "C" int ts_gemm(void *out, const void *x, const void *w, const void *bias, const ts_gemm_config *cfg,
                       void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gemm");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(w, "w");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->in_dtype, "cfg->in_dtype");
    v.dtype_in(cfg->out_dtype, "cfg->out_dtype", {TS_F16, TS_BF16, TS_F32});
    ts::check_out_dtype(v, cfg);
    v.positive(cfg->m, "cfg->m");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.elements("out", {cfg->m, cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return ts::gemm_nt(v.op(), out, cfg->out_dtype == TS_F32, static_cast<const T *>(x),
                           static_cast<const T *>(w), static_cast<const T *>(bias), cfg->m, cfg->n, cfg->k, st);
    });
}
