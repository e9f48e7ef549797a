/*
 * layernorm_residual: sum = fp16(x + residual), then out = layernorm(sum) of that ROUNDED sum,
 * exactly the unfused residual_add followed by layernorm, in one pass over memory. One block
 * per row. Fast path (hidden % 8 == 0, aligned, hidden <= 16384): x and residual are read once
 * with 16-byte vectors, the rounded sum is stored and kept in registers, the two-pass mean /
 * squared-deviation reductions and the output run from registers. Generic path (odd hidden,
 * misaligned pointers): scalar, three passes, the later ones re-reading the stored sum.
 */
#include "internal.h"

namespace {

template <int VPT>
__global__ void __launch_bounds__(ts::kRowThreads)
    layernorm_residual_vec_kernel(__half *sum_out, __half *out, const __half *x, const __half *residual,
                                  const __half *gamma, const __half *beta, int hidden, float eps) {
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

__global__ void __launch_bounds__(1024)
    layernorm_residual_generic_kernel(__half *sum_out, __half *out, const __half *x, const __half *residual,
                                      const __half *gamma, const __half *beta, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const __half s = __float2half_rn(__half2float(x[ro + i]) + __half2float(residual[ro + i]));
        sum_out[ro + i] = s;
        sum += __half2float(s);
    }
    ts::layernorm_row_generic(sum_out + ro, sum, hidden, eps, gamma, beta, out + ro, scratch);
}

} // namespace

int ts::launch_layernorm_residual(const char *op, __half *sum_out, __half *out, const __half *x,
                                  const __half *residual, const __half *gamma, const __half *beta, int rows,
                                  int hidden, float eps, cudaStream_t stream) {
    const bool aligned = ts::aligned16(sum_out) && ts::aligned16(out) && ts::aligned16(x) &&
                         ts::aligned16(residual) && ts::aligned16(gamma) && ts::aligned16(beta);
    const ts::RowPlan plan = ts::plan_row(hidden, aligned);
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d", rows, hidden, eps, plan.vpt);
    return ts::launch_row(op, plan, rows, stream, d, layernorm_residual_vec_kernel<1>, layernorm_residual_vec_kernel<2>, layernorm_residual_vec_kernel<4>,
                          layernorm_residual_vec_kernel<8>, layernorm_residual_generic_kernel, sum_out, out, x, residual, gamma, beta, hidden, eps);
}

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
    ts::check_norm(v, cfg);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::launch_layernorm_residual(v.op(), static_cast<__half *>(sum), static_cast<__half *>(out),
                                     static_cast<const __half *>(x), static_cast<const __half *>(residual),
                                     static_cast<const __half *>(gamma), static_cast<const __half *>(beta),
                                     cfg->rows, cfg->hidden, cfg->eps, st);
}
