/*
 * gemm_w4a16: out [m, n] = x [m, k] . W^T for a 4-bit weight in the AWQ or GPTQ packing
 * (touchstone.h states the contract; docs/quantization.md, "4-bit weights", the formats).
 *
 * A correctness-first path: w4a16_dequant_kernel writes the dequantised weight W [n, k] in the
 * storage type T, (q - z) * s rounded once (the product of an integer in -16..15 and a T value
 * is exact in fp32), into a library workspace, and the gemm op's own dispatch multiplies it
 * (ts::gemm_nt: the decode gemv for up to 4 rows, cuBLAS otherwise), fp32 accumulation and one
 * rounding. A thread per weight element, consecutive threads along k so the writes of W's rows
 * are coalesced. GPTQ's g_idx is device data: an index outside [0, k / group_size) is reported
 * through the fault record (TS_ERR_INDEX at the next wait) and its elements are written as 0.
 * Reading the packed weight once inside the gemv (no workspace round trip) is the fast path still
 * to write.
 */
#include "internal.h"

namespace {

/* The nibble of an AWQ word that holds column c % 8 of its eight (docs/quantization.md). */
__device__ __forceinline__ int awq_nibble(int c) {
    constexpr unsigned kReverse = 0x73625140u; /* (0, 4, 1, 5, 2, 6, 3, 7), one per nibble */
    return (kReverse >> (4 * (c & 7))) & 0xF;
}

__device__ __forceinline__ int code(int32_t word, int nibble) { return ((uint32_t)word >> (4 * nibble)) & 0xF; }

/* w [n, k] (W, a Linear weight) from the packed W^T [k, n]. FORMAT: TS_W4_AWQ or TS_W4_GPTQ. */
template <int FORMAT, typename T>
__global__ void __launch_bounds__(256) w4a16_dequant_kernel(T *w, const int32_t *qweight, const int32_t *qzeros,
                                                            const T *scales, const int32_t *g_idx, int n, int k,
                                                            int group_size, ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int64_t total = (int64_t)n * k;
    const int groups = k / group_size, words = n / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i / k), r = (int)(i % k); /* W[c][r] = W^T[r][c] */
        int q, z, g;
        if constexpr (FORMAT == TS_W4_AWQ) {
            g = r / group_size;
            q = code(qweight[(int64_t)r * words + c / 8], awq_nibble(c));
            z = code(qzeros[(int64_t)g * words + c / 8], awq_nibble(c));
        } else {
            g = g_idx[r];
            if (g < 0 || g >= groups) {
                if (c == 0) ts::report_fault(fault, ts::FAULT_W4A16_G_IDX, r, g, groups);
                w[i] = ts::from_float<T>(0.0f);
                continue;
            }
            q = code(qweight[(int64_t)(r / 8) * n + c], r % 8);
            z = code(qzeros[(int64_t)g * words + c / 8], c % 8) + 1; /* stored z - 1 */
        }
        w[i] = ts::from_float<T>((float)(q - z) * ts::to_float(scales[(int64_t)g * n + c]));
    }
}

template <typename T>
int launch(const char *op, T *out, const T *x, const int32_t *qweight, const int32_t *qzeros, const T *scales,
           const int32_t *g_idx, const ts_w4a16_config &c, cudaStream_t stream) {
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_W4A16, (size_t)c.n * c.k * sizeof(T), &ws));
    T *w = static_cast<T *>(ws);
    const int64_t total = (int64_t)c.n * c.k;
    const unsigned grid = ts::grid_for(total, 256);
    const char *d = ts::dims("n=%d k=%d group=%d format=%d in=%s", c.n, c.k, c.group_size, c.format,
                             ts::Storage<T>::name);
    if (c.format == TS_W4_AWQ) {
        auto kernel = w4a16_dequant_kernel<TS_W4_AWQ, T>;
        TS_LAUNCH(op, kernel, grid, 256, 0, stream, d, w, qweight, qzeros, scales, g_idx, c.n, c.k, c.group_size,
                  ts::fault_record());
    } else {
        auto kernel = w4a16_dequant_kernel<TS_W4_GPTQ, T>;
        TS_LAUNCH(op, kernel, grid, 256, 0, stream, d, w, qweight, qzeros, scales, g_idx, c.n, c.k, c.group_size,
                  ts::fault_record());
    }
    return ts::gemm_nt(op, out, false, x, static_cast<const T *>(w), static_cast<const T *>(nullptr), c.m, c.n, c.k,
                       stream);
}

} // namespace

extern "C" int ts_gemm_w4a16(void *out, const void *x, const int32_t *qweight, const int32_t *qzeros,
                             const void *scales, const int32_t *g_idx, const ts_w4a16_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("gemm_w4a16");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(qweight, "qweight");
    v.ptr(qzeros, "qzeros");
    v.ptr(scales, "scales");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->m, "cfg->m");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.positive(cfg->group_size, "cfg->group_size");
    if (!v.ok()) return v.status();
    if (cfg->format != TS_W4_AWQ && cfg->format != TS_W4_GPTQ)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->format = %d: want TS_W4_AWQ (0) or TS_W4_GPTQ (1)", cfg->format);
    else if (cfg->k % cfg->group_size != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must divide cfg->k = %d", cfg->group_size, cfg->k);
    else if (cfg->k % 8 != 0 || cfg->n % 8 != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->k = %d, cfg->n = %d: both must be multiples of 8 (8 codes a word)",
               cfg->k, cfg->n);
    else if (cfg->format == TS_W4_GPTQ && g_idx == nullptr)
        v.fail(TS_ERR_INVALID_ARGUMENT, "g_idx = NULL: GPTQ needs each input's group");
    else if (cfg->format == TS_W4_AWQ && g_idx != nullptr)
        v.fail(TS_ERR_INVALID_ARGUMENT, "g_idx = %p: AWQ has none, must be NULL", (const void *)g_idx);
    if (!v.ok()) return v.status();
    v.elements("x", {cfg->m, cfg->k});
    v.elements("out", {cfg->m, cfg->n});
    v.elements("w", {cfg->n, cfg->k});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(v.op(), static_cast<T *>(out), static_cast<const T *>(x), qweight, qzeros,
                      static_cast<const T *>(scales), g_idx, *cfg, st);
    });
}
