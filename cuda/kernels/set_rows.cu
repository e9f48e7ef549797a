/*
 * set_rows: dst[rows[i]] = src[i], a bit-exact row scatter in place into dst (the KV-cache
 * append). The row index is device data, so a captured decode step replays its append at the
 * position the caller wrote into rows before the launch, with no host-side offset.
 *
 * One block per source row; the block reads its row index once (thread 0, through shared
 * memory) and copies the row in the widest unit the row's byte length and the pointers allow
 * (16 bytes, else 4, else 2): by bytes, so one kernel per unit serves every dtype (fp16, bf16 and
 * fp32 rows alike). An index outside [0, dst_rows) is recorded in the fault record
 * (reported as TS_ERR_INDEX by the next ts_synchronize or ts_copy_to_host) and that row is not
 * written. Rows must be distinct: which of two writes to one row lands is unspecified.
 */
#include "internal.h"

namespace {

template <typename U>
__global__ void set_rows_kernel(U *dst, const U *src, const int32_t *rows, int64_t units, int dst_rows,
                                ts::FaultRecord *fault) {
    ts::pdl_wait();
    __shared__ int row;
    const int i = blockIdx.x;
    if (threadIdx.x == 0) row = rows[i];
    __syncthreads();
    const int r = row;
    if (r < 0 || r >= dst_rows) {
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_SET_ROWS_ROW, i, r, dst_rows);
        return;
    }
    const U *from = src + (int64_t)i * units;
    U *to = dst + (int64_t)r * units;
    for (int64_t k = threadIdx.x; k < units; k += blockDim.x) to[k] = from[k];
}

template <typename U>
int launch_as(const char *op, void *dst, const void *src, const int32_t *rows, int src_rows, int dst_rows,
              int64_t row_bytes, cudaStream_t stream) {
    const int64_t units = row_bytes / (int64_t)sizeof(U);
    const int threads = units >= 256 ? 256 : ts::round_up((int)units, 32);
    const char *d = ts::dims("src_rows=%d dst_rows=%d row_bytes=%lld unit=%zuB", src_rows, dst_rows,
                             (long long)row_bytes, sizeof(U));
    auto kernel = set_rows_kernel<U>;
    TS_LAUNCH(op, kernel, src_rows, threads, 0, stream, d, static_cast<U *>(dst), static_cast<const U *>(src), rows,
              units, dst_rows, ts::fault_record());
    return TS_OK;
}

int launch_set_rows(void *dst, const void *src, const int32_t *rows, int src_rows, int dst_rows, int64_t row_bytes,
                    cudaStream_t stream) {
    const char *op = "set_rows";
    if (row_bytes % 16 == 0 && ts::aligned16(dst) && ts::aligned16(src))
        return launch_as<uint4>(op, dst, src, rows, src_rows, dst_rows, row_bytes, stream);
    const bool aligned4 = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 3u) == 0;
    if (row_bytes % 4 == 0 && aligned4)
        return launch_as<uint32_t>(op, dst, src, rows, src_rows, dst_rows, row_bytes, stream);
    return launch_as<uint16_t>(op, dst, src, rows, src_rows, dst_rows, row_bytes, stream);
}

} // namespace

extern "C" int ts_set_rows(void *dst, const void *src, const int32_t *rows, const ts_set_rows_config *cfg,
                           void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("set_rows");
    v.ptr(dst, "dst");
    v.ptr(src, "src");
    v.ptr(rows, "rows");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_in(cfg->dtype, "cfg->dtype", {TS_F16, TS_BF16, TS_F32});
    v.positive(cfg->dst_rows, "cfg->dst_rows");
    v.positive(cfg->src_rows, "cfg->src_rows");
    v.positive(cfg->row_elems, "cfg->row_elems");
    v.elements("dst", {cfg->dst_rows, cfg->row_elems});
    v.elements("src", {cfg->src_rows, cfg->row_elems});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    const int64_t row_bytes = (int64_t)cfg->row_elems * (cfg->dtype == TS_F32 ? 4 : 2); /* f16, bf16: 2 */
    return launch_set_rows(dst, src, rows, cfg->src_rows, cfg->dst_rows, row_bytes, st);
}
