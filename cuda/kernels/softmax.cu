/*
 * softmax over the last dim of x [rows, n] (fp16, bf16 or fp32) into fp32 out.
 *
 * Long fp32 rows (n >= kClusterMinN, n % 4 == 0, aligned; a vocabulary of 151936 is 608 KB): a
 * cluster of kCluster CTAs per row, each holding its slice of the row in shared memory, so the
 * row is read from DRAM once. Each CTA copies its slice in with cp.async, takes its max m_c,
 * replaces its values by e = expf(x - m_c) and sums them to s_c; the CTAs exchange (m_c, s_c)
 * through distributed shared memory (M = max m_c, S = sum s_c expf(m_c - M)) and write
 * out = e * (expf(m_c - M) / S): one exp per element, within a few fp32 ulps of expf(x - M) / S.
 * The one-block-per-row kernel below re-read each row from DRAM in its second pass (the rows
 * together exceed L2) and reached 50% of copy bandwidth on the H200 at 128 x 151936; this one
 * 64.6%. Its CTAs load, compute and store in step, so DRAM idles during the exps; processing
 * the slice in 4 cp.async groups as they land (per-group max, rescaled at the end) was tried
 * and measured slower (58.8%).
 *
 * Other rows: one block per row (long rows are looped over). Pass 1: each thread keeps an online
 * (max, sum of exp(x - max)) pair over its elements, merged across the block with warp
 * shuffles and shared memory; pass 2: out = expf(x - max) / sum, re-reading the row (L2). -inf
 * entries contribute 0 and get probability 0. expf, not __expf. Vector path (n % 4 == 0 and
 * aligned pointers): 4 elements per access (float4, or 4 fp16 / bf16 values as 8 bytes).
 */
#include <algorithm>

#include <cooperative_groups.h>

#include "internal.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kVec = 4;

__device__ __forceinline__ void load4(const float *p, float (&v)[kVec]) {
    const float4 u = *reinterpret_cast<const float4 *>(p);
    v[0] = u.x;
    v[1] = u.y;
    v[2] = u.z;
    v[3] = u.w;
}

/* 4 values of a 16-bit storage type T (8 bytes). */
template <typename T>
__device__ __forceinline__ void load4(const T *p, float (&v)[kVec]) {
    using P = typename ts::Storage<T>::Pair;
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = ts::to_float2(*reinterpret_cast<const P *>(&u.x));
    const float2 b = ts::to_float2(*reinterpret_cast<const P *>(&u.y));
    v[0] = a.x;
    v[1] = a.y;
    v[2] = b.x;
    v[3] = b.y;
}

using ts::to_float; /* its fp32 overload too: softmax_kernel reads fp32 or 16-bit input */

/* Adds one element to a running (max m, sum s of exp(x - m)). */
__device__ __forceinline__ void online_add(float &m, float &s, float x) {
    if (x == -INFINITY) return;
    if (x > m) {
        s = s * expf(m - x) + 1.0f; /* m = -inf: s is 0 and expf(-inf) = 0 */
        m = x;
    } else {
        s += expf(x - m);
    }
}

/* Merges (m2, s2) into (m, s). */
__device__ __forceinline__ void online_merge(float &m, float &s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return; /* both empty */
    s = (m == -INFINITY ? 0.0f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mx));
    m = mx;
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(1024) softmax_kernel(float *out, const T *x, int n) {
    ts::pdl_wait();
    __shared__ float sm_m[32], sm_s[32];
    const int64_t ro = (int64_t)blockIdx.x * n;
    const T *xr = x + ro;
    float *orow = out + ro;
    float m = -INFINITY, s = 0.0f;
    int tail = 0;
    if (VEC) {
        const int nv = n / kVec;
        int i = threadIdx.x;
        /* Four independent 16-byte loads in flight per thread before their use. */
        for (; i + 3 * (int)blockDim.x < nv; i += 4 * blockDim.x) {
            float v[4][kVec];
#pragma unroll
            for (int u = 0; u < 4; ++u) load4(xr + (int64_t)(i + u * blockDim.x) * kVec, v[u]);
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int k = 0; k < kVec; ++k) online_add(m, s, v[u][k]);
        }
        for (; i < nv; i += blockDim.x) {
            float v[kVec];
            load4(xr + (int64_t)i * kVec, v);
#pragma unroll
            for (int k = 0; k < kVec; ++k) online_add(m, s, v[k]);
        }
        tail = nv * kVec;
    }
    for (int i = tail + threadIdx.x; i < n; i += blockDim.x) online_add(m, s, to_float(xr[i]));

    /* Block merge: warps by shuffles, then the warp leaders through shared memory. */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? sm_m[lane] : -INFINITY;
    s = lane < nwarps ? sm_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const float row_max = m, row_sum = s;

    if (VEC) {
        const int nv = n / kVec;
#pragma unroll 4
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            float v[kVec];
            load4(xr + (int64_t)i * kVec, v);
            float4 r;
            r.x = expf(v[0] - row_max) / row_sum;
            r.y = expf(v[1] - row_max) / row_sum;
            r.z = expf(v[2] - row_max) / row_sum;
            r.w = expf(v[3] - row_max) / row_sum;
            *reinterpret_cast<float4 *>(orow + (int64_t)i * kVec) = r;
        }
    }
    for (int i = tail + threadIdx.x; i < n; i += blockDim.x) orow[i] = expf(to_float(xr[i]) - row_max) / row_sum;
}

constexpr int kCluster = 8, kClusterThreads = 512, kClusterMinN = 8192;

__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kClusterThreads)
    softmax_cluster_kernel(float *out, const float *x, int n, int chunk) {
    ts::pdl_wait();
    extern __shared__ __align__(16) float xs[]; /* this CTA's slice of the row, then its exps */
    __shared__ float scratch[32];
    __shared__ float2 stat; /* (m_c, s_c), read by every CTA of the cluster */
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int64_t row = blockIdx.x / kCluster;
    const int c0 = rank * chunk;
    const int nv = max(0, min(n - c0, chunk)) / 4; /* n and chunk are multiples of 4 */
    const float *xr = x + row * n + c0;
    float *orow = out + row * n + c0;
    float4 *xs4 = reinterpret_cast<float4 *>(xs);

    for (int i = threadIdx.x; i < nv; i += blockDim.x) ts::cp_async16(xs + 4 * i, xr + 4 * i);
    ts::cp_async_commit();
    ts::cp_async_wait<0>();
    __syncthreads();

    /* Each thread touches the same vectors i in every pass below. */
    float m = -INFINITY;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        const float4 v = xs4[i];
        m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    m = ts::block_max(m, scratch);
    float s = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float4 v = xs4[i];
        if (m == -INFINITY) { /* the whole slice is -inf: every probability in it is 0 */
            v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else {
            v.x = expf(v.x - m);
            v.y = expf(v.y - m);
            v.z = expf(v.z - m);
            v.w = expf(v.w - m);
        }
        xs4[i] = v;
        s += (v.x + v.y) + (v.z + v.w);
    }
    s = ts::block_sum(s, scratch);
    if (threadIdx.x == 0) stat = make_float2(m, s);
    cluster.sync(); /* release / acquire: every CTA's stat is visible */
    float row_max = -INFINITY;
    float2 st[kCluster];
#pragma unroll
    for (int r = 0; r < kCluster; ++r) {
        st[r] = *cluster.map_shared_rank(&stat, r);
        row_max = fmaxf(row_max, st[r].x);
    }
    float row_sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kCluster; ++r)
        if (st[r].x != -INFINITY) row_sum += st[r].y * expf(st[r].x - row_max);
    cluster.sync(); /* no CTA exits, freeing its stat, while another may still read it */
    /* A row of -inf only: 0 / 0 = NaN, as expf(x - max) / sum gives. */
    const float f = (m == -INFINITY ? 0.0f : expf(m - row_max)) / row_sum;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float4 v = xs4[i];
        v.x *= f;
        v.y *= f;
        v.z *= f;
        v.w *= f;
        *reinterpret_cast<float4 *>(orow + 4 * i) = v;
    }
}

/* The cluster kernel when its conditions hold; *used = false otherwise. */
int launch_cluster(float *out, const float *x, int rows, int n, cudaStream_t stream, bool *used) {
    const char *op = "softmax";
    *used = false;
    const int chunk = ts::round_up((int)ts::ceil_div(n, kCluster), 4);
    const size_t smem = (size_t)chunk * sizeof(float);
    if (n < kClusterMinN || n % 4 != 0 || !ts::aligned16(out) || !ts::aligned16(x) ||
        (int64_t)rows * kCluster > 0x7fffffff || smem + 1024 > (size_t)ts::max_shared_optin())
        return TS_OK;
    auto kernel = softmax_cluster_kernel;
    static std::atomic<int> smem_allowed_on{-1};
    TS_CHECK(op, ts::allow_max_shared(op, kernel, smem_allowed_on)); /* also near 48 KiB: static smem */
    const int threads = std::min(kClusterThreads, ts::round_up(chunk / 4, 32));
    const char *d = ts::dims("rows=%d n=%d in=f32 cluster=%d chunk=%d", rows, n, kCluster, chunk);
    TS_LAUNCH_PLAIN(op, kernel, (unsigned)(rows * kCluster), threads, smem, stream, d, out, x, n, chunk);
    *used = true;
    return TS_OK;
}

template <typename T>
constexpr const char *in_name() {
    if constexpr (std::is_same_v<T, float>)
        return "f32";
    else
        return ts::Storage<T>::name;
}

template <typename T>
int launch_typed(float *out, const T *x, int rows, int n, cudaStream_t stream) {
    const char *op = "softmax";
    const bool vec = n % kVec == 0 && ts::aligned16(out) &&
                     (reinterpret_cast<uintptr_t>(x) % (sizeof(T) * kVec)) == 0;
    const int64_t units = vec ? n / kVec : n;
    const int threads = units >= 1024 ? 1024 : ts::round_up((int)units, 32);
    const char *d = ts::dims("rows=%d n=%d in=%s vec=%d", rows, n, in_name<T>(), (int)vec);
    if (vec) {
        auto kernel = softmax_kernel<T, true>;
        TS_LAUNCH(op, kernel, rows, threads, 0, stream, d, out, x, n);
    } else {
        auto kernel = softmax_kernel<T, false>;
        TS_LAUNCH(op, kernel, rows, threads, 0, stream, d, out, x, n);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_softmax(void *out, const void *x, const ts_softmax_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("softmax");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_in(cfg->in_dtype, "cfg->in_dtype", {TS_F16, TS_BF16, TS_F32});
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->n, "cfg->n");
    v.elements("x", {cfg->rows, cfg->n});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    if (cfg->in_dtype == TS_F32) {
        bool used = false;
        TS_CHECK(v.op(), launch_cluster(static_cast<float *>(out), static_cast<const float *>(x), cfg->rows, cfg->n,
                                        st, &used));
        if (used) return TS_OK;
        return launch_typed(static_cast<float *>(out), static_cast<const float *>(x), cfg->rows, cfg->n, st);
    }
    return ts::with_storage(cfg->in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_typed(static_cast<float *>(out), static_cast<const T *>(x), cfg->rows, cfg->n, st);
    });
}
