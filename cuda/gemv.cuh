/*
 * gemv.cuh: the small-M matrix product of decode (gemm's, rmsnorm_gemm's, gpt_ffn's): out
 * [rows, n] = epi(a . w^T) for rows <= 16 with a [rows, k] already in shared memory in the storage
 * type T (the op's prologue put it there: a normalised row, a copy of x), w [n, k] in T too (fp16
 * or bf16, the kernels' template argument: the same loads and math for both). At decode the
 * product reads each weight row once and does 2 rows flops per weight element, so it is bound by
 * the weight read: each warp owns an output column at a time and its lanes stream that weight row
 * in 16-byte vectors (up to four in flight per lane), fp32 accumulation per row, a shuffle
 * reduction, and lane 0 hands each row's sum to the op's epilogue. Needs k % 8 == 0 and w 16-byte
 * aligned.
 */
#ifndef TOUCHSTONE_GEMV_CUH
#define TOUCHSTONE_GEMV_CUH

#include "internal.h"

#include <type_traits>

namespace ts {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvMaxRows = 16;

/* The rows template argument a launch uses: the next power of two >= rows (1..16). */
inline int gemv_tile(int rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16; }

template <int MR, typename T>
__device__ __forceinline__ void gemv_fma(float (&acc)[MR], const uint4 &wv, const T *a, int rows, int k, int c) {
    float wf[8];
    unpack8<T>(wv, wf);
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        if (m < rows) {
            float af[8];
            unpack8<T>(reinterpret_cast<const uint4 *>(a + (int64_t)m * k)[c], af);
#pragma unroll
            for (int t = 0; t < 8; ++t) acc[m] = fmaf(wf[t], af[t], acc[m]);
        }
    }
}

/* Every column j of this block's share (j = blockIdx.x * warps + warp, stepping by the grid):
 * epi(m, j, sum_k a[m][k] w[j][k]) for m < rows. Call after a __syncthreads that publishes a. */
template <int MR, typename T, typename Epi>
__device__ __forceinline__ void gemv_smem(const T *a, const T *__restrict__ w, int rows, int k, int n,
                                          const Epi &epi) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nvec = k >> 3;
    for (int j = blockIdx.x * kGemvWarps + warp; j < n; j += gridDim.x * kGemvWarps) {
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
        const uint4 *wr = reinterpret_cast<const uint4 *>(w + (int64_t)j * k);
        /* Each lane issues up to four 16-byte loads before it uses any: a weight row of 896
         * values is 3.5 vectors a lane, and one load at a time would pay the memory latency
         * three or four times per column. */
        for (int base = 0; base < nvec; base += 128) {
            uint4 wv[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int c = base + lane + 32 * u;
                if (c < nvec) wv[u] = __ldg(wr + c);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int c = base + lane + 32 * u;
                if (c < nvec) gemv_fma<MR>(acc, wv[u], a, rows, k, c);
            }
        }
#pragma unroll
        for (int m = 0; m < MR; ++m) acc[m] = warp_sum(acc[m]);
        if (lane == 0) {
#pragma unroll
            for (int m = 0; m < MR; ++m)
                if (m < rows) epi(m, j, acc[m]);
        }
    }
}

/* The epilogue of a plain projection: out [rows, n] = T(acc + bias[j]) (bias may be null). */
template <typename T>
struct GemvBiasStore {
    T *out;
    const T *bias;
    int n;
    __device__ __forceinline__ void operator()(int m, int j, float acc) const {
        out[(int64_t)m * n + j] = from_float<T>(bias ? acc + to_float(bias[j]) : acc);
    }
};

/* The prologue of a gemv over x itself: x [rows, k] (16-byte aligned, 8 values of T a vector)
 * copied into shared memory by the whole block, then a barrier. */
template <typename T>
__device__ __forceinline__ void gemv_load_rows(uint4 *smem, const T *x, int rows, int k) {
    const uint4 *src = reinterpret_cast<const uint4 *>(x);
    for (int c = threadIdx.x; c < rows * (k >> 3); c += blockDim.x) smem[c] = src[c];
    __syncthreads();
}

/* Blocks of a gemv launch: enough for every column a warp, at most what is resident at once
 * (each block redoes the prologue, so more blocks than fit only repeat it). */
inline unsigned gemv_grid(int n, int blocks_per_sm) {
    const int64_t want = ceil_div(n, kGemvWarps);
    const int64_t cap = (int64_t)blocks_per_sm * sm_count();
    return (unsigned)(want < cap ? want : cap);
}

/* Launches a gemv kernel (kernel(args...), one of the decode ops') over n output columns with the
 * rows [rows, k] of T in dynamic shared memory. shared_done and occupancy are statics of the
 * caller's instance (allow_max_shared, blocks_per_sm: one per kernel). */
template <typename T, typename Kernel, typename... Args>
int launch_gemv_kernel(const char *op, Kernel kernel, std::atomic<int> &shared_done, std::atomic<uint64_t> &occupancy,
                       int rows, int k, int n, cudaStream_t stream, const char *dimstr, Args... args) {
    const size_t smem = (size_t)rows * k * sizeof(T);
    TS_CHECK(op, allow_max_shared(op, kernel, shared_done));
    int per_sm = 1;
    TS_CHECK(op, blocks_per_sm(op, kernel, kGemvThreads, smem, occupancy, &per_sm));
    TS_LAUNCH(op, kernel, gemv_grid(n, per_sm), kGemvThreads, smem, stream, dimstr, args...);
    return TS_OK;
}

/* Whether the activation rows [rows, k] fit the shared memory a gemv block may take (2 bytes an
 * element: either storage type, internal.h). */
inline bool gemv_fits(int rows, int k) { return (int64_t)rows * k * 2 <= (int64_t)max_shared_optin() - 1024; }

/* Where the projections of decode (gemm, rmsnorm_gemm, layernorm_gemm, swiglu_gemm) take the gemv
 * rather than cuBLAS: up to gemv_rows() rows (ts_set_gemv_rows, at most 4), k % 8 == 0, 16-byte
 * aligned operands (aligned), a weight [n, k] of at most 32 MiB. Measured op by op on an H100
 * (docs/PERF.md, 2026-11-24): the gemv ran Qwen2.5's q/k/v and gate/up projections (2.1 and 17 MB)
 * in 6.6 and 12.4 us where the norm and cuBLAS took 10.9 and 15.2, lost on Phi-3's 57 MB q/k/v
 * (30.2 against 28.3 us), and was 1.4x and 2.3-4x slower than cuBLAS at 8 and 16 rows (one
 * shared-memory read per row per weight vector). The row limit is the whole model's measured
 * choice (touchstone bench-batch -gemv-rows). 2 bytes a weight element: either storage type,
 * whose gemv reads the same bytes. */
inline bool gemv_decode_applies(int rows, int k, int n, bool aligned) {
    return rows <= gemv_rows() && k % 8 == 0 && aligned && (int64_t)n * k * 2 <= (32ll << 20) &&
           gemv_fits(rows, k);
}

/* Batch-invariant mode (ts_set_batch_invariant): every projection of up to kGemvMaxRows rows takes
 * the gemv, whatever the weight size, because a row's sum in gemv_smem runs in the same order at
 * every tile size (the lanes' vectors, then the same shuffle tree): only the rows' count changes
 * between a sequence alone and in a batch, never its arithmetic. Needs what the gemv needs (k % 8,
 * 16-byte alignment) and one row in shared memory. */
inline bool gemv_invariant_applies(int rows, int k, bool aligned) {
    return batch_invariant() && rows <= kGemvMaxRows && k % 8 == 0 && aligned && gemv_fits(1, k);
}

/* Runs launch(tile, first_row, rows) over rows in chunks that fit shared memory (a power of two
 * up to 16 rows each; Llama-3.2-1B's down projection, k = 8192, fits 8), tile the
 * std::integral_constant of the chunk's gemv_tile. */
template <typename Launch>
int gemv_by_chunks(int rows, int k, Launch launch) {
    int chunk = kGemvMaxRows;
    while (chunk > 1 && !gemv_fits(chunk, k)) chunk /= 2;
    for (int r0 = 0; r0 < rows; r0 += chunk) {
        const int n = rows - r0 < chunk ? rows - r0 : chunk;
        int s = TS_OK;
        switch (gemv_tile(n)) {
        case 1: s = launch(std::integral_constant<int, 1>{}, r0, n); break;
        case 2: s = launch(std::integral_constant<int, 2>{}, r0, n); break;
        case 4: s = launch(std::integral_constant<int, 4>{}, r0, n); break;
        case 8: s = launch(std::integral_constant<int, 8>{}, r0, n); break;
        default: s = launch(std::integral_constant<int, 16>{}, r0, n); break;
        }
        if (s != TS_OK) return s;
    }
    return TS_OK;
}

} // namespace ts

#endif /* TOUCHSTONE_GEMV_CUH */
