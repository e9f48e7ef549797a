/*
 * rmsnorm_residual: sum = fp16(x + residual), then out = rmsnorm(sum) * weight of that ROUNDED
 * sum, exactly the unfused residual_add followed by rmsnorm, in one pass over memory: the
 * pre-norm step of Qwen2, Phi-3 and Llama. One block per row. Fast path (hidden % 8 == 0,
 * aligned, hidden <= 16384): x and residual are read once with 16-byte vectors, the rounded sum
 * is stored and kept in registers, and the sum of squares and the output run from registers.
 * Generic path (odd hidden, misaligned pointers): scalar, two passes, the second re-reading the
 * stored sum. Each element of x and residual is read by the thread that later writes sum there,
 * before it does, so sum may equal x or residual (in place).
 */
#include "internal.h"

namespace {

template <int VPT>
__global__ void __launch_bounds__(ts::kRowThreads)
    rmsnorm_residual_vec_kernel(__half *sum_out, __half *out, const __half *x, const __half *residual,
                                const __half *weight, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float v[VPT][8];
    ts::residual_row_regs<VPT>(v, x + ro, residual + ro, sum_out + ro, nvec);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < 8; ++j) ss += v[k][j] * v[k][j];
        }
    }
    ts::rmsnorm_row_regs<VPT>(v, ss, nvec, hidden, eps, weight, out + ro, scratch);
}

__global__ void __launch_bounds__(1024)
    rmsnorm_residual_generic_kernel(__half *sum_out, __half *out, const __half *x, const __half *residual,
                                    const __half *weight, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const __half s = __float2half_rn(__half2float(x[ro + i]) + __half2float(residual[ro + i]));
        sum_out[ro + i] = s;
        const float a = __half2float(s);
        ss += a * a;
    }
    ts::rmsnorm_row_generic(sum_out + ro, ss, hidden, eps, weight, out + ro, scratch);
}

} // namespace

int ts::launch_rmsnorm_residual(const char *op, __half *sum_out, __half *out, const __half *x, const __half *residual,
                                const __half *weight, int rows, int hidden, float eps, cudaStream_t stream) {
    const bool aligned = ts::aligned16(sum_out) && ts::aligned16(out) && ts::aligned16(x) &&
                         ts::aligned16(residual) && ts::aligned16(weight);
    const ts::RowPlan plan = ts::plan_row(hidden, aligned);
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d", rows, hidden, eps, plan.vpt);
    return ts::launch_row(op, plan, rows, stream, d, rmsnorm_residual_vec_kernel<1>, rmsnorm_residual_vec_kernel<2>,
                          rmsnorm_residual_vec_kernel<4>, rmsnorm_residual_vec_kernel<8>,
                          rmsnorm_residual_generic_kernel, sum_out, out, x, residual, weight, hidden, eps);
}

extern "C" int ts_rmsnorm_residual(void *sum, void *out, const void *x, const void *residual, const void *weight,
                                   const ts_norm_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("rmsnorm_residual");
    v.ptr(sum, "sum");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(residual, "residual");
    v.ptr(weight, "weight");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    ts::check_norm(v, cfg);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::launch_rmsnorm_residual(v.op(), static_cast<__half *>(sum), static_cast<__half *>(out),
                                   static_cast<const __half *>(x), static_cast<const __half *>(residual),
                                   static_cast<const __half *>(weight), cfg->rows, cfg->hidden, cfg->eps, st);
}
