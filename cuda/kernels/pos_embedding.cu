/*
 * pos_embedding: out[t] = x[t] + table[positions[t]] (learned positions, GPT-2). One block per
 * token, 16-byte vectors of 8 values when hidden % 8 == 0 and every pointer is 16-byte aligned,
 * else scalar; fp32 add, one rounding to the storage type T (fp16 or bf16, the kernel's last
 * template argument); out may equal x. positions are range-checked on the
 * device: a position outside [0, table_rows) is recorded in the fault record (TS_ERR_INDEX at the
 * next ts_synchronize / ts_copy_to_host) and its row is skipped.
 */
#include "internal.h"

namespace {

template <bool VEC, typename T>
__global__ void pos_embedding_kernel(T *out, const T *x, const T *table, const int32_t *positions, int hidden,
                                     int table_rows, ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int t = blockIdx.x;
    const int p = positions[t];
    if (p < 0 || p >= table_rows) {
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_POS_EMBEDDING_POSITION, t, p, table_rows);
        return;
    }
    const int64_t xo = (int64_t)t * hidden, to = (int64_t)p * hidden;
    if (VEC) {
        for (int c = threadIdx.x * 8; c < hidden; c += blockDim.x * 8) {
            float a[8], b[8];
            ts::load8(x + xo + c, a);
            ts::load8(table + to + c, b);
#pragma unroll
            for (int k = 0; k < 8; ++k) a[k] += b[k];
            ts::store8(out + xo + c, a);
        }
    } else {
        for (int c = threadIdx.x; c < hidden; c += blockDim.x)
            out[xo + c] = ts::from_float<T>(ts::to_float(x[xo + c]) + ts::to_float(table[to + c]));
    }
}

template <typename T>
int launch_pos_embedding(T *out, const T *x, const T *table, const int32_t *positions, int tokens, int hidden,
                         int table_rows, cudaStream_t stream) {
    const char *op = "pos_embedding";
    const bool vec = hidden % 8 == 0 && ts::aligned16(out) && ts::aligned16(x) && ts::aligned16(table);
    const int units = vec ? hidden / 8 : hidden;
    const int threads = units >= 256 ? 256 : ts::round_up(units, 32);
    const char *d = ts::dims("tokens=%d hidden=%d table_rows=%d vec=%d", tokens, hidden, table_rows, (int)vec);
    if (vec) {
        auto kernel = pos_embedding_kernel<true, T>;
        TS_LAUNCH(op, kernel, tokens, threads, 0, stream, d, out, x, table, positions, hidden, table_rows,
                  ts::fault_record());
    } else {
        auto kernel = pos_embedding_kernel<false, T>;
        TS_LAUNCH(op, kernel, tokens, threads, 0, stream, d, out, x, table, positions, hidden, table_rows,
                  ts::fault_record());
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_pos_embedding(void *out, const void *x, const void *table, const int32_t *positions,
                                const ts_embedding_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("pos_embedding");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(table, "table");
    v.ptr(positions, "positions");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    ts::check_embedding(v, cfg, "x", false);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_pos_embedding(static_cast<T *>(out), static_cast<const T *>(x), static_cast<const T *>(table),
                                    positions, cfg->tokens, cfg->hidden, cfg->table_rows, st);
    });
}
