/*
 * touchstone.h — the whole C ABI of libtouchstone_cuda.so.
 *
 * This header is the single source of truth for every signature, status code and config
 * struct. Plain C only: ints, floats, void* device pointers and pointers to const config
 * structs; cudaStream_t crosses as void* (NULL means the library's own stream, created by
 * ts_init). No C++ type and no exception crosses the boundary.
 *
 * Conventions
 *  - Every function returns an int status: TS_OK (0) or a negative ts_status. After a
 *    failure ts_last_error() returns a message naming the op, the argument and the bad value,
 *    e.g. "rmsnorm: cfg->hidden = 0: must be positive".
 *  - Every op validates all of its arguments before any launch; on a validation error nothing
 *    is launched and outputs are untouched.
 *  - Activations, weights, biases and norm weights are stored in the 16-bit dtype named by the
 *    config, TS_F16 (IEEE binary16) or TS_BF16 (bfloat16: fp32's exponent range, 8 significant
 *    bits), every tensor of a call in the same one; math is fp32 whatever the storage. Wherever
 *    an op's contract rounds a value (its output, an intermediate a fused op keeps as the unfused
 *    composition would store it) it rounds to the storage dtype, to nearest even, once; the
 *    comments below say "the storage dtype" for it. The logits/softmax/sample path is fp32.
 *  - Ops are asynchronous on the stream. Index data that lives on the device (positions, ids,
 *    cache_lens, set_rows' rows) is range-checked by the kernels: the first out-of-range index
 *    is recorded and reported as TS_ERR_INDEX by the next ts_synchronize or ts_copy_to_host.
 *    ts_sample checks its logits the same way; a bad one is reported as TS_ERR_INVALID_ARGUMENT.
 *  - After a sticky CUDA error (an illegal address corrupts the context) every later call
 *    returns TS_ERR_STICKY with the message of the op that caused it; the process must restart.
 *  - Every wait for the device (ts_synchronize, the copies back, the timers, a workspace that
 *    grows, ts_release_workspaces, ts_shutdown, ts_copy_bandwidth, the waits of TOUCHSTONE_SYNC=1)
 *    polls with a deadline (ts_set_deadline; TOUCHSTONE_DEADLINE seconds at ts_init; default
 *    TS_DEFAULT_DEADLINE_S). A wait that passes it returns TS_ERR_TIMEOUT naming the call, the
 *    last ops launched before it (op, kernel, dims with TOUCHSTONE_LOG=debug: the kernel that
 *    hung is the last or one of those before it; TOUCHSTONE_SYNC=1 pins it on its own launch)
 *    and the deadline. A kernel that never finishes keeps its context busy, so, as after a
 *    sticky error, every later call returns TS_ERR_TIMEOUT with that message: restart.
 *  - Launch parameters are logged to stderr when TOUCHSTONE_LOG=debug.
 *  - Layouts are row-major (C order) and match docs/golden-format.md.
 */
#ifndef TOUCHSTONE_H
#define TOUCHSTONE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_ABI_VERSION 27

typedef enum {
    TS_OK = 0,
    TS_ERR_INVALID_ARGUMENT = -1, /* a null pointer, a non-positive dim, a bad eps ... */
    TS_ERR_SHAPE_MISMATCH = -2,   /* dims that do not fit together (heads that do not divide, rope_dim > head_dim) */
    TS_ERR_UNSUPPORTED = -3,      /* a valid request this build does not implement (e.g. a dtype) */
    TS_ERR_OUT_OF_MEMORY = -4,    /* cudaMalloc failed */
    TS_ERR_CUDA = -5,             /* any other CUDA or cuBLAS failure */
    TS_ERR_STICKY = -6,           /* the context is corrupted by an earlier fault: restart */
    TS_ERR_NOT_INITIALIZED = -7,  /* ts_init has not succeeded */
    TS_ERR_INDEX = -8,            /* a kernel saw an out-of-range index in device data */
    TS_ERR_NO_DEVICE = -9,        /* no CUDA device, or the ordinal does not exist */
    TS_ERR_TIMEOUT = -10          /* a wait for the device passed its deadline: a kernel hung; restart */
} ts_status;

/* The deadline of a wait for the device when neither ts_set_deadline nor TOUCHSTONE_DEADLINE
 * sets one: far above the slowest legitimate wait of the conformance tiers (a whole full-size
 * prefill, a graph of decode steps, a 1 GiB copy: well under a second on an H100), so only a
 * kernel that does not finish reaches it, and short enough that a hung run ends soon. */
#define TS_DEFAULT_DEADLINE_S 60.0

typedef enum {
    TS_F16 = 1,  /* IEEE binary16 storage */
    TS_F32 = 2,
    TS_I32 = 3,
    TS_BF16 = 4, /* bfloat16 storage (the top 16 bits of an fp32) */
    TS_F8E4M3 = 5, /* FP8 E4M3 (torch.float8_e4m3fn): 1 byte, largest finite 448, no inf (docs/quantization.md) */
    TS_F8E5M2 = 6  /* FP8 E5M2 (torch.float8_e5m2): 1 byte, largest finite 57344 */
} ts_dtype;

/* ---- runtime (runtime.cu) ------------------------------------------------------------ */

int ts_abi_version(void);
/* Message of the last failing call on this thread ("" if none). Valid until the next call. */
const char *ts_last_error(void);
/* Static name of a status, e.g. "TS_ERR_SHAPE_MISMATCH". */
const char *ts_status_name(int status);

int ts_device_count(int *count);
/* Selects the device, creates the library stream and cuBLAS handle. Idempotent for the same
 * device; a different device after a successful init is TS_ERR_INVALID_ARGUMENT. */
int ts_init(int device);
/* Releases the stream, cuBLAS handle and workspaces. Buffers must be freed by the caller. */
int ts_shutdown(void);

typedef struct {
    char name[256];
    int ordinal;
    int sm_count;
    int cc_major;
    int cc_minor;
    int64_t total_bytes;
    int64_t l2_bytes;
    int clock_khz;
    int memory_bus_bits;
} ts_device_info;

int ts_get_device_info(ts_device_info *info);
/* Measured device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written
 * (a copy of N bytes moves 2N): CUDA events, warm-up, median of repeats, 1 GiB buffers.
 * Measured once per process, then cached. */
int ts_copy_bandwidth(double *gb_per_s);
/* Bytes of device memory in use on the device (total - free, all processes). */
int ts_memory_in_use(int64_t *bytes);
/* Waits for the device, then frees the library's workspaces (FFN intermediates, decode
 * partials, cuBLAS and cublasLt workspaces); they grow again on the next op that needs them.
 * Lets a caller check that device memory returns to where it was. */
int ts_release_workspaces(void);
/* Path recording, for coverage tests: while on, each kernel launch, library call and device
 * fault read back is counted under "<op>\t<what>", where what is the kernel's demangled name
 * without its parameter list (e.g. layernorm_vec_kernel<4, __nv_bfloat16>: a kernel of 16-bit data
 * names its storage type, __half or __nv_bfloat16), the library call (cublasGemmEx) or
 * "fault:<kind>" (rope's fault:position). on = 1 clears the counts and starts; 0 stops. Needs no
 * ts_init. */
int ts_record_paths(int on);
/* The counts, one "<op>\t<what>\t<count>\n" line each in byte order, NUL-terminated and
 * truncated to buf_size; *needed (when not NULL) gets the full size including the NUL. */
int ts_recorded_paths(char *buf, size_t buf_size, size_t *needed);

/* Batch invariance, as vLLM and SGLang define it: with the mode on, a row's result of every op a
 * batched decode step uses does not depend on how many other rows (sequences) share the call, so a
 * sequence's logits are bit-identical alone or in a batch of up to 16. Off (the default), the ops
 * pick their kernel and work split by the whole call's size, the fastest choice: the projections of
 * more rows than the gemv row limit (ts_set_gemv_rows; and any projection whose weight exceeds
 * 32 MiB) take cuBLAS, whose kernel and split-K differ with m, and attention_decode splits the
 * cache length by the batch size. On:
 *  - gemm, rmsnorm_gemm and swiglu_gemm take the gemv for every call of up to 16 rows (k % 8 == 0,
 *    16-byte aligned operands, any weight size, 16-bit or fp32 out), rows that do not fit shared
 *    memory at once in chunks; each row's sum runs in the same order whatever the row count;
 *  - attention_decode splits each sequence's cache as it would for a batch of one.
 * Slower at 8 and 16 rows (docs/PERF.md). The mode is process-wide and read when an op is called,
 * so a captured graph keeps the mode of its capture. TOUCHSTONE_BATCH_INVARIANT=1 at ts_init turns
 * it on; any other value but 0 or unset makes ts_init fail, naming it. Needs no ts_init. */
int ts_set_batch_invariant(int on);
int ts_batch_invariant(int *on);

/* The row count up to which the decode projections (gemm, rmsnorm_gemm, layernorm_gemm,
 * swiglu_gemm; not gpt_ffn, whose fused FFN has its own limit) take the gemv instead of cuBLAS,
 * 0..4 (0: never the gemv; the gemv's row tiles are 1, 2 and 4). The gemv's other limits hold
 * whatever the setting (gemv.cuh: k % 8 == 0, 16-byte aligned operands, a weight of at most
 * 32 MiB). The default is the fastest whole-model choice measured by `touchstone bench-batch
 * -gemv-rows` (docs/PERF.md, "Batched decode throughput"). Process-wide, read when an op is
 * called, so a captured graph keeps the setting of its capture; the batch-invariant mode
 * overrides it. TOUCHSTONE_GEMV_ROWS=<0..4> at ts_init sets it; any other value makes ts_init
 * fail, naming it. Needs no ts_init. */
int ts_set_gemv_rows(int max_rows);
int ts_gemv_rows(int *max_rows);

int ts_malloc(void **ptr, size_t bytes);
int ts_free(void *ptr);
int ts_memset(void *dst, int byte_value, size_t bytes, void *stream);
int ts_copy_to_device(void *dst, const void *src, size_t bytes, void *stream);
/* Waits for the stream, then copies; reports pending device faults first (TS_ERR_INDEX, or
 * TS_ERR_INVALID_ARGUMENT for ts_sample's logits). */
int ts_copy_to_host(void *dst, const void *src, size_t bytes, void *stream);
/* Device-to-device copy, asynchronous on the stream (a KV-cache append, say). */
int ts_copy_device(void *dst, const void *src, size_t bytes, void *stream);
/* Waits for the stream; reports pending device faults (as ts_copy_to_host) and sticky errors. */
int ts_synchronize(void *stream);

/* The deadline of every wait for the device, in seconds (> 0, at most 86400): process-wide, read
 * when a wait starts. Needs no ts_init; ts_init applies TOUCHSTONE_DEADLINE (seconds, a number
 * in that range; anything else makes ts_init fail, naming it). */
int ts_set_deadline(double seconds);
int ts_deadline(double *seconds);
/* For tests of the deadline: launches debug_hang_kernel, one block that spins on a device flag
 * nothing sets, on the stream. The next wait for the stream passes its deadline and returns
 * TS_ERR_TIMEOUT naming "debug_hang"; the kernel runs until the process exits. */
int ts_debug_hang(void *stream);

/* Timers for benchmarks: CUDA events recorded on a stream. */
typedef struct ts_timer ts_timer;
int ts_timer_create(ts_timer **timer);
int ts_timer_start(ts_timer *timer, void *stream);
/* Records the stop event, waits for it, and returns the elapsed milliseconds. */
int ts_timer_stop(ts_timer *timer, void *stream, float *ms);
int ts_timer_destroy(ts_timer *timer);

/* ---- graphs (graph.cu) -------------------------------------------------------------------
 * A decode step is hundreds of small launches, and issuing each from the host costs more than
 * most of them take on the device. A graph records the ops called on a stream between
 * ts_graph_begin and ts_graph_end once and replays them all with one ts_graph_launch.
 *
 *  - Each op still validates its arguments when it is called during the capture (a refused
 *    call records nothing); device-side checks (index faults) run at every replay and are
 *    reported as usual by the next ts_synchronize or ts_copy_to_host.
 *  - Pointers and config values are fixed at capture. A replay reads whatever the captured
 *    buffers hold at that time, so what changes from one replay to the next (a token id, a
 *    position, a cache length, a KV-cache row) must live in device buffers that the caller
 *    rewrites before ts_graph_launch, never in a config value or a pointer offset.
 *  - While a capture is open, calls that wait for the device or allocate or free memory are
 *    refused with TS_ERR_UNSUPPORTED and leave the capture intact: ts_init, ts_shutdown,
 *    ts_malloc, ts_free, ts_copy_to_device, ts_copy_to_host, ts_synchronize, the timers,
 *    ts_copy_bandwidth, ts_release_workspaces, a workspace that would have to grow (run the same
 *    ops once uncaptured first), and ts_graph_launch. One capture at a time.
 *  - With TOUCHSTONE_SYNC=1 the ops do not synchronise during a capture; ts_graph_launch does.
 */
typedef struct ts_graph ts_graph;
/* Starts capturing the ops called on stream (NULL: the library stream). */
int ts_graph_begin(void *stream);
/* Ends the capture on stream and instantiates it into *graph. If an op failed inside CUDA
 * during the capture the capture is invalid: the error is returned and *graph is NULL. The
 * capture is over either way, except when an argument of this call is refused. */
int ts_graph_end(void *stream, ts_graph **graph);
/* Replays the graph on stream, asynchronously. */
int ts_graph_launch(ts_graph *graph, void *stream);
/* Frees the graph; NULL is a no-op. */
int ts_graph_destroy(ts_graph *graph);

/* ---- configs -------------------------------------------------------------------------- */

/* Every config's dtype (a storage dtype) is TS_F16 or TS_BF16 unless its comment says otherwise;
 * another known dtype is TS_ERR_UNSUPPORTED, a value outside ts_dtype TS_ERR_INVALID_ARGUMENT,
 * each naming the field and its value. */

/* residual_add, swiglu, gelu, gelu_tanh: n elements, any shape. */
typedef struct {
    ts_dtype dtype;
    int64_t n;
} ts_elementwise_config;

/* rmsnorm, layernorm, layernorm_residual, rmsnorm_residual: rows x hidden.
 * weight_dtype, 0 or dtype: the weight (gamma, beta) in the storage dtype; TS_F32: an fp32 weight
 * [hidden] (Gemma's 1 + w, folded once at load: exact in fp32), taken by rmsnorm and
 * rmsnorm_residual only (the math is fp32 either way, out rounded once); layernorm and
 * layernorm_residual refuse it with TS_ERR_UNSUPPORTED. */
typedef struct {
    ts_dtype dtype;
    int rows;
    int hidden;
    float eps;
    ts_dtype weight_dtype;
} ts_norm_config;

/* rope on x [tokens, heads, head_dim]; NeoX/rotate_half pairs (i, i + rope_dim/2) for
 * i < rope_dim/2, angle positions[t] * inv_freq_i with inv_freq_i = freq_base^(-2i/rope_dim) / div_i;
 * the rotated pair is multiplied by attention_factor; dims >= rope_dim pass unchanged. The angle is
 * exact to ~1e-6 rad at every int32 position (double angle, reduced to [-pi, pi] before sincos).
 *
 * RoPE scaling (Llama 3's llama3, YaRN, LongRoPE) is a per-pair divisor table that the caller
 * computes once from the model config: div_i = freq_divisor[i], or long_divisor[i] for a token
 * whose position is >= long_from (LongRoPE's long factors), or 1 where the table is NULL. */
typedef struct {
    ts_dtype dtype;
    int tokens;
    int heads;
    int head_dim; /* even */
    int rope_dim; /* even, 0 < rope_dim <= head_dim */
    float freq_base;
    const float *freq_divisor; /* device, rope_dim/2 fp32 > 0, or NULL (no scaling) */
    const float *long_divisor; /* device, rope_dim/2 fp32 > 0, or NULL (no long table) */
    int long_from;             /* >= 0 when long_divisor is set; ignored otherwise */
    float attention_factor;    /* finite, > 0: YaRN's mscale, LongRoPE's scaling; 1 for none */
} ts_rope_config;

/* Sliding windows (the attention configs' `window`): 0 for none; window > 0 lets the query at
 * position p see only keys p - window + 1 .. p (transformers' sliding_window: key > p - window),
 * with causal masking (a prefill with a window must be causal). */

/* Logit soft-capping (the attention configs' `softcap`, the last field of ts_attention_config,
 * ts_scores_config, ts_decode_config, ts_paged_decode_config, ts_paged_prefill_config and
 * ts_decode_fp8_config): 0: none; > 0 (finite): each score s = scale · q·k becomes
 * softcap · tanh(s / softcap) before the causal/window mask and the softmax (Gemma 2's
 * attn_logit_softcapping: transformers' eager_attention_forward divides the scaled scores by
 * softcap, takes tanh, multiplies back, then adds the mask). Negative, NaN or inf is
 * TS_ERR_INVALID_ARGUMENT naming the op and cfg->softcap. */

/* attention_prefill: q [batch, seq_len, n_heads, head_dim], k/v [batch, seq_len, n_kv_heads,
 * head_dim], out like q; query head h reads kv head h / (n_heads / n_kv_heads). */
typedef struct {
    ts_dtype dtype;
    int batch;
    int seq_len;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int causal; /* nonzero: query i sees keys 0..i */
    float scale;
    int window; /* 0, or the sliding window (causal only) */
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_attention_config;

/* attention_scores_softmax: q [batch, seq_q, n_heads, head_dim], k [batch, seq_k, n_kv_heads,
 * head_dim] with seq_q <= seq_k (the queries are the last seq_q positions), probs fp32 [batch,
 * n_heads, seq_q, seq_k]; head_dim up to 256. */
typedef struct {
    ts_dtype dtype;
    int batch;
    int seq_q;
    int seq_k;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int causal; /* nonzero: query i sees keys 0 .. seq_k - seq_q + i */
    float scale;
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_scores_config;

/* attention_decode: q [batch, n_heads, head_dim], caches [batch, max_len, n_kv_heads,
 * head_dim], cache_lens int32 [batch] with 1 <= cache_lens[b] <= max_len (checked on device),
 * out like q. */
typedef struct {
    ts_dtype dtype;
    int batch;
    int max_len;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window; /* 0, or the sliding window: the query (position cache_lens[b] - 1) sees the last
                   min(window, cache_lens[b]) keys */
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_decode_config;

/* attention_decode_paged: attention_decode over a paged KV cache (vLLM's layout). k/v caches
 * [num_blocks, block_size, n_kv_heads, head_dim] are a pool of pages; block_table int32 [batch,
 * table_width] maps position p of sequence b to slot p % block_size of page
 * block_table[b][p / block_size]. block_size is a power of two in [1, 256]. Only the first
 * ceil(cache_lens[b] / block_size) entries of a row are read, each checked on the device to be
 * in [0, num_blocks), and 1 <= cache_lens[b] <= table_width * block_size (a bad length or page
 * is recorded in the fault record, TS_ERR_INDEX at the next ts_synchronize / ts_copy_to_host,
 * and that sequence is skipped). Unfused equivalent: each sequence's pages gathered into a
 * contiguous cache, then ts_attention_decode. The KV append into pages is ts_set_rows on the
 * pool viewed as [num_blocks * block_size, n_kv_heads * head_dim], each new token's slot its row
 * (vLLM's slot_mapping). */
typedef struct {
    ts_dtype dtype;
    int batch;
    int num_blocks;
    int block_size;
    int table_width;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window; /* 0, or the sliding window, as ts_decode_config's */
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_paged_decode_config;

/* attention_prefill_paged: new tokens attending causally to their sequences' paged caches
 * (chunked prefill, prefix caching; a sequence with one new token is a decode inside the
 * launch). q [total_q, n_heads, head_dim] holds every sequence's new queries in order: sequence
 * b's are rows q_starts[b] .. q_starts[b + 1] - 1 (q_starts int32 [batch + 1], q_starts[0] = 0,
 * q_starts[batch] = total_q, at least one a sequence). The pool and block_table are
 * attention_decode_paged's and already hold the new tokens' keys and values; kv_lens int32
 * [batch] are the whole lengths (new tokens included), q_len <= kv_lens[b] <= table_width *
 * block_size. Query i of sequence b is at position kv_lens[b] - q_len + i and sees positions 0 ..
 * kv_lens[b] - q_len + i. The starts, lengths and the table entries they reach are checked on
 * the device (TS_ERR_INDEX at the next sync; a bad sequence is skipped). out like q. Unfused
 * equivalent: each sequence's pages gathered, then ts_attention_prefill's causal attention with
 * the queries offset by the prefix. */
typedef struct {
    ts_dtype dtype;
    int batch;
    int total_q;
    int num_blocks;
    int block_size;
    int table_width;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window; /* 0, or the sliding window: query i of sequence b (at position p) sees p - window
                   + 1 .. p */
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_paged_prefill_config;

/* attention_decode_paged_fp8 and attention_prefill_paged_fp8: attention_decode_paged and
 * attention_prefill_paged over a paged E4M3 pool (vLLM's paged cache with kv_cache_dtype "fp8").
 * k/v caches [num_blocks, block_size, n_kv_heads, head_dim] of codes stand for the keys code *
 * k_scale[h] and values code * v_scale[h] (h the kv head, 0 when scale_heads is 1; k_scale,
 * v_scale fp32 [scale_heads] on the device, scale_heads 1 or n_kv_heads), as attention_decode_fp8's
 * contiguous caches; the pages are appended by set_rows_fp8 on the pool viewed as [num_blocks *
 * block_size, n_kv_heads * head_dim]. Every other argument, check and fault is the 16-bit paged
 * op's; q and out in dtype (TS_F16 or TS_BF16), fp32 math, one rounding of out. The decode reads
 * head dims 32, 64, 96 and 128 and refuses others as unsupported; the prefill takes head dims
 * that are multiples of 8 up to 256. Unfused equivalent: the pool dequantised to fp32
 * values, then the 16-bit paged op's arithmetic over them. */
typedef struct {
    ts_dtype dtype;
    int batch;
    int num_blocks;
    int block_size;
    int table_width;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window;    /* as ts_paged_decode_config's */
    float softcap; /* as ts_paged_decode_config's */
    int scale_heads;
} ts_paged_decode_fp8_config;

typedef struct {
    ts_dtype dtype;
    int batch;
    int total_q;
    int num_blocks;
    int block_size;
    int table_width;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int window;    /* as ts_paged_prefill_config's */
    float softcap; /* as ts_paged_prefill_config's */
    int scale_heads;
} ts_paged_prefill_fp8_config;

/* swiglu_ffn: x [rows, hidden], w_gate/w_up [ffn, hidden], w_down [hidden, ffn]. The gate, up
 * and activation intermediates are stored in dtype in a library workspace that grows to the
 * largest request and is reused, never allocated per call. */
typedef struct {
    ts_dtype dtype;
    int rows;
    int hidden;
    int ffn;
} ts_ffn_config;

/* rmsnorm_gemm and layernorm_gemm: x [rows, hidden], norm_weight (gamma, beta) [hidden], w [n,
 * hidden], bias [n] or NULL, out [rows, n]; sum [rows, hidden] with a residual. */
typedef struct {
    ts_dtype dtype;
    int rows;
    int hidden;
    int n;
    float eps;
} ts_norm_gemm_config;

typedef enum {
    TS_GELU_ERF = 0, /* exact: x Phi(x), as ts_gelu */
    TS_GELU_TANH = 1 /* tanh approximation, as ts_gelu_tanh */
} ts_gelu_kind;

/* gpt_ffn: x [rows, hidden], w1 [ffn, hidden], b1 [ffn] or NULL, w2 [hidden, ffn], b2 [hidden]
 * or NULL, out [rows, hidden]. The activation [rows, ffn] lives in a library workspace. */
typedef struct {
    ts_dtype dtype;
    int rows;
    int hidden;
    int ffn;
    int gelu; /* ts_gelu_kind */
} ts_gpt_ffn_config;

/* geglu: n elements of gate, up and out, any shape; gelu is a ts_gelu_kind. */
typedef struct {
    ts_dtype dtype;
    int64_t n;
    int gelu; /* ts_gelu_kind */
} ts_geglu_config;

/* gelu_scale: n elements, any shape; gelu is a ts_gelu_kind, scale any finite float. */
typedef struct {
    ts_dtype dtype;
    int64_t n;
    int gelu; /* ts_gelu_kind */
    float scale;
} ts_gelu_scale_config;

/* logit_softcap: n elements (n >= 0), any shape; dtype TS_F32, TS_F16 or TS_BF16; softcap positive
 * and finite (ts_logit_softcap). */
typedef struct {
    ts_dtype dtype;
    int64_t n;
    float softcap;
} ts_logit_softcap_config;

/* embedding: out[t] = table[ids[t]], table [table_rows, hidden] (table_rows = vocab).
 * pos_embedding: out[t] = x[t] + table[positions[t]], table [table_rows, hidden].
 * scale, 0 or 1: no scaling (a bit-exact gather); else embedding's out = table[id] * scale,
 * rounded once to the storage dtype (Gemma's embed_scale, sqrt(hidden): the caller rounds it to
 * dtype as transformers does, so the product of two 16-bit values is exact in fp32), finite;
 * pos_embedding refuses any other scale with TS_ERR_INVALID_ARGUMENT. */
typedef struct {
    ts_dtype dtype;
    int tokens;
    int hidden;
    int table_rows;
    float scale;
} ts_embedding_config;

/* set_rows: dst[rows[i]] = src[i] for i < src_rows, a bit-exact row scatter in place into dst
 * (the KV-cache append): dst [dst_rows, row_elems], src [src_rows, row_elems], both in dtype
 * (TS_F16, TS_BF16 or TS_F32), rows int32 [src_rows]. Every other row of dst is left as it was.
 * rows live on the device, so a captured graph can replay an append at a new position: each must
 * lie in [0, dst_rows) (checked on device: an out-of-range row is reported as TS_ERR_INDEX and not
 * written) and they must be distinct (which write wins for a repeated row is unspecified). */
typedef struct {
    ts_dtype dtype;
    int dst_rows;
    int src_rows;
    int row_elems;
} ts_set_rows_config;

/* set_rows_fp8: the KV-cache append into an FP8 E4M3 cache (vLLM's and FlashInfer's fp8 KV
 * cache): dst [dst_rows, row_elems] E4M3 codes, src [src_rows, row_elems] in dtype (TS_F16,
 * TS_BF16 or TS_F32), rows int32 [src_rows] as set_rows (device data, each in [0, dst_rows),
 * distinct). Element e of a row belongs to head e / (row_elems / scale_heads) and is stored as
 * e4m3(src / scale[head]): the division rounded to nearest even in fp32, then to E4M3 with
 * saturation at +-448 (docs/quantization.md, static quantisation). scale: fp32 [scale_heads] on
 * the device, scale_heads 1 (per tensor) or a divisor of row_elems (per head). */
typedef struct {
    ts_dtype dtype; /* src's */
    int dst_rows;
    int src_rows;
    int row_elems;
    int scale_heads;
} ts_set_rows_fp8_config;

/* attention_decode_fp8: attention_decode over E4M3 caches. k/v caches [batch, max_len,
 * n_kv_heads, head_dim] of codes stand for the keys code * k_scale[h] and values code *
 * v_scale[h], h the kv head (0 when scale_heads is 1); k_scale, v_scale fp32 [scale_heads] on the
 * device, scale_heads 1 or n_kv_heads. q and out in dtype (TS_F16 or TS_BF16), fp32 math, one
 * rounding of out; cache_lens as attention_decode's. */
typedef struct {
    ts_dtype dtype;
    int batch;
    int max_len;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    float scale;
    int scale_heads;
    float softcap; /* 0: none; > 0: soft-capping of the scaled scores (above) */
} ts_decode_fp8_config;

/* gemm: out [m, n] = x [m, k] . w^T (w is [n, k]) + bias [n] (bias may be NULL). x, w and bias
 * in in_dtype (TS_F16 or TS_BF16), fp32 accumulation (cuBLAS; at decode shapes a gemv kernel),
 * result rounded once to out_dtype: in_dtype itself or TS_F32. A 16-bit out_dtype other than
 * in_dtype (TS_F16 in, TS_BF16 out or the reverse) is TS_ERR_UNSUPPORTED, naming both. */
typedef struct {
    ts_dtype in_dtype;
    ts_dtype out_dtype;
    int m;
    int n;
    int k;
} ts_gemm_config;

/* softmax over the last dim of x [rows, n] (in_dtype TS_F16, TS_BF16 or TS_F32) into fp32 out;
 * -inf entries get probability 0. */
typedef struct {
    ts_dtype in_dtype;
    int rows;
    int n;
} ts_softmax_config;

/* quant_fp8: x [rows, hidden] (in_dtype TS_F16, TS_BF16 or TS_F32) into the f8e4m3 out [rows,
 * hidden], bit for bit as docs/quantization.md defines it. Dynamic (scale NULL): each row in
 * groups of group_size consecutive elements (group_size divides hidden: hidden is per token, 128
 * the 1x128 groups of fine-grained FP8), a group's scale s = max(amax, 1e-10) / 448 (NaN when
 * the group holds a NaN) written to the fp32 scales [rows, hidden / group_size], and
 * q = e4m3(x / s), every division a correctly rounded fp32 one. Static (scale: one fp32 on the
 * device, the per-tensor scale; scales NULL, group_size 0): q = e4m3(x / scale). */
typedef struct {
    ts_dtype in_dtype;
    int rows;
    int hidden;
    int group_size;
} ts_quant_config;

/* rmsnorm_quant_fp8: x [rows, hidden] in dtype (TS_F16 or TS_BF16), weight [hidden], the f8e4m3
 * out [rows, hidden]; group_size as quant_fp8's (dynamic: a positive divisor of hidden, at most
 * 8192 groups a row; static: 0). swiglu_quant_fp8 takes ts_quant_config: in_dtype the storage
 * dtype of gate and up (TS_F16 or TS_BF16), hidden their width. */
typedef struct {
    ts_dtype dtype;
    int rows;
    int hidden;
    int group_size;
    float eps;
} ts_norm_quant_config;

/* gemm_fp8: out [m, n] (out_dtype TS_F16 or TS_BF16) = dequant(x) [m, k] . dequant(w)^T for the
 * f8e4m3 x and w [n, k] (the w8a8 GEMM of FP8 checkpoints), fp32 accumulation; a value
 * dequantises as float(q) * scale. block_scales 1: x_scales [m, k/128] (1x128 groups, k % 128 == 0)
 * and w_scales [ceil(n/128), k/128] (128x128 blocks, transformers' weight_scale_inv); 0: per
 * token x_scales [m, 1] and per output channel w_scales [n, 1] (compressed-tensors' FP8-dynamic). */
typedef struct {
    ts_dtype out_dtype;
    int m;
    int n;
    int k;
    int block_scales;
} ts_gemm_fp8_config;

/* 4-bit weight packings (docs/quantization.md, "4-bit weights"). */
typedef enum {
    TS_W4_AWQ = 0, /* AutoAWQ GEMM: qweight [k, n/8], qzeros [k/g, n/8], nibble j of a word is column 8c + (0,2,4,6,1,3,5,7)[j] */
    TS_W4_GPTQ = 1, /* GPTQ: qweight [k/8, n] (nibble j is row 8r + j), qzeros [k/g, n/8] storing z - 1, g_idx [k] */
    TS_W4_TILED = 2 /* this library's layout (ts_w4a16_tile): qweight holds codes, scales and zero points; qzeros,
                       scales and g_idx are NULL */
} ts_w4_format;

/* gemm_w4a16: out [m, n] = x [m, k] . W^T, W^T[k, n] = (q - z[g(k), n]) * scales[g(k), n]
 * rounded once to dtype (TS_F16 or TS_BF16: x, scales and out), fp32 accumulation, one rounding
 * of out. g(k) = k / group_size (AWQ, g_idx NULL) or g_idx[k] (GPTQ, device data in [0,
 * k/group_size)). k % group_size == 0, k % 8 == 0, n % 8 == 0. */
typedef struct {
    ts_dtype dtype;
    int m;
    int n;
    int k;
    int group_size;
    int format; /* ts_w4_format */
} ts_w4a16_config;

/* sample: one token per row of fp32 logits [rows, vocab] into int32 tokens [rows], exactly as
 * docs/sampling.md defines it (Philox4x32-10 keyed by seed, counter (step, row); greedy when
 * temperature is 0; top-k, temperature, top-p, then the draw, in fp64 over the canonical
 * order). Logits are checked on the device: a row with a NaN or +inf logit, or with every
 * logit -inf, gets token -1 and the fault is reported by the next ts_synchronize or
 * ts_copy_to_host. The logits never leave the device; scratch space is a library workspace. */
typedef struct {
    int rows;
    int vocab;
    float temperature; /* 0 = greedy, else finite and > 0 */
    int top_k;         /* 0 = off, else >= 1 (values above vocab keep every token) */
    float top_p;       /* in (0, 1]; 1 = off */
    uint64_t seed;
    uint64_t step;
} ts_sample_config;

/* philox: the raw Philox4x32-10 stream of docs/sampling.md, for checking it bit for bit.
 * out uint32 [n, 4]: row i is the output for key seed and counter (step + i mod 2^64, row). */
typedef struct {
    uint64_t seed;
    uint64_t step;
    uint32_t row;
    int n;
} ts_philox_config;

/* ---- ops: one per file in cuda/kernels/ -------------------------------------------------- */

/* out = x + residual, in fp32 then rounded to the storage dtype; out may equal x (in place). */
int ts_residual_add(void *out, const void *x, const void *residual, const ts_elementwise_config *cfg, void *stream);
/* out = x / sqrt(mean(x^2) + eps) * weight per row, fp32 math, out rounded once (weight in the
 * storage dtype or, cfg->weight_dtype TS_F32, fp32). */
int ts_rmsnorm(void *out, const void *x, const void *weight, const ts_norm_config *cfg, void *stream);
int ts_layernorm(void *out, const void *x, const void *gamma, const void *beta, const ts_norm_config *cfg, void *stream);
/* Unfused equivalent: ts_residual_add(sum, x, residual) then ts_layernorm(out, sum, ...). */
int ts_layernorm_residual(void *sum, void *out, const void *x, const void *residual, const void *gamma,
                          const void *beta, const ts_norm_config *cfg, void *stream);
/* Unfused equivalent: ts_residual_add(sum, x, residual) then ts_rmsnorm(out, sum, weight, ...): out
 * normalises the sum rounded to the storage dtype; weight as rmsnorm's (fp32 with cfg->weight_dtype
 * TS_F32). sum may equal x or residual (in place); out must not overlap sum, x or residual. */
int ts_rmsnorm_residual(void *sum, void *out, const void *x, const void *residual, const void *weight,
                        const ts_norm_config *cfg, void *stream);
/* out may equal x. */
int ts_rope(void *out, const void *x, const int32_t *positions, const ts_rope_config *cfg, void *stream);
int ts_attention_prefill(void *out, const void *q, const void *k, const void *v, const ts_attention_config *cfg,
                         void *stream);
int ts_attention_decode(void *out, const void *q, const void *k_cache, const void *v_cache, const int32_t *cache_lens,
                        const ts_decode_config *cfg, void *stream);
/* probs = softmax(scale q k^T + causal mask) per head, in fp32 (masked keys get 0): the attention
 * probabilities. Unfused equivalent, per batch and head: gemm(s, q_h, k_kvh) into fp32, s * scale,
 * masked to -inf above the causal diagonal, softmax(probs, s). */
int ts_attention_scores_softmax(void *probs, const void *q, const void *k, const ts_scores_config *cfg, void *stream);
/* out = silu(gate) * up */
int ts_swiglu(void *out, const void *gate, const void *up, const ts_elementwise_config *cfg, void *stream);
/* out = gelu(gate) * up with the GELU of cfg->gelu (Gemma's gelu_pytorch_tanh MLP: TS_GELU_TANH;
 * the exact GELU of other GeGLU models: TS_GELU_ERF), fp32 math from the 16-bit inputs, out
 * rounded once; out may equal gate or up. */
int ts_geglu(void *out, const void *gate, const void *up, const ts_geglu_config *cfg, void *stream);
/* Final logit soft-capping (Gemma 2's final_logit_softcapping, 30.0 in every published config):
 * out = softcap · tanh(x / softcap) elementwise over cfg->n elements, transformers'
 * Gemma2ForCausalLM `logits = logits / cap; logits = torch.tanh(logits); logits = logits * cap`.
 * cfg->dtype is that of x and out: TS_F32 (the engine's logits: the lm-head gemm writes fp32) or
 * TS_F16 / TS_BF16 (libraries that keep logits in the storage dtype). Computed in fp32 (tanh as
 * the attention soft cap's, internal.h's softcap_score: within 2^-21 of the cap) with one
 * rounding to dtype; out may equal x (in place). cfg->softcap must be positive and finite (0,
 * negative, NaN or inf is TS_ERR_INVALID_ARGUMENT naming logit_softcap, cfg->softcap and the
 * value); cfg->n >= 0 (0 launches nothing; the pointers are still required). */
int ts_logit_softcap(void *out, const void *x, const ts_logit_softcap_config *cfg, void *stream);
/* Unfused equivalent: gemm(g, x, w_gate), gemm(u, x, w_up), swiglu(a, g, u), gemm(out, a, w_down). */
int ts_swiglu_ffn(void *out, const void *x, const void *w_gate, const void *w_up, const void *w_down,
                  const ts_ffn_config *cfg, void *stream);
/* out [rows, ffn] = silu(x . w_gate^T) * (x . w_up^T), w_gate_up = [w_gate; w_up] stacked
 * [2 ffn, hidden]; cfg as swiglu_ffn's. gate and up stay fp32 until the one rounding of out.
 * Unfused equivalent: gemm(g, x, w_gate_up[:ffn]), gemm(u, x, w_gate_up[ffn:]), swiglu(out, g, u). */
int ts_gemm_swiglu(void *out, const void *x, const void *w_gate_up, const ts_ffn_config *cfg, void *stream);
/* out [rows, n] = rmsnorm(s, norm_weight) . w^T (+ bias): the pre-norm and the projection after it.
 * Without a residual (sum and residual NULL) s = x; with one, s = x + residual rounded to the
 * storage dtype, stored in sum (which must not overlap x or residual). The normalised row is
 * rounded to the storage dtype as rmsnorm stores it, the product accumulates in fp32 and rounds
 * once to the storage dtype (the bias added before).
 * Unfused equivalent: rmsnorm_residual(sum, h, x, residual, norm_weight) (or rmsnorm(h, x,
 * norm_weight)), then gemm(out, h, w, bias). */
int ts_rmsnorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *norm_weight,
                    const void *w, const void *bias, const ts_norm_gemm_config *cfg, void *stream);
/* out [rows, n] = layernorm(s, gamma, beta) . w^T (+ bias): a LayerNorm family's pre-norm and the
 * projection after it, as rmsnorm_gemm (s, sum and residual as there). The normalised row is
 * rounded to the storage dtype as layernorm stores it, the product accumulates in fp32 and rounds
 * once.
 * Unfused equivalent: layernorm_residual(sum, h, x, residual, gamma, beta) (or layernorm(h, x,
 * gamma, beta)), then gemm(out, h, w, bias). */
int ts_layernorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *gamma, const void *beta,
                      const void *w, const void *bias, const ts_norm_gemm_config *cfg, void *stream);
/* out [m, n] = (silu(gate) * up) . w^T (+ bias [n]) for gate, up [m, k] and w [n, k] (cfg: gemm's,
 * out_dtype equal to in_dtype, TS_F16 or TS_BF16; TS_F32 out is TS_ERR_UNSUPPORTED here): a SwiGLU
 * FFN's activation and its down projection. The activation is rounded to the storage dtype as
 * swiglu stores it; the product accumulates in fp32 and rounds once.
 * Unfused equivalent: swiglu(a, gate, up), then gemm(out, a, w, bias). */
int ts_swiglu_gemm(void *out, const void *gate, const void *up, const void *w, const void *bias,
                   const ts_gemm_config *cfg, void *stream);
/* out = gelu(x . w1^T + b1) . w2^T + b2 (GPT-2's MLP), the first product kept in fp32 through
 * the bias and the GELU of cfg->gelu until the one rounding of the activation to the storage
 * dtype.
 * Unfused equivalent: gemm(h, x, w1, b1), gelu or gelu_tanh(a, h), gemm(out, a, w2, b2). */
int ts_gpt_ffn(void *out, const void *x, const void *w1, const void *b1, const void *w2, const void *b2,
               const ts_gpt_ffn_config *cfg, void *stream);
/* exact erf GELU */
int ts_gelu(void *out, const void *x, const ts_elementwise_config *cfg, void *stream);
/* tanh approximation (GPT-2 gelu_new) */
int ts_gelu_tanh(void *out, const void *x, const ts_elementwise_config *cfg, void *stream);
/* out = gelu(x) * scale with the GELU of cfg->gelu, kept in fp32 through the scale until the one
 * rounding of out; out may equal x. Unfused equivalent: gelu or gelu_tanh(h, x), then gemm(out, h,
 * w) with h and out viewed as [n, 1] and w = [[scale]] a [1, 1] of the storage dtype (one exact
 * product, one rounding): it differs from the fused op by the rounding of h, and by that of scale
 * where scale is not exact in the storage dtype. */
int ts_gelu_scale(void *out, const void *x, const ts_gelu_scale_config *cfg, void *stream);
int ts_pos_embedding(void *out, const void *x, const void *table, const int32_t *positions,
                     const ts_embedding_config *cfg, void *stream);
int ts_embedding(void *out, const int32_t *ids, const void *table, const ts_embedding_config *cfg, void *stream);
int ts_set_rows(void *dst, const void *src, const int32_t *rows, const ts_set_rows_config *cfg, void *stream);
int ts_set_rows_fp8(void *dst, const void *src, const int32_t *rows, const float *scale,
                    const ts_set_rows_fp8_config *cfg, void *stream);
int ts_attention_decode_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                            const int32_t *cache_lens, const float *k_scale, const float *v_scale,
                            const ts_decode_fp8_config *cfg, void *stream);
int ts_attention_decode_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                              const int32_t *block_table, const int32_t *cache_lens,
                              const ts_paged_decode_config *cfg, void *stream);
int ts_attention_prefill_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                               const ts_paged_prefill_config *cfg, void *stream);
int ts_attention_decode_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                  const int32_t *block_table, const int32_t *cache_lens, const float *k_scale,
                                  const float *v_scale, const ts_paged_decode_fp8_config *cfg, void *stream);
int ts_attention_prefill_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                   const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                                   const float *k_scale, const float *v_scale, const ts_paged_prefill_fp8_config *cfg,
                                   void *stream);
int ts_gemm(void *out, const void *x, const void *w, const void *bias, const ts_gemm_config *cfg, void *stream);
int ts_softmax(void *out, const void *x, const ts_softmax_config *cfg, void *stream);
int ts_quant_fp8(void *out, float *scales, const void *x, const float *scale, const ts_quant_config *cfg,
                 void *stream);
int ts_gemm_fp8(void *out, const void *x, const float *x_scales, const void *w, const float *w_scales,
                const ts_gemm_fp8_config *cfg, void *stream);
/* The fused FP8 activation quantisers: the op before an FP8 GEMM and quant_fp8 in one pass. The
 * intermediate y is rounded to the storage dtype exactly as the unfused op stores it, then
 * quantised bit for bit as quant_fp8 quantises that y (docs/quantization.md, "Fused
 * quantisers"): dynamic (scale NULL) into out and the fp32 scales [rows, hidden / group_size],
 * or static (scale: one fp32 on the device; scales NULL, group_size 0).
 * rmsnorm_quant_fp8: y = rmsnorm(s, weight) (rmsnorm's T((s * inv) * weight)); s = x, or with a
 * residual (sum and residual both non-NULL) s = x + residual rounded to the storage dtype and
 * stored in sum, which may equal x or residual (in place).
 * Unfused equivalent: rmsnorm_residual(sum, y, x, residual, weight) (or rmsnorm(y, x, weight)),
 * then quant_fp8(out, scales, y, scale). */
int ts_rmsnorm_quant_fp8(void *out, float *scales, void *sum, const void *x, const void *residual, const void *weight,
                         const float *scale, const ts_norm_quant_config *cfg, void *stream);
/* swiglu_quant_fp8: y = silu(gate) * up (swiglu's) for gate, up [rows, hidden].
 * Unfused equivalent: swiglu(y, gate, up), then quant_fp8(out, scales, y, scale). */
int ts_swiglu_quant_fp8(void *out, float *scales, const void *gate, const void *up, const float *scale,
                        const ts_quant_config *cfg, void *stream);
int ts_gemm_w4a16(void *out, const void *x, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                  const int32_t *g_idx, const ts_w4a16_config *cfg, void *stream);

/* w4a16_tile: an AWQ or GPTQ weight (cfg->format its packing; GPTQ with its groups in order, g(k) =
 * k / group_size: an act-order g_idx is not tiled) rewritten into `tiled`, ts_w4a16_tiled_bytes
 * long, in this library's layout for gemm_w4a16 with cfg->format = TS_W4_TILED (cuda/w4a16_tiled.cuh):
 * the same codes, scales and zero points in the order its decode gemv reads them, once at load
 * time. Needs k % 32 == 0 and group_size % 32 == 0 (else TS_ERR_UNSUPPORTED: keep the packed
 * format); cfg->m is not read. */
int ts_w4a16_tiled_bytes(const ts_w4a16_config *cfg, size_t *bytes);
int ts_w4a16_tile(void *tiled, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                  const ts_w4a16_config *cfg, void *stream);
int ts_sample(int32_t *tokens, const float *logits, const ts_sample_config *cfg, void *stream);
int ts_philox(uint32_t *out, const ts_philox_config *cfg, void *stream);

/* moe_router: each token's experts from the router's logits [tokens, experts] (dtype TS_F16 or
 * TS_BF16), as transformers' MoE routers choose them: p = softmax(float(logits)) over the
 * experts, the top_k largest p in descending order (equal logits: the lower expert index first)
 * into ids int32 [tokens, top_k] and their p into weights fp32 [tokens, top_k], divided by their
 * sum when renormalize is 1 (Mixtral; Qwen3-MoE's norm_topk_prob). 1 <= top_k <= experts <= 1024. */
typedef struct {
    ts_dtype dtype;
    int tokens;
    int experts;
    int top_k;
    int renormalize;
} ts_moe_router_config;

/* moe_ffn: the expert block after the router, SwiGLU experts as transformers stores them: out
 * [tokens, hidden] = sum_j weights[t, j] * down[e] (silu(g) * u), e = ids[t, j] (int32 [tokens,
 * top_k], each in [0, experts), else TS_ERR_INDEX at the next wait), weights fp32 [tokens, top_k];
 * g and u the rows 0..ffn-1 and ffn..2 ffn-1 of gate_up[e] [2 ffn, hidden] times x[t]; gate_up
 * [experts, 2 ffn, hidden] and down [experts, hidden, ffn] in dtype (TS_F16 or TS_BF16) as x and
 * out. Gate, up, the activation and each expert's down product round to dtype, the weighted sum
 * is fp32 with one rounding. Needs hidden and ffn % 8 == 0 and 16-byte aligned out, x, gate_up
 * and down (else TS_ERR_UNSUPPORTED). */
typedef struct {
    ts_dtype dtype;
    int tokens;
    int hidden;
    int ffn;
    int experts;
    int top_k;
} ts_moe_ffn_config;

int ts_moe_router(float *weights, int32_t *ids, const void *logits, const ts_moe_router_config *cfg, void *stream);
int ts_moe_ffn(void *out, const void *x, const int32_t *ids, const float *weights, const void *gate_up,
               const void *down, const ts_moe_ffn_config *cfg, void *stream);

/* moe_shared_add: x, routed, shared and out [tokens, hidden], gate [1, hidden], all in dtype (TS_F16 or
 * TS_BF16); tokens > 0, hidden > 0. */
typedef struct {
    ts_dtype dtype;
    int tokens;
    int hidden;
} ts_moe_shared_config;

/* The gated shared expert of Qwen2-MoE (transformers' Qwen2MoeSparseMoeBlock: Qwen1.5-MoE-A2.7B,
 * Qwen2-57B-A14B): out[t] = routed[t] + sigmoid(x[t] . gate) * shared[t], one gate value a token,
 * x the block's input, gate its shared_expert_gate weight [1, hidden], routed the experts' weighted
 * sum (ts_moe_ffn), shared the shared expert's SwiGLU output. The dot product is accumulated in
 * fp32, the sigmoid is fp32 (expf and a division), routed + s * shared one fp32 fma, then one
 * rounding to dtype. Every token's dot is complete before any of its row is written, so out may
 * equal routed (in place) or x. Unfused equivalent: gemm(g [tokens, 1], x, gate), then
 * routed + sigmoid(g) * shared elementwise, each step rounded to dtype (transformers' eager order).
 * Refused before any launch, TS_ERR_INVALID_ARGUMENT naming moe_shared_add, the argument and the
 * value: a NULL pointer; cfg->dtype not a ts_dtype (TS_F32 and the FP8 types: TS_ERR_UNSUPPORTED);
 * cfg->tokens or cfg->hidden <= 0. */
int ts_moe_shared_add(void *out, const void *routed, const void *shared, const void *x, const void *gate,
                      const ts_moe_shared_config *cfg, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* TOUCHSTONE_H */
