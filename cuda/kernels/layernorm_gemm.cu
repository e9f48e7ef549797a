/*
 * layernorm_gemm: out [rows, n] = layernorm(s) . w^T (+ bias), s = x, or s = T(x + residual)
 * stored in sum, T the storage type (fp16 or bf16, the kernels' last template argument): a
 * LayerNorm family's pre-norm and the projection after it (GPT-2's ln_1 and c_attn) in one op, as
 * rmsnorm_gemm is for the RMSNorm families. The normalised row is rounded to T as layernorm stores
 * it (T(((s - mean) * inv) * gamma + beta), the variance from the squared deviations), the product
 * accumulates in fp32 and rounds once, the bias added before.
 *
 * Decode (rows <= 4, a weight of at most 32 MiB, hidden % 8 == 0, every pointer 16-byte aligned,
 * the rows fit in shared memory): one kernel. Each block normalises all rows into shared memory
 * (the whole block on every row, read from L2 by every block; two barriers, the mean's and the
 * variance's) and then streams its share of the weight rows (gemv.cuh): against
 * layernorm_residual then gemm, one launch fewer and no round trip of the normalised rows through
 * memory. Block 0 alone stores sum. Otherwise (prefill, odd widths, misaligned pointers):
 * layernorm or layernorm_residual into a library workspace, then gemm's cuBLAS path, exactly the
 * unfused composition.
 */
#include "gemv.cuh"

namespace {

template <int MR, typename T>
__global__ void __launch_bounds__(ts::kGemvThreads)
    layernorm_gemv_kernel(T *out, T *sum_out, const T *x, const T *residual, const T *gamma, const T *beta,
                          const T *w, const T *bias, int rows, int hidden, int n, float eps) {
    ts::pdl_wait();
    extern __shared__ uint4 smem_rows[];
    __shared__ float partial[2][MR][ts::kGemvWarps];
    T *a = reinterpret_cast<T *>(smem_rows);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nvec = hidden >> 3;
    /* As rmsnorm_gemm's prologue (every load of a thread in flight at once, the second and third
     * passes from shared memory), with the mean's sums and then the squared deviations' through
     * a barrier each. */
    float sm[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) sm[m] = 0.0f;
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            if (m < rows) {
                const int64_t o = (int64_t)m * hidden + c * 8;
                float v[8];
                ts::load8(x + o, v);
                if (residual != nullptr) {
                    float rr[8];
                    ts::load8(residual + o, rr);
#pragma unroll
                    for (int t = 0; t < 8; ++t) v[t] = ts::round_to<T>(v[t] + rr[t]);
                    if (blockIdx.x == 0) ts::store8(sum_out + o, v); /* exact: already in T */
                }
#pragma unroll
                for (int t = 0; t < 8; ++t) sm[m] += v[t];
                ts::store8(a + o, v);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        const float t = ts::warp_sum(sm[m]);
        if (lane == 0) partial[0][m][warp] = t;
    }
    __syncthreads();
    float mean[MR], ss[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        float t = 0.0f;
#pragma unroll
        for (int w8 = 0; w8 < ts::kGemvWarps; ++w8) t += partial[0][m][w8];
        mean[m] = t / (float)hidden;
        ss[m] = 0.0f;
    }
    /* Each thread reads back only the vectors it stored above. */
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            if (m < rows) {
                float v[8];
                ts::unpack8<T>(reinterpret_cast<const uint4 *>(a + (int64_t)m * hidden)[c], v);
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    const float dv = v[t] - mean[m];
                    ss[m] += dv * dv;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        const float t = ts::warp_sum(ss[m]);
        if (lane == 0) partial[1][m][warp] = t;
    }
    __syncthreads();
    float inv[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        float t = 0.0f;
#pragma unroll
        for (int w8 = 0; w8 < ts::kGemvWarps; ++w8) t += partial[1][m][w8];
        inv[m] = 1.0f / sqrtf(t / (float)hidden + eps);
    }
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float g[8], bt[8];
        ts::load8(gamma + c * 8, g);
        ts::load8(beta + c * 8, bt);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            if (m < rows) {
                float v[8];
                ts::unpack8<T>(reinterpret_cast<const uint4 *>(a + (int64_t)m * hidden)[c], v);
#pragma unroll
                for (int t = 0; t < 8; ++t) v[t] = ((v[t] - mean[m]) * inv[m]) * g[t] + bt[t];
                ts::store8(a + (int64_t)m * hidden + c * 8, v);
            }
        }
    }
    __syncthreads();
    ts::gemv_smem<MR>(a, w, rows, hidden, n, ts::GemvBiasStore<T>{out, bias, n});
}

template <int MR, typename T>
int launch_gemv(const char *op, T *out, T *sum, const T *x, const T *residual, const T *gamma, const T *beta,
                const T *w, const T *bias, int rows, int hidden, int n, float eps, cudaStream_t stream) {
    static std::atomic<int> shared_done{-1};
    static std::atomic<uint64_t> occupancy{0};
    return ts::launch_gemv_kernel<T>(op, layernorm_gemv_kernel<MR, T>, shared_done, occupancy, rows, hidden, n,
                                     stream,
                                     ts::dims("rows=%d hidden=%d n=%d tile=%d in=%s", rows, hidden, n, MR,
                                              ts::Storage<T>::name),
                                     out, sum, x, residual, gamma, beta, w, bias, rows, hidden, n, eps);
}

template <typename T>
int launch_layernorm_gemm(T *out, T *sum, const T *x, const T *residual, const T *gamma, const T *beta, const T *w,
                          const T *bias, int rows, int hidden, int n, float eps, cudaStream_t stream) {
    const char *op = "layernorm_gemm";
    const bool aligned = ts::aligned16(x) && ts::aligned16(gamma) && ts::aligned16(beta) && ts::aligned16(w) &&
                         (residual == nullptr || (ts::aligned16(residual) && ts::aligned16(sum)));
    /* gemv.cuh's limits (gemv_decode_applies), as rmsnorm_gemm's. */
    if (ts::gemv_decode_applies(rows, hidden, n, aligned)) {
        switch (ts::gemv_tile(rows)) {
        case 1: return launch_gemv<1>(op, out, sum, x, residual, gamma, beta, w, bias, rows, hidden, n, eps, stream);
        case 2: return launch_gemv<2>(op, out, sum, x, residual, gamma, beta, w, bias, rows, hidden, n, eps, stream);
        default:
            return launch_gemv<4>(op, out, sum, x, residual, gamma, beta, w, bias, rows, hidden, n, eps, stream);
        }
    }
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, (size_t)rows * hidden * sizeof(T), &ws));
    T *h = static_cast<T *>(ws);
    if (residual != nullptr)
        TS_CHECK(op, ts::launch_layernorm_residual(op, sum, h, x, residual, gamma, beta, rows, hidden, eps, stream));
    else
        TS_CHECK(op, ts::launch_layernorm(op, h, x, gamma, beta, rows, hidden, eps, stream));
    return ts::gemm_nt(op, out, false, h, w, bias, rows, n, hidden, stream);
}

} // namespace

extern "C" int ts_layernorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *gamma,
                                 const void *beta, const void *w, const void *bias, const ts_norm_gemm_config *cfg,
                                 void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("layernorm_gemm");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(gamma, "gamma");
    v.ptr(beta, "beta");
    v.ptr(w, "w");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    if ((sum == nullptr) != (residual == nullptr))
        v.fail(TS_ERR_INVALID_ARGUMENT, "sum = %p, residual = %p: give both (a residual add) or neither", sum,
               residual);
    else if (sum != nullptr && (sum == x || sum == residual))
        v.fail(TS_ERR_INVALID_ARGUMENT, "sum = %p: must not overlap x or residual (every block reads them)", sum);
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->n, "cfg->n");
    v.eps(cfg->eps, "cfg->eps");
    v.elements("x", {cfg->rows, cfg->hidden});
    v.elements("w", {cfg->n, cfg->hidden});
    v.elements("out", {cfg->rows, cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_layernorm_gemm(static_cast<T *>(out), static_cast<T *>(sum), static_cast<const T *>(x),
                                     static_cast<const T *>(residual), static_cast<const T *>(gamma),
                                     static_cast<const T *>(beta), static_cast<const T *>(w),
                                     static_cast<const T *>(bias), cfg->rows, cfg->hidden, cfg->n, cfg->eps, st);
    });
}
