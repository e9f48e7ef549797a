/*
 * runtime.cu — device, stream, cuBLAS handles, memory, errors, the device fault record,
 * workspaces, device info and timers. See include/touchstone.h for the contract.
 */
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

struct ts_timer {
    cudaEvent_t start;
    cudaEvent_t stop;
};

namespace ts {
namespace {

struct State {
    std::mutex mu; /* init/shutdown, workspaces, fault record readout */
    std::atomic<bool> initialized{false};
    int device = -1;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t lt = nullptr;
    FaultRecord *d_fault = nullptr;
    FaultRecord *h_fault = nullptr; /* pinned readout buffer */
    int sm_count = 0;
    int max_shared_optin = 48 * 1024;
    void *ws[WS_COUNT] = {};
    size_t ws_bytes[WS_COUNT] = {};
    double bandwidth_gbps = 0.0;
};

State g;
std::mutex g_blas_mu;

std::atomic<bool> g_debug{false};
std::atomic<bool> g_sync{false};
std::atomic<bool> g_batch_invariant{false};
/* ts_set_gemv_rows; the default is the measured whole-model choice (touchstone.h). */
std::atomic<int> g_gemv_rows{ts::kDefaultGemvRows};
std::atomic<bool> g_pdl{false};

/* Path recording (ts_record_paths): "<op>\t<what>" -> count. */
std::atomic<bool> g_record{false};
std::mutex g_record_mu;
std::map<std::string, long long> g_records;
std::atomic<const char *> g_last_op{"(none)"};

std::mutex g_sticky_mu;
std::atomic<bool> g_sticky{false};
std::string g_sticky_msg;
int g_sticky_status = TS_ERR_STICKY; /* TS_ERR_TIMEOUT after a wait past its deadline */

thread_local char tl_error[2048] = "";
thread_local char tl_dims[512] = "";

bool is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
#if CUDART_VERSION >= 12080
    case cudaErrorTensorMemoryLeak:
#endif
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorExternalDevice:
    case cudaErrorUnknown:
        return true;
    default:
        return false;
    }
}

const char *base_name(const char *path) {
    const char *s = std::strrchr(path, '/');
    return s ? s + 1 : path;
}

void vformat(char *buf, size_t n, const char *fmt, va_list ap) { std::vsnprintf(buf, n, fmt, ap); }

/* "void (anonymous namespace)::rmsnorm_vec_kernel<8, float, __half>(__half*, ...)" -> "rmsnorm_vec_kernel<8, float, __half>". */
std::string short_name(std::string name) {
    if (!name.empty() && name.back() == ')') { /* drop the parameter list */
        int depth = 0;
        for (size_t i = name.size(); i-- > 0;) {
            if (name[i] == ')') {
                ++depth;
            } else if (name[i] == '(' && --depth == 0) {
                name.resize(i);
                break;
            }
        }
    }
    size_t start = 0; /* after the last "::" or space outside template arguments and parentheses */
    int depth = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        if (c == '<' || c == '(')
            ++depth;
        else if (c == '>' || c == ')')
            --depth;
        else if (depth == 0 && c == ' ')
            start = i + 1;
        else if (depth == 0 && c == ':' && i + 1 < name.size() && name[i + 1] == ':')
            start = i + 2;
    }
    return name.substr(start);
}

bool env_is(const char *name, const char *value) {
    const char *v = std::getenv(name);
    return v != nullptr && std::strcmp(v, value) == 0;
}

} // namespace

/* ---- errors ------------------------------------------------------------------------------ */

int set_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vformat(tl_error, sizeof tl_error, fmt, ap);
    va_end(ap);
    return status;
}

int cuda_failure(const char *op, cudaError_t err, const char *expr, const char *file, int line) {
    if (is_sticky(err)) {
        std::lock_guard<std::mutex> lk(g_sticky_mu);
        if (!g_sticky.load()) {
            char msg[1536];
            std::snprintf(msg, sizeof msg,
                          "%s: %s: %s (%s) at %s:%d; the CUDA context is unusable (sticky error), most recent op "
                          "launched: %s; restart the process",
                          op, expr, cudaGetErrorString(err), cudaGetErrorName(err), base_name(file), line,
                          g_last_op.load());
            g_sticky_msg = msg;
            g_sticky_status = TS_ERR_STICKY;
            g_sticky.store(true);
        }
        return set_error(g_sticky_status, "%s", g_sticky_msg.c_str());
    }
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call does not see it */
    int status = TS_ERR_CUDA;
    switch (err) {
    case cudaErrorMemoryAllocation:
        status = TS_ERR_OUT_OF_MEMORY;
        break;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
        status = TS_ERR_NO_DEVICE;
        break;
    default:
        break;
    }
    return set_error(status, "%s: %s: %s (%s) at %s:%d", op, expr, cudaGetErrorString(err), cudaGetErrorName(err),
                     base_name(file), line);
}

int cublas_failure(const char *op, cublasStatus_t st, const char *expr, const char *file, int line) {
    if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) {
        /* The cause may be a sticky CUDA error: report that instead when it is one. */
        cudaError_t e = cudaPeekAtLastError();
        if (is_sticky(e)) return cuda_failure(op, e, expr, file, line);
    }
    const int status = st == CUBLAS_STATUS_ALLOC_FAILED ? TS_ERR_OUT_OF_MEMORY : TS_ERR_CUDA;
    return set_error(status, "%s: %s: %s (cuBLAS status %d) at %s:%d", op, expr, cublasGetStatusString(st), (int)st,
                     base_name(file), line);
}

bool debug_enabled() { return g_debug.load(std::memory_order_relaxed); }

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }

bool batch_invariant() { return g_batch_invariant.load(std::memory_order_relaxed); }

int gemv_rows() { return g_gemv_rows.load(std::memory_order_relaxed); }

const char *dims(const char *fmt, ...) {
    if (!debug_enabled()) return "";
    va_list ap;
    va_start(ap, fmt);
    vformat(tl_dims, sizeof tl_dims, fmt, ap);
    va_end(ap);
    return tl_dims;
}

void record_path(const char *op, const std::string &what) {
    if (!g_record.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lk(g_record_mu);
    ++g_records[std::string(op) + "\t" + what];
}

bool launch_noted() { return g_debug.load(std::memory_order_relaxed) || g_record.load(std::memory_order_relaxed); }

std::string kernel_name(const void *kernel) {
    const char *mangled = nullptr;
    if (kernel == nullptr || cudaFuncGetName(&mangled, kernel) != cudaSuccess || mangled == nullptr) {
        (void)cudaGetLastError();
        return "?";
    }
    int st = 0;
    char *dem = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    std::string name = short_name(st == 0 && dem ? dem : mangled);
    std::free(dem);
    return name;
}

void log_launch(const char *op, const void *kernel, dim3 grid, dim3 block, size_t smem, const char *d) {
    const std::string name = kernel_name(kernel);
    record_path(op, name);
    if (debug_enabled())
        std::fprintf(stderr, "touchstone: debug: %s: launch %s grid=(%u,%u,%u) block=(%u,%u,%u) smem=%zu %s\n", op,
                     name.c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, d);
}

void log_library_call(const char *op, const char *call, const char *d) {
    note_launch(op, nullptr, call, d);
    record_path(op, call);
    if (debug_enabled()) std::fprintf(stderr, "touchstone: debug: %s: %s %s\n", op, call, d);
}

int after_launch(const char *op, cudaStream_t stream) {
    g_last_op.store(op, std::memory_order_relaxed);
    /* A capturing stream cannot be waited for: ts_graph_launch synchronises instead. */
    if (g_sync.load(std::memory_order_relaxed) && !capturing()) return wait_stream(op, stream);
    return TS_OK;
}

int sticky_status() {
    if (!g_sticky.load(std::memory_order_acquire)) return TS_OK;
    std::lock_guard<std::mutex> lk(g_sticky_mu);
    return set_error(g_sticky_status, "%s", g_sticky_msg.c_str());
}

int latch_failure(int status, const char *msg) {
    std::lock_guard<std::mutex> lk(g_sticky_mu);
    if (!g_sticky.load()) {
        g_sticky_msg = msg;
        g_sticky_status = status;
        g_sticky.store(true, std::memory_order_release);
    }
    return set_error(g_sticky_status, "%s", g_sticky_msg.c_str());
}


int ready(const char *op, void *stream_arg, cudaStream_t *stream) {
    if (!g.initialized.load(std::memory_order_acquire))
        return set_error(TS_ERR_NOT_INITIALIZED, "%s: the library is not initialized: call ts_init first", op);
    /* The current device is per host thread, and a Go caller's OS thread changes between calls
     * (goroutines move) and may have run anything since: every entry makes the library's device
     * current. cudaGetDevice reads a thread-local, so asking costs next to nothing; a cached
     * per-thread flag would miss a cudaSetDevice made by other code on the same thread. */
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != g.device) TS_CHECK(op, cudaSetDevice(g.device));
    if (stream) *stream = stream_arg ? static_cast<cudaStream_t>(stream_arg) : g.stream;
    return TS_OK;
}

/* ---- validation -------------------------------------------------------------------------- */

const char *dtype_name(int dtype) {
    switch (dtype) {
    case TS_F16:
        return "TS_F16";
    case TS_BF16:
        return "TS_BF16";
    case TS_F32:
        return "TS_F32";
    case TS_I32:
        return "TS_I32";
    case TS_F8E4M3:
        return "TS_F8E4M3";
    case TS_F8E5M2:
        return "TS_F8E5M2";
    default:
        return "not a ts_dtype";
    }
}

void Validator::fail(int status, const char *fmt, ...) {
    if (status_ != TS_OK) return;
    status_ = status;
    char body[1536];
    va_list ap;
    va_start(ap, fmt);
    vformat(body, sizeof body, fmt, ap);
    va_end(ap);
    set_error(status, "%s: %s", op_, body);
}

void Validator::quant_outputs(const float *scales, const float *scale, int hidden, int group_size) {
    if (!ok()) return;
    if (scale == nullptr) {
        ptr(scales, "scales");
        if (ok() && (group_size <= 0 || hidden % group_size != 0))
            fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must be positive and divide cfg->hidden = %d (dynamic)",
                 group_size, hidden);
    } else if (group_size != 0) {
        fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must be 0 with a static scale (one per tensor)", group_size);
    } else if (scales != nullptr) {
        fail(TS_ERR_INVALID_ARGUMENT, "scales = %p: must be NULL with a static scale", (const void *)scales);
    }
}

void Validator::ptr(const void *p, const char *name) {
    if (p == nullptr) fail(TS_ERR_INVALID_ARGUMENT, "%s = NULL: a pointer is required", name);
}

void Validator::positive(int64_t v, const char *name) {
    if (v <= 0) fail(TS_ERR_INVALID_ARGUMENT, "%s = %lld: must be positive", name, (long long)v);
}

void Validator::dtype_in(int dtype, const char *name, std::initializer_list<int> allowed) {
    for (int a : allowed)
        if (dtype == a) return;
    if (dtype < TS_F16 || dtype > TS_F8E5M2) {
        fail(TS_ERR_INVALID_ARGUMENT, "%s = %d: not a ts_dtype", name, dtype);
        return;
    }
    std::string list; /* "TS_F16, TS_BF16 or TS_F32" */
    size_t i = 0;
    for (int a : allowed) {
        if (i > 0) list += i + 1 == allowed.size() ? " or " : ", ";
        list += dtype_name(a);
        ++i;
    }
    fail(TS_ERR_UNSUPPORTED, "%s = %d (%s): this build supports %s only", name, dtype, dtype_name(dtype),
         list.c_str());
}

void Validator::dtype_storage(int dtype, const char *name) { dtype_in(dtype, name, {TS_F16, TS_BF16}); }

void Validator::eps(float v, const char *name) {
    if (!(v > 0.0f) || !std::isfinite(v)) fail(TS_ERR_INVALID_ARGUMENT, "%s = %g: must be positive and finite", name, v);
}

void Validator::scale(float v, const char *name) {
    if (!(v > 0.0f) || !std::isfinite(v)) fail(TS_ERR_INVALID_ARGUMENT, "%s = %g: must be positive and finite", name, v);
}

void Validator::elements(const char *what, std::initializer_list<int64_t> dims) {
    if (!ok()) return;
    const int64_t limit = (int64_t)1 << 59; /* elements: x 8 bytes still fits in int64 */
    int64_t p = 1;
    bool overflow = false;
    for (int64_t d : dims) {
        if (d <= 0) return; /* reported by positive() */
        if (p > limit / d) overflow = true;
        else p *= d;
    }
    if (!overflow) return;
    char shape[256];
    size_t n = 0;
    for (int64_t d : dims)
        n += std::snprintf(shape + n, n < sizeof shape ? sizeof shape - n : 0, "%s%lld", n ? ", " : "", (long long)d);
    fail(TS_ERR_INVALID_ARGUMENT, "%s = [%s]: more than 2^59 elements, beyond the index range", what, shape);
}

/* ---- state accessors --------------------------------------------------------------------- */

int sm_count() { return g.sm_count > 0 ? g.sm_count : 132; }
int max_shared_optin() { return g.max_shared_optin; }
int current_device() { return g.device; }
cublasHandle_t cublas_handle() { return g.blas; }
cublasLtHandle_t cublaslt_handle() { return g.lt; }
std::mutex &blas_mutex() { return g_blas_mu; }
FaultRecord *fault_record() { return g.d_fault; }

int workspace(const char *op, Workspace slot, size_t bytes, void **ptr) {
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.ws_bytes[slot] < bytes) {
        if (capturing())
            return set_error(TS_ERR_UNSUPPORTED,
                             "%s: workspace %d must grow to %zu bytes during a graph capture, which cannot allocate: "
                             "run the same ops once uncaptured before capturing them",
                             op, (int)slot, bytes);
        if (g.ws[slot] != nullptr) {
            /* Earlier launches on any stream may still read the old buffer. */
            TS_CHECK(op, wait_device(op, g.stream));
            TS_CHECK(op, cudaFree(g.ws[slot]));
            g.ws[slot] = nullptr;
            g.ws_bytes[slot] = 0;
        }
        /* Grow by at least 1/4 so a slowly rising request does not reallocate every call. */
        size_t want = std::max(bytes, g.ws_bytes[slot] + g.ws_bytes[slot] / 4);
        want = (want + 255) & ~(size_t)255;
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, want);
        if (e != cudaSuccess && want > bytes) { /* retry at the exact size */
            (void)cudaGetLastError();
            want = (bytes + 255) & ~(size_t)255;
            e = cudaMalloc(&p, want);
        }
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            return set_error(TS_ERR_OUT_OF_MEMORY, "%s: workspace of %zu bytes: cudaMalloc: out of device memory", op,
                             bytes);
        }
        TS_CHECK(op, e);
        /* Zeroed once per growth, never per call: cuBLAS's Hopper GEMMs store their output
         * through the TMA, which compute-sanitizer's initcheck does not see, so without this
         * every read of a GEMM result in a workspace is reported as uninitialised. */
        TS_CHECK(op, cudaMemset(p, 0, want));
        /* cudaMemset runs on the legacy default stream, which the library's non-blocking
         * stream does not wait for: without this the zeroing could land after the caller's
         * first kernel wrote the workspace (seen as an all-zero GEMM input with guards off). */
        TS_CHECK(op, wait_device(op, g.stream));
        g.ws[slot] = p;
        g.ws_bytes[slot] = want;
        if (debug_enabled())
            std::fprintf(stderr, "touchstone: debug: %s: workspace %d grown to %zu bytes\n", op, (int)slot, want);
    }
    *ptr = g.ws[slot];
    return TS_OK;
}

namespace {

/* A fault read back counts as a path of the op whose kernel reported it. */
void record_fault(int kind) {
    switch (kind) {
    case FAULT_ROPE_POSITION: record_path("rope", "fault:position"); break;
    case FAULT_POS_EMBEDDING_POSITION: record_path("pos_embedding", "fault:position"); break;
    case FAULT_EMBEDDING_ID: record_path("embedding", "fault:id"); break;
    case FAULT_DECODE_CACHE_LEN: record_path("attention_decode", "fault:cache_len"); break;
    case FAULT_SET_ROWS_ROW: record_path("set_rows", "fault:row"); break;
    case FAULT_W4A16_G_IDX: record_path("gemm_w4a16", "fault:g_idx"); break;
    case FAULT_SET_ROWS_FP8_ROW: record_path("set_rows_fp8", "fault:row"); break;
    case FAULT_DECODE_FP8_CACHE_LEN: record_path("attention_decode_fp8", "fault:cache_len"); break;
    case FAULT_PAGED_CACHE_LEN: record_path("attention_decode_paged", "fault:cache_len"); break;
    case FAULT_PAGED_BLOCK_TABLE: record_path("attention_decode_paged", "fault:block_table"); break;
    case FAULT_PREFILL_Q_STARTS: record_path("attention_prefill_paged", "fault:q_starts"); break;
    case FAULT_PREFILL_KV_LEN: record_path("attention_prefill_paged", "fault:kv_len"); break;
    case FAULT_PREFILL_BLOCK_TABLE: record_path("attention_prefill_paged", "fault:block_table"); break;
    case FAULT_MOE_ID: record_path("moe_ffn", "fault:id"); break;
    case FAULT_PAGED_FP8_CACHE_LEN: record_path("attention_decode_paged_fp8", "fault:cache_len"); break;
    case FAULT_PAGED_FP8_BLOCK_TABLE: record_path("attention_decode_paged_fp8", "fault:block_table"); break;
    case FAULT_PREFILL_FP8_Q_STARTS: record_path("attention_prefill_paged_fp8", "fault:q_starts"); break;
    case FAULT_PREFILL_FP8_KV_LEN: record_path("attention_prefill_paged_fp8", "fault:kv_len"); break;
    case FAULT_PREFILL_FP8_BLOCK_TABLE: record_path("attention_prefill_paged_fp8", "fault:block_table"); break;
    case FAULT_SAMPLE_LOGIT: record_path("sample", "fault:logit"); break;
    case FAULT_SAMPLE_ALL_NEG_INF: record_path("sample", "fault:all_neg_inf"); break;
    default: record_path("?", "fault:" + std::to_string(kind)); break;
    }
}

/* The paged attention op whose kernel reported a fault of this kind. */
const char *paged_op(int kind) {
    switch (kind) {
    case FAULT_PAGED_CACHE_LEN:
    case FAULT_PAGED_BLOCK_TABLE: return "attention_decode_paged";
    case FAULT_PAGED_FP8_CACHE_LEN:
    case FAULT_PAGED_FP8_BLOCK_TABLE: return "attention_decode_paged_fp8";
    case FAULT_PREFILL_FP8_Q_STARTS:
    case FAULT_PREFILL_FP8_KV_LEN:
    case FAULT_PREFILL_FP8_BLOCK_TABLE: return "attention_prefill_paged_fp8";
    default: return "attention_prefill_paged";
    }
}

/* Reads and clears the device fault record after the stream's work: TS_ERR_INDEX for an
 * out-of-range index, TS_ERR_INVALID_ARGUMENT for sample's bad logits (the spec makes those an
 * error of the call, like its bad config values; they are only found on the device). */
int check_faults(const char *op, cudaStream_t st) {
    std::lock_guard<std::mutex> lk(g.mu);
    TS_CHECK(op, cudaMemcpyAsync(g.h_fault, g.d_fault, sizeof(FaultRecord), cudaMemcpyDeviceToHost, st));
    TS_CHECK(op, wait_stream(op, st));
    if (g.h_fault->claimed == 0) return TS_OK;
    const FaultRecord f = *g.h_fault;
    TS_CHECK(op, cudaMemsetAsync(g.d_fault, 0, sizeof(FaultRecord), st));
    TS_CHECK(op, wait_stream(op, st));
    std::memset(g.h_fault, 0, sizeof(FaultRecord));
    record_fault(f.kind);
    switch (f.kind) {
    case FAULT_ROPE_POSITION:
        return set_error(TS_ERR_INDEX, "rope: positions[%d] = %d: must be >= 0", f.index, f.value);
    case FAULT_POS_EMBEDDING_POSITION:
        return set_error(TS_ERR_INDEX, "pos_embedding: positions[%d] = %d: must be in [0, %d) (the rows of table)",
                         f.index, f.value, f.bound);
    case FAULT_EMBEDDING_ID:
        return set_error(TS_ERR_INDEX, "embedding: ids[%d] = %d: must be in [0, %d) (the rows of table)", f.index,
                         f.value, f.bound);
    case FAULT_DECODE_CACHE_LEN:
        return set_error(TS_ERR_INDEX, "attention_decode: cache_lens[%d] = %d: must be in [1, %d] (the cache capacity)", f.index,
                         f.value, f.bound);
    case FAULT_SET_ROWS_ROW:
        return set_error(TS_ERR_INDEX, "set_rows: rows[%d] = %d: must be in [0, %d) (the rows of dst)", f.index, f.value,
                         f.bound);
    case FAULT_W4A16_G_IDX:
        return set_error(TS_ERR_INDEX, "gemm_w4a16: g_idx[%d] = %d: must be in [0, %d) (the groups of scales)", f.index,
                         f.value, f.bound);
    case FAULT_SET_ROWS_FP8_ROW:
        return set_error(TS_ERR_INDEX, "set_rows_fp8: rows[%d] = %d: must be in [0, %d) (the rows of dst)", f.index,
                         f.value, f.bound);
    case FAULT_DECODE_FP8_CACHE_LEN:
        return set_error(TS_ERR_INDEX,
                         "attention_decode_fp8: cache_lens[%d] = %d: must be in [1, %d] (the cache capacity)", f.index,
                         f.value, f.bound);
    /* Worded as the cpu backend words them (engine/backend/cpu/paged.go). */
    case FAULT_PAGED_CACHE_LEN:
    case FAULT_PAGED_FP8_CACHE_LEN:
        return set_error(TS_ERR_INDEX, "%s: cache_lens[%d] = %d: must be in [1, %d] (table_width x block_size)",
                         paged_op(f.kind), f.index, f.value, f.bound);
    case FAULT_PAGED_BLOCK_TABLE:
    case FAULT_PREFILL_BLOCK_TABLE:
    case FAULT_PAGED_FP8_BLOCK_TABLE:
    case FAULT_PREFILL_FP8_BLOCK_TABLE:
        return set_error(TS_ERR_INDEX,
                         "%s: block_table[%d] = %d: must be in [0, %d) (num_blocks), or past the sequence's pages",
                         paged_op(f.kind), f.index, f.value, f.bound);
    case FAULT_PREFILL_Q_STARTS:
    case FAULT_PREFILL_FP8_Q_STARTS:
        return set_error(TS_ERR_INDEX,
                         "%s: q_starts[%d] = %d: must be 0 at 0, then above the previous start and at most %d, the "
                         "last exactly that (every sequence has a new token; q's rows)",
                         paged_op(f.kind), f.index, f.value, f.bound);
    case FAULT_PREFILL_KV_LEN:
    case FAULT_PREFILL_FP8_KV_LEN:
        return set_error(TS_ERR_INDEX,
                         "%s: kv_lens[%d] = %d: must be at least its new tokens and at most %d (table_width x "
                         "block_size)",
                         paged_op(f.kind), f.index, f.value, f.bound);
    case FAULT_MOE_ID:
        return set_error(TS_ERR_INDEX, "moe_ffn: ids[%d] = %d: must be in [0, %d) (the experts of gate_up)", f.index,
                         f.value, f.bound);
    /* Worded as the cpu backend words them (engine/sample), "op: arg = value: reason", so both
     * backends give the same argument error. */
    case FAULT_SAMPLE_LOGIT: {
        float v;
        std::memcpy(&v, &f.bound, sizeof v);
        return set_error(TS_ERR_INVALID_ARGUMENT, "sample: logits[%d][%d] = %s: must be finite or -inf", f.index,
                         f.value, std::isnan(v) ? "NaN" : "+Inf");
    }
    case FAULT_SAMPLE_ALL_NEG_INF:
        return set_error(TS_ERR_INVALID_ARGUMENT, "sample: logits[%d] = all -inf: a row needs at least one finite logit",
                         f.index);
    default:
        return set_error(TS_ERR_INDEX, "a kernel reported an out-of-range index (fault kind %d, index %d, value %d)",
                         f.kind, f.index, f.value);
    }
}

void release_locked() {
    release_wait_events();
    for (int i = 0; i < WS_COUNT; ++i) {
        if (g.ws[i]) cudaFree(g.ws[i]);
        g.ws[i] = nullptr;
        g.ws_bytes[i] = 0;
    }
    gemm_release();
    gemm_fp8_release();
    if (g.blas) cublasDestroy(g.blas);
    if (g.lt) cublasLtDestroy(g.lt);
    if (g.stream) cudaStreamDestroy(g.stream);
    if (g.d_fault) cudaFree(g.d_fault);
    if (g.h_fault) cudaFreeHost(g.h_fault);
    g.blas = nullptr;
    g.lt = nullptr;
    g.stream = nullptr;
    g.d_fault = nullptr;
    g.h_fault = nullptr;
    g.device = -1;
    g.bandwidth_gbps = 0.0;
    (void)cudaGetLastError();
}

int init_locked(int device) {
    const char *op = "ts_init";
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return set_error(TS_ERR_NO_DEVICE, "ts_init: cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e),
                         cudaGetErrorName(e));
    }
    if (device < 0 || device >= count)
        return set_error(TS_ERR_NO_DEVICE, "ts_init: device = %d: must be in [0, %d) (the CUDA devices visible)", device,
                         count);
    TS_CHECK(op, cudaSetDevice(device));
    g.device = device;
    TS_CHECK(op, cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    TS_CHECK(op, cublasCreate(&g.blas));
    TS_CHECK(op, cublasSetStream(g.blas, g.stream));
    /* fp32 accumulation all the way: no split-K partial sums reduced in fp16 or bf16 for 16-bit
     * outputs. */
    TS_CHECK(op, cublasSetMathMode(g.blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    TS_CHECK(op, cublasLtCreate(&g.lt));
    TS_CHECK(op, cudaMalloc(&g.d_fault, sizeof(FaultRecord)));
    TS_CHECK(op, cudaMemset(g.d_fault, 0, sizeof(FaultRecord)));
    TS_CHECK(op, cudaMallocHost(&g.h_fault, sizeof(FaultRecord)));
    std::memset(g.h_fault, 0, sizeof(FaultRecord));
    TS_CHECK(op, cudaDeviceGetAttribute(&g.sm_count, cudaDevAttrMultiProcessorCount, device));
    TS_CHECK(op, cudaDeviceGetAttribute(&g.max_shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    int major = 0;
    TS_CHECK(op, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    /* Programmatic dependent launch (internal.h): Hopper and later, unless TOUCHSTONE_PDL=0. */
    g_pdl.store(major >= 9 && !env_is("TOUCHSTONE_PDL", "0"));
    TS_CHECK(op, wait_device(op, g.stream));
    return TS_OK;
}

} // namespace
} // namespace ts

using namespace ts;

/* ---- the C ABI ------------------------------------------------------------------------------ */

extern "C" {

int ts_abi_version(void) { return TS_ABI_VERSION; }

const char *ts_last_error(void) { return tl_error; }

const char *ts_status_name(int status) {
    switch (status) {
    case TS_OK:
        return "TS_OK";
    case TS_ERR_INVALID_ARGUMENT:
        return "TS_ERR_INVALID_ARGUMENT";
    case TS_ERR_SHAPE_MISMATCH:
        return "TS_ERR_SHAPE_MISMATCH";
    case TS_ERR_UNSUPPORTED:
        return "TS_ERR_UNSUPPORTED";
    case TS_ERR_OUT_OF_MEMORY:
        return "TS_ERR_OUT_OF_MEMORY";
    case TS_ERR_CUDA:
        return "TS_ERR_CUDA";
    case TS_ERR_STICKY:
        return "TS_ERR_STICKY";
    case TS_ERR_NOT_INITIALIZED:
        return "TS_ERR_NOT_INITIALIZED";
    case TS_ERR_INDEX:
        return "TS_ERR_INDEX";
    case TS_ERR_NO_DEVICE:
        return "TS_ERR_NO_DEVICE";
    case TS_ERR_TIMEOUT:
        return "TS_ERR_TIMEOUT";
    default:
        return "TS_ERR_UNKNOWN_STATUS";
    }
}

int ts_device_count(int *count) {
    TS_STICKY_GUARD();
    if (count == nullptr)
        return set_error(TS_ERR_INVALID_ARGUMENT, "ts_device_count: count = NULL: a pointer is required");
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return set_error(TS_ERR_NO_DEVICE, "ts_device_count: cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e),
                         cudaGetErrorName(e));
    }
    *count = n;
    return TS_OK;
}

int ts_init(int device) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_init", refuse_during_capture("ts_init"));
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.initialized.load()) {
        if (g.device == device) {
            TS_CHECK("ts_init", cudaSetDevice(device));
            return TS_OK;
        }
        return set_error(TS_ERR_INVALID_ARGUMENT,
                         "ts_init: device = %d: the library is already initialized on device %d (ts_shutdown first)",
                         device, g.device);
    }
    g_debug.store(env_is("TOUCHSTONE_LOG", "debug"));
    g_sync.store(env_is("TOUCHSTONE_SYNC", "1"));
    if (const char *bi = std::getenv("TOUCHSTONE_BATCH_INVARIANT"); bi != nullptr && *bi != '\0') {
        if (std::strcmp(bi, "1") != 0 && std::strcmp(bi, "0") != 0)
            return set_error(TS_ERR_INVALID_ARGUMENT,
                             "ts_init: TOUCHSTONE_BATCH_INVARIANT = \"%s\": want 1 (batch-invariant kernels) or 0", bi);
        g_batch_invariant.store(bi[0] == '1');
    }
    if (const char *gr = std::getenv("TOUCHSTONE_GEMV_ROWS"); gr != nullptr && *gr != '\0') {
        if (gr[1] != '\0' || gr[0] < '0' || gr[0] > '0' + ts::kMaxGemvRows)
            return set_error(TS_ERR_INVALID_ARGUMENT,
                             "ts_init: TOUCHSTONE_GEMV_ROWS = \"%s\": want a row count 0..%d", gr, ts::kMaxGemvRows);
        g_gemv_rows.store(gr[0] - '0');
    }
    if (const char *dl = std::getenv("TOUCHSTONE_DEADLINE"); dl != nullptr && *dl != '\0') {
        char *end = nullptr;
        const double seconds = std::strtod(dl, &end);
        if (end == dl || *end != '\0')
            return set_error(TS_ERR_INVALID_ARGUMENT,
                             "ts_init: TOUCHSTONE_DEADLINE = \"%s\": want a number of seconds in (0, 86400]", dl);
        TS_CHECK("ts_init", set_deadline("ts_init", "TOUCHSTONE_DEADLINE", seconds));
    }
    const int status = init_locked(device);
    if (status != TS_OK) {
        if (!g_sticky.load()) release_locked();
        return status;
    }
    g.initialized.store(true, std::memory_order_release);
    if (debug_enabled())
        std::fprintf(stderr,
                     "touchstone: debug: ts_init: device %d, %d SMs, %d bytes opt-in shared memory per block, "
                     "programmatic dependent launch %s\n",
                     device, g.sm_count, g.max_shared_optin, pdl_enabled() ? "on" : "off");
    return TS_OK;
}

int ts_shutdown(void) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_shutdown", refuse_during_capture("ts_shutdown"));
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.initialized.load()) return TS_OK;
    cudaError_t e = cudaSetDevice(g.device);
    int status = e == cudaSuccess ? wait_device("ts_shutdown", g.stream)
                                  : cuda_failure("ts_shutdown", e, "cudaSetDevice()", __FILE__, __LINE__);
    g.initialized.store(false);
    if (status != TS_OK) {
        /* the context is gone, or busy with a hung kernel: release nothing */
        if (status == TS_ERR_STICKY || status == TS_ERR_TIMEOUT) return status;
        release_locked();
        return status;
    }
    release_locked();
    return TS_OK;
}

int ts_get_device_info(ts_device_info *info) {
    TS_STICKY_GUARD();
    const char *op = "ts_get_device_info";
    if (info == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: info = NULL: a pointer is required", op);
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    cudaDeviceProp p;
    TS_CHECK(op, cudaGetDeviceProperties(&p, g.device));
    int clock_khz = 0, bus_bits = 0;
    TS_CHECK(op, cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, g.device));
    TS_CHECK(op, cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, g.device));
    std::memset(info, 0, sizeof *info);
    std::snprintf(info->name, sizeof info->name, "%s", p.name);
    info->ordinal = g.device;
    info->sm_count = p.multiProcessorCount;
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->total_bytes = (int64_t)p.totalGlobalMem;
    info->l2_bytes = (int64_t)p.l2CacheSize;
    info->clock_khz = clock_khz;
    info->memory_bus_bits = bus_bits;
    return TS_OK;
}

int ts_copy_bandwidth(double *gb_per_s) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_copy_bandwidth", refuse_during_capture("ts_copy_bandwidth"));
    const char *op = "ts_copy_bandwidth";
    if (gb_per_s == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: gb_per_s = NULL: a pointer is required", op);
    cudaStream_t st;
    int s = ready(op, nullptr, &st);
    if (s != TS_OK) return s;
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.bandwidth_gbps > 0) {
        *gb_per_s = g.bandwidth_gbps;
        return TS_OK;
    }
    /* 1 GiB buffers; halve on out-of-memory down to 64 MiB. */
    size_t bytes = (size_t)1 << 30;
    void *a = nullptr, *b = nullptr;
    for (;;) {
        cudaError_t e1 = cudaMalloc(&a, bytes);
        cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc(&b, bytes) : e1;
        if (e1 == cudaSuccess && e2 == cudaSuccess) break;
        if (a) cudaFree(a);
        a = nullptr;
        if ((e1 != cudaSuccess && e1 != cudaErrorMemoryAllocation) ||
            (e2 != cudaSuccess && e2 != cudaErrorMemoryAllocation) || bytes <= ((size_t)64 << 20))
            TS_CHECK(op, e1 != cudaSuccess ? e1 : e2);
        (void)cudaGetLastError();
        bytes /= 2;
    }
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    std::vector<float> ms;
    auto body = [&]() -> int {
        TS_CHECK(op, cudaMemsetAsync(a, 1, bytes, st));
        TS_CHECK(op, cudaEventCreate(&e0));
        TS_CHECK(op, cudaEventCreate(&e1));
        for (int i = 0; i < 3; ++i) TS_CHECK(op, cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
        for (int i = 0; i < 20; ++i) {
            TS_CHECK(op, cudaEventRecord(e0, st));
            TS_CHECK(op, cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
            TS_CHECK(op, cudaEventRecord(e1, st));
            TS_CHECK(op, wait_event(op, e1));
            float t = 0;
            TS_CHECK(op, cudaEventElapsedTime(&t, e0, e1));
            ms.push_back(t);
        }
        return TS_OK;
    };
    s = body();
    if (!g_sticky.load()) {
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        cudaFree(a);
        cudaFree(b);
    }
    if (s != TS_OK) return s;
    std::sort(ms.begin(), ms.end());
    const double median = 0.5 * (ms[9] + ms[10]);
    if (!(median > 0)) return set_error(TS_ERR_CUDA, "%s: measured a copy time of %g ms", op, median);
    g.bandwidth_gbps = 2.0 * (double)bytes / (median * 1e-3) / 1e9;
    *gb_per_s = g.bandwidth_gbps;
    return TS_OK;
}

int ts_memory_in_use(int64_t *bytes) {
    TS_STICKY_GUARD();
    const char *op = "ts_memory_in_use";
    if (bytes == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: bytes = NULL: a pointer is required", op);
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    size_t free_b = 0, total_b = 0;
    TS_CHECK(op, cudaMemGetInfo(&free_b, &total_b));
    *bytes = (int64_t)(total_b - free_b);
    return TS_OK;
}

int ts_release_workspaces(void) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_release_workspaces", refuse_during_capture("ts_release_workspaces"));
    const char *op = "ts_release_workspaces";
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    std::lock_guard<std::mutex> lk(g.mu);
    /* Launches on any stream may still use a workspace. The cuBLAS handle keeps a stale
     * workspace pointer, but every GEMM sets its workspace again before it runs. */
    TS_CHECK(op, wait_device(op, g.stream));
    for (int i = 0; i < WS_COUNT; ++i) {
        if (g.ws[i] != nullptr) TS_CHECK(op, cudaFree(g.ws[i]));
        g.ws[i] = nullptr;
        g.ws_bytes[i] = 0;
    }
    return TS_OK;
}

int ts_malloc(void **ptr, size_t bytes) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_malloc", refuse_during_capture("ts_malloc"));
    const char *op = "ts_malloc";
    if (ptr == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: ptr = NULL: a pointer is required", op);
    *ptr = nullptr;
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    if (bytes == 0) return TS_OK; /* an empty tensor: NULL, which ts_free accepts */
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return set_error(TS_ERR_OUT_OF_MEMORY, "%s: bytes = %zu: cudaMalloc: out of device memory", op, bytes);
    }
    TS_CHECK(op, e);
    *ptr = p;
    return TS_OK;
}

int ts_free(void *ptr) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_free", refuse_during_capture("ts_free"));
    const char *op = "ts_free";
    if (ptr == nullptr) return TS_OK;
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaFree(ptr));
    return TS_OK;
}

int ts_memset(void *dst, int byte_value, size_t bytes, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "ts_memset";
    if (bytes == 0) return TS_OK;
    if (dst == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: dst = NULL: a device pointer is required", op);
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaMemsetAsync(dst, byte_value, bytes, st));
    return TS_OK;
}

int ts_copy_device(void *dst, const void *src, size_t bytes, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "ts_copy_device";
    if (bytes == 0) return TS_OK;
    if (dst == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: dst = NULL: a device pointer is required", op);
    if (src == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: src = NULL: a device pointer is required", op);
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
    return TS_OK;
}

int ts_copy_to_device(void *dst, const void *src, size_t bytes, void *stream) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_copy_to_device", refuse_during_capture("ts_copy_to_device"));
    const char *op = "ts_copy_to_device";
    if (bytes == 0) return TS_OK;
    if (dst == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: dst = NULL: a device pointer is required", op);
    if (src == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: src = NULL: a host pointer is required", op);
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
    /* src is caller (Go) memory: do not return while the copy may still read it. */
    TS_CHECK(op, wait_stream(op, st));
    return TS_OK;
}

int ts_copy_to_host(void *dst, const void *src, size_t bytes, void *stream) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_copy_to_host", refuse_during_capture("ts_copy_to_host"));
    const char *op = "ts_copy_to_host";
    if (bytes != 0) {
        if (dst == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: dst = NULL: a host pointer is required", op);
        if (src == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: src = NULL: a device pointer is required", op);
    }
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    s = check_faults(op, st); /* waits for the stream */
    if (s != TS_OK) return s;
    if (bytes == 0) return TS_OK;
    TS_CHECK(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st));
    TS_CHECK(op, wait_stream(op, st));
    return TS_OK;
}

int ts_synchronize(void *stream) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_synchronize", refuse_during_capture("ts_synchronize"));
    const char *op = "ts_synchronize";
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    return check_faults(op, st);
}

int ts_timer_create(ts_timer **timer) {
    TS_STICKY_GUARD();
    const char *op = "ts_timer_create";
    if (timer == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: timer = NULL: a pointer is required", op);
    *timer = nullptr;
    int s = ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    ts_timer *t = new ts_timer{nullptr, nullptr};
    cudaError_t e = cudaEventCreate(&t->start);
    if (e == cudaSuccess) e = cudaEventCreate(&t->stop);
    if (e != cudaSuccess) {
        if (t->start) cudaEventDestroy(t->start);
        delete t;
        TS_CHECK(op, e);
    }
    *timer = t;
    return TS_OK;
}

int ts_timer_start(ts_timer *timer, void *stream) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_timer_start", refuse_during_capture("ts_timer_start"));
    const char *op = "ts_timer_start";
    if (timer == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: timer = NULL: a timer is required", op);
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaEventRecord(timer->start, st));
    return TS_OK;
}

int ts_timer_stop(ts_timer *timer, void *stream, float *ms) {
    TS_STICKY_GUARD();
    TS_CHECK("ts_timer_stop", refuse_during_capture("ts_timer_stop"));
    const char *op = "ts_timer_stop";
    if (timer == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: timer = NULL: a timer is required", op);
    if (ms == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: ms = NULL: a pointer is required", op);
    cudaStream_t st;
    int s = ready(op, stream, &st);
    if (s != TS_OK) return s;
    TS_CHECK(op, cudaEventRecord(timer->stop, st));
    TS_CHECK(op, wait_event(op, timer->stop));
    TS_CHECK(op, cudaEventElapsedTime(ms, timer->start, timer->stop));
    return TS_OK;
}

int ts_timer_destroy(ts_timer *timer) {
    TS_STICKY_GUARD();
    if (timer == nullptr) return TS_OK;
    cudaEventDestroy(timer->start);
    cudaEventDestroy(timer->stop);
    delete timer;
    return TS_OK;
}

int ts_record_paths(int on) {
    std::lock_guard<std::mutex> lk(ts::g_record_mu);
    if (on) ts::g_records.clear();
    ts::g_record.store(on != 0);
    return TS_OK;
}

int ts_recorded_paths(char *buf, size_t buf_size, size_t *needed) {
    std::string text;
    {
        std::lock_guard<std::mutex> lk(ts::g_record_mu);
        for (const auto &r : ts::g_records) text += r.first + "\t" + std::to_string(r.second) + "\n";
    }
    if (needed != nullptr) *needed = text.size() + 1;
    if (buf != nullptr && buf_size > 0) {
        const size_t n = std::min(text.size(), buf_size - 1);
        std::memcpy(buf, text.data(), n);
        buf[n] = '\0';
    }
    return TS_OK;
}

} /* extern "C" */

int ts_set_batch_invariant(int on) {
    if (on != 0 && on != 1)
        return set_error(TS_ERR_INVALID_ARGUMENT, "ts_set_batch_invariant: on = %d: must be 0 or 1", on);
    g_batch_invariant.store(on == 1);
    return TS_OK;
}

int ts_batch_invariant(int *on) {
    if (on == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "ts_batch_invariant: on is NULL");
    *on = g_batch_invariant.load() ? 1 : 0;
    return TS_OK;
}

int ts_set_gemv_rows(int max_rows) {
    if (max_rows < 0 || max_rows > ts::kMaxGemvRows)
        return set_error(TS_ERR_INVALID_ARGUMENT, "ts_set_gemv_rows: max_rows = %d: want 0..%d", max_rows,
                         ts::kMaxGemvRows);
    g_gemv_rows.store(max_rows);
    return TS_OK;
}

int ts_gemv_rows(int *max_rows) {
    if (max_rows == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "ts_gemv_rows: max_rows is NULL");
    *max_rows = g_gemv_rows.load();
    return TS_OK;
}
