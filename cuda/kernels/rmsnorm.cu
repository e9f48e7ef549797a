/*
 * rmsnorm: out = x / sqrt(mean(x^2) + eps) * weight per row of x [rows, hidden]. One block per
 * row. Fast path (hidden % 8 == 0, aligned, hidden <= 16384): the row is loaded once into
 * registers with 16-byte vectors; fp32 sum of squares reduced by warp shuffles and shared
 * memory; then normalised from registers. Generic path (odd hidden such as 1001, misaligned
 * pointers): scalar loads, two passes over the row. The rounding order matches the reference:
 * y = T((x * inv) * w), T the storage type (fp16 or bf16, the kernels' last template argument).
 * The weight W (the template argument before it) is T, or float for an fp32 weight
 * (weight_dtype TS_F32: Gemma's 1 + w, folded once at load, which no 16-bit type holds exactly):
 * the math is fp32 either way, with the one rounding of out. out may equal x.
 */
#include "internal.h"

namespace {

template <int VPT, typename W, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    rmsnorm_vec_kernel(T *out, const T *x, const W *weight, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float v[VPT][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            ts::load8(x + ro + c * 8, v[k]);
#pragma unroll
            for (int j = 0; j < 8; ++j) ss += v[k][j] * v[k][j];
        }
    }
    ts::rmsnorm_row_regs<VPT>(v, ss, nvec, hidden, eps, weight, out + ro, scratch);
}

template <typename W, typename T>
__global__ void __launch_bounds__(1024)
    rmsnorm_generic_kernel(T *out, const T *x, const W *weight, int hidden, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float a = ts::to_float(x[ro + i]);
        ss += a * a;
    }
    ts::rmsnorm_row_generic(x + ro, ss, hidden, eps, weight, out + ro, scratch);
}

} // namespace

template <typename W, typename T>
int ts::launch_rmsnorm(const char *op, T *out, const T *x, const W *weight, int rows, int hidden, float eps,
                       cudaStream_t stream) {
    const ts::RowPlan plan = ts::plan_row(hidden, ts::aligned16(out) && ts::aligned16(x) && ts::aligned16(weight));
    const char *d = ts::dims("rows=%d hidden=%d eps=%g vpt=%d w32=%d", rows, hidden, eps, plan.vpt,
                             (int)(sizeof(W) == 4));
    return ts::launch_row(op, plan, rows, stream, d, rmsnorm_vec_kernel<1, W, T>, rmsnorm_vec_kernel<2, W, T>,
                          rmsnorm_vec_kernel<4, W, T>, rmsnorm_vec_kernel<8, W, T>, rmsnorm_generic_kernel<W, T>, out,
                          x, weight, hidden, eps);
}
template int ts::launch_rmsnorm<__half, __half>(const char *, __half *, const __half *, const __half *, int, int,
                                                float, cudaStream_t);
template int ts::launch_rmsnorm<__nv_bfloat16, __nv_bfloat16>(const char *, __nv_bfloat16 *, const __nv_bfloat16 *,
                                                              const __nv_bfloat16 *, int, int, float, cudaStream_t);
template int ts::launch_rmsnorm<float, __half>(const char *, __half *, const __half *, const float *, int, int, float,
                                               cudaStream_t);
template int ts::launch_rmsnorm<float, __nv_bfloat16>(const char *, __nv_bfloat16 *, const __nv_bfloat16 *,
                                                      const float *, int, int, float, cudaStream_t);

extern "C" int ts_rmsnorm(void *out, const void *x, const void *weight, const ts_norm_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("rmsnorm");
    v.ptr(out, "out");
    v.ptr(x, "x");
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
            return ts::launch_rmsnorm(v.op(), static_cast<T *>(out), static_cast<const T *>(x),
                                      static_cast<const float *>(weight), cfg->rows, cfg->hidden, cfg->eps, st);
        return ts::launch_rmsnorm(v.op(), static_cast<T *>(out), static_cast<const T *>(x),
                                  static_cast<const T *>(weight), cfg->rows, cfg->hidden, cfg->eps, st);
    });
}
