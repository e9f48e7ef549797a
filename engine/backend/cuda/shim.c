/* shim.c: dlopen loader and thin wrappers over libtouchstone_cuda.so; see shim.h. */
#include "shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The calls in flight, one slot per OS thread that has called the library (freed when the
 * thread exits): which function, and since when. A call can block inside the library without
 * any wait of its own (a launch whose kernel is loaded lazily waits for the device, which a
 * hung kernel keeps busy), so the Go side polls tsg_stuck for a call in flight for too long. */
#define TSG_SLOTS 256
static struct {
    atomic_int used;
    _Atomic(const tsg_api *) api;
    _Atomic(const char *) name;
    atomic_llong since; /* CLOCK_MONOTONIC ns at entry; 0 when not in a call */
} slots[TSG_SLOTS];
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

static void release_slot(void *v) {
    int i = (int)(intptr_t)v - 1;
    atomic_store(&slots[i].since, 0);
    atomic_store(&slots[i].used, 0);
}
static void make_slot_key(void) { pthread_key_create(&slot_key, release_slot); }

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* this_slot is the calling thread's slot, claimed on its first call; -1 when all are taken
 * (that thread's calls then go unwatched). */
static int this_slot(void) {
    pthread_once(&slot_once, make_slot_key);
    intptr_t v = (intptr_t)pthread_getspecific(slot_key);
    if (v != 0) return (int)v - 1;
    for (int i = 0; i < TSG_SLOTS; ++i) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&slots[i].used, &free_slot, 1)) {
            pthread_setspecific(slot_key, (void *)(intptr_t)(i + 1));
            return i;
        }
    }
    return -1;
}

/* enter marks the thread as inside name of library a until done() returns. */
static void enter(const tsg_api *a, const char *name) {
    int i = this_slot();
    if (i >= 0) {
        atomic_store(&slots[i].api, a);
        atomic_store(&slots[i].name, name);
        atomic_store(&slots[i].since, now_ns());
    }
}

static void leave(void) {
    intptr_t v = (intptr_t)pthread_getspecific(slot_key);
    if (v != 0) atomic_store(&slots[v - 1].since, 0);
}

int tsg_stuck(const tsg_api *a, long long min_ns, char *name, size_t name_len, long long *elapsed_ns) {
    const long long now = now_ns();
    long long worst = -1;
    for (int i = 0; i < TSG_SLOTS; ++i) {
        const long long since = atomic_load(&slots[i].since);
        if (since != 0 && atomic_load(&slots[i].api) == a && now - since >= min_ns && now - since > worst) {
            worst = now - since;
            const char *n = atomic_load(&slots[i].name);
            snprintf(name, name_len, "%s", n != NULL ? n : "?");
        }
    }
    *elapsed_ns = worst;
    return worst >= 0;
}

int tsg_load(const char *path, tsg_api **out, int *version, char *detail, size_t detail_len) {
    *out = NULL;
    *version = 0;
    detail[0] = '\0';
    dlerror(); /* clear a stale message so the one reported is this call's */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *m = dlerror();
        snprintf(detail, detail_len, "%s", m != NULL ? m : "dlopen failed without a message");
        return TSG_DLOPEN_FAILED;
    }
    /* The version comes first: a library built from another header is best reported as such,
     * not as whichever of its symbols happens to be missing. */
    void *sym = dlsym(h, "ts_abi_version");
    if (sym == NULL) {
        snprintf(detail, detail_len, "ts_abi_version");
        dlclose(h);
        return TSG_MISSING_SYMBOL;
    }
    int (*abi_version)(void);
    memcpy(&abi_version, &sym, sizeof sym);
    *version = abi_version();
    if (*version != TS_ABI_VERSION) {
        dlclose(h);
        return TSG_VERSION_MISMATCH;
    }
    tsg_api *a = calloc(1, sizeof *a);
    if (a == NULL) {
        dlclose(h);
        return TSG_NO_MEMORY;
    }
    a->handle = h;
    /* memcpy instead of a cast: ISO C has no conversion from void * to a function pointer. */
#define TSG_LOAD(name, ret, params)                           \
    sym = dlsym(h, #name);                                    \
    if (sym == NULL) {                                        \
        snprintf(detail, detail_len, "%s", #name);            \
        free(a);                                              \
        dlclose(h);                                           \
        return TSG_MISSING_SYMBOL;                            \
    }                                                         \
    memcpy(&a->name, &sym, sizeof sym);
    TSG_ABI(TSG_LOAD)
#undef TSG_LOAD
    *out = a;
    return TSG_LOADED;
}

/* done captures the message of a failed call while still on the thread that made it. */
static int done(const tsg_api *a, int st, tsg_err *e) {
    leave();
    if (st != TS_OK && e != NULL) {
        const char *msg = a->ts_last_error();
        const char *name = a->ts_status_name(st);
        e->status = st;
        snprintf(e->msg, sizeof e->msg, "%s", msg != NULL ? msg : "");
        snprintf(e->name, sizeof e->name, "%s", name != NULL ? name : "");
    }
    return st;
}

int tsg_device_count(const tsg_api *a, int *count, tsg_err *e) {
    enter(a, "ts_device_count");
    return done(a, a->ts_device_count(count), e);
}
int tsg_init(const tsg_api *a, int device, tsg_err *e) {
    enter(a, "ts_init");
    return done(a, a->ts_init(device), e);
}
int tsg_shutdown(const tsg_api *a, tsg_err *e) {
    enter(a, "ts_shutdown");
    return done(a, a->ts_shutdown(), e);
}
int tsg_get_device_info(const tsg_api *a, ts_device_info *info, tsg_err *e) {
    enter(a, "ts_get_device_info");
    return done(a, a->ts_get_device_info(info), e);
}
int tsg_copy_bandwidth(const tsg_api *a, double *gb_per_s, tsg_err *e) {
    enter(a, "ts_copy_bandwidth");
    return done(a, a->ts_copy_bandwidth(gb_per_s), e);
}
int tsg_memory_in_use(const tsg_api *a, int64_t *bytes, tsg_err *e) {
    enter(a, "ts_memory_in_use");
    return done(a, a->ts_memory_in_use(bytes), e);
}
int tsg_release_workspaces(const tsg_api *a, tsg_err *e) {
    enter(a, "ts_release_workspaces");
    return done(a, a->ts_release_workspaces(), e);
}
int tsg_record_paths(const tsg_api *a, int on, tsg_err *e) {
    enter(a, "ts_record_paths");
    return done(a, a->ts_record_paths(on), e);
}
int tsg_set_batch_invariant(const tsg_api *a, int on, tsg_err *e) {
    enter(a, "ts_set_batch_invariant");
    return done(a, a->ts_set_batch_invariant(on), e);
}
int tsg_batch_invariant(const tsg_api *a, int *on, tsg_err *e) {
    enter(a, "ts_batch_invariant");
    return done(a, a->ts_batch_invariant(on), e);
}
int tsg_set_gemv_rows(const tsg_api *a, int max_rows, tsg_err *e) {
    enter(a, "ts_set_gemv_rows");
    return done(a, a->ts_set_gemv_rows(max_rows), e);
}
int tsg_gemv_rows(const tsg_api *a, int *max_rows, tsg_err *e) {
    enter(a, "ts_gemv_rows");
    return done(a, a->ts_gemv_rows(max_rows), e);
}
int tsg_recorded_paths(const tsg_api *a, char *buf, size_t size, size_t *needed, tsg_err *e) {
    enter(a, "ts_recorded_paths");
    return done(a, a->ts_recorded_paths(buf, size, needed), e);
}
int tsg_copy_device(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e) {
    enter(a, "ts_copy_device");
    return done(a, a->ts_copy_device(dst, src, bytes, NULL), e);
}

int tsg_copy_to_device(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e) {
    enter(a, "ts_copy_to_device");
    return done(a, a->ts_copy_to_device(dst, src, bytes, NULL), e);
}

int tsg_alloc(const tsg_api *a, void **base, size_t bytes, size_t guard, int pattern, const void *src, tsg_err *e) {
    enter(a, "ts_alloc");
    *base = NULL;
    void *p = NULL;
    int st = a->ts_malloc(&p, bytes + 2 * guard);
    if (st != TS_OK) {
        return done(a, st, e);
    }
    char *data = (char *)p + guard;
    if (guard > 0) {
        st = a->ts_memset(p, pattern, guard, NULL);
        if (st == TS_OK) {
            st = a->ts_memset(data + bytes, pattern, guard, NULL);
        }
    }
    if (st == TS_OK && bytes > 0) {
        st = src != NULL ? a->ts_copy_to_device(data, src, bytes, NULL) : a->ts_memset(data, 0, bytes, NULL);
    }
    if (st != TS_OK) {
        done(a, st, e); /* capture before ts_free can overwrite the message */
        a->ts_free(p);
        return st;
    }
    *base = p;
    return done(a, TS_OK, e);
}

int tsg_free(const tsg_api *a, void *base, tsg_err *e) {
    enter(a, "ts_free");
    return done(a, a->ts_free(base), e);
}
int tsg_copy_to_host(const tsg_api *a, void *dst, const void *src, size_t bytes, tsg_err *e) {
    enter(a, "ts_copy_to_host");
    return done(a, a->ts_copy_to_host(dst, src, bytes, NULL), e);
}
int tsg_synchronize(const tsg_api *a, tsg_err *e) {
    enter(a, "ts_synchronize");
    return done(a, a->ts_synchronize(NULL), e);
}

int tsg_read_guards(const tsg_api *a, const void *base, size_t bytes, size_t guard, void *before, void *after,
                    tsg_err *e) {
    enter(a, "ts_read_guards");
    int st = a->ts_copy_to_host(before, base, guard, NULL);
    if (st == TS_OK) {
        st = a->ts_copy_to_host(after, (const char *)base + guard + bytes, guard, NULL);
    }
    return done(a, st, e);
}

int tsg_fill_guards(const tsg_api *a, void *base, size_t bytes, size_t guard, int pattern, tsg_err *e) {
    enter(a, "ts_fill_guards");
    int st = a->ts_memset(base, pattern, guard, NULL);
    if (st == TS_OK) {
        st = a->ts_memset((char *)base + guard + bytes, pattern, guard, NULL);
    }
    return done(a, st, e);
}

int tsg_timer_create(const tsg_api *a, ts_timer **t, tsg_err *e) {
    enter(a, "ts_timer_create");
    return done(a, a->ts_timer_create(t), e);
}
int tsg_timer_start(const tsg_api *a, ts_timer *t, tsg_err *e) {
    enter(a, "ts_timer_start");
    return done(a, a->ts_timer_start(t, NULL), e);
}
int tsg_timer_stop(const tsg_api *a, ts_timer *t, float *ms, tsg_err *e) {
    enter(a, "ts_timer_stop");
    return done(a, a->ts_timer_stop(t, NULL, ms), e);
}
int tsg_timer_destroy(const tsg_api *a, ts_timer *t, tsg_err *e) {
    enter(a, "ts_timer_destroy");
    return done(a, a->ts_timer_destroy(t), e);
}
int tsg_set_deadline(const tsg_api *a, double seconds, tsg_err *e) {
    enter(a, "ts_set_deadline");
    return done(a, a->ts_set_deadline(seconds), e);
}
int tsg_deadline(const tsg_api *a, double *seconds, tsg_err *e) {
    enter(a, "ts_deadline");
    return done(a, a->ts_deadline(seconds), e);
}
int tsg_debug_hang(const tsg_api *a, tsg_err *e) {
    enter(a, "ts_debug_hang");
    return done(a, a->ts_debug_hang(NULL), e);
}

int tsg_graph_begin(const tsg_api *a, tsg_err *e) {
    enter(a, "ts_graph_begin");
    return done(a, a->ts_graph_begin(NULL), e);
}
int tsg_graph_end(const tsg_api *a, ts_graph **g, tsg_err *e) {
    enter(a, "ts_graph_end");
    return done(a, a->ts_graph_end(NULL, g), e);
}
int tsg_graph_launch(const tsg_api *a, ts_graph *g, tsg_err *e) {
    enter(a, "ts_graph_launch");
    return done(a, a->ts_graph_launch(g, NULL), e);
}
int tsg_graph_destroy(const tsg_api *a, ts_graph *g, tsg_err *e) {
    enter(a, "ts_graph_destroy");
    return done(a, a->ts_graph_destroy(g), e);
}

int tsg_residual_add(const tsg_api *a, void *out, const void *x, const void *residual, const ts_elementwise_config *cfg,
                     tsg_err *e) {
    enter(a, "ts_residual_add");
    return done(a, a->ts_residual_add(out, x, residual, cfg, NULL), e);
}
int tsg_rmsnorm(const tsg_api *a, void *out, const void *x, const void *weight, const ts_norm_config *cfg, tsg_err *e) {
    enter(a, "ts_rmsnorm");
    return done(a, a->ts_rmsnorm(out, x, weight, cfg, NULL), e);
}
int tsg_layernorm(const tsg_api *a, void *out, const void *x, const void *gamma, const void *beta,
                  const ts_norm_config *cfg, tsg_err *e) {
    enter(a, "ts_layernorm");
    return done(a, a->ts_layernorm(out, x, gamma, beta, cfg, NULL), e);
}
int tsg_layernorm_residual(const tsg_api *a, void *sum, void *out, const void *x, const void *residual,
                           const void *gamma, const void *beta, const ts_norm_config *cfg, tsg_err *e) {
    enter(a, "ts_layernorm_residual");
    return done(a, a->ts_layernorm_residual(sum, out, x, residual, gamma, beta, cfg, NULL), e);
}
int tsg_rmsnorm_residual(const tsg_api *a, void *sum, void *out, const void *x, const void *residual,
                         const void *weight, const ts_norm_config *cfg, tsg_err *e) {
    enter(a, "ts_rmsnorm_residual");
    return done(a, a->ts_rmsnorm_residual(sum, out, x, residual, weight, cfg, NULL), e);
}
int tsg_rope(const tsg_api *a, void *out, const void *x, const int32_t *positions, const ts_rope_config *cfg,
             tsg_err *e) {
    enter(a, "ts_rope");
    return done(a, a->ts_rope(out, x, positions, cfg, NULL), e);
}
int tsg_attention_prefill(const tsg_api *a, void *out, const void *q, const void *k, const void *v,
                          const ts_attention_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_prefill");
    return done(a, a->ts_attention_prefill(out, q, k, v, cfg, NULL), e);
}
int tsg_attention_decode(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *cache_lens, const ts_decode_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_decode");
    return done(a, a->ts_attention_decode(out, q, k_cache, v_cache, cache_lens, cfg, NULL), e);
}
int tsg_swiglu(const tsg_api *a, void *out, const void *gate, const void *up, const ts_elementwise_config *cfg,
               tsg_err *e) {
    enter(a, "ts_swiglu");
    return done(a, a->ts_swiglu(out, gate, up, cfg, NULL), e);
}
int tsg_geglu(const tsg_api *a, void *out, const void *gate, const void *up, const ts_geglu_config *cfg, tsg_err *e) {
    enter(a, "ts_geglu");
    return done(a, a->ts_geglu(out, gate, up, cfg, NULL), e);
}
int tsg_swiglu_ffn(const tsg_api *a, void *out, const void *x, const void *w_gate, const void *w_up,
                   const void *w_down, const ts_ffn_config *cfg, tsg_err *e) {
    enter(a, "ts_swiglu_ffn");
    return done(a, a->ts_swiglu_ffn(out, x, w_gate, w_up, w_down, cfg, NULL), e);
}
int tsg_gemm_swiglu(const tsg_api *a, void *out, const void *x, const void *w_gate_up, const ts_ffn_config *cfg,
                    tsg_err *e) {
    enter(a, "ts_gemm_swiglu");
    return done(a, a->ts_gemm_swiglu(out, x, w_gate_up, cfg, NULL), e);
}
int tsg_attention_scores_softmax(const tsg_api *a, void *probs, const void *q, const void *k,
                                 const ts_scores_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_scores_softmax");
    return done(a, a->ts_attention_scores_softmax(probs, q, k, cfg, NULL), e);
}
int tsg_rmsnorm_gemm(const tsg_api *a, void *out, void *sum, const void *x, const void *residual,
                     const void *norm_weight, const void *w, const void *bias, const ts_norm_gemm_config *cfg,
                     tsg_err *e) {
    enter(a, "ts_rmsnorm_gemm");
    return done(a, a->ts_rmsnorm_gemm(out, sum, x, residual, norm_weight, w, bias, cfg, NULL), e);
}
int tsg_layernorm_gemm(const tsg_api *a, void *out, void *sum, const void *x, const void *residual, const void *gamma,
                       const void *beta, const void *w, const void *bias, const ts_norm_gemm_config *cfg, tsg_err *e) {
    enter(a, "ts_layernorm_gemm");
    return done(a, a->ts_layernorm_gemm(out, sum, x, residual, gamma, beta, w, bias, cfg, NULL), e);
}
int tsg_swiglu_gemm(const tsg_api *a, void *out, const void *gate, const void *up, const void *w, const void *bias,
                    const ts_gemm_config *cfg, tsg_err *e) {
    enter(a, "ts_swiglu_gemm");
    return done(a, a->ts_swiglu_gemm(out, gate, up, w, bias, cfg, NULL), e);
}
int tsg_gpt_ffn(const tsg_api *a, void *out, const void *x, const void *w1, const void *b1, const void *w2,
                const void *b2, const ts_gpt_ffn_config *cfg, tsg_err *e) {
    enter(a, "ts_gpt_ffn");
    return done(a, a->ts_gpt_ffn(out, x, w1, b1, w2, b2, cfg, NULL), e);
}
int tsg_gelu(const tsg_api *a, void *out, const void *x, const ts_elementwise_config *cfg, tsg_err *e) {
    enter(a, "ts_gelu");
    return done(a, a->ts_gelu(out, x, cfg, NULL), e);
}
int tsg_gelu_tanh(const tsg_api *a, void *out, const void *x, const ts_elementwise_config *cfg, tsg_err *e) {
    enter(a, "ts_gelu_tanh");
    return done(a, a->ts_gelu_tanh(out, x, cfg, NULL), e);
}
int tsg_gelu_scale(const tsg_api *a, void *out, const void *x, const ts_gelu_scale_config *cfg, tsg_err *e) {
    enter(a, "ts_gelu_scale");
    return done(a, a->ts_gelu_scale(out, x, cfg, NULL), e);
}
int tsg_pos_embedding(const tsg_api *a, void *out, const void *x, const void *table, const int32_t *positions,
                      const ts_embedding_config *cfg, tsg_err *e) {
    enter(a, "ts_pos_embedding");
    return done(a, a->ts_pos_embedding(out, x, table, positions, cfg, NULL), e);
}
int tsg_embedding(const tsg_api *a, void *out, const int32_t *ids, const void *table, const ts_embedding_config *cfg,
                  tsg_err *e) {
    enter(a, "ts_embedding");
    return done(a, a->ts_embedding(out, ids, table, cfg, NULL), e);
}
int tsg_set_rows(const tsg_api *a, void *dst, const void *src, const int32_t *rows, const ts_set_rows_config *cfg,
                 tsg_err *e) {
    enter(a, "ts_set_rows");
    return done(a, a->ts_set_rows(dst, src, rows, cfg, NULL), e);
}
int tsg_set_rows_fp8(const tsg_api *a, void *dst, const void *src, const int32_t *rows, const float *scale,
                     const ts_set_rows_fp8_config *cfg, tsg_err *e) {
    enter(a, "ts_set_rows_fp8");
    return done(a, a->ts_set_rows_fp8(dst, src, rows, scale, cfg, NULL), e);
}
int tsg_moe_router(const tsg_api *a, float *weights, int32_t *ids, const void *logits, const ts_moe_router_config *cfg,
                   tsg_err *e) {
    enter(a, "ts_moe_router");
    return done(a, a->ts_moe_router(weights, ids, logits, cfg, NULL), e);
}
int tsg_moe_ffn(const tsg_api *a, void *out, const void *x, const int32_t *ids, const float *weights,
                const void *gate_up, const void *down, const ts_moe_ffn_config *cfg, tsg_err *e) {
    enter(a, "ts_moe_ffn");
    return done(a, a->ts_moe_ffn(out, x, ids, weights, gate_up, down, cfg, NULL), e);
}
int tsg_moe_shared_add(const tsg_api *a, void *out, const void *routed, const void *shared, const void *x,
                       const void *gate, const ts_moe_shared_config *cfg, tsg_err *e) {
    enter(a, "ts_moe_shared_add");
    return done(a, a->ts_moe_shared_add(out, routed, shared, x, gate, cfg, NULL), e);
}
int tsg_attention_decode_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *cache_lens, const float *k_scale, const float *v_scale,
                             const ts_decode_fp8_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_decode_fp8");
    return done(a, a->ts_attention_decode_fp8(out, q, k_cache, v_cache, cache_lens, k_scale, v_scale, cfg, NULL), e);
}
int tsg_attention_decode_paged(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *block_table, const int32_t *cache_lens,
                               const ts_paged_decode_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_decode_paged");
    return done(a, a->ts_attention_decode_paged(out, q, k_cache, v_cache, block_table, cache_lens, cfg, NULL), e);
}
int tsg_attention_prefill_paged(const tsg_api *a, void *out, const void *q, const void *k_cache, const void *v_cache,
                                const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                                const ts_paged_prefill_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_prefill_paged");
    return done(a, a->ts_attention_prefill_paged(out, q, k_cache, v_cache, block_table, q_starts, kv_lens, cfg, NULL),
                e);
}
int tsg_attention_decode_paged_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache,
                                   const void *v_cache, const int32_t *block_table, const int32_t *cache_lens,
                                   const float *k_scale, const float *v_scale, const ts_paged_decode_fp8_config *cfg,
                                   tsg_err *e) {
    enter(a, "ts_attention_decode_paged_fp8");
    return done(a,
                a->ts_attention_decode_paged_fp8(out, q, k_cache, v_cache, block_table, cache_lens, k_scale, v_scale,
                                                 cfg, NULL),
                e);
}
int tsg_attention_prefill_paged_fp8(const tsg_api *a, void *out, const void *q, const void *k_cache,
                                    const void *v_cache, const int32_t *block_table, const int32_t *q_starts,
                                    const int32_t *kv_lens, const float *k_scale, const float *v_scale,
                                    const ts_paged_prefill_fp8_config *cfg, tsg_err *e) {
    enter(a, "ts_attention_prefill_paged_fp8");
    return done(a,
                a->ts_attention_prefill_paged_fp8(out, q, k_cache, v_cache, block_table, q_starts, kv_lens, k_scale,
                                                  v_scale, cfg, NULL),
                e);
}
int tsg_gemm(const tsg_api *a, void *out, const void *x, const void *w, const void *bias, const ts_gemm_config *cfg,
             tsg_err *e) {
    enter(a, "ts_gemm");
    return done(a, a->ts_gemm(out, x, w, bias, cfg, NULL), e);
}
int tsg_softmax(const tsg_api *a, void *out, const void *x, const ts_softmax_config *cfg, tsg_err *e) {
    enter(a, "ts_softmax");
    return done(a, a->ts_softmax(out, x, cfg, NULL), e);
}
int tsg_logit_softcap(const tsg_api *a, void *out, const void *x, const ts_logit_softcap_config *cfg, tsg_err *e) {
    enter(a, "ts_logit_softcap");
    return done(a, a->ts_logit_softcap(out, x, cfg, NULL), e);
}
int tsg_quant_fp8(const tsg_api *a, void *out, float *scales, const void *x, const float *scale,
                  const ts_quant_config *cfg, tsg_err *e) {
    enter(a, "ts_quant_fp8");
    return done(a, a->ts_quant_fp8(out, scales, x, scale, cfg, NULL), e);
}
int tsg_gemm_fp8(const tsg_api *a, void *out, const void *x, const float *x_scales, const void *w,
                 const float *w_scales, const ts_gemm_fp8_config *cfg, tsg_err *e) {
    enter(a, "ts_gemm_fp8");
    return done(a, a->ts_gemm_fp8(out, x, x_scales, w, w_scales, cfg, NULL), e);
}
int tsg_rmsnorm_quant_fp8(const tsg_api *a, void *out, float *scales, void *sum, const void *x, const void *residual,
                          const void *weight, const float *scale, const ts_norm_quant_config *cfg, tsg_err *e) {
    enter(a, "ts_rmsnorm_quant_fp8");
    return done(a, a->ts_rmsnorm_quant_fp8(out, scales, sum, x, residual, weight, scale, cfg, NULL), e);
}
int tsg_swiglu_quant_fp8(const tsg_api *a, void *out, float *scales, const void *gate, const void *up,
                         const float *scale, const ts_quant_config *cfg, tsg_err *e) {
    enter(a, "ts_swiglu_quant_fp8");
    return done(a, a->ts_swiglu_quant_fp8(out, scales, gate, up, scale, cfg, NULL), e);
}
int tsg_gemm_w4a16(const tsg_api *a, void *out, const void *x, const void *qweight, const void *qzeros,
                   const void *scales, const void *g_idx, const ts_w4a16_config *cfg, tsg_err *e) {
    enter(a, "ts_gemm_w4a16");
    return done(a,
                a->ts_gemm_w4a16(out, x, (const int32_t *)qweight, (const int32_t *)qzeros, scales,
                                 (const int32_t *)g_idx, cfg, NULL),
                e);
}
int tsg_w4a16_tiled_bytes(const tsg_api *a, const ts_w4a16_config *cfg, size_t *bytes, tsg_err *e) {
    enter(a, "ts_w4a16_tiled_bytes");
    return done(a, a->ts_w4a16_tiled_bytes(cfg, bytes), e);
}
int tsg_w4a16_tile(const tsg_api *a, void *tiled, const void *qweight, const void *qzeros, const void *scales,
                   const ts_w4a16_config *cfg, tsg_err *e) {
    enter(a, "ts_w4a16_tile");
    return done(a, a->ts_w4a16_tile(tiled, (const int32_t *)qweight, (const int32_t *)qzeros, scales, cfg, NULL), e);
}
int tsg_sample(const tsg_api *a, void *tokens, const void *logits, const ts_sample_config *cfg, tsg_err *e) {
    enter(a, "ts_sample");
    return done(a, a->ts_sample((int32_t *)tokens, (const float *)logits, cfg, NULL), e);
}
int tsg_philox(const tsg_api *a, void *out, const ts_philox_config *cfg, tsg_err *e) {
    enter(a, "ts_philox");
    return done(a, a->ts_philox((uint32_t *)out, cfg, NULL), e);
}
