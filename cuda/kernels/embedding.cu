/*
 * embedding: out[t] = table[ids[t]], a bit-exact row gather. One block per token; the row is
 * copied in the widest unit the row length and the pointers allow (16 bytes = 8 values, else
 * 4 bytes, else 2). Both storage types (fp16, bf16) are 2 bytes a value and a copy never looks at
 * them, so one kernel per unit serves both: no dispatch on the dtype. ids are range-checked on the device: an id outside [0, table_rows) is
 * recorded in the fault record (reported as TS_ERR_INDEX by the next ts_synchronize or
 * ts_copy_to_host) and its row is skipped.
 *
 * Scaled (cfg->scale other than 0 and 1: Gemma's embed_scale, sqrt(hidden) rounded to the
 * storage type by the caller, as transformers rounds it): out[t] = T(float(table[id]) * scale),
 * one fp32 product and one rounding. The product of two 16-bit values is exact in fp32 (11 + 11
 * significant bits, or 8 + 8), so the one rounding is the correctly rounded product the reference
 * computes in the storage type, bit for bit; a product past the type's range rounds to inf, as
 * it does there. This reads values, so it is typed: 16-byte vectors of 8 when hidden % 8 == 0 and
 * out and table are 16-byte aligned, else one value a thread.
 */
#include "internal.h"

namespace {

template <typename U>
__global__ void embedding_kernel(U *out, const int32_t *ids, const U *table, int units, int table_rows,
                                 ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int t = blockIdx.x;
    const int id = ids[t];
    if (id < 0 || id >= table_rows) {
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_EMBEDDING_ID, t, id, table_rows);
        return;
    }
    const U *src = table + (int64_t)id * units;
    U *dst = out + (int64_t)t * units;
    for (int i = threadIdx.x; i < units; i += blockDim.x) dst[i] = src[i];
}

template <typename U>
int launch_as(const char *op, void *out, const int32_t *ids, const void *table, int tokens, int hidden, int table_rows,
              cudaStream_t stream) {
    const int units = (int)((int64_t)hidden * 2 / (int64_t)sizeof(U));
    const int threads = units >= 256 ? 256 : ts::round_up(units, 32);
    const char *d = ts::dims("tokens=%d hidden=%d table_rows=%d unit=%zuB", tokens, hidden, table_rows, sizeof(U));
    auto kernel = embedding_kernel<U>;
    TS_LAUNCH(op, kernel, tokens, threads, 0, stream, d, static_cast<U *>(out), ids, static_cast<const U *>(table),
              units, table_rows, ts::fault_record());
    return TS_OK;
}

template <bool VEC, typename T>
__global__ void embedding_scale_kernel(T *out, const int32_t *ids, const T *table, int hidden, int table_rows,
                                       float scale, ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int t = blockIdx.x;
    const int id = ids[t];
    if (id < 0 || id >= table_rows) {
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_EMBEDDING_ID, t, id, table_rows);
        return;
    }
    const T *src = table + (int64_t)id * hidden;
    T *dst = out + (int64_t)t * hidden;
    if (VEC) {
        for (int c = threadIdx.x * 8; c < hidden; c += blockDim.x * 8) {
            float v[8];
            ts::load8(src + c, v);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] *= scale;
            ts::store8(dst + c, v);
        }
    } else {
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = ts::from_float<T>(ts::to_float(src[c]) * scale);
    }
}

template <typename T>
int launch_embedding_scaled(T *out, const int32_t *ids, const T *table, int tokens, int hidden, int table_rows,
                            float scale, cudaStream_t stream) {
    const char *op = "embedding";
    const bool vec = hidden % 8 == 0 && ts::aligned16(out) && ts::aligned16(table);
    const int units = vec ? hidden / 8 : hidden;
    const int threads = units >= 256 ? 256 : ts::round_up(units, 32);
    const char *d =
        ts::dims("tokens=%d hidden=%d table_rows=%d scale=%g vec=%d", tokens, hidden, table_rows, scale, (int)vec);
    if (vec) {
        auto kernel = embedding_scale_kernel<true, T>;
        TS_LAUNCH(op, kernel, tokens, threads, 0, stream, d, out, ids, table, hidden, table_rows, scale,
                  ts::fault_record());
    } else {
        auto kernel = embedding_scale_kernel<false, T>;
        TS_LAUNCH(op, kernel, tokens, threads, 0, stream, d, out, ids, table, hidden, table_rows, scale,
                  ts::fault_record());
    }
    return TS_OK;
}

int launch_embedding(void *out, const int32_t *ids, const void *table, int tokens, int hidden, int table_rows,
                     cudaStream_t stream) {
    const char *op = "embedding";
    if (hidden % 8 == 0 && ts::aligned16(out) && ts::aligned16(table))
        return launch_as<uint4>(op, out, ids, table, tokens, hidden, table_rows, stream);
    const bool aligned4 = ((reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(table)) & 3u) == 0;
    if (hidden % 2 == 0 && aligned4)
        return launch_as<uint32_t>(op, out, ids, table, tokens, hidden, table_rows, stream);
    return launch_as<uint16_t>(op, out, ids, table, tokens, hidden, table_rows, stream);
}

} // namespace

extern "C" int ts_embedding(void *out, const int32_t *ids, const void *table, const ts_embedding_config *cfg,
                            void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("embedding");
    v.ptr(out, "out");
    v.ptr(ids, "ids");
    v.ptr(table, "table");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    ts::check_embedding(v, cfg, "out", true);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    if (!ts::embedding_scaled(cfg))
        return launch_embedding(out, ids, table, cfg->tokens, cfg->hidden, cfg->table_rows, st);
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_embedding_scaled(static_cast<T *>(out), ids, static_cast<const T *>(table), cfg->tokens,
                                       cfg->hidden, cfg->table_rows, cfg->scale, st);
    });
}
