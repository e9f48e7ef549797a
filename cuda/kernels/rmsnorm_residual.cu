/*
 * rmsnorm_residual: sum = T(x + residual), T the storage type (fp16 or bf16, the kernels' last
 * template argument), then out = rmsnorm(sum) * weight of that ROUNDED sum, exactly the unfused
 * residual_add followed by rmsnorm, in one pass over memory: the pre-norm step of Qwen2, Phi-3 and
 * Llama. One block per row. Fast path (hidden % 8 == 0,
 * aligned, hidden <= 16384): x and residual are read once with 16-byte vectors, the rounded sum
 * is stored and kept in registers, and the sum of squares and the output run from registers.
 * Generic path (odd hidden, misaligned pointers): scalar, two passes, the second re-reading the
 * stored sum. Each element of x and residual is read by the thread that later writes sum there,
 * before it does, so sum may equal x or residual (in place). The weight W is T or float (an fp32
 * weight, weight_dtype TS_F32), as rmsnorm's.
 */
#include "internal.h"

namespace {

template <int VPT, typename W, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    rmsnorm_residual_vec_kernel(T *sum_out, T *out, const T *x, const T *residual, const W *weight, int hidden,
                                float eps) {
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

template <typename W, typename T>
__global__ void __launch_bounds__(1024)
    rmsnorm_residual_generic_kernel(T *sum_out, T *out, const T *x, const T *residual, const W *weight, int hidden,
                                    float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const T s = ts::from_float<T>(ts::to_float(x[ro + i]) + ts::to_float(residual[ro + i]));
        sum_out[ro + i] = s;
        const float a = ts::to_float(s);
        ss += a * a;
    }
    ts::rmsnorm_row_generic(sum_out + ro, ss, hidden, eps, weight, out + ro, scratch);
}

} // namespace

template <typename W, typename T>
int ts::launch_rmsnorm_residual(const char *op, T *sum_out, T *out, const T *x, const T *residual, const W *weight,
                                int rows, int hidden, float eps, cudaStream_t stream) {
    const bool aligned = ts::aligned16(sum_out) && ts::aligned16(out) && ts::aligned16(x) &&
                         ts::aligned16(residual) && ts::aligned16(weight);
    const ts::RowPlan plan = ts::plan_row(hidden, aligned);
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d w32=%d", rows, hidden, eps, plan.vpt,
                             (int)(sizeof(W) == 4));
    return ts::launch_row(op, plan, rows, stream, d, rmsnorm_residual_vec_kernel<1, W, T>,
                          rmsnorm_residual_vec_kernel<2, W, T>, rmsnorm_residual_vec_kernel<4, W, T>,
                          rmsnorm_residual_vec_kernel<8, W, T>, rmsnorm_residual_generic_kernel<W, T>, sum_out, out,
                          x, residual, weight, hidden, eps);
}
template int ts::launch_rmsnorm_residual<__half, __half>(const char *, __half *, __half *, const __half *,
                                                         const __half *, const __half *, int, int, float,
                                                         cudaStream_t);
template int ts::launch_rmsnorm_residual<__nv_bfloat16, __nv_bfloat16>(const char *, __nv_bfloat16 *,
                                                                       __nv_bfloat16 *, const __nv_bfloat16 *,
                                                                       const __nv_bfloat16 *, const __nv_bfloat16 *,
                                                                       int, int, float, cudaStream_t);
template int ts::launch_rmsnorm_residual<float, __half>(const char *, __half *, __half *, const __half *,
                                                        const __half *, const float *, int, int, float, cudaStream_t);
template int ts::launch_rmsnorm_residual<float, __nv_bfloat16>(const char *, __nv_bfloat16 *, __nv_bfloat16 *,
                                                               const __nv_bfloat16 *, const __nv_bfloat16 *,
                                                               const float *, int, int, float, cudaStream_t);

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
    ts::check_norm(v, cfg, true);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (cfg->weight_dtype == TS_F32)
            return ts::launch_rmsnorm_residual(v.op(), static_cast<T *>(sum), static_cast<T *>(out),
                                               static_cast<const T *>(x), static_cast<const T *>(residual),
                                               static_cast<const float *>(weight), cfg->rows, cfg->hidden, cfg->eps,
                                               st);
        return ts::launch_rmsnorm_residual(v.op(), static_cast<T *>(sum), static_cast<T *>(out),
                                           static_cast<const T *>(x), static_cast<const T *>(residual),
                                           static_cast<const T *>(weight), cfg->rows, cfg->hidden, cfg->eps, st);
    });
}
