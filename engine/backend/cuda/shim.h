/*
 * shim.h: the C half of the Go cuda backend.
 *
 * The Go build never links libtouchstone_cuda.so: the library is dlopen'ed at run time and
 * every function of the ABI is looked up by name into a tsg_api table. Go cannot call a C
 * function pointer, so each ABI function has a tsg_* wrapper that calls through the table.
 *
 * The wrappers also copy ts_last_error() and ts_status_name() into a caller's tsg_err in the
 * same C call that failed: ts_last_error is per OS thread, and a goroutine may move to
 * another thread between two cgo calls, so fetching the message with a second call could
 * read another thread's (or no) message.
 */
#ifndef TOUCHSTONE_CUDA_SHIM_H
#define TOUCHSTONE_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "touchstone.h"

/* Every function of touchstone.h: name, return type, parameter list. The loader walks this
 * list, so a function added to the header and here is loaded (and required) automatically. */
#define TSG_ABI(X)                                                                                        \
    X(ts_abi_version, int, (void))                                                                        \
    X(ts_last_error, const char *, (void))                                                                \
    X(ts_status_name, const char *, (int))                                                                \
    X(ts_device_count, int, (int *))                                                                      \
    X(ts_init, int, (int))                                                                                \
    X(ts_shutdown, int, (void))                                                                           \
    X(ts_get_device_info, int, (ts_device_info *))                                                       \
    X(ts_copy_bandwidth, int, (double *))                                                                 \
    X(ts_memory_in_use, int, (int64_t *))                                                                 \
    X(ts_release_workspaces, int, (void))                                                                 \
    X(ts_record_paths, int, (int))                                                                        \
    X(ts_recorded_paths, int, (char *, size_t, size_t *))                                                 \
    X(ts_set_batch_invariant, int, (int))                                                                 \
    X(ts_batch_invariant, int, (int *))                                                                   \
    X(ts_set_gemv_rows, int, (int))                                                                       \
    X(ts_gemv_rows, int, (int *))                                                                         \
    X(ts_malloc, int, (void **, size_t))                                                                  \
    X(ts_free, int, (void *))                                                                             \
    X(ts_memset, int, (void *, int, size_t, void *))                                                      \
    X(ts_copy_to_device, int, (void *, const void *, size_t, void *))                                     \
    X(ts_copy_device, int, (void *, const void *, size_t, void *))                                        \
    X(ts_copy_to_host, int, (void *, const void *, size_t, void *))                                       \
    X(ts_synchronize, int, (void *))                                                                      \
    X(ts_timer_create, int, (ts_timer **))                                                                \
    X(ts_timer_start, int, (ts_timer *, void *))                                                          \
    X(ts_timer_stop, int, (ts_timer *, void *, float *))                                                  \
    X(ts_timer_destroy, int, (ts_timer *))                                                                \
    X(ts_set_deadline, int, (double))                                                                     \
    X(ts_deadline, int, (double *))                                                                       \
    X(ts_debug_hang, int, (void *))                                                                       \
    X(ts_graph_begin, int, (void *))                                                                      \
    X(ts_graph_end, int, (void *, ts_graph **))                                                           \
    X(ts_graph_launch, int, (ts_graph *, void *))                                                         \
    X(ts_graph_destroy, int, (ts_graph *))                                                                \
    X(ts_residual_add, int, (void *, const void *, const void *, const ts_elementwise_config *, void *)) \
    X(ts_rmsnorm, int, (void *, const void *, const void *, const ts_norm_config *, void *))             \
    X(ts_layernorm, int, (void *, const void *, const void *, const void *, const ts_norm_config *, void *)) \
    X(ts_layernorm_residual, int,                                                                         \
      (void *, void *, const void *, const void *, const void *, const void *, const ts_norm_config *, void *)) \
    X(ts_rmsnorm_residual, int,                                                                           \
      (void *, void *, const void *, const void *, const void *, const ts_norm_config *, void *))        \
    X(ts_rope, int, (void *, const void *, const int32_t *, const ts_rope_config *, void *))             \
    X(ts_attention_prefill, int,                                                                          \
      (void *, const void *, const void *, const void *, const ts_attention_config *, void *))           \
    X(ts_attention_decode, int,                                                                           \
      (void *, const void *, const void *, const void *, const int32_t *, const ts_decode_config *, void *)) \
    X(ts_swiglu, int, (void *, const void *, const void *, const ts_elementwise_config *, void *))       \
    X(ts_geglu, int, (void *, const void *, const void *, const ts_geglu_config *, void *))             \
    X(ts_swiglu_ffn, int,                                                                                 \
      (void *, const void *, const void *, const void *, const void *, const ts_ffn_config *, void *))   \
    X(ts_gemm_swiglu, int, (void *, const void *, const void *, const ts_ffn_config *, void *))          \
    X(ts_attention_scores_softmax, int, (void *, const void *, const void *, const ts_scores_config *, void *)) \
    X(ts_rmsnorm_gemm, int,                                                                               \
      (void *, void *, const void *, const void *, const void *, const void *, const void *,             \
       const ts_norm_gemm_config *, void *))                                                             \
    X(ts_layernorm_gemm, int,                                                                             \
      (void *, void *, const void *, const void *, const void *, const void *, const void *, const void *, \
       const ts_norm_gemm_config *, void *))                                                             \
    X(ts_swiglu_gemm, int,                                                                                \
      (void *, const void *, const void *, const void *, const void *, const ts_gemm_config *, void *))   \
    X(ts_gpt_ffn, int,                                                                                    \
      (void *, const void *, const void *, const void *, const void *, const void *,                     \
       const ts_gpt_ffn_config *, void *))                                                               \
    X(ts_gelu, int, (void *, const void *, const ts_elementwise_config *, void *))                       \
    X(ts_gelu_tanh, int, (void *, const void *, const ts_elementwise_config *, void *))                  \
    X(ts_gelu_scale, int, (void *, const void *, const ts_gelu_scale_config *, void *))                  \
    X(ts_pos_embedding, int,                                                                              \
      (void *, const void *, const void *, const int32_t *, const ts_embedding_config *, void *))        \
    X(ts_embedding, int, (void *, const int32_t *, const void *, const ts_embedding_config *, void *))   \
    X(ts_set_rows, int, (void *, const void *, const int32_t *, const ts_set_rows_config *, void *))     \
    X(ts_set_rows_fp8, int,                                                                               \
      (void *, const void *, const int32_t *, const float *, const ts_set_rows_fp8_config *, void *))     \
    X(ts_moe_router, int, (float *, int32_t *, const void *, const ts_moe_router_config *, void *))      \
    X(ts_moe_ffn, int,                                                                                    \
      (void *, const void *, const int32_t *, const float *, const void *, const void *,                  \
       const ts_moe_ffn_config *, void *))                                                                \
    X(ts_moe_shared_add, int,                                                                             \
      (void *, const void *, const void *, const void *, const void *, const ts_moe_shared_config *,      \
       void *))                                                                                           \
    X(ts_attention_decode_fp8, int,                                                                       \
      (void *, const void *, const void *, const void *, const int32_t *, const float *, const float *,   \
       const ts_decode_fp8_config *, void *))                                                             \
    X(ts_attention_decode_paged, int,                                                                     \
      (void *, const void *, const void *, const void *, const int32_t *, const int32_t *,                \
       const ts_paged_decode_config *, void *))                                                           \
    X(ts_attention_prefill_paged, int,                                                                    \
      (void *, const void *, const void *, const void *, const int32_t *, const int32_t *, const int32_t *, \
       const ts_paged_prefill_config *, void *))                                                          \
    X(ts_attention_decode_paged_fp8, int,                                                                 \
      (void *, const void *, const void *, const void *, const int32_t *, const int32_t *, const float *,  \
       const float *, const ts_paged_decode_fp8_config *, void *))                                        \
    X(ts_attention_prefill_paged_fp8, int,                                                                \
      (void *, const void *, const void *, const void *, const int32_t *, const int32_t *, const int32_t *, \
       const float *, const float *, const ts_paged_prefill_fp8_config *, void *))                        \
    X(ts_gemm, int, (void *, const void *, const void *, const void *, const ts_gemm_config *, void *))  \
    X(ts_softmax, int, (void *, const void *, const ts_softmax_config *, void *))                         \
    X(ts_logit_softcap, int, (void *, const void *, const ts_logit_softcap_config *, void *))             \
    X(ts_quant_fp8, int, (void *, float *, const void *, const float *, const ts_quant_config *, void *))  \
    X(ts_gemm_fp8, int,                                                                                   \
      (void *, const void *, const float *, const void *, const float *, const ts_gemm_fp8_config *, void *)) \
    X(ts_rmsnorm_quant_fp8, int,                                                                          \
      (void *, float *, void *, const void *, const void *, const void *, const float *,                 \
       const ts_norm_quant_config *, void *))                                                            \
    X(ts_swiglu_quant_fp8, int,                                                                           \
      (void *, float *, const void *, const void *, const float *, const ts_quant_config *, void *))     \
    X(ts_gemm_w4a16, int,                                                                                 \
      (void *, const void *, const int32_t *, const int32_t *, const void *, const int32_t *,             \
       const ts_w4a16_config *, void *))                                                                 \
    X(ts_w4a16_tiled_bytes, int, (const ts_w4a16_config *, size_t *))                                    \
    X(ts_w4a16_tile, int,                                                                                 \
      (void *, const int32_t *, const int32_t *, const void *, const ts_w4a16_config *, void *))         \
    X(ts_sample, int, (int32_t *, const float *, const ts_sample_config *, void *))                      \
    X(ts_philox, int, (uint32_t *, const ts_philox_config *, void *))

typedef struct tsg_api {
    void *handle;
#define TSG_FIELD(name, ret, params) ret(*name) params;
    TSG_ABI(TSG_FIELD)
#undef TSG_FIELD
} tsg_api;

/* What a failing call left behind, captured before control returns to Go. */
typedef struct {
    int status;
    char name[64];   /* ts_status_name(status) */
    char msg[1024];  /* ts_last_error(), truncated if longer */
} tsg_err;

enum {
    TSG_LOADED = 0,
    TSG_DLOPEN_FAILED = 1,    /* detail: dlerror() */
    TSG_MISSING_SYMBOL = 2,   /* detail: the symbol */
    TSG_VERSION_MISMATCH = 3, /* *version: what the library reports */
    TSG_NO_MEMORY = 4
};

/* Loads the library at path. The table is never freed on success: a CUDA library is not
 * safely unloadable, and one load serves the whole process. */
int tsg_load(const char *path, tsg_api **out, int *version, char *detail, size_t detail_len);

/* Whether a call into library a has been in flight for at least min_ns (every tsg_ wrapper
 * marks its thread from entry to return): 1 with the longest such call's ABI function in name
 * and its time in *elapsed_ns, else 0. */
int tsg_stuck(const tsg_api *a, long long min_ns, char *name, size_t name_len, long long *elapsed_ns);

int tsg_device_count(const tsg_api *a, int *count, tsg_err *e);
int tsg_init(const tsg_api *a, int device, tsg_err *e);
int tsg_shutdown(const tsg_api *a, tsg_err *e);
int tsg_get_device_info(const tsg_api *a, ts_device_info *info, tsg_err *e);
int tsg_copy_bandwidth(const tsg_api *a, double *gb_per_s, tsg_err *e);
int tsg_memory_in_use(const tsg_api *a, int64_t *bytes, tsg_err *e);
int tsg_release_workspaces(const tsg_api *a, tsg_err *e);
int tsg_record_paths(const tsg_api *a, int on, tsg_err *e);
int tsg_recorded_paths(const tsg_api *a, char *buf, size_t size, size_t *needed, tsg_err *e);
int tsg_set_batch_invariant(const tsg_api *a, int on, tsg_err *e);
int tsg_batch_invariant(const tsg_api *a, int *on, tsg_err *e);
int tsg_set_gemv_rows(const tsg_api *a, int max_rows, tsg_err *e);
int tsg_gemv_rows(const tsg_api *a, int *max_rows, tsg_err *e);
int tsg_copy_device(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e);
int tsg_copy_to_device(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e);

/* Allocates guard + bytes + guard, fills both guards with pattern, then copies src into the
 * data (or zeroes it when src is NULL); frees the allocation again if any step fails. */
int tsg_alloc(const tsg_api *a, void **base, size_t bytes, size_t guard, int pattern, const void *src, tsg_err *e);
int tsg_free(const tsg_api *a, void *base, tsg_err *e);
int tsg_copy_to_host(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e);
int tsg_synchronize(const tsg_api *a, tsg_err *e);
/* Copies both guard regions of an allocation to the host (which waits for the stream). */
int tsg_read_guards(const tsg_api *a, const void *base, size_t bytes, size_t guard, void *before, void *after,
                    tsg_err *e);
int tsg_fill_guards(const tsg_api *a, void *base, size_t bytes, size_t guard, int pattern, tsg_err *e);

int tsg_timer_create(const tsg_api *a, ts_timer **t, tsg_err *e);
int tsg_timer_start(const tsg_api *a, ts_timer *t, tsg_err *e);
int tsg_timer_stop(const tsg_api *a, ts_timer *t, float *ms, tsg_err *e);
int tsg_timer_destroy(const tsg_api *a, ts_timer *t, tsg_err *e);
int tsg_set_deadline(const tsg_api *a, double seconds, tsg_err *e);
int tsg_deadline(const tsg_api *a, double *seconds, tsg_err *e);
int tsg_debug_hang(const tsg_api *a, tsg_err *e);

/* Graphs of the ops issued on the library stream (touchstone.h, "graphs"). */
int tsg_graph_begin(const tsg_api *a, tsg_err *e);
int tsg_graph_end(const tsg_api *a, ts_graph **g, tsg_err *e);
int tsg_graph_launch(const tsg_api *a, ts_graph *g, tsg_err *e);
int tsg_graph_destroy(const tsg_api *a, ts_graph *g, tsg_err *e);

/* The ops, on the library stream (NULL). */
int tsg_residual_add(const tsg_api *a, void *out, const void *x, const void *residual, const ts_elementwise_config *cfg,
                     tsg_err *e);
int tsg_rmsnorm(const tsg_api *a, void *out, const void *x, const void *weight, const ts_norm_config *cfg, tsg_err *e);
int tsg_layernorm(const tsg_api *a, void *out, const void *x, const void *gamma, const void *beta,
                  const ts_norm_config *cfg, tsg_err *e);
int tsg_layernorm_residual(const tsg_api *a, void *sum, void *out, const void *x, const void *residual,
                           const void *gamma, const void *beta, const ts_norm_config *cfg, tsg_err *e);
int tsg_rmsnorm_residual(const tsg_api *a, void *sum, void *out, const void *x, const void *residual,
                         const void *weight, const ts_norm_config *cfg, tsg_err *e);
int tsg_rope(const tsg_api *a, void *out, const void *x, const int32_t *positions, const ts_rope_config *cfg,
             tsg_err *e);
int tsg_attention_prefill(const tsg_api *a, void *out, const void *q, const void *k, const void *v,
                          const ts_attention_config *cfg, tsg_err *e);
int tsg_attention_decode(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *cache_lens, const ts_decode_config *cfg, tsg_err *e);
int tsg_swiglu(const tsg_api *a, void *out, const void *gate, const void *up, const ts_elementwise_config *cfg,
               tsg_err *e);
int tsg_geglu(const tsg_api *a, void *out, const void *gate, const void *up, const ts_geglu_config *cfg, tsg_err *e);
int tsg_swiglu_ffn(const tsg_api *a, void *out, const void *x, const void *w_gate, const void *w_up,
                   const void *w_down, const ts_ffn_config *cfg, tsg_err *e);
int tsg_gemm_swiglu(const tsg_api *a, void *out, const void *x, const void *w_gate_up, const ts_ffn_config *cfg,
                    tsg_err *e);
int tsg_attention_scores_softmax(const tsg_api *a, void *probs, const void *q, const void *k,
                                 const ts_scores_config *cfg, tsg_err *e);
int tsg_rmsnorm_gemm(const tsg_api *a, void *out, void *sum, const void *x, const void *residual,
                     const void *norm_weight, const void *w, const void *bias, const ts_norm_gemm_config *cfg,
                     tsg_err *e);
int tsg_layernorm_gemm(const tsg_api *a, void *out, void *sum, const void *x, const void *residual, const void *gamma,
                       const void *beta, const void *w, const void *bias, const ts_norm_gemm_config *cfg, tsg_err *e);
int tsg_swiglu_gemm(const tsg_api *a, void *out, const void *gate, const void *up, const void *w, const void *bias,
                    const ts_gemm_config *cfg, tsg_err *e);
int tsg_gpt_ffn(const tsg_api *a, void *out, const void *x, const void *w1, const void *b1, const void *w2,
                const void *b2, const ts_gpt_ffn_config *cfg, tsg_err *e);
int tsg_gelu(const tsg_api *a, void *out, const void *x, const ts_elementwise_config *cfg, tsg_err *e);
int tsg_gelu_tanh(const tsg_api *a, void *out, const void *x, const ts_elementwise_config *cfg, tsg_err *e);
int tsg_gelu_scale(const tsg_api *a, void *out, const void *x, const ts_gelu_scale_config *cfg, tsg_err *e);
int tsg_pos_embedding(const tsg_api *a, void *out, const void *x, const void *table, const int32_t *positions,
                      const ts_embedding_config *cfg, tsg_err *e);
int tsg_embedding(const tsg_api *a, void *out, const int32_t *ids, const void *table, const ts_embedding_config *cfg,
                  tsg_err *e);
int tsg_set_rows(const tsg_api *a, void *dst, const void *src, const int32_t *rows, const ts_set_rows_config *cfg,
                 tsg_err *e);
int tsg_set_rows_fp8(const tsg_api *a, void *dst, const void *src, const int32_t *rows, const float *scale,
                     const ts_set_rows_fp8_config *cfg, tsg_err *e);
int tsg_moe_router(const tsg_api *a, float *weights, int32_t *ids, const void *logits, const ts_moe_router_config *cfg,
                   tsg_err *e);
int tsg_moe_ffn(const tsg_api *a, void *out, const void *x, const int32_t *ids, const float *weights,
                const void *gate_up, const void *down, const ts_moe_ffn_config *cfg, tsg_err *e);
int tsg_moe_shared_add(const tsg_api *a, void *out, const void *routed, const void *shared, const void *x,
                       const void *gate, const ts_moe_shared_config *cfg, tsg_err *e);
int tsg_attention_decode_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *cache_lens, const float *k_scale, const float *v_scale,
                             const ts_decode_fp8_config *cfg, tsg_err *e);
int tsg_attention_decode_paged(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *block_table, const int32_t *cache_lens,
                               const ts_paged_decode_config *cfg, tsg_err *e);
int tsg_attention_prefill_paged(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                                const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                                const ts_paged_prefill_config *cfg, tsg_err *e);
int tsg_attention_decode_paged_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache,
                                   const void *v_cache, const int32_t *block_table, const int32_t *cache_lens,
                                   const float *k_scale, const float *v_scale, const ts_paged_decode_fp8_config *cfg,
                                   tsg_err *e);
int tsg_attention_prefill_paged_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache,
                                    const void *v_cache, const int32_t *block_table, const int32_t *q_starts,
                                    const int32_t *kv_lens, const float *k_scale, const float *v_scale,
                                    const ts_paged_prefill_fp8_config *cfg, tsg_err *e);
int tsg_gemm(const tsg_api *a, void *out, const void *x, const void *w, const void *bias, const ts_gemm_config *cfg,
             tsg_err *e);
int tsg_softmax(const tsg_api *a, void *out, const void *x, const ts_softmax_config *cfg, tsg_err *e);
int tsg_logit_softcap(const tsg_api *a, void *out, const void *x, const ts_logit_softcap_config *cfg, tsg_err *e);
int tsg_quant_fp8(const tsg_api *a, void *out, float *scales, const void *x, const float *scale,
                  const ts_quant_config *cfg, tsg_err *e);
int tsg_gemm_fp8(const tsg_api *a, void *out, const void *x, const float *x_scales, const void *w,
                 const float *w_scales, const ts_gemm_fp8_config *cfg, tsg_err *e);
int tsg_rmsnorm_quant_fp8(const tsg_api *a, void *out, float *scales, void *sum, const void *x, const void *residual,
                          const void *weight, const float *scale, const ts_norm_quant_config *cfg, tsg_err *e);
int tsg_swiglu_quant_fp8(const tsg_api *a, void *out, float *scales, const void *gate, const void *up,
                         const float *scale, const ts_quant_config *cfg, tsg_err *e);
int tsg_gemm_w4a16(const tsg_api *a, void *out, const void *x, const void *qweight, const void *qzeros,
                   const void *scales, const void *g_idx, const ts_w4a16_config *cfg, tsg_err *e);
int tsg_w4a16_tiled_bytes(const tsg_api *a, const ts_w4a16_config *cfg, size_t *bytes, tsg_err *e);
int tsg_w4a16_tile(const tsg_api *a, void *tiled, const void *qweight, const void *qzeros, const void *scales,
                   const ts_w4a16_config *cfg, tsg_err *e);
int tsg_sample(const tsg_api *a, void *tokens, const void *logits, const ts_sample_config *cfg, tsg_err *e);
int tsg_philox(const tsg_api *a, void *out, const ts_philox_config *cfg, tsg_err *e);

#endif /* TOUCHSTONE_CUDA_SHIM_H */
