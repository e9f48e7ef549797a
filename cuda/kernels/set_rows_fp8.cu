/*
 * set_rows_fp8: the KV-cache append into an FP8 E4M3 cache, dst[rows[i]] = e4m3(src[i] /
 * scale[head]) in place (touchstone.h states the contract; docs/quantization.md the rounding:
 * the division rounded to nearest even in fp32, then to E4M3 with saturation, ts::quant_code,
 * the static quantisation quant_fp8 runs, so the codes are the same bytes on every backend).
 *
 * One block per source row, as set_rows: thread 0 reads the row index once (device data: a
 * captured decode step replays its append at a new position); an index outside [0, dst_rows) is
 * recorded in the fault record (TS_ERR_INDEX at the next wait) and that row is not written. A
 * thread quantises 8 consecutive elements at a time (one 16-byte read of a 16-bit row, one
 * 8-byte store of codes) when the row allows it, else one element at a time. The scale of a head
 * is read per element from L1: a row's heads share a handful of values.
 */
#include "fp8.cuh"
#include "internal.h"

namespace {

__device__ __forceinline__ float value(const float *x, int64_t i) { return x[i]; }
__device__ __forceinline__ float value(const __half *x, int64_t i) { return __half2float(x[i]); }
__device__ __forceinline__ float value(const __nv_bfloat16 *x, int64_t i) { return ts::to_float(x[i]); }

/* VEC: 8 elements a step (16-bit src, row_elems % 8 == 0, head_elems % 8 == 0, src 16-byte
 * and dst 8-byte aligned); else 1. */
template <bool VEC, typename T>
__global__ void set_rows_fp8_kernel(unsigned char *dst, const T *src, const int32_t *rows, const float *scale,
                                    int row_elems, int head_elems, int dst_rows, ts::FaultRecord *fault) {
    ts::pdl_wait();
    __shared__ int row;
    const int i = blockIdx.x;
    if (threadIdx.x == 0) row = rows[i];
    __syncthreads();
    const int r = row;
    if (r < 0 || r >= dst_rows) {
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_SET_ROWS_FP8_ROW, i, r, dst_rows);
        return;
    }
    const T *from = src + (int64_t)i * row_elems;
    unsigned char *to = dst + (int64_t)r * row_elems;
    if constexpr (VEC) {
        for (int e = 8 * threadIdx.x; e < row_elems; e += 8 * blockDim.x) {
            float v[8];
            ts::unpack8<T>(*reinterpret_cast<const uint4 *>(from + e), v);
            const float s = scale[e / head_elems]; /* 8 | head_elems: one head for all 8 */
            uint32_t lo = 0, hi = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                lo |= (uint32_t)ts::quant_code(v[k], s) << (8 * k);
                hi |= (uint32_t)ts::quant_code(v[k + 4], s) << (8 * k);
            }
            *reinterpret_cast<uint2 *>(to + e) = make_uint2(lo, hi);
        }
    } else {
        for (int e = threadIdx.x; e < row_elems; e += blockDim.x)
            to[e] = ts::quant_code(value(from, e), scale[e / head_elems]);
    }
}

template <typename T>
int launch(unsigned char *dst, const T *src, const int32_t *rows, const float *scale, const ts_set_rows_fp8_config &c,
           cudaStream_t stream) {
    const char *op = "set_rows_fp8";
    const int head_elems = c.row_elems / c.scale_heads;
    constexpr bool kWide = sizeof(T) == 2;
    const bool vec = kWide && c.row_elems % 8 == 0 && head_elems % 8 == 0 && ts::aligned16(src) &&
                     reinterpret_cast<uintptr_t>(dst) % 8 == 0;
    const int per_thread = vec ? 8 : 1;
    const int threads = std::min(256, ts::round_up((int)ts::ceil_div(c.row_elems, per_thread), 32));
    const char *d = ts::dims("src_rows=%d dst_rows=%d row_elems=%d scale_heads=%d in=%s", c.src_rows, c.dst_rows,
                             c.row_elems, c.scale_heads, ts::dtype_name(c.dtype));
    if constexpr (kWide) {
        if (vec) {
            auto kernel = set_rows_fp8_kernel<true, T>;
            TS_LAUNCH(op, kernel, c.src_rows, threads, 0, stream, d, dst, src, rows, scale, c.row_elems, head_elems,
                      c.dst_rows, ts::fault_record());
            return TS_OK;
        }
    }
    auto kernel = set_rows_fp8_kernel<false, T>;
    TS_LAUNCH(op, kernel, c.src_rows, threads, 0, stream, d, dst, src, rows, scale, c.row_elems, head_elems,
              c.dst_rows, ts::fault_record());
    return TS_OK;
}

} // namespace

extern "C" int ts_set_rows_fp8(void *dst, const void *src, const int32_t *rows, const float *scale,
                               const ts_set_rows_fp8_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("set_rows_fp8");
    v.ptr(dst, "dst");
    v.ptr(src, "src");
    v.ptr(rows, "rows");
    v.ptr(scale, "scale");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_in(cfg->dtype, "cfg->dtype", {TS_F16, TS_BF16, TS_F32});
    v.positive(cfg->dst_rows, "cfg->dst_rows");
    v.positive(cfg->src_rows, "cfg->src_rows");
    v.positive(cfg->row_elems, "cfg->row_elems");
    v.positive(cfg->scale_heads, "cfg->scale_heads");
    if (!v.ok()) return v.status();
    if (cfg->row_elems % cfg->scale_heads != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale_heads = %d: must divide cfg->row_elems = %d (one scale a head)",
               cfg->scale_heads, cfg->row_elems);
    v.elements("dst", {cfg->dst_rows, cfg->row_elems});
    v.elements("src", {cfg->src_rows, cfg->row_elems});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    auto *q = static_cast<unsigned char *>(dst);
    if (cfg->dtype == TS_F32) return launch(q, static_cast<const float *>(src), rows, scale, *cfg, st);
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch(q, static_cast<const T *>(src), rows, scale, *cfg, st);
    });
}
