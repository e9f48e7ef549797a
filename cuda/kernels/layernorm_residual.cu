/*
 * layernorm_residual: sum = T(x + residual), T the storage type (fp16 or bf16, the kernels' last
 * template argument), then out = layernorm(sum) of that ROUNDED sum, exactly the unfused
 * residual_add followed by layernorm, in one pass over memory. One block per row. Fast path (hidden % 8 == 0, aligned, hidden <= 16384): x and residual are read once
 * with 16-byte vectors, the rounded sum is stored and kept in registers, the two-pass mean /
 * squared-deviation reductions and the output run from registers. Generic path (odd hidden,
 * misaligned pointers): scalar, three passes, the later ones re-reading the stored sum.
 */
#include "internal.h"

namespace {

template <int VPT, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    layernorm_residual_vec_kernel(T *sum_out, T *out, const T *x, const T *residual, const T *gamma, const T *beta,
                                  int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float v[VPT][8];
    ts::residual_row_regs<VPT>(v, x + ro, residual + ro, sum_out + ro, nvec);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += v[k][j];
        }
    }
    ts::layernorm_row_regs<VPT>(v, sum, nvec, hidden, eps, gamma, beta, out + ro, scratch);
}

template <typename T>
__global__ void __launch_bounds__(1024)
    layernorm_residual_generic_kernel(T *sum_out, T *out, const T *x, const T *residual, const T *gamma,
                                      const T *beta, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const T s = ts::from_float<T>(ts::to_float(x[ro + i]) + ts::to_float(residual[ro + i]));
        sum_out[ro + i] = s;
        sum += ts::to_float(s);
    }
    ts::layernorm_row_generic(sum_out + ro, sum, hidden, eps, gamma, beta, out + ro, scratch);
}

} // namespace

template <typename T>
int ts::launch_layernorm_residual(const char *op, T *sum_out, T *out, const T *x, const T *residual, const T *gamma,
                                  const T *beta, int rows, int hidden, float eps, cudaStream_t stream) {
    const bool aligned = ts::aligned16(sum_out) && ts::aligned16(out) && ts::aligned16(x) &&
                         ts::aligned16(residual) && ts::aligned16(gamma) && ts::aligned16(beta);
    const ts::RowPlan plan = ts::plan_row(hidden, aligned);
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d", rows, hidden, eps, plan.vpt);
    return ts::launch_row(op, plan, rows, stream, d, layernorm_residual_vec_kernel<1, T>,
                          layernorm_residual_vec_kernel<2, T>, layernorm_residual_vec_kernel<4, T>,
                          layernorm_residual_vec_kernel<8, T>, layernorm_residual_generic_kernel<T>, sum_out, out, x,
                          residual, gamma, beta, hidden, eps);
}
template int ts::launch_layernorm_residual<__half>(const char *, __half *, __half *, const __half *, const __half *,
                                                   const __half *, const __half *, int, int, float, cudaStream_t);
template int ts::launch_layernorm_residual<__nv_bfloat16>(const char *, __nv_bfloat16 *, __nv_bfloat16 *,
                                                          const __nv_bfloat16 *, const __nv_bfloat16 *,
                                                          const __nv_bfloat16 *, const __nv_bfloat16 *, int, int,
                                                          float, cudaStream_t);

extern "C" int ts_layernorm_residual(void *sum, void *out, const void *x, const void *residual, const void *gamma,
                                     const void *beta, const ts_norm_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("layernorm_residual");
    v.ptr(sum, "sum");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(residual, "residual");
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
        return ts::launch_layernorm_residual(v.op(), static_cast<T *>(sum), static_cast<T *>(out),
                                             static_cast<const T *>(x), static_cast<const T *>(residual),
                                             static_cast<const T *>(gamma), static_cast<const T *>(beta), cfg->rows,
                                             cfg->hidden, cfg->eps, st);
    });
}
