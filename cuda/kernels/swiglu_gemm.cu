/*
 * swiglu_gemm: out [rows, n] = (silu(gate) * up) . w^T (+ bias), gate and up [rows, k], w [n, k]:
 * a SwiGLU FFN's activation and its down projection in one op, everything in the storage type T
 * (fp16 or bf16, the kernels' last template argument; out_dtype is in_dtype). The activation is
 * rounded to T as swiglu stores it (ts::silu_mul, the same function), the product accumulates in
 * fp32 and rounds once, the bias added before that rounding.
 *
 * Decode (rows <= 4, k % 8 == 0, every pointer 16-byte aligned, a weight of at most 32 MiB, the
 * rows fit in shared memory): one kernel. Each block computes the activation rows into shared
 * memory and streams its share of the weight rows (gemv.cuh): against swiglu then gemm, one launch
 * fewer and no round trip of the activation. Otherwise: swiglu into a library workspace, then
 * gemm's path, exactly the unfused composition.
 */
#include "gemv.cuh"

namespace {

template <int MR, typename T>
__global__ void __launch_bounds__(ts::kGemvThreads)
    swiglu_gemv_kernel(T *out, const T *gate, const T *up, const T *w, const T *bias, int rows, int k, int n) {
    ts::pdl_wait();
    extern __shared__ uint4 smem_rows[];
    T *a = reinterpret_cast<T *>(smem_rows);
    for (int c = threadIdx.x; c < rows * (k >> 3); c += blockDim.x) {
        float g[8], u[8];
        ts::load8(gate + (int64_t)c * 8, g);
        ts::load8(up + (int64_t)c * 8, u);
#pragma unroll
        for (int t = 0; t < 8; ++t) g[t] = ts::silu_mul(g[t], u[t]);
        ts::store8(a + (int64_t)c * 8, g);
    }
    __syncthreads();
    ts::gemv_smem<MR>(a, w, rows, k, n, ts::GemvBiasStore<T>{out, bias, n});
}

template <int MR, typename T>
int launch_gemv(const char *op, T *out, const T *gate, const T *up, const T *w, const T *bias, int rows, int k, int n,
                cudaStream_t stream) {
    static std::atomic<int> shared_done{-1};
    static std::atomic<uint64_t> occupancy{0};
    return ts::launch_gemv_kernel<T>(op, swiglu_gemv_kernel<MR, T>, shared_done, occupancy, rows, k, n, stream,
                                     ts::dims("rows=%d k=%d n=%d tile=%d in=%s", rows, k, n, MR,
                                              ts::Storage<T>::name),
                                     out, gate, up, w, bias, rows, k, n);
}

template <typename T>
int launch_swiglu_gemm(T *out, const T *gate, const T *up, const T *w, const T *bias, int rows, int k, int n,
                       cudaStream_t stream) {
    const char *op = "swiglu_gemm";
    const bool aligned = ts::aligned16(gate) && ts::aligned16(up) && ts::aligned16(w);
    if (ts::gemv_invariant_applies(rows, k, aligned))
        return ts::gemv_by_chunks(rows, k, [&](auto tile, int r0, int nr) {
            const int64_t off = (int64_t)r0 * k;
            return launch_gemv<decltype(tile)::value>(op, out + (int64_t)r0 * n, gate + off, up + off, w, bias, nr, k,
                                                      n, stream);
        });
    if (ts::gemv_decode_applies(rows, k, n, aligned)) {
        switch (ts::gemv_tile(rows)) {
        case 1: return launch_gemv<1>(op, out, gate, up, w, bias, rows, k, n, stream);
        case 2: return launch_gemv<2>(op, out, gate, up, w, bias, rows, k, n, stream);
        default: return launch_gemv<4>(op, out, gate, up, w, bias, rows, k, n, stream);
        }
    }
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_FFN, (size_t)rows * k * sizeof(T), &ws));
    T *act = static_cast<T *>(ws);
    TS_CHECK(op, ts::launch_swiglu(op, act, gate, up, (int64_t)rows * k, stream));
    return ts::gemm_nt(op, out, false, act, w, bias, rows, n, k, stream);
}

} // namespace

extern "C" int ts_swiglu_gemm(void *out, const void *gate, const void *up, const void *w, const void *bias,
                              const ts_gemm_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("swiglu_gemm");
    v.ptr(out, "out");
    v.ptr(gate, "gate");
    v.ptr(up, "up");
    v.ptr(w, "w");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->in_dtype, "cfg->in_dtype");
    v.dtype_storage(cfg->out_dtype, "cfg->out_dtype"); /* no fp32 out: the op feeds the residual stream */
    ts::check_out_dtype(v, cfg);
    v.positive(cfg->m, "cfg->m");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.elements("gate", {cfg->m, cfg->k});
    v.elements("w", {cfg->n, cfg->k});
    v.elements("out", {cfg->m, cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_swiglu_gemm(static_cast<T *>(out), static_cast<const T *>(gate), static_cast<const T *>(up),
                                  static_cast<const T *>(w), static_cast<const T *>(bias), cfg->m, cfg->k, cfg->n,
                                  st);
    });
}
