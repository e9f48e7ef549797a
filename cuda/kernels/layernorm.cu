/*
 * layernorm: out = (x - mean) / sqrt(var + eps) * gamma + beta per row of x [rows, hidden],
 * two-pass in fp32 (the mean, then the sum of squared deviations from it: never
 * E[x^2] - E[x]^2, which cancels when |mean| >> std). One block per row. Fast path (hidden % 8
 * == 0, aligned, hidden <= 16384): the row is loaded once into registers with 16-byte vectors
 * and both passes and the output run from registers; reductions by warp shuffles and shared
 * memory. Generic path (odd hidden such as 1001, misaligned pointers): scalar loads, three
 * passes over the row. Rounding as the reference: y = T(((x - mean) * inv) * gamma + beta), T the
 * storage type (fp16 or bf16, the kernels' last template argument). out may equal x.
 */
#include "internal.h"

namespace {

template <int VPT, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    layernorm_vec_kernel(T *out, const T *x, const T *gamma, const T *beta, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float v[VPT][8];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            ts::load8(x + ro + c * 8, v[k]);
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += v[k][j];
        }
    }
    ts::layernorm_row_regs<VPT>(v, sum, nvec, hidden, eps, gamma, beta, out + ro, scratch);
}

template <typename T>
__global__ void __launch_bounds__(1024)
    layernorm_generic_kernel(T *out, const T *x, const T *gamma, const T *beta, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) sum += ts::to_float(x[ro + i]);
    ts::layernorm_row_generic(x + ro, sum, hidden, eps, gamma, beta, out + ro, scratch);
}

} // namespace

template <typename T>
int ts::launch_layernorm(const char *op, T *out, const T *x, const T *gamma, const T *beta, int rows, int hidden,
                         float eps, cudaStream_t stream) {
    const bool aligned = ts::aligned16(out) && ts::aligned16(x) && ts::aligned16(gamma) && ts::aligned16(beta);
    const ts::RowPlan plan = ts::plan_row(hidden, aligned);
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d", rows, hidden, eps, plan.vpt);
    return ts::launch_row(op, plan, rows, stream, d, layernorm_vec_kernel<1, T>, layernorm_vec_kernel<2, T>,
                          layernorm_vec_kernel<4, T>, layernorm_vec_kernel<8, T>, layernorm_generic_kernel<T>, out, x,
                          gamma, beta, hidden, eps);
}
template int ts::launch_layernorm<__half>(const char *, __half *, const __half *, const __half *, const __half *, int,
                                          int, float, cudaStream_t);
template int ts::launch_layernorm<__nv_bfloat16>(const char *, __nv_bfloat16 *, const __nv_bfloat16 *,
                                                 const __nv_bfloat16 *, const __nv_bfloat16 *, int, int, float,
                                                 cudaStream_t);

extern "C" int ts_layernorm(void *out, const void *x, const void *gamma, const void *beta, const ts_norm_config *cfg,
                            void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("layernorm");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(gamma, "gamma");
    v.ptr(beta, "beta");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    ts::check_norm(v, cfg, false);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return ts::launch_layernorm(v.op(), static_cast<T *>(out), static_cast<const T *>(x),
                                    static_cast<const T *>(gamma), static_cast<const T *>(beta), cfg->rows,
                                    cfg->hidden, cfg->eps, st);
    });
}
