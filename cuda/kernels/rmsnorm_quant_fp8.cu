/*
 * rmsnorm_quant_fp8: y = T((s * inv) * weight), s = x or T(x + residual) stored in sum, T the
 * storage type (fp16 or bf16, the kernels' last template argument), then out, scales =
 * quant_fp8(y) (touchstone.h states the contract): the pre-norm of an FP8 model and the
 * quantisation of its output for the FP8 projection after it, in one pass over memory. One block
 * per row with rmsnorm's row plans and arithmetic (ts::plan_row, the sum of squares in the same
 * order, rmsnorm_row_regs's y), so y is bit for bit what rmsnorm or rmsnorm_residual would store,
 * and the quantisation is quant_fp8's (fp8.cuh: quant_scale, quant_code), so the bytes and scales
 * are what quant_fp8 would write from that y.
 *
 * Fast path (hidden % 8 == 0, hidden <= 16384, every pointer 16-byte aligned; static, per-token
 * groups, or groups of G = 8 x 2^k <= 256 values): the row in registers, VPT vectors of 8 values
 * a thread, y never leaves them. Vector c is thread c % blockDim's (blockDim a multiple of 32),
 * so a group's G / 8 vectors are G / 8 consecutive lanes' and its amax takes log2(G / 8)
 * shuffles; a per-token group takes the block's maximum. Each thread stores its 8 codes as one
 * 8-byte word. Generic path (odd hidden, a pointer off a boundary, another group size): scalar,
 * the sum of squares, then the group maxima (shared memory; a per-token group the block's
 * maximum), then the codes, y recomputed in each pass from the stored sum (or x) by the same
 * arithmetic. Each element of x and residual is read by the thread that writes sum there,
 * before it does, so sum may equal x or residual (in place).
 */
#include "fp8.cuh"
#include "internal.h"

namespace {

/* Groups a row may have: the generic path keeps their maxima in shared memory (32 KiB). */
constexpr int kMaxGroups = 8192;

/* The maximum of v over the block; every thread gets it. blockDim.x a multiple of 32; scratch
 * is 32 unsigned of shared memory. */
__device__ __forceinline__ unsigned block_umax(unsigned v, unsigned *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = __reduce_max_sync(0xffffffffu, v);
    __syncthreads(); /* a previous call may still be reading scratch */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0u;
    return __reduce_max_sync(0xffffffffu, v);
}

/* The 8 codes of one vector as one 8-byte store (p 8-byte aligned). */
__device__ __forceinline__ void store_codes(unsigned char *p, const float (&v)[8], float s) {
    uint2 u = make_uint2(0u, 0u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        u.x |= (uint32_t)ts::quant_code(v[j], s) << (8 * j);
        u.y |= (uint32_t)ts::quant_code(v[4 + j], s) << (8 * j);
    }
    *reinterpret_cast<uint2 *>(p) = u;
}

template <int VPT, typename T>
__global__ void __launch_bounds__(ts::kRowThreads)
    rmsnorm_quant_vec_kernel(unsigned char *out, float *scales, T *sum_out, const T *x, const T *residual,
                             const T *weight, const float *scale, int hidden, int group_size, float eps) {
    ts::pdl_wait();
    __shared__ float scratch[32];
    __shared__ unsigned uscratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int nvec = hidden >> 3;
    float v[VPT][8];
    if (residual != nullptr) {
        ts::residual_row_regs<VPT>(v, x + ro, residual + ro, sum_out + ro, nvec);
    } else {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c < nvec) ts::load8(x + ro + c * 8, v[k]);
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < 8; ++j) ss += v[k][j] * v[k][j];
        }
    }
    /* rmsnorm_row_regs's y, rounded to T where rmsnorm stores it, kept in registers */
    const float inv = 1.0f / sqrtf(ts::block_sum(ss, scratch) / (float)hidden + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            float w[8];
            ts::load8(weight + c * 8, w);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[k][j] = ts::round_to<T>((v[k][j] * inv) * w[j]);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[k][j] = 0.0f;
        }
    }
    unsigned char *out_row = out + ro;
    if (scale != nullptr) {
        const float s = *scale;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c < nvec) store_codes(out_row + c * 8, v[k], s);
        }
        return;
    }
    if (group_size == hidden) {
        unsigned a = 0u;
#pragma unroll
        for (int k = 0; k < VPT; ++k)
#pragma unroll
            for (int j = 0; j < 8; ++j) a = max(a, ts::abs_bits(v[k][j]));
        const float s = ts::quant_scale(block_umax(a, uscratch));
        if (threadIdx.x == 0) scales[blockIdx.x] = s;
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c < nvec) store_codes(out_row + c * 8, v[k], s);
        }
        return;
    }
    /* G / 8 lanes (a power of two up to 32) hold a group's vectors: nvec is a multiple of G / 8,
     * so a lane group lies wholly inside the row or wholly past it */
    const int lanes = group_size >> 3;
    const int64_t groups = hidden / group_size;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        unsigned a = 0u;
#pragma unroll
        for (int j = 0; j < 8; ++j) a = max(a, ts::abs_bits(v[k][j]));
        for (int o = lanes >> 1; o > 0; o >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (c < nvec) {
            const float s = ts::quant_scale(a);
            if (c % lanes == 0) scales[(int64_t)blockIdx.x * groups + c / lanes] = s;
            store_codes(out_row + c * 8, v[k], s);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    rmsnorm_quant_generic_kernel(unsigned char *out, float *scales, T *sum_out, const T *x, const T *residual,
                                 const T *weight, const float *scale, int hidden, int group_size, float eps) {
    ts::pdl_wait();
    extern __shared__ unsigned group_max[];
    __shared__ float scratch[32];
    __shared__ unsigned uscratch[32];
    const int64_t ro = (int64_t)blockIdx.x * hidden;
    const int groups = scale != nullptr ? 0 : hidden / group_size;
    if (groups > 1)
        for (int g = threadIdx.x; g < groups; g += blockDim.x) group_max[g] = 0u;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float a;
        if (residual != nullptr) {
            const T s = ts::from_float<T>(ts::to_float(x[ro + i]) + ts::to_float(residual[ro + i]));
            sum_out[ro + i] = s;
            a = ts::to_float(s);
        } else {
            a = ts::to_float(x[ro + i]);
        }
        ss += a * a;
    }
    /* block_sum's barriers also order the zeroed maxima before the first atomicMax */
    const float inv = 1.0f / sqrtf(ts::block_sum(ss, scratch) / (float)hidden + eps);
    /* every pass reads the elements this thread read (or stored) itself */
    const T *src = (residual != nullptr ? sum_out : x) + ro;
    unsigned char *out_row = out + ro;
    auto y = [&](int i) { return ts::round_to<T>((ts::to_float(src[i]) * inv) * ts::to_float(weight[i])); };
    if (scale != nullptr) {
        const float s = *scale;
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) out_row[i] = ts::quant_code(y(i), s);
        return;
    }
    if (groups == 1) {
        unsigned a = 0u;
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) a = max(a, ts::abs_bits(y(i)));
        const float s = ts::quant_scale(block_umax(a, uscratch));
        if (threadIdx.x == 0) scales[blockIdx.x] = s;
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) out_row[i] = ts::quant_code(y(i), s);
        return;
    }
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) atomicMax(&group_max[i / group_size], ts::abs_bits(y(i)));
    __syncthreads();
    for (int g = threadIdx.x; g < groups; g += blockDim.x)
        scales[(int64_t)blockIdx.x * groups + g] = ts::quant_scale(group_max[g]);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out_row[i] = ts::quant_code(y(i), ts::quant_scale(group_max[i / group_size]));
}

/* Whether the fast path's lane groups can hold a group: per token, or 8 x 2^k <= 256 values. */
bool lane_groups(int group_size, int hidden) {
    if (group_size == hidden) return true;
    const int lanes = group_size / 8;
    return group_size % 8 == 0 && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
}

template <typename T>
int launch(unsigned char *out, float *scales, T *sum, const T *x, const T *residual, const T *weight,
           const float *scale, const ts_norm_quant_config &c, cudaStream_t stream) {
    const char *op = "rmsnorm_quant_fp8";
    const bool aligned = ts::aligned16(out) && ts::aligned16(x) && ts::aligned16(weight) &&
                         (residual == nullptr || (ts::aligned16(residual) && ts::aligned16(sum)));
    const bool fits = scale != nullptr || lane_groups(c.group_size, c.hidden);
    const ts::RowPlan plan = ts::plan_row(c.hidden, aligned && fits);
    const int groups = scale != nullptr ? 0 : c.hidden / c.group_size;
    const size_t smem = plan.vpt == 0 && groups > 1 ? (size_t)groups * sizeof(unsigned) : 0;
    const char *d = ts::dims("rows=%d hidden=%d group=%d eps=%g vpt=%d residual=%d in=%s", c.rows, c.hidden,
                             c.group_size, c.eps, plan.vpt, residual != nullptr, ts::Storage<T>::name);
    auto kernel = plan.vpt == 1   ? rmsnorm_quant_vec_kernel<1, T>
                  : plan.vpt == 2 ? rmsnorm_quant_vec_kernel<2, T>
                  : plan.vpt == 4 ? rmsnorm_quant_vec_kernel<4, T>
                  : plan.vpt == 8 ? rmsnorm_quant_vec_kernel<8, T>
                                  : rmsnorm_quant_generic_kernel<T>;
    TS_LAUNCH(op, kernel, c.rows, plan.threads, smem, stream, d, out, scales, sum, x, residual, weight, scale, c.hidden,
              c.group_size, c.eps);
    return TS_OK;
}

} // namespace

extern "C" int ts_rmsnorm_quant_fp8(void *out, float *scales, void *sum, const void *x, const void *residual,
                                    const void *weight, const float *scale, const ts_norm_quant_config *cfg,
                                    void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("rmsnorm_quant_fp8");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(weight, "weight");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    if ((sum == nullptr) != (residual == nullptr))
        v.fail(TS_ERR_INVALID_ARGUMENT, "sum = %p, residual = %p: give both (a residual add) or neither", sum,
               residual);
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.eps(cfg->eps, "cfg->eps");
    v.elements("x", {cfg->rows, cfg->hidden});
    if (!v.ok()) return v.status();
    v.quant_outputs(scales, scale, cfg->hidden, cfg->group_size);
    if (v.ok() && scale == nullptr && cfg->hidden / cfg->group_size > kMaxGroups)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->group_size = %d: %d groups a row, this build takes at most %d",
               cfg->group_size, cfg->hidden / cfg->group_size, kMaxGroups);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(static_cast<unsigned char *>(out), scales, static_cast<T *>(sum), static_cast<const T *>(x),
                      static_cast<const T *>(residual), static_cast<const T *>(weight), scale, *cfg, st);
    });
}
