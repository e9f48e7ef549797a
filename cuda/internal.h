/*
 * internal.h — shared by runtime.cu and cuda/kernels/<op>.cu. Not part of the ABI: nothing in
 * here crosses the library boundary (see include/touchstone.h for that).
 *
 * What lives here:
 *  - errors: the thread-local last-error buffer (ts::set_error), the one check macro TS_CHECK
 *    for every CUDA and cuBLAS call, and TS_LAUNCH, which logs a launch, launches, and checks
 *    cudaGetLastError; sticky errors (the context is unusable) are latched in runtime.cu;
 *  - ts::Validator, the argument checks every ts_* entry runs before any launch;
 *  - the device fault record that kernels fill when they see an out-of-range index in device
 *    data (positions, ids, cache_lens, rows) or a bad logit (sample): runtime.cu owns it, kernels
 *    receive a pointer to it;
 *  - library state the ops need: the stream, the cuBLAS handles, workspaces, the SM count;
 *  - the storage types (TS_F16 as __half, TS_BF16 as __nv_bfloat16) and the one dispatch on them;
 *  - small device helpers: 16-byte vector loads/stores of either storage type, warp and block
 *    reductions.
 */
#ifndef TOUCHSTONE_INTERNAL_H
#define TOUCHSTONE_INTERNAL_H

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "touchstone.h"

namespace ts {

/* ---- errors ------------------------------------------------------------------------------ */

/* Formats a message into this thread's last-error buffer and returns status. */
int set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Map a failed CUDA / cuBLAS call to a status, record the message (op, call, file:line), and
 * latch sticky errors. Called through TS_CHECK only. */
int cuda_failure(const char *op, cudaError_t err, const char *expr, const char *file, int line);
int cublas_failure(const char *op, cublasStatus_t st, const char *expr, const char *file, int line);

inline int check(const char *op, cudaError_t err, const char *expr, const char *file, int line) {
    return err == cudaSuccess ? TS_OK : cuda_failure(op, err, expr, file, line);
}
inline int check(const char *op, cublasStatus_t st, const char *expr, const char *file, int line) {
    return st == CUBLAS_STATUS_SUCCESS ? TS_OK : cublas_failure(op, st, expr, file, line);
}
/* A status returned by one of our own helpers: already recorded, pass it through. */
inline int check(const char *, int status, const char *, const char *, int) { return status; }

/* Latches a failure that leaves the context unusable (a sticky CUDA error, a wait past its
 * deadline): status and msg are returned by this and every later call. */
int latch_failure(int status, const char *msg);

/* ---- waits with a deadline (deadline.cu) -------------------------------------------------- */

/* Every wait for the device goes through these: they poll an event recorded behind the work
 * and return TS_ERR_TIMEOUT (latched) once the deadline passes, naming op and the launches
 * since the last completed wait. wait_device drains the library stream and the legacy default
 * stream, then synchronises the device. */
int wait_stream(const char *op, cudaStream_t stream);
int wait_device(const char *op, cudaStream_t library_stream);
int wait_event(const char *op, cudaEvent_t event);
/* Destroys the events kept for waits (ts_shutdown: the next ts_init may pick another device). */
void release_wait_events();
/* Records a launch for a timeout's message: a kernel, or a library call (kernel nullptr). */
void note_launch(const char *op, const void *kernel, const char *call, const char *dims);
/* Sets the deadline from ts_set_deadline or TOUCHSTONE_DEADLINE (what names the source). */
int set_deadline(const char *op, const char *what, double seconds);
/* A kernel's name, demangled and without its parameter list, e.g. layernorm_vec_kernel<4, __half>
 * ("?" when CUDA cannot name it): the launch log, path recording and hang messages use it. */
std::string kernel_name(const void *kernel);

/* The one error-check macro: every CUDA call, every cuBLAS call and every launch goes through
 * it. On failure it returns the status from the enclosing function. */
#define TS_CHECK(op, call)                                                                   \
    do {                                                                                     \
        int ts_status_ = ::ts::check((op), (call), #call, __FILE__, __LINE__);               \
        if (ts_status_ != TS_OK) return ts_status_;                                          \
    } while (0)

/* Launch bookkeeping: debug log of the launch (TOUCHSTONE_LOG=debug) before it, and after it
 * the record of the most recent op (named in sticky-error messages) plus, with
 * TOUCHSTONE_SYNC=1, a stream synchronisation so a fault is pinned on the op that caused it. */
bool debug_enabled();
/* Whether launches are looked at: the debug log or path recording (ts_record_paths) is on. */
bool launch_noted();
/* printf-style description of an op's dims for the debug log; "" when debug is off. */
const char *dims(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_launch(const char *op, const void *kernel, dim3 grid, dim3 block, size_t smem, const char *dims);
int after_launch(const char *op, cudaStream_t stream);
/* cuBLAS calls are logged too (no grid: cuBLAS chooses). */
void log_library_call(const char *op, const char *call, const char *dims);

/* Programmatic dependent launch (PDL, sm_90+): every kernel of this library is launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization, and every kernel's first statement is
 * ts::pdl_wait() (griddepcontrol.wait: the grid before it on the stream has completed and its
 * writes are visible). No kernel triggers its dependents early (griddepcontrol.launch_dependents),
 * so the next grid is launched as this one's blocks exit: its launch and block scheduling overlap
 * this grid's tail and memory flush instead of following them. Measured on an H100 (2026-11-24; docs/PERF.md,
 * "Whole models"): Qwen2.5-0.5B decode 1.02 -> 0.945 ms/token; triggering at the
 * start of each kernel made it slower (1.15), and prefetching the gemv weights into L2 before the
 * wait did not pay. Every block of every kernel runs the wait first (a grid whose blocks all
 * returned before it could complete before the grid it follows):
 * engine/backend/cuda's TestEveryKernelWaitsForItsPredecessor checks the sources for it.
 * TOUCHSTONE_PDL=0 at ts_init launches without the attribute (the waits are then no-ops). */
bool pdl_enabled();

/* ts_set_batch_invariant's mode: the decode ops choose kernels and splits independent of the
 * number of rows they are given (touchstone.h). */
bool batch_invariant();

/* ts_set_gemv_rows: up to how many rows the decode projections take the gemv (0..kMaxGemvRows,
 * the largest row tile of their launches); kDefaultGemvRows until set. 1, measured (bench-batch
 * -gemv-rows on an H200, docs/PERF.md): one row is 10-20% faster by the gemv for Qwen2.5-0.5B and
 * Llama-3.2-1B; at 3 and 4 rows cuBLAS is 4-34% faster; at 2 the gemv wins by 5% for Qwen and
 * loses by 9% for Llama, so 1. */
constexpr int kMaxGemvRows = 4;
constexpr int kDefaultGemvRows = 1;
int gemv_rows();

/* One launch, with the programmatic-stream-serialisation attribute when pdl_enabled(). */
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args &&...args) {
    if (!pdl_enabled()) {
        kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
        return cudaSuccess;
    }
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/* TS_LAUNCH(op, kernel, grid, block, smem, stream, dims, args...): kernel is a function name
 * or pointer without commas (bind template instances to a local variable first). Launches with
 * PDL when pdl_enabled(). */
#define TS_LAUNCH(op, kernel, grid, block, smem, stream, dimstr, ...)                         \
    do {                                                                                     \
        const dim3 ts_grid_(grid), ts_block_(block);                                         \
        if (::ts::launch_noted())                                                            \
            ::ts::log_launch((op), reinterpret_cast<const void *>(kernel), ts_grid_, ts_block_, \
                             (size_t)(smem), (dimstr));                                      \
        ::ts::note_launch((op), reinterpret_cast<const void *>(kernel), nullptr, (dimstr));  \
        TS_CHECK((op), ::ts::launch_kernel(kernel, ts_grid_, ts_block_, (size_t)(smem), (stream), __VA_ARGS__)); \
        TS_CHECK((op), cudaGetLastError());                                                  \
        TS_CHECK((op), ::ts::after_launch((op), (stream)));                                  \
    } while (0)

/* TS_LAUNCH without programmatic dependent launch: for the cluster kernel (softmax's), where
 * the two launch attributes together are not relied on. Its kernel still begins with the wait. */
#define TS_LAUNCH_PLAIN(op, kernel, grid, block, smem, stream, dimstr, ...)                   \
    do {                                                                                     \
        const dim3 ts_grid_(grid), ts_block_(block);                                         \
        if (::ts::launch_noted())                                                            \
            ::ts::log_launch((op), reinterpret_cast<const void *>(kernel), ts_grid_, ts_block_, \
                             (size_t)(smem), (dimstr));                                      \
        ::ts::note_launch((op), reinterpret_cast<const void *>(kernel), nullptr, (dimstr));  \
        kernel<<<ts_grid_, ts_block_, (smem), (stream)>>>(__VA_ARGS__);                      \
        TS_CHECK((op), cudaGetLastError());                                                  \
        TS_CHECK((op), ::ts::after_launch((op), (stream)));                                  \
    } while (0)

/* The first statement of every kernel (see pdl_enabled): wait until the grid before this one
 * on the stream has completed and its writes are visible. A no-op below sm_90 and for a launch
 * without the attribute. */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* ---- entry-point guards ------------------------------------------------------------------ */

/* TS_ERR_STICKY (with the latched message) once a sticky error happened, else TS_OK. Every
 * ts_* entry calls this first. */
int sticky_status();
/* After validation: TS_ERR_NOT_INITIALIZED unless ts_init succeeded; makes the library's
 * device current on the calling thread; resolves a NULL stream to the library's stream. */
int ready(const char *op, void *stream_arg, cudaStream_t *stream);

#define TS_STICKY_GUARD()                                                                    \
    do {                                                                                     \
        int ts_sticky_ = ::ts::sticky_status();                                              \
        if (ts_sticky_ != TS_OK) return ts_sticky_;                                          \
    } while (0)

/* ---- argument validation ----------------------------------------------------------------- */

/* Collects the checks of one call; the first failure wins and is written to the last-error
 * buffer as "op: arg = value: reason". */
class Validator {
  public:
    explicit Validator(const char *op) : op_(op) {}
    bool ok() const { return status_ == TS_OK; }
    int status() const { return status_; }
    const char *op() const { return op_; }

    void fail(int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
    /* A required pointer (device buffer or config). */
    void ptr(const void *p, const char *name);
    /* A dim that must be > 0. */
    void positive(int64_t v, const char *name);
    /* dtype must be one of allowed (e.g. gemm's out_dtype, softmax's in_dtype): a known but
     * unimplemented dtype is TS_ERR_UNSUPPORTED, a value outside ts_dtype TS_ERR_INVALID_ARGUMENT. */
    void dtype_in(int dtype, const char *name, std::initializer_list<int> allowed);
    /* A storage dtype: TS_F16 or TS_BF16 (dtype_in with those two). */
    void dtype_storage(int dtype, const char *name);
    /* eps > 0 and finite. */
    void eps(float v, const char *name);
    /* scale > 0 and finite. */
    void scale(float v, const char *name);
    /* The elements of one tensor (the product of its dims) must not exceed 2^59, so byte offsets
     * of any dtype fit in int64. Non-positive dims are left to positive(). */
    void elements(const char *what, std::initializer_list<int64_t> dims);
    /* The FP8 quantisers' outputs (quant_fp8, the fused ones): dynamic (scale NULL) needs scales
     * and a group_size dividing hidden; static a group_size of 0 and no scales. */
    void quant_outputs(const float *scales, const float *scale, int hidden, int group_size);

  private:
    const char *op_;
    int status_ = TS_OK;
};

const char *dtype_name(int dtype);

/* ---- storage types ----------------------------------------------------------------------- */

/* The 16-bit storage of activations and weights (touchstone.h): TS_F16 is __half, TS_BF16 is
 * __nv_bfloat16. Every kernel that reads or writes 16-bit data takes the type as its last template
 * argument T (softmax_kernel, whose input may be fp32 as well, as its first), so the two share one
 * source: the same vector widths, tiling and launch plans, and the path table names each instance
 * (layernorm_vec_kernel<1, __nv_bfloat16>). Both are 2 bytes, so
 * a 16-byte vector holds 8 of either and every byte count is the same. Math is fp32 for both; the
 * types differ only where a value is stored (or rounded as if stored): from_float<T> and pack2<T>,
 * round to nearest even in T. The kernels that only copy 16-bit rows bit for bit (embedding,
 * set_rows) move bytes and need no type. */
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "16-bit storage types");

template <typename T>
struct Storage;
template <>
struct Storage<__half> {
    using Pair = __half2; /* two values in one 32-bit word, lo in the low half */
    static constexpr cudaDataType_t cuda_type = CUDA_R_16F;
    static constexpr const char *name = "f16";
};
template <>
struct Storage<__nv_bfloat16> {
    using Pair = __nv_bfloat162;
    static constexpr cudaDataType_t cuda_type = CUDA_R_16BF;
    static constexpr const char *name = "bf16";
};

template <typename T>
struct StorageTag {
    using type = T;
};

/* The one dispatch of an entry on its storage dtype, after validation accepted it (dtype_storage):
 * f(StorageTag<T>{}) with T = __nv_bfloat16 for TS_BF16, __half for TS_F16. */
template <typename F>
int with_storage(int dtype, F &&f) {
    if (dtype == TS_BF16) return f(StorageTag<__nv_bfloat16>{});
    return f(StorageTag<__half>{});
}

/* ---- library state ----------------------------------------------------------------------- */

int sm_count();
/* Largest dynamic shared memory a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin). */
int max_shared_optin();
int current_device();
cublasHandle_t cublas_handle();
cublasLtHandle_t cublaslt_handle();
/* Serialises use of the cuBLAS handles (their stream binding) across host threads. */
std::mutex &blas_mutex();

/* Library-owned device workspaces, grown on demand to the largest request and reused; freed by
 * ts_shutdown. Ops that share a slot must run on one stream (the library is not re-entrant
 * across concurrently running streams for the ops that use a workspace). */
enum Workspace {
    WS_FFN = 0,
    WS_DECODE,
    WS_DECODE_COUNTERS,
    WS_GEMM,
    WS_CUBLASLT,
    WS_CUBLAS,
    WS_SAMPLE,          /* sample: per-row plans (bin offsets and masses), candidates, fault details */
    WS_SAMPLE_COUNTERS, /* sample: per-row accumulators, bin totals and block counters, zero between calls */
    WS_W4A16,           /* gemm_w4a16: the dequantised weight */
    WS_MOE,             /* moe_ffn: the expert-sorted rows, their tiles and the activations */
    WS_COUNT
};
int workspace(const char *op, Workspace slot, size_t bytes, void **ptr);

/* ---- graph capture (graph.cu) ------------------------------------------------------------ */

/* True between a successful ts_graph_begin and its ts_graph_end. */
bool capturing();
/* TS_ERR_UNSUPPORTED naming op while a capture is open, else TS_OK: for the calls that wait for
 * the device, allocate or free, which a capture cannot record (touchstone.h, "graphs"). */
int refuse_during_capture(const char *op);

/* Lets kernel take up to the device's opt-in shared memory per block (needed above 48 KiB) in
 * dynamic shared memory, less what it declares statically (the two together may not exceed the
 * opt-in limit); done once per kernel and device, tracked in done_for_device (a static of the
 * caller). */
template <typename Kernel>
int allow_max_shared(const char *op, Kernel kernel, std::atomic<int> &done_for_device) {
    const int dev = current_device();
    if (done_for_device.load(std::memory_order_relaxed) == dev) return TS_OK;
    cudaFuncAttributes attr;
    TS_CHECK(op, cudaFuncGetAttributes(&attr, kernel));
    TS_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      max_shared_optin() - (int)attr.sharedSizeBytes));
    done_for_device.store(dev, std::memory_order_relaxed);
    return TS_OK;
}

/* Resident blocks per SM of kernel at (threads, dynamic shared memory), from the occupancy
 * calculator. The answer for the last (threads, smem) asked is remembered in cache (a static of
 * the caller): an op is called with one shape over and over, and the launch path stays short
 * (host time between a caller's start event and the launch is device idle time). */
template <typename Kernel>
int blocks_per_sm(const char *op, Kernel kernel, int threads, size_t smem, std::atomic<uint64_t> &cache,
                  int *blocks) {
    const uint64_t key = ((uint64_t)smem << 24) | ((uint64_t)threads << 8);
    const uint64_t c = cache.load(std::memory_order_relaxed);
    if ((c & ~(uint64_t)0xff) == key && (c & 0xff) != 0) {
        *blocks = (int)(c & 0xff);
        return TS_OK;
    }
    int n = 0;
    TS_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    n = n < 1 ? 1 : (n > 255 ? 255 : n);
    cache.store(key | (uint64_t)n, std::memory_order_relaxed);
    *blocks = n;
    return TS_OK;
}

/* Called by ts_shutdown: forget cached cuBLASLt heuristics (gemm.cu, gemm_fp8.cu). */
void gemm_release();
void gemm_fp8_release();

/* Internal launchers shared between ops (each defined in its op's file, instantiated there for
 * both storage types). */
template <typename T>
int launch_swiglu(const char *op, T *out, const T *gate, const T *up, int64_t n, cudaStream_t stream);
/* rmsnorm and rmsnorm_residual on rows x hidden (their files), launch records under op; the weight
 * W is T itself or float (an fp32 weight, ts_norm_config's weight_dtype TS_F32). */
template <typename W, typename T>
int launch_rmsnorm(const char *op, T *out, const T *x, const W *weight, int rows, int hidden, float eps,
                   cudaStream_t stream);
template <typename W, typename T>
int launch_rmsnorm_residual(const char *op, T *sum_out, T *out, const T *x, const T *residual, const W *weight,
                            int rows, int hidden, float eps, cudaStream_t stream);
/* layernorm and layernorm_residual likewise. */
template <typename T>
int launch_layernorm(const char *op, T *out, const T *x, const T *gamma, const T *beta, int rows, int hidden,
                     float eps, cudaStream_t stream);
template <typename T>
int launch_layernorm_residual(const char *op, T *sum_out, T *out, const T *x, const T *residual, const T *gamma,
                              const T *beta, int rows, int hidden, float eps, cudaStream_t stream);
/* Row-major out[m, n] = x[m, k] . w[n, k]^T (+ bias[n]), inputs and bias in T, fp32 accumulation,
 * one rounding to out: T, or fp32 with out_f32. */
template <typename T>
int gemm_nt(const char *op, void *out, bool out_f32, const T *x, const T *w, const T *bias, int m, int n, int k,
            cudaStream_t stream);

/* gemm_w4a16 over a weight in the tiled layout (cuda/kernels/gemm_w4a16_tiled.cu), its config
 * checked; and the checks of a config the tiled layout can hold (cuda/kernels/w4a16_tile.cu). */
int launch_gemm_w4a16_tiled(const char *op, void *out, const void *x, const void *tiled, const ts_w4a16_config &c,
                            cudaStream_t stream);
void check_w4a16_tileable(Validator &v, const ts_w4a16_config *cfg);

/* ---- device fault record ----------------------------------------------------------------- */

enum FaultKind {
    FAULT_NONE = 0,
    FAULT_ROPE_POSITION = 1,          /* rope: positions[i] < 0 */
    FAULT_POS_EMBEDDING_POSITION = 2, /* pos_embedding: positions[i] outside [0, table_rows) */
    FAULT_EMBEDDING_ID = 3,           /* embedding: ids[i] outside [0, table_rows) */
    FAULT_DECODE_CACHE_LEN = 4,       /* attention_decode: cache_lens[b] outside [1, max_len] */
    /* Not indices but bad values: reported as TS_ERR_INVALID_ARGUMENT, as the host checks of the
     * same op would be. */
    FAULT_SAMPLE_LOGIT = 5,   /* sample: logits[index][value] is NaN or +inf (bound: its bits) */
    FAULT_SAMPLE_ALL_NEG_INF = 6, /* sample: every logit of row index is -inf */
    /* An index again (TS_ERR_INDEX); numbered after the sample kinds, which came first. */
    FAULT_SET_ROWS_ROW = 7, /* set_rows: rows[i] outside [0, dst_rows); that row is not written */
    FAULT_W4A16_G_IDX = 8,  /* gemm_w4a16: g_idx[i] outside [0, k / group_size) */
    FAULT_SET_ROWS_FP8_ROW = 9,     /* set_rows_fp8: rows[i] outside [0, dst_rows) */
    FAULT_DECODE_FP8_CACHE_LEN = 10, /* attention_decode_fp8: cache_lens[b] outside [1, max_len] */
    FAULT_PAGED_CACHE_LEN = 11,      /* attention_decode_paged: cache_lens[b] outside [1, width * block_size] */
    FAULT_PAGED_BLOCK_TABLE = 12,    /* attention_decode_paged: a read block_table entry outside [0, num_blocks) */
    FAULT_PREFILL_Q_STARTS = 13,     /* attention_prefill_paged: q_starts not 0, increasing, ending at total_q */
    FAULT_PREFILL_KV_LEN = 14,       /* attention_prefill_paged: kv_lens[b] outside [q_len, width * block_size] */
    FAULT_PREFILL_BLOCK_TABLE = 15,  /* attention_prefill_paged: a read block_table entry outside [0, num_blocks) */
    FAULT_MOE_ID = 16,               /* moe_ffn: ids[i] outside [0, experts) */
    FAULT_PAGED_FP8_CACHE_LEN = 17,     /* attention_decode_paged_fp8: as FAULT_PAGED_CACHE_LEN */
    FAULT_PAGED_FP8_BLOCK_TABLE = 18,   /* attention_decode_paged_fp8: as FAULT_PAGED_BLOCK_TABLE */
    FAULT_PREFILL_FP8_Q_STARTS = 19,    /* attention_prefill_paged_fp8: as FAULT_PREFILL_Q_STARTS */
    FAULT_PREFILL_FP8_KV_LEN = 20,      /* attention_prefill_paged_fp8: as FAULT_PREFILL_KV_LEN */
    FAULT_PREFILL_FP8_BLOCK_TABLE = 21  /* attention_prefill_paged_fp8: as FAULT_PREFILL_BLOCK_TABLE */
};

/* The first bad value in device data (an out-of-range index, a bad logit) any kernel saw since
 * the last check; claimed by atomicCAS. */
struct FaultRecord {
    int claimed; /* 0 = empty */
    int kind;    /* FaultKind */
    int index;   /* element of the index tensor */
    int value;   /* the value found there */
    int bound;   /* table_rows, dst_rows, or max_len */
    int pad[3];
};

/* Device pointer to the record, allocated by ts_init. */
FaultRecord *fault_record();

#ifdef __CUDACC__
__device__ __forceinline__ void report_fault(FaultRecord *f, int kind, int index, int value, int bound) {
    if (atomicCAS(&f->claimed, 0, 1) == 0) {
        f->kind = kind;
        f->index = index;
        f->value = value;
        f->bound = bound;
        __threadfence();
    }
}

/* ---- device helpers ---------------------------------------------------------------------- */

/* Storage <-> fp32, exact for both types. A bf16 is the top half of an fp32, so its conversion is
 * an integer shift (or mask) on the ALU rather than the conversion instruction __bfloat162float
 * emits for sm_90 (cvt.f32.bf16): measured on an H100 at decode shapes, that took the bf16 gemvs
 * from 0-5% slower than their fp16 twins to 5-20% faster; no other kernel moved. */
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __uint_as_float((uint32_t)__bfloat16_as_ushort(v) << 16);
}
__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) {
    const uint32_t u = *reinterpret_cast<const uint32_t *>(&v); /* lo in the low half */
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}

/* fp32 -> T rounded to nearest even (the storage rounding of the contract), and two of them in
 * one 32-bit word, lo in the low half (one cvt.rn.{f16,bf16}x2.f32). */
template <typename T>
__device__ T from_float(float v);
template <typename T>
__device__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* v rounded to T and back: the value a store of v in T and a reload would give. */
template <typename T>
__device__ __forceinline__ float round_to(float v) {
    return to_float(from_float<T>(v));
}

/* 8 values of T in a 16-byte register vector <-> 8 floats. */
template <typename T>
__device__ __forceinline__ void unpack8(const uint4 &u, float (&v)[8]) {
    using P = typename Storage<T>::Pair;
    const P *h = reinterpret_cast<const P *>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = to_float2(h[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
    return make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
}

template <typename T>
__device__ __forceinline__ void load8(const T *p, float (&v)[8]) {
    unpack8<T>(*reinterpret_cast<const uint4 *>(p), v);
}
/* 8 fp32 values (rmsnorm's fp32 weight) from a 16-byte aligned p: two 16-byte loads. */
__device__ __forceinline__ void load8(const float *p, float (&v)[8]) {
    const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename T>
__device__ __forceinline__ void store8(T *p, const float (&v)[8]) {
    *reinterpret_cast<uint4 *>(p) = pack8<T>(v);
}

/* Asynchronous 16-byte global -> shared copies (cp.async, sm_80+): no register staging, many
 * in flight; wait_group N waits until at most N of this thread's committed groups are pending. */
__device__ __forceinline__ void cp_async16(void *smem_dst, const void *gmem_src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* The bare special-function unit instructions, without the range scaling that __expf and
 * __fdividef add for subnormal inputs and results (results below 2^-126 flush to 0).
 * ex2_approx: 2^x, relative error about 2^-22; rcp_approx: 1/x, 1 ulp (PTX ISA). */
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* silu(g) * u = g / (1 + exp(-g)) * u in fp32, the activation of swiglu and gemm_swiglu:
 * exp(-g) = 2^(-g log2(e)); 1 / inf = 0 for g < -88, where the value is < 1e-36. */
__device__ __forceinline__ float silu_mul(float g, float u) {
    return g * rcp_approx(1.0f + ex2_approx(g * -1.44269504088896341f)) * u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block; every thread gets the total. blockDim.x must be a multiple of 32 (at most
 * 1024); scratch is 32 floats of shared memory, reusable across calls. */
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* a previous call may still be reading scratch */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}
#endif /* __CUDACC__ */

/* ---- host helpers ------------------------------------------------------------------------ */

inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Blocks for a grid-stride loop over `work` items at `threads` per block: enough to fill every
 * SM at full occupancy (2048 threads per SM), never more than the work needs. */
inline unsigned grid_for(int64_t work, int threads) {
    const int64_t need = ceil_div(work, threads);
    const int64_t fill = (int64_t)sm_count() * (2048 / threads);
    const int64_t g = need < fill ? need : fill;
    return (unsigned)(g < 1 ? 1 : g);
}

/* The number of k splits of a split-K gemv (gemm_fp8's and gemm_w4a16's decode kernels): work
 * items are (column tile, k slice), a warp each, in rounds of `resident` warps. The weight read
 * is the cost, and it runs at full speed only with `full` of the resident warps or more busy
 * (gemm_fp8's: half of them; gemm_w4a16's, which dequantises as it goes, all); a last round that
 * is mostly empty costs as much as a full one; every split adds its fp32 partials (out_elems
 * written and read back, 8 bytes each). The estimate, in bytes at full bandwidth, is minimised
 * over 1..granules splits; a granule is the k block a slice is made of, granule_bytes the weight
 * bytes of one tile over one granule. */
inline int splitk_count(int64_t tiles, int64_t granules, double granule_bytes, double out_elems, int resident,
                        double full) {
    int best = 1;
    double best_cost = 0.0;
    for (int64_t s = 1; s <= granules; ++s) {
        const int64_t items = tiles * s, busy = items < resident ? items : resident;
        const int64_t rounds = ceil_div(items, resident);
        const double item_bytes = (double)ceil_div(granules, s) * granule_bytes;
        const double floor_warps = full * resident;
        const double round_bytes = ((double)busy > floor_warps ? (double)busy : floor_warps) * item_bytes;
        const double cost = (double)rounds * round_bytes + (s > 1 ? 8.0 * (double)s * out_elems : 0.0);
        if (s == 1 || cost < best_cost) {
            best = (int)s;
            best_cost = cost;
        }
    }
    return best;
}

/* Launch plan of the row kernels (rmsnorm, layernorm, layernorm_residual, rmsnorm_residual): one
 * block per row.
 * vpt > 0: the row is held in registers, vpt 16-byte vectors (8 values of either storage type) per
 * thread, at most kRowThreads threads; needs hidden % 8 == 0, 16-byte aligned pointers and
 * hidden <= 16384.
 * vpt == 0: the generic kernel (scalar loads, re-reads the row from global memory / L1 / L2 for
 * each pass; up to 1024 threads).
 * Tried on the H200 at 4096 x 4096 and measured no better (rmsnorm / layernorm /
 * layernorm_residual, % of copy bandwidth; this plan: 73 / 64 / 86): up to 8 vectors per thread
 * at 64 threads per row (70 / 63 / 80: 21 rows resident per SM, so 4096 rows ran in 1.48 waves);
 * persistent blocks streaming rows through shared memory 2 rows ahead with cp.async
 * (74.5 / 61 / 79). */
constexpr int kRowThreads = 256;

struct RowPlan {
    int vpt;
    int threads;
};

inline RowPlan plan_row(int hidden, bool aligned) {
    if (aligned && hidden % 8 == 0) {
        const int nvec = hidden / 8;
        for (int vpt = 1; vpt <= 8; vpt *= 2)
            if (nvec <= vpt * kRowThreads) return {vpt, round_up((int)ceil_div(nvec, vpt), 32)};
    }
    return {0, hidden >= 1024 ? 1024 : round_up(hidden, 32)};
}

/* Launches one block per row with the kernel the plan picks: the register kernels for 1, 2, 4
 * or 8 vectors per thread, else the generic one. All five share one signature. */
template <typename Kernel, typename... Args>
int launch_row(const char *op, const RowPlan &plan, int rows, cudaStream_t stream, const char *dimstr, Kernel vpt1,
               Kernel vpt2, Kernel vpt4, Kernel vpt8, Kernel generic, Args... args) {
    Kernel kernel = plan.vpt == 1   ? vpt1
                    : plan.vpt == 2 ? vpt2
                    : plan.vpt == 4 ? vpt4
                    : plan.vpt == 8 ? vpt8
                                    : generic;
    TS_LAUNCH(op, kernel, rows, plan.threads, 0, stream, dimstr, args...);
    return TS_OK;
}

/* The start of a fused residual norm (layernorm_residual, rmsnorm_residual): the row
 * T(x + residual) into registers v (VPT vectors of 8 per thread) and into sum_out, each row
 * pointer already offset to the row. The sum is rounded to the storage type before it is kept, so
 * the norm that follows sees exactly what the unfused residual_add would have stored. */
template <int VPT, typename T>
__device__ __forceinline__ void residual_row_regs(float (&v)[VPT][8], const T *x, const T *residual, T *sum_out,
                                                  int nvec) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            float r[8];
            load8(x + c * 8, v[k]);
            load8(residual + c * 8, r);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[k][j] = round_to<T>(v[k][j] + r[j]);
            store8(sum_out + c * 8, v[k]); /* exact: the values are in T already */
        }
    }
}

/* The end of a two-pass LayerNorm over a row held in registers, shared by layernorm and
 * layernorm_residual: the mean from each thread's share of the row sum, then the sum of
 * squared deviations from it (never E[x^2] - E[x]^2, which cancels when |mean| >> std), then
 * out_row = T(((v - mean) * inv) * gamma + beta). */
template <int VPT, typename T>
__device__ __forceinline__ void layernorm_row_regs(float (&v)[VPT][8], float sum, int nvec, int hidden, float eps,
                                                    const T *gamma, const T *beta, T *out_row, float *scratch) {
    const float mean = block_sum(sum, scratch) / (float)hidden;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float dv = v[k][j] - mean;
                ss += dv * dv;
            }
        }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            float g[8], b[8];
            load8(gamma + c * 8, g);
            load8(beta + c * 8, b);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[k][j] = ((v[k][j] - mean) * inv) * g[j] + b[j];
            store8(out_row + c * 8, v[k]);
        }
    }
}

/* The same for the generic kernels, re-reading the row (src_row) from global memory: each
 * thread reads only elements it summed (or stored) itself. */
template <typename T>
__device__ __forceinline__ void layernorm_row_generic(const T *src_row, float sum, int hidden, float eps,
                                                       const T *gamma, const T *beta, T *out_row, float *scratch) {
    const float mean = block_sum(sum, scratch) / (float)hidden;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float dv = to_float(src_row[i]) - mean;
        ss += dv * dv;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out_row[i] = from_float<T>(((to_float(src_row[i]) - mean) * inv) * to_float(gamma[i]) + to_float(beta[i]));
}

/* The end of an RMSNorm over a row held in registers, shared by rmsnorm and rmsnorm_residual:
 * the row's sum of squares from each thread's share ss (fp32), then
 * out_row = T((v * inv) * weight), the reference's rounding order. The weight W is T or float (an
 * fp32 weight such as Gemma's 1 + w): the product is fp32 either way, so only the load differs. */
template <int VPT, typename W, typename T>
__device__ __forceinline__ void rmsnorm_row_regs(float (&v)[VPT][8], float ss, int nvec, int hidden, float eps,
                                                  const W *weight, T *out_row, float *scratch) {
    const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < nvec) {
            float w[8];
            load8(weight + c * 8, w);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[k][j] = (v[k][j] * inv) * w[j];
            store8(out_row + c * 8, v[k]);
        }
    }
}

/* The same for the generic kernels, re-reading the row (src_row) from global memory: each
 * thread reads only elements it squared (or stored) itself. */
template <typename W, typename T>
__device__ __forceinline__ void rmsnorm_row_generic(const T *src_row, float ss, int hidden, float eps,
                                                     const W *weight, T *out_row, float *scratch) {
    const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out_row[i] = from_float<T>((to_float(src_row[i]) * inv) * to_float(weight[i]));
}

/* The ts_norm_config checks every norm entry runs after its pointer checks. f32_weight: the op
 * takes an fp32 weight (weight_dtype TS_F32: rmsnorm, rmsnorm_residual); the LayerNorms do not,
 * and refuse it by name. */
inline void check_norm(Validator &v, const ts_norm_config *cfg, bool f32_weight) {
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->hidden, "cfg->hidden");
    v.eps(cfg->eps, "cfg->eps");
    v.elements("x", {cfg->rows, cfg->hidden});
    const int wd = cfg->weight_dtype;
    if (!v.ok() || wd == 0 || wd == cfg->dtype || (f32_weight && wd == TS_F32)) return;
    if (wd < TS_F16 || wd > TS_F8E5M2)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->weight_dtype = %d: not a ts_dtype (0: the storage dtype)", wd);
    else if (f32_weight)
        v.fail(TS_ERR_UNSUPPORTED, "cfg->weight_dtype = %d (%s): the weight is in the storage dtype (0 or %s) or TS_F32",
               wd, dtype_name(wd), dtype_name(cfg->dtype));
    else
        v.fail(TS_ERR_UNSUPPORTED,
               "cfg->weight_dtype = %d (%s): gamma and beta are in the storage dtype (0 or %s); an fp32 weight is "
               "rmsnorm's and rmsnorm_residual's only",
               wd, dtype_name(wd), dtype_name(cfg->dtype));
}

/* gemm's and swiglu_gemm's out_dtype against in_dtype, after both passed their own checks: a
 * 16-bit out_dtype is in_dtype itself; the other 16-bit type (TS_F16 in and TS_BF16 out, or the
 * reverse) is a conversion this build does not do, refused naming both. */
inline void check_out_dtype(Validator &v, const ts_gemm_config *cfg) {
    if (v.ok() && cfg->out_dtype != TS_F32 && cfg->out_dtype != cfg->in_dtype)
        v.fail(TS_ERR_UNSUPPORTED,
               "cfg->out_dtype = %d (%s) with cfg->in_dtype = %d (%s): a 16-bit out_dtype must be in_dtype (no "
               "mixing of TS_F16 and TS_BF16)",
               (int)cfg->out_dtype, dtype_name(cfg->out_dtype), (int)cfg->in_dtype, dtype_name(cfg->in_dtype));
}

/* The ts_embedding_config checks of embedding and pos_embedding; rows_of names the [tokens,
 * hidden] operand the op reads or writes ("out" for the gather, "x" for the position add).
 * scaled: the op takes a scale (embedding: any finite one, 0 and 1 meaning none); pos_embedding
 * takes none and refuses one rather than ignore it. */
inline void check_embedding(Validator &v, const ts_embedding_config *cfg, const char *rows_of, bool scaled) {
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->tokens, "cfg->tokens");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->table_rows, "cfg->table_rows");
    v.elements(rows_of, {cfg->tokens, cfg->hidden});
    v.elements("table", {cfg->table_rows, cfg->hidden});
    if (v.ok() && scaled && !std::isfinite(cfg->scale))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale = %g: must be finite (0 or 1: no scaling)", (double)cfg->scale);
    if (v.ok() && !scaled && cfg->scale != 0.0f && cfg->scale != 1.0f)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->scale = %g: this op takes no scale (0 or 1)", (double)cfg->scale);
}

/* Whether an embedding config asks for a scaled gather (a scale other than 0 and 1). */
inline bool embedding_scaled(const ts_embedding_config *cfg) { return cfg->scale != 0.0f && cfg->scale != 1.0f; }

/* The head layout both attention kernels support: n_kv_heads divides n_heads (GQA) and
 * head_dim is a multiple of 8 (16-byte vectors) up to 256 (their template instances). */
inline void check_heads(Validator &v, int n_heads, int n_kv_heads, int head_dim) {
    if (v.ok() && n_heads % n_kv_heads != 0)
        v.fail(TS_ERR_SHAPE_MISMATCH, "cfg->n_kv_heads = %d: must divide n_heads (%d)", n_kv_heads, n_heads);
    if (v.ok() && (head_dim % 8 != 0 || head_dim > 256))
        v.fail(TS_ERR_UNSUPPORTED, "cfg->head_dim = %d: this build supports multiples of 8 up to 256", head_dim);
}

/* A sliding window (the attention configs' window): 0 for none, else positive; a prefill's
 * needs causal attention (causal is true for the decode entries, whose query is the last
 * position). */
inline void check_window(Validator &v, int window, bool causal) {
    if (v.ok() && window < 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->window = %d: must be >= 0 (0: no sliding window)", window);
    if (v.ok() && window > 0 && !causal)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->window = %d: a sliding window needs causal attention (cfg->causal = 0)",
               window);
}

/* The attention configs' softcap (touchstone.h, "Logit soft-capping"): 0 or a positive finite
 * value. */
inline void check_softcap(Validator &v, float softcap) {
    if (v.ok() && !(softcap >= 0.0f && std::isfinite(softcap)))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->softcap = %g: must be 0 (none) or positive and finite", softcap);
}

/* Soft-capping of a scaled score s (natural units): cap * tanh(s / cap), s / cap as
 * s * inv_cap (inv_cap = 1 / cap rounded once; the quotient differs by at most one rounding,
 * 2^-24 relative, from the division transformers does). tanh(x) = 1 - 2 / (e^(2x) + 1) with
 * e^(2x) by the SFU's ex2.approx (relative error about 2^-22) and 1 / (.) by rcp.approx (1 ulp):
 * e^(2x) overflows to inf for x > 44 (tanh = 1 exactly, 1 / inf = 0) and underflows to 0 below
 * -44 (tanh = -1). Its error against fp64 tanh, emulated in fp32 over s in [-400, 400] at cap 50
 * (tools/gen-golden/selftest/kernels.py, softcap_tanh_error, each SFU result perturbed by its
 * bound): at most 2.25e-5 absolute on the capped score at cap 50 (2^-21 of the cap; tanhf's 2
 * ulp would be 6e-6), 4.6% of the 4.9e-4 score error that the fp16 rounding of P, which the
 * attention tolerances budget, amounts to. Not tanhf: its two-branch libdevice body (a polynomial below |x| = 0.6)
 * kept several registers live inside the score loops and made the uncapped tensor-core decode
 * at head_dim 64 spill (ptxas -v, sm_90: 0 -> 52/76 bytes of spill stores/loads); not
 * tanh.approx.f32, whose 2^-10.987 relative error is 0.025 at a cap of 50. */
__device__ __forceinline__ float softcap_score(float s, float cap, float inv_cap) {
    const float e = ex2_approx(s * inv_cap * 2.88539008177792681f); /* e^(2x), 2 log2(e) */
    return cap - 2.0f * cap * rcp_approx(e + 1.0f);
}

} // namespace ts

#endif /* TOUCHSTONE_INTERNAL_H */
