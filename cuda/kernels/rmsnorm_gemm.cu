/*
 * rmsnorm_gemm: out [rows, n] = rmsnorm(s) . w^T (+ bias), s = x, or s = T(x + residual) stored in
 * sum, T the storage type (fp16 or bf16, the kernels' last template argument): the pre-norm and the
 * projection after it (Q/K/V, gate/up) in one op. The normalised row is rounded to T as rmsnorm
 * stores it (T((s * inv) * weight)), the product accumulates in fp32 and rounds once, the bias
 * added before that rounding.
 *
 * Decode (rows <= 4, a weight of at most 32 MiB, hidden % 8 == 0, every pointer 16-byte aligned,
 * the rows fit in shared memory): one kernel. Each block normalises all rows into shared memory (the whole block on
 * every row; the rows are a few KiB, read from L2 by every block) and then streams its share of
 * the weight rows (gemv.cuh): against rmsnorm_residual then gemm, one launch fewer and no round
 * trip of the normalised rows through memory. Block 0 alone stores sum. Otherwise (prefill, odd widths,
 * misaligned pointers): rmsnorm or rmsnorm_residual into a library workspace, then gemm's cuBLAS
 * path, exactly the unfused composition.
 */
#include "gemv.cuh"

namespace {

template <int MR, typename T>
__global__ void __launch_bounds__(ts::kGemvThreads)
    rmsnorm_gemv_kernel(T *out, T *sum_out, const T *x, const T *residual, const T *weight, const T *w, const T *bias,
                        int rows, int hidden, int n, float eps) {
    ts::pdl_wait();
    extern __shared__ uint4 smem_rows[];
    __shared__ float partial[MR][ts::kGemvWarps];
    T *a = reinterpret_cast<T *>(smem_rows);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nvec = hidden >> 3;
    /* The prologue runs before any weight is read, so its latency is the kernel's: the whole
     * block shares every row (all loads of a thread in flight at once), the sums of squares go
     * through one barrier, and the second pass works from shared memory. */
    float ss[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) ss[m] = 0.0f;
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
                for (int t = 0; t < 8; ++t) ss[m] += v[t] * v[t];
                ts::store8(a + o, v);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        const float s = ts::warp_sum(ss[m]);
        if (lane == 0) partial[m][warp] = s;
    }
    __syncthreads();
    float inv[MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        float t = 0.0f;
#pragma unroll
        for (int w8 = 0; w8 < ts::kGemvWarps; ++w8) t += partial[m][w8];
        inv[m] = 1.0f / sqrtf(t / (float)hidden + eps);
    }
    /* Each thread rewrites only the vectors it stored above. */
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float g[8];
        ts::load8(weight + c * 8, g);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            if (m < rows) {
                float v[8];
                ts::unpack8<T>(reinterpret_cast<const uint4 *>(a + (int64_t)m * hidden)[c], v);
#pragma unroll
                for (int t = 0; t < 8; ++t) v[t] = (v[t] * inv[m]) * g[t];
                ts::store8(a + (int64_t)m * hidden + c * 8, v);
            }
        }
    }
    __syncthreads();
    ts::gemv_smem<MR>(a, w, rows, hidden, n, ts::GemvBiasStore<T>{out, bias, n});
}

template <int MR, typename T>
int launch_gemv(const char *op, T *out, T *sum, const T *x, const T *residual, const T *weight, const T *w,
                const T *bias, int rows, int hidden, int n, float eps, cudaStream_t stream) {
    static std::atomic<int> shared_done{-1};
    static std::atomic<uint64_t> occupancy{0};
    return ts::launch_gemv_kernel<T>(op, rmsnorm_gemv_kernel<MR, T>, shared_done, occupancy, rows, hidden, n, stream,
                                     ts::dims("rows=%d hidden=%d n=%d tile=%d in=%s", rows, hidden, n, MR,
                                              ts::Storage<T>::name),
                                     out, sum, x, residual, weight, w, bias, rows, hidden, n, eps);
}

template <typename T>
int launch_rmsnorm_gemm(T *out, T *sum, const T *x, const T *residual, const T *weight, const T *w, const T *bias,
                        int rows, int hidden, int n, float eps, cudaStream_t stream) {
    const char *op = "rmsnorm_gemm";
    const bool aligned = ts::aligned16(x) && ts::aligned16(weight) && ts::aligned16(w) &&
                         (residual == nullptr || (ts::aligned16(residual) && ts::aligned16(sum)));
    /* gemv.cuh's limits (gemv_decode_applies), measured on this op's own shapes. */
    if (ts::gemv_invariant_applies(rows, hidden, aligned))
        return ts::gemv_by_chunks(rows, hidden, [&](auto tile, int r0, int nr) {
            const int64_t off = (int64_t)r0 * hidden;
            return launch_gemv<decltype(tile)::value>(op, out + (int64_t)r0 * n, sum ? sum + off : nullptr, x + off,
                                                      residual ? residual + off : nullptr, weight, w, bias, nr,
                                                      hidden, n, eps, stream);
        });
    if (ts::gemv_decode_applies(rows, hidden, n, aligned)) {
        switch (ts::gemv_tile(rows)) {
        case 1: return launch_gemv<1>(op, out, sum, x, residual, weight, w, bias, rows, hidden, n, eps, stream);
        case 2: return launch_gemv<2>(op, out, sum, x, residual, weight, w, bias, rows, hidden, n, eps, stream);
        default: return launch_gemv<4>(op, out, sum, x, residual, weight, w, bias, rows, hidden, n, eps, stream);
        }
    }
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, (size_t)rows * hidden * sizeof(T), &ws));
    T *h = static_cast<T *>(ws);
    if (residual != nullptr)
        TS_CHECK(op, ts::launch_rmsnorm_residual(op, sum, h, x, residual, weight, rows, hidden, eps, stream));
    else
        TS_CHECK(op, ts::launch_rmsnorm(op, h, x, weight, rows, hidden, eps, stream));
    return ts::gemm_nt(op, out, false, h, w, bias, rows, n, hidden, stream);
}

} // namespace

extern "C" int ts_rmsnorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *norm_weight,
                               const void *w, const void *bias, const ts_norm_gemm_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("rmsnorm_gemm");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(norm_weight, "norm_weight");
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
        return launch_rmsnorm_gemm(static_cast<T *>(out), static_cast<T *>(sum), static_cast<const T *>(x),
                                   static_cast<const T *>(residual), static_cast<const T *>(norm_weight),
                                   static_cast<const T *>(w), static_cast<const T *>(bias), cfg->rows, cfg->hidden,
                                   cfg->n, cfg->eps, st);
    });
}
