/*
 * fakets.c: libtouchstone_cuda.so over host memory, for the Go backend's tests on machines
 * without CUDA. "Device" pointers are malloc'ed host memory; the stream is synchronous.
 * Built by the tests with gcc -shared -fPIC; never part of a real build.
 *
 * It only has to exercise the Go side: every entry point appends one line to $FAKETS_LOG
 * ("ts_rmsnorm dtype=1 rows=4 ..."), so tests can count calls into the library and check
 * the configs Go built; residual_add really adds (fp16 and bf16), gelu copies x to out, sample picks
 * the argmax when greedy (else writes nothing), philox computes the real stream, the other
 * ops only log. Behaviour is switched at run time by the environment, read on every call
 * (Go's os.Setenv reaches C's environment when cgo is in use):
 *
 *   FAKETS_FAIL=<ts_name>:<status>:<message>  that entry point fails with status/message
 *   FAKETS_LATCH=1                            any failure also latches, as a sticky fault
 *                                             does (TS_ERR_STICKY always latches): every
 *                                             later call returns TS_ERR_STICKY
 *   FAKETS_OOB=<ts_name>:after|before:<i>[:sum]  after succeeding, the op writes 0x00 into
 *                                             byte i past the end (or before the start)
 *                                             of out (of sum, for layernorm_residual and
 *                                             rmsnorm_residual)
 *   FAKETS_DEVICES=<n>                        device count (default 1)
 *   FAKETS_PATHS=<text>                       what ts_recorded_paths returns (the fake
 *                                             launches no kernels to record)
 *
 * Compile with -DFAKE_ABI_VERSION=<n> to report another ABI version, -DFAKE_OMIT_RMSNORM to
 * leave ts_rmsnorm out.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "touchstone.h"

#ifndef FAKE_ABI_VERSION
#define FAKE_ABI_VERSION TS_ABI_VERSION
#endif

/* Slack on both sides of every allocation, so that the out-of-bounds writes tests inject
 * without guards land in memory the fake owns instead of corrupting malloc. */
#define SLACK 64

static char last_error[1024];
static int latched;
static int latched_status = TS_ERR_STICKY;
static double fake_deadline = TS_DEFAULT_DEADLINE_S;
static char latched_msg[1024];
static int initialized;
static int current_device = -1;
static int64_t in_use;

static void logf_(const char *fmt, ...) {
    const char *path = getenv("FAKETS_LOG");
    if (path == NULL || *path == '\0') return;
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int fail(int status, const char *msg) {
    snprintf(last_error, sizeof last_error, "%s", msg);
    const char *latch = getenv("FAKETS_LATCH");
    if (status == TS_ERR_STICKY || status == TS_ERR_TIMEOUT || (latch != NULL && strcmp(latch, "1") == 0)) {
        latched = 1;
        latched_status = status == TS_ERR_TIMEOUT ? TS_ERR_TIMEOUT : TS_ERR_STICKY;
        snprintf(latched_msg, sizeof latched_msg, "%s", msg);
    }
    return status;
}

/* enter runs first in every entry point after the log line: a latched fault, then an
 * injected failure, then (for calls that need it) the init check. */
static int enter(const char *name, int needs_init) {
    if (latched) {
        snprintf(last_error, sizeof last_error, "%s", latched_msg);
        return latched_status;
    }
    /* FAKETS_HANG=<function>[:<n>]: that call (only its n-th, counting from 1) never
     * returns, as a library without deadlines waiting for a kernel that never finishes
     * would not. FAKETS_HANG_ONCE=<file>: only if the file does not exist yet (it is created
     * on hanging), so a process started after the hang runs clean. */
    const char *hang = getenv("FAKETS_HANG");
    size_t hn = strlen(name);
    if (hang != NULL && strncmp(hang, name, hn) == 0 && (hang[hn] == '\0' || hang[hn] == ':')) {
        static long hang_calls;
        if (hang[hn] == '\0' || ++hang_calls == strtol(hang + hn + 1, NULL, 10)) {
            const char *once = getenv("FAKETS_HANG_ONCE");
            FILE *f = NULL;
            if (once == NULL || *once == '\0' || (f = fopen(once, "wx")) != NULL) {
                if (f != NULL) fclose(f);
                for (;;) pause();
            }
        }
    }
    const char *spec = getenv("FAKETS_FAIL");
    size_t n = strlen(name);
    if (spec != NULL && strncmp(spec, name, n) == 0 && spec[n] == ':') {
        char *end;
        long st = strtol(spec + n + 1, &end, 10);
        return fail((int)st, *end == ':' ? end + 1 : "");
    }
    if (needs_init && !initialized) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: ts_init has not succeeded", name);
        return fail(TS_ERR_NOT_INITIALIZED, msg);
    }
    return TS_OK;
}

static int null_arg(const char *name, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s = NULL: must be a device pointer", name, arg);
    return fail(TS_ERR_INVALID_ARGUMENT, msg);
}

#define NEED(name, p) \
    if ((p) == NULL) return null_arg(name, #p)

/* oob injects an out-of-bounds write into out (bytes long) if FAKETS_OOB asks for it. */
static void oob(const char *name, void *out, void *sum, size_t bytes) {
    const char *spec = getenv("FAKETS_OOB");
    size_t n = strlen(name);
    if (spec == NULL || strncmp(spec, name, n) != 0 || spec[n] != ':') return;
    const char *side = spec + n + 1;
    const char *colon = strchr(side, ':');
    if (colon == NULL) return;
    long i = strtol(colon + 1, NULL, 10);
    unsigned char *p = (unsigned char *)(strstr(colon + 1, ":sum") != NULL ? sum : out);
    if (strncmp(side, "after", 5) == 0) {
        p[bytes + (size_t)i] = 0x00;
    } else {
        p[-1 - i] = 0x00;
    }
}

/* ---- bf16 <-> fp32, for residual_add (round to nearest even; no NaN input in the tests) ---- */

static float b2f(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t f2b(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- fp16 <-> fp32, for residual_add ---- */

static float h2f(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0);
    if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {                        /* below 2^-14: fp16 subnormal */
        float af;
        memcpy(&af, &a, sizeof af);
        return sign | (uint16_t)lrintf(af * 16777216.0f);
    }
    uint32_t r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    uint32_t h = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

/* ---- runtime ---- */

int ts_abi_version(void) {
    logf_("ts_abi_version");
    return FAKE_ABI_VERSION;
}

const char *ts_last_error(void) { return last_error; }

const char *ts_status_name(int status) {
    switch (status) {
    case TS_OK: return "TS_OK";
    case TS_ERR_INVALID_ARGUMENT: return "TS_ERR_INVALID_ARGUMENT";
    case TS_ERR_SHAPE_MISMATCH: return "TS_ERR_SHAPE_MISMATCH";
    case TS_ERR_UNSUPPORTED: return "TS_ERR_UNSUPPORTED";
    case TS_ERR_OUT_OF_MEMORY: return "TS_ERR_OUT_OF_MEMORY";
    case TS_ERR_CUDA: return "TS_ERR_CUDA";
    case TS_ERR_STICKY: return "TS_ERR_STICKY";
    case TS_ERR_NOT_INITIALIZED: return "TS_ERR_NOT_INITIALIZED";
    case TS_ERR_INDEX: return "TS_ERR_INDEX";
    case TS_ERR_NO_DEVICE: return "TS_ERR_NO_DEVICE";
    case TS_ERR_TIMEOUT: return "TS_ERR_TIMEOUT";
    }
    return "TS_ERR_UNKNOWN";
}

static int device_count(void) {
    const char *s = getenv("FAKETS_DEVICES");
    return s != NULL && *s != '\0' ? atoi(s) : 1;
}

int ts_device_count(int *count) {
    logf_("ts_device_count");
    int st = enter("ts_device_count", 0);
    if (st) return st;
    *count = device_count();
    if (*count == 0) return fail(TS_ERR_NO_DEVICE, "ts_device_count: no CUDA-capable device is detected (fake)");
    return TS_OK;
}

int ts_init(int device) {
    logf_("ts_init device=%d", device);
    int st = enter("ts_init", 0);
    if (st) return st;
    char msg[256];
    if (device < 0 || device >= device_count()) {
        snprintf(msg, sizeof msg, "ts_init: device = %d: no such device (%d devices)", device, device_count());
        return fail(TS_ERR_NO_DEVICE, msg);
    }
    if (initialized && device != current_device) {
        snprintf(msg, sizeof msg, "ts_init: device = %d: already initialised on device %d", device, current_device);
        return fail(TS_ERR_INVALID_ARGUMENT, msg);
    }
    const char *dl = getenv("TOUCHSTONE_DEADLINE"); /* as the library reads it */
    if (dl != NULL && *dl != '\0') {
        double seconds = strtod(dl, NULL);
        if (!(seconds > 0) || !(seconds <= 86400)) {
            snprintf(msg, sizeof msg, "ts_init: TOUCHSTONE_DEADLINE = \"%s\": want a number of seconds in (0, 86400]", dl);
            return fail(TS_ERR_INVALID_ARGUMENT, msg);
        }
        fake_deadline = seconds;
    }
    initialized = 1;
    current_device = device;
    return TS_OK;
}

int ts_shutdown(void) {
    logf_("ts_shutdown");
    int st = enter("ts_shutdown", 0);
    if (st) return st;
    initialized = 0;
    current_device = -1;
    return TS_OK;
}

int ts_get_device_info(ts_device_info *info) {
    logf_("ts_get_device_info");
    int st = enter("ts_get_device_info", 1);
    if (st) return st;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "Fake GPU (host memory)");
    info->ordinal = current_device;
    info->sm_count = 7;
    info->cc_major = 9;
    info->total_bytes = (int64_t)8 << 30;
    info->l2_bytes = 50 << 20;
    return TS_OK;
}

int ts_copy_bandwidth(double *gb_per_s) {
    logf_("ts_copy_bandwidth");
    int st = enter("ts_copy_bandwidth", 1);
    if (st) return st;
    *gb_per_s = 123.5;
    return TS_OK;
}

int ts_memory_in_use(int64_t *bytes) {
    logf_("ts_memory_in_use");
    int st = enter("ts_memory_in_use", 1);
    if (st) return st;
    *bytes = in_use;
    return TS_OK;
}

int ts_release_workspaces(void) {
    logf_("ts_release_workspaces");
    return enter("ts_release_workspaces", 1);
}

int ts_record_paths(int on) {
    logf_("ts_record_paths on=%d", on);
    return enter("ts_record_paths", 0);
}

int ts_set_deadline(double seconds) {
    logf_("ts_set_deadline seconds=%g", seconds);
    int st = enter("ts_set_deadline", 0);
    if (st) return st;
    if (!(seconds > 0) || !(seconds <= 86400)) {
        char msg[160];
        snprintf(msg, sizeof msg, "ts_set_deadline: seconds = %g: must be in (0, 86400] seconds", seconds);
        return fail(TS_ERR_INVALID_ARGUMENT, msg);
    }
    fake_deadline = seconds;
    return TS_OK;
}

int ts_deadline(double *seconds) {
    logf_("ts_deadline");
    int st = enter("ts_deadline", 0);
    if (st) return st;
    *seconds = fake_deadline;
    return TS_OK;
}

/* The hang itself is the next wait's: FAKETS_FAIL=ts_synchronize:-10:... plays it. */
int ts_debug_hang(void *stream) {
    logf_("ts_debug_hang stream=%d", stream != NULL);
    return enter("ts_debug_hang", 0);
}

static int fake_batch_invariant;

int ts_set_batch_invariant(int on) {
    logf_("ts_set_batch_invariant on=%d", on);
    int st = enter("ts_set_batch_invariant", 0);
    if (st) return st;
    fake_batch_invariant = on;
    return TS_OK;
}

int ts_batch_invariant(int *on) {
    logf_("ts_batch_invariant");
    int st = enter("ts_batch_invariant", 0);
    if (st) return st;
    *on = fake_batch_invariant;
    return TS_OK;
}

static int fake_gemv_rows = 1; /* the library's kDefaultGemvRows */

int ts_set_gemv_rows(int max_rows) {
    logf_("ts_set_gemv_rows max_rows=%d", max_rows);
    int st = enter("ts_set_gemv_rows", 0);
    if (st) return st;
    if (max_rows < 0 || max_rows > 4) return fail(TS_ERR_INVALID_ARGUMENT, "ts_set_gemv_rows: max_rows: want 0..4");
    fake_gemv_rows = max_rows;
    return TS_OK;
}

int ts_gemv_rows(int *max_rows) {
    logf_("ts_gemv_rows");
    int st = enter("ts_gemv_rows", 0);
    if (st) return st;
    *max_rows = fake_gemv_rows;
    return TS_OK;
}

int ts_recorded_paths(char *buf, size_t buf_size, size_t *needed) {
    logf_("ts_recorded_paths");
    int st = enter("ts_recorded_paths", 0);
    if (st) return st;
    const char *text = getenv("FAKETS_PATHS");
    if (text == NULL) text = "";
    if (needed != NULL) *needed = strlen(text) + 1;
    if (buf != NULL && buf_size > 0) snprintf(buf, buf_size, "%s", text);
    return TS_OK;
}

int ts_malloc(void **ptr, size_t bytes) {
    logf_("ts_malloc bytes=%zu", bytes);
    int st = enter("ts_malloc", 1);
    if (st) return st;
    NEED("ts_malloc", ptr);
    if (bytes == 0) return fail(TS_ERR_INVALID_ARGUMENT, "ts_malloc: bytes = 0: must be positive");
    unsigned char *p = malloc(bytes + 2 * SLACK);
    if (p == NULL) return fail(TS_ERR_OUT_OF_MEMORY, "ts_malloc: out of (host) memory");
    memcpy(p, &bytes, sizeof bytes);
    memset(p + SLACK, 0xCD, bytes); /* garbage, as cudaMalloc gives: Alloc must zero */
    in_use += (int64_t)bytes;
    *ptr = p + SLACK;
    return TS_OK;
}

int ts_free(void *ptr) {
    logf_("ts_free");
    int st = enter("ts_free", 0);
    if (st) return st;
    if (ptr == NULL) return TS_OK;
    unsigned char *p = (unsigned char *)ptr - SLACK;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    in_use -= (int64_t)bytes;
    free(p);
    return TS_OK;
}

int ts_memset(void *dst, int byte_value, size_t bytes, void *stream) {
    logf_("ts_memset value=%d bytes=%zu stream=%d", byte_value, bytes, stream != NULL);
    int st = enter("ts_memset", 1);
    if (st) return st;
    NEED("ts_memset", dst);
    memset(dst, byte_value, bytes);
    return TS_OK;
}

int ts_copy_device(void *dst, const void *src, size_t bytes, void *stream) {
    logf_("ts_copy_device bytes=%zu stream=%d", bytes, stream != NULL);
    int st = enter("ts_copy_device", 1);
    if (st) return st;
    NEED("ts_copy_device", dst);
    NEED("ts_copy_device", src);
    memmove(dst, src, bytes);
    return TS_OK;
}

int ts_copy_to_device(void *dst, const void *src, size_t bytes, void *stream) {
    logf_("ts_copy_to_device bytes=%zu stream=%d", bytes, stream != NULL);
    int st = enter("ts_copy_to_device", 1);
    if (st) return st;
    NEED("ts_copy_to_device", dst);
    NEED("ts_copy_to_device", src);
    memcpy(dst, src, bytes);
    return TS_OK;
}

int ts_copy_to_host(void *dst, const void *src, size_t bytes, void *stream) {
    logf_("ts_copy_to_host bytes=%zu stream=%d", bytes, stream != NULL);
    int st = enter("ts_copy_to_host", 1);
    if (st) return st;
    NEED("ts_copy_to_host", dst);
    NEED("ts_copy_to_host", src);
    memcpy(dst, src, bytes);
    return TS_OK;
}

int ts_synchronize(void *stream) {
    logf_("ts_synchronize stream=%d", stream != NULL);
    return enter("ts_synchronize", 1);
}

struct ts_timer {
    int started;
};

int ts_timer_create(ts_timer **timer) {
    logf_("ts_timer_create");
    int st = enter("ts_timer_create", 1);
    if (st) return st;
    *timer = calloc(1, sizeof **timer);
    return *timer != NULL ? TS_OK : fail(TS_ERR_OUT_OF_MEMORY, "ts_timer_create: out of memory");
}

int ts_timer_start(ts_timer *timer, void *stream) {
    logf_("ts_timer_start stream=%d", stream != NULL);
    int st = enter("ts_timer_start", 1);
    if (st) return st;
    timer->started = 1;
    return TS_OK;
}

int ts_timer_stop(ts_timer *timer, void *stream, float *ms) {
    logf_("ts_timer_stop stream=%d", stream != NULL);
    int st = enter("ts_timer_stop", 1);
    if (st) return st;
    if (!timer->started) return fail(TS_ERR_INVALID_ARGUMENT, "ts_timer_stop: timer = not started: call ts_timer_start first");
    *ms = 1.5f;
    return TS_OK;
}

int ts_timer_destroy(ts_timer *timer) {
    logf_("ts_timer_destroy");
    int st = enter("ts_timer_destroy", 0);
    if (st) return st;
    free(timer);
    return TS_OK;
}

/* ---- graphs: the fake runs every op at once, so a capture only tracks its state and a
 * replay runs nothing; enough for the Go side's bookkeeping (open/close, errors, guards). */

struct ts_graph {
    int launches;
};
static int capture_open;

int ts_graph_begin(void *stream) {
    logf_("ts_graph_begin stream=%d", stream != NULL);
    int st = enter("ts_graph_begin", 1);
    if (st) return st;
    if (capture_open) return fail(TS_ERR_INVALID_ARGUMENT, "ts_graph_begin: a capture is already open");
    capture_open = 1;
    return TS_OK;
}

int ts_graph_end(void *stream, ts_graph **graph) {
    logf_("ts_graph_end stream=%d", stream != NULL);
    int st = enter("ts_graph_end", 1);
    if (st) return st;
    if (!capture_open) return fail(TS_ERR_INVALID_ARGUMENT, "ts_graph_end: no capture is open");
    capture_open = 0;
    *graph = calloc(1, sizeof **graph);
    return *graph != NULL ? TS_OK : fail(TS_ERR_OUT_OF_MEMORY, "ts_graph_end: out of memory");
}

int ts_graph_launch(ts_graph *graph, void *stream) {
    logf_("ts_graph_launch stream=%d", stream != NULL);
    int st = enter("ts_graph_launch", 1);
    if (st) return st;
    NEED("ts_graph_launch", graph);
    graph->launches++;
    return TS_OK;
}

int ts_graph_destroy(ts_graph *graph) {
    logf_("ts_graph_destroy");
    int st = enter("ts_graph_destroy", 0);
    if (st) return st;
    free(graph);
    return TS_OK;
}

/* ---- ops ---- */

int ts_residual_add(void *out, const void *x, const void *residual, const ts_elementwise_config *cfg, void *stream) {
    logf_("ts_residual_add dtype=%d n=%lld inplace=%d stream=%d", cfg->dtype, (long long)cfg->n, out == x,
          stream != NULL);
    int st = enter("ts_residual_add", 1);
    if (st) return st;
    NEED("residual_add", out);
    NEED("residual_add", x);
    NEED("residual_add", residual);
    if (cfg->dtype != TS_F16 && cfg->dtype != TS_BF16)
        return fail(TS_ERR_UNSUPPORTED, "residual_add: cfg->dtype: only TS_F16 and TS_BF16 are implemented");
    const uint16_t *a = x, *b = residual;
    uint16_t *o = out;
    if (cfg->dtype == TS_BF16)
        for (int64_t i = 0; i < cfg->n; i++) o[i] = f2b(b2f(a[i]) + b2f(b[i]));
    else
        for (int64_t i = 0; i < cfg->n; i++) o[i] = f2h(h2f(a[i]) + h2f(b[i]));
    oob("ts_residual_add", out, NULL, (size_t)cfg->n * 2);
    return TS_OK;
}

int ts_rmsnorm(void *out, const void *x, const void *weight, const ts_norm_config *cfg, void *stream);
#ifndef FAKE_OMIT_RMSNORM
int ts_rmsnorm(void *out, const void *x, const void *weight, const ts_norm_config *cfg, void *stream) {
    logf_("ts_rmsnorm dtype=%d rows=%d hidden=%d eps=%g weight_dtype=%d stream=%d", cfg->dtype, cfg->rows,
          cfg->hidden, cfg->eps, cfg->weight_dtype, stream != NULL);
    int st = enter("ts_rmsnorm", 1);
    if (st) return st;
    NEED("rmsnorm", out);
    NEED("rmsnorm", x);
    NEED("rmsnorm", weight);
    oob("ts_rmsnorm", out, NULL, (size_t)cfg->rows * cfg->hidden * 2);
    return TS_OK;
}
#endif

int ts_layernorm(void *out, const void *x, const void *gamma, const void *beta, const ts_norm_config *cfg,
                 void *stream) {
    logf_("ts_layernorm dtype=%d rows=%d hidden=%d eps=%g stream=%d", cfg->dtype, cfg->rows, cfg->hidden, cfg->eps,
          stream != NULL);
    int st = enter("ts_layernorm", 1);
    if (st) return st;
    NEED("layernorm", out);
    NEED("layernorm", x);
    NEED("layernorm", gamma);
    NEED("layernorm", beta);
    oob("ts_layernorm", out, NULL, (size_t)cfg->rows * cfg->hidden * 2);
    return TS_OK;
}

int ts_layernorm_residual(void *sum, void *out, const void *x, const void *residual, const void *gamma,
                          const void *beta, const ts_norm_config *cfg, void *stream) {
    logf_("ts_layernorm_residual dtype=%d rows=%d hidden=%d eps=%g stream=%d", cfg->dtype, cfg->rows, cfg->hidden,
          cfg->eps, stream != NULL);
    int st = enter("ts_layernorm_residual", 1);
    if (st) return st;
    NEED("layernorm_residual", sum);
    NEED("layernorm_residual", out);
    NEED("layernorm_residual", x);
    NEED("layernorm_residual", residual);
    NEED("layernorm_residual", gamma);
    NEED("layernorm_residual", beta);
    oob("ts_layernorm_residual", out, sum, (size_t)cfg->rows * cfg->hidden * 2);
    return TS_OK;
}

int ts_rmsnorm_residual(void *sum, void *out, const void *x, const void *residual, const void *weight,
                        const ts_norm_config *cfg, void *stream) {
    logf_("ts_rmsnorm_residual dtype=%d rows=%d hidden=%d eps=%g weight_dtype=%d stream=%d", cfg->dtype, cfg->rows,
          cfg->hidden, cfg->eps, cfg->weight_dtype, stream != NULL);
    int st = enter("ts_rmsnorm_residual", 1);
    if (st) return st;
    NEED("rmsnorm_residual", sum);
    NEED("rmsnorm_residual", out);
    NEED("rmsnorm_residual", x);
    NEED("rmsnorm_residual", residual);
    NEED("rmsnorm_residual", weight);
    oob("ts_rmsnorm_residual", out, sum, (size_t)cfg->rows * cfg->hidden * 2);
    return TS_OK;
}

int ts_rope(void *out, const void *x, const int32_t *positions, const ts_rope_config *cfg, void *stream) {
    logf_("ts_rope dtype=%d tokens=%d heads=%d head_dim=%d rope_dim=%d freq_base=%g freq_divisor=%d long_divisor=%d "
          "long_from=%d attention_factor=%g stream=%d",
          cfg->dtype, cfg->tokens, cfg->heads, cfg->head_dim, cfg->rope_dim, cfg->freq_base, cfg->freq_divisor != NULL,
          cfg->long_divisor != NULL, cfg->long_from, cfg->attention_factor, stream != NULL);
    int st = enter("ts_rope", 1);
    if (st) return st;
    NEED("rope", out);
    NEED("rope", x);
    NEED("rope", positions);
    oob("ts_rope", out, NULL, (size_t)cfg->tokens * cfg->heads * cfg->head_dim * 2);
    return TS_OK;
}

int ts_attention_prefill(void *out, const void *q, const void *k, const void *v, const ts_attention_config *cfg,
                         void *stream) {
    logf_("ts_attention_prefill dtype=%d batch=%d seq_len=%d n_heads=%d n_kv_heads=%d head_dim=%d causal=%d "
          "scale=%g softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->seq_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->causal, cfg->scale,
          (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_prefill", 1);
    if (st) return st;
    NEED("attention_prefill", out);
    NEED("attention_prefill", q);
    NEED("attention_prefill", k);
    NEED("attention_prefill", v);
    return TS_OK;
}

int ts_attention_decode(void *out, const void *q, const void *k_cache, const void *v_cache, const int32_t *cache_lens,
                        const ts_decode_config *cfg, void *stream) {
    logf_("ts_attention_decode dtype=%d batch=%d max_len=%d n_heads=%d n_kv_heads=%d head_dim=%d scale=%g softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->max_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale,
          (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_decode", 1);
    if (st) return st;
    NEED("attention_decode", out);
    NEED("attention_decode", q);
    NEED("attention_decode", k_cache);
    NEED("attention_decode", v_cache);
    NEED("attention_decode", cache_lens);
    return TS_OK;
}

int ts_swiglu(void *out, const void *gate, const void *up, const ts_elementwise_config *cfg, void *stream) {
    logf_("ts_swiglu dtype=%d n=%lld stream=%d", cfg->dtype, (long long)cfg->n, stream != NULL);
    int st = enter("ts_swiglu", 1);
    if (st) return st;
    NEED("swiglu", out);
    NEED("swiglu", gate);
    NEED("swiglu", up);
    return TS_OK;
}

int ts_geglu(void *out, const void *gate, const void *up, const ts_geglu_config *cfg, void *stream) {
    logf_("ts_geglu dtype=%d n=%lld gelu=%d stream=%d", cfg->dtype, (long long)cfg->n, cfg->gelu, stream != NULL);
    int st = enter("ts_geglu", 1);
    if (st) return st;
    NEED("geglu", out);
    NEED("geglu", gate);
    NEED("geglu", up);
    return TS_OK;
}

int ts_swiglu_ffn(void *out, const void *x, const void *w_gate, const void *w_up, const void *w_down,
                  const ts_ffn_config *cfg, void *stream) {
    logf_("ts_swiglu_ffn dtype=%d rows=%d hidden=%d ffn=%d stream=%d", cfg->dtype, cfg->rows, cfg->hidden, cfg->ffn,
          stream != NULL);
    int st = enter("ts_swiglu_ffn", 1);
    if (st) return st;
    NEED("swiglu_ffn", out);
    NEED("swiglu_ffn", x);
    NEED("swiglu_ffn", w_gate);
    NEED("swiglu_ffn", w_up);
    NEED("swiglu_ffn", w_down);
    return TS_OK;
}

int ts_gemm_swiglu(void *out, const void *x, const void *w_gate_up, const ts_ffn_config *cfg, void *stream) {
    logf_("ts_gemm_swiglu dtype=%d rows=%d hidden=%d ffn=%d stream=%d", cfg->dtype, cfg->rows, cfg->hidden, cfg->ffn,
          stream != NULL);
    int st = enter("ts_gemm_swiglu", 1);
    if (st) return st;
    NEED("gemm_swiglu", out);
    NEED("gemm_swiglu", x);
    NEED("gemm_swiglu", w_gate_up);
    return TS_OK;
}

int ts_attention_scores_softmax(void *probs, const void *q, const void *k, const ts_scores_config *cfg, void *stream) {
    logf_("ts_attention_scores_softmax dtype=%d batch=%d seq_q=%d seq_k=%d n_heads=%d n_kv_heads=%d head_dim=%d causal=%d "
          "scale=%g softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->seq_q, cfg->seq_k, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->causal,
          cfg->scale, (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_scores_softmax", 1);
    if (st) return st;
    NEED("attention_scores_softmax", probs);
    NEED("attention_scores_softmax", q);
    NEED("attention_scores_softmax", k);
    return TS_OK;
}

int ts_layernorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *gamma, const void *beta,
                      const void *w, const void *bias, const ts_norm_gemm_config *cfg, void *stream) {
    logf_("ts_layernorm_gemm dtype=%d rows=%d hidden=%d n=%d eps=%g residual=%d bias=%d stream=%d", cfg->dtype,
          cfg->rows, cfg->hidden, cfg->n, cfg->eps, residual != NULL, bias != NULL, stream != NULL);
    int st = enter("ts_layernorm_gemm", 1);
    if (st) return st;
    NEED("layernorm_gemm", out);
    NEED("layernorm_gemm", x);
    NEED("layernorm_gemm", gamma);
    NEED("layernorm_gemm", beta);
    NEED("layernorm_gemm", w);
    (void)sum;
    return TS_OK;
}

int ts_rmsnorm_gemm(void *out, void *sum, const void *x, const void *residual, const void *norm_weight, const void *w,
                    const void *bias, const ts_norm_gemm_config *cfg, void *stream) {
    logf_("ts_rmsnorm_gemm dtype=%d rows=%d hidden=%d n=%d eps=%g residual=%d bias=%d stream=%d", cfg->dtype, cfg->rows,
          cfg->hidden, cfg->n, cfg->eps, residual != NULL, bias != NULL, stream != NULL);
    int st = enter("ts_rmsnorm_gemm", 1);
    if (st) return st;
    NEED("rmsnorm_gemm", out);
    NEED("rmsnorm_gemm", x);
    NEED("rmsnorm_gemm", norm_weight);
    NEED("rmsnorm_gemm", w);
    (void)sum;
    return TS_OK;
}

int ts_swiglu_gemm(void *out, const void *gate, const void *up, const void *w, const void *bias,
                   const ts_gemm_config *cfg, void *stream) {
    logf_("ts_swiglu_gemm in=%d out=%d m=%d n=%d k=%d bias=%d stream=%d", cfg->in_dtype, cfg->out_dtype, cfg->m, cfg->n,
          cfg->k, bias != NULL, stream != NULL);
    int st = enter("ts_swiglu_gemm", 1);
    if (st) return st;
    NEED("swiglu_gemm", out);
    NEED("swiglu_gemm", gate);
    NEED("swiglu_gemm", up);
    NEED("swiglu_gemm", w);
    return TS_OK;
}

int ts_gpt_ffn(void *out, const void *x, const void *w1, const void *b1, const void *w2, const void *b2,
               const ts_gpt_ffn_config *cfg, void *stream) {
    logf_("ts_gpt_ffn dtype=%d rows=%d hidden=%d ffn=%d gelu=%d b1=%d b2=%d stream=%d", cfg->dtype, cfg->rows,
          cfg->hidden, cfg->ffn, cfg->gelu, b1 != NULL, b2 != NULL, stream != NULL);
    int st = enter("ts_gpt_ffn", 1);
    if (st) return st;
    NEED("gpt_ffn", out);
    NEED("gpt_ffn", x);
    NEED("gpt_ffn", w1);
    NEED("gpt_ffn", w2);
    return TS_OK;
}

static int copy_op(const char *name, void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    logf_("%s dtype=%d n=%lld stream=%d", name, cfg->dtype, (long long)cfg->n, stream != NULL);
    int st = enter(name, 1);
    if (st) return st;
    NEED(name, out);
    NEED(name, x);
    memmove(out, x, (size_t)cfg->n * 2);
    oob(name, out, NULL, (size_t)cfg->n * 2);
    return TS_OK;
}

int ts_gelu(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    return copy_op("ts_gelu", out, x, cfg, stream);
}

int ts_gelu_tanh(void *out, const void *x, const ts_elementwise_config *cfg, void *stream) {
    return copy_op("ts_gelu_tanh", out, x, cfg, stream);
}

int ts_gelu_scale(void *out, const void *x, const ts_gelu_scale_config *cfg, void *stream) {
    logf_("ts_gelu_scale dtype=%d n=%lld gelu=%d scale=%g stream=%d", cfg->dtype, (long long)cfg->n, cfg->gelu,
          (double)cfg->scale, stream != NULL);
    int st = enter("ts_gelu_scale", 1);
    if (st) return st;
    NEED("gelu_scale", out);
    NEED("gelu_scale", x);
    return TS_OK;
}

int ts_pos_embedding(void *out, const void *x, const void *table, const int32_t *positions,
                     const ts_embedding_config *cfg, void *stream) {
    logf_("ts_pos_embedding dtype=%d tokens=%d hidden=%d table_rows=%d scale=%g stream=%d", cfg->dtype, cfg->tokens,
          cfg->hidden, cfg->table_rows, (double)cfg->scale, stream != NULL);
    int st = enter("ts_pos_embedding", 1);
    if (st) return st;
    NEED("pos_embedding", out);
    NEED("pos_embedding", x);
    NEED("pos_embedding", table);
    NEED("pos_embedding", positions);
    return TS_OK;
}

int ts_embedding(void *out, const int32_t *ids, const void *table, const ts_embedding_config *cfg, void *stream) {
    logf_("ts_embedding dtype=%d tokens=%d hidden=%d table_rows=%d scale=%g stream=%d", cfg->dtype, cfg->tokens,
          cfg->hidden, cfg->table_rows, (double)cfg->scale, stream != NULL);
    int st = enter("ts_embedding", 1);
    if (st) return st;
    NEED("embedding", out);
    NEED("embedding", ids);
    NEED("embedding", table);
    return TS_OK;
}

int ts_set_rows(void *dst, const void *src, const int32_t *rows, const ts_set_rows_config *cfg, void *stream) {
    logf_("ts_set_rows dtype=%d dst_rows=%d src_rows=%d row_elems=%d stream=%d", cfg->dtype, cfg->dst_rows,
          cfg->src_rows, cfg->row_elems, stream != NULL);
    int st = enter("ts_set_rows", 1);
    if (st) return st;
    NEED("set_rows", dst);
    NEED("set_rows", src);
    NEED("set_rows", rows);
    return TS_OK;
}

int ts_set_rows_fp8(void *dst, const void *src, const int32_t *rows, const float *scale,
                    const ts_set_rows_fp8_config *cfg, void *stream) {
    logf_("ts_set_rows_fp8 dtype=%d dst_rows=%d src_rows=%d row_elems=%d scale_heads=%d stream=%d", cfg->dtype,
          cfg->dst_rows, cfg->src_rows, cfg->row_elems, cfg->scale_heads, stream != NULL);
    int st = enter("ts_set_rows_fp8", 1);
    if (st) return st;
    NEED("set_rows_fp8", dst);
    NEED("set_rows_fp8", src);
    NEED("set_rows_fp8", rows);
    NEED("set_rows_fp8", scale);
    return TS_OK;
}

int ts_moe_router(float *weights, int32_t *ids, const void *logits, const ts_moe_router_config *cfg, void *stream) {
    logf_("ts_moe_router dtype=%d tokens=%d experts=%d top_k=%d renormalize=%d stream=%d", cfg->dtype, cfg->tokens,
          cfg->experts, cfg->top_k, cfg->renormalize, stream != NULL);
    int st = enter("ts_moe_router", 1);
    if (st) return st;
    NEED("moe_router", weights);
    NEED("moe_router", ids);
    NEED("moe_router", logits);
    return TS_OK;
}

int ts_moe_ffn(void *out, const void *x, const int32_t *ids, const float *weights, const void *gate_up,
               const void *down, const ts_moe_ffn_config *cfg, void *stream) {
    logf_("ts_moe_ffn dtype=%d tokens=%d hidden=%d ffn=%d experts=%d top_k=%d stream=%d", cfg->dtype, cfg->tokens,
          cfg->hidden, cfg->ffn, cfg->experts, cfg->top_k, stream != NULL);
    int st = enter("ts_moe_ffn", 1);
    if (st) return st;
    NEED("moe_ffn", out);
    NEED("moe_ffn", x);
    NEED("moe_ffn", ids);
    NEED("moe_ffn", weights);
    NEED("moe_ffn", gate_up);
    NEED("moe_ffn", down);
    return TS_OK;
}

int ts_moe_shared_add(void *out, const void *routed, const void *shared, const void *x, const void *gate,
                      const ts_moe_shared_config *cfg, void *stream) {
    logf_("ts_moe_shared_add dtype=%d tokens=%d hidden=%d inplace=%d stream=%d", cfg->dtype, cfg->tokens, cfg->hidden,
          out == routed, stream != NULL);
    int st = enter("ts_moe_shared_add", 1);
    if (st) return st;
    NEED("moe_shared_add", out);
    NEED("moe_shared_add", routed);
    NEED("moe_shared_add", shared);
    NEED("moe_shared_add", x);
    NEED("moe_shared_add", gate);
    return TS_OK;
}

int ts_attention_decode_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                            const int32_t *cache_lens, const float *k_scale, const float *v_scale,
                            const ts_decode_fp8_config *cfg, void *stream) {
    logf_("ts_attention_decode_fp8 dtype=%d batch=%d max_len=%d n_heads=%d n_kv_heads=%d head_dim=%d scale_heads=%d "
          "softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->max_len, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->scale_heads,
          (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_decode_fp8", 1);
    if (st) return st;
    NEED("attention_decode_fp8", out);
    NEED("attention_decode_fp8", q);
    NEED("attention_decode_fp8", k_cache);
    NEED("attention_decode_fp8", v_cache);
    NEED("attention_decode_fp8", cache_lens);
    NEED("attention_decode_fp8", k_scale);
    NEED("attention_decode_fp8", v_scale);
    return TS_OK;
}

int ts_attention_decode_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                              const int32_t *block_table, const int32_t *cache_lens,
                              const ts_paged_decode_config *cfg, void *stream) {
    logf_("ts_attention_decode_paged dtype=%d batch=%d num_blocks=%d block_size=%d table_width=%d n_heads=%d "
          "n_kv_heads=%d head_dim=%d softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->num_blocks, cfg->block_size, cfg->table_width, cfg->n_heads, cfg->n_kv_heads,
          cfg->head_dim, (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_decode_paged", 1);
    if (st) return st;
    NEED("attention_decode_paged", out);
    NEED("attention_decode_paged", q);
    NEED("attention_decode_paged", k_cache);
    NEED("attention_decode_paged", v_cache);
    NEED("attention_decode_paged", block_table);
    NEED("attention_decode_paged", cache_lens);
    return TS_OK;
}

int ts_attention_prefill_paged(void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                               const ts_paged_prefill_config *cfg, void *stream) {
    logf_("ts_attention_prefill_paged dtype=%d batch=%d total_q=%d num_blocks=%d block_size=%d table_width=%d "
          "n_heads=%d n_kv_heads=%d head_dim=%d softcap=%g stream=%d",
          cfg->dtype, cfg->batch, cfg->total_q, cfg->num_blocks, cfg->block_size, cfg->table_width, cfg->n_heads,
          cfg->n_kv_heads, cfg->head_dim, (double)cfg->softcap, stream != NULL);
    int st = enter("ts_attention_prefill_paged", 1);
    if (st) return st;
    NEED("attention_prefill_paged", out);
    NEED("attention_prefill_paged", q);
    NEED("attention_prefill_paged", k_cache);
    NEED("attention_prefill_paged", v_cache);
    NEED("attention_prefill_paged", block_table);
    NEED("attention_prefill_paged", q_starts);
    NEED("attention_prefill_paged", kv_lens);
    return TS_OK;
}

int ts_attention_decode_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                  const int32_t *block_table, const int32_t *cache_lens, const float *k_scale,
                                  const float *v_scale, const ts_paged_decode_fp8_config *cfg, void *stream) {
    logf_("ts_attention_decode_paged_fp8 dtype=%d batch=%d num_blocks=%d block_size=%d table_width=%d n_heads=%d "
          "n_kv_heads=%d head_dim=%d window=%d softcap=%g scale_heads=%d stream=%d",
          cfg->dtype, cfg->batch, cfg->num_blocks, cfg->block_size, cfg->table_width, cfg->n_heads, cfg->n_kv_heads,
          cfg->head_dim, cfg->window, (double)cfg->softcap, cfg->scale_heads, stream != NULL);
    int st = enter("ts_attention_decode_paged_fp8", 1);
    if (st) return st;
    NEED("attention_decode_paged_fp8", out);
    NEED("attention_decode_paged_fp8", q);
    NEED("attention_decode_paged_fp8", k_cache);
    NEED("attention_decode_paged_fp8", v_cache);
    NEED("attention_decode_paged_fp8", block_table);
    NEED("attention_decode_paged_fp8", cache_lens);
    NEED("attention_decode_paged_fp8", k_scale);
    NEED("attention_decode_paged_fp8", v_scale);
    return TS_OK;
}

int ts_attention_prefill_paged_fp8(void *out, const void *q, const void *k_cache, const void *v_cache,
                                   const int32_t *block_table, const int32_t *q_starts, const int32_t *kv_lens,
                                   const float *k_scale, const float *v_scale, const ts_paged_prefill_fp8_config *cfg,
                                   void *stream) {
    logf_("ts_attention_prefill_paged_fp8 dtype=%d batch=%d total_q=%d num_blocks=%d block_size=%d table_width=%d "
          "n_heads=%d n_kv_heads=%d head_dim=%d window=%d softcap=%g scale_heads=%d stream=%d",
          cfg->dtype, cfg->batch, cfg->total_q, cfg->num_blocks, cfg->block_size, cfg->table_width, cfg->n_heads,
          cfg->n_kv_heads, cfg->head_dim, cfg->window, (double)cfg->softcap, cfg->scale_heads, stream != NULL);
    int st = enter("ts_attention_prefill_paged_fp8", 1);
    if (st) return st;
    NEED("attention_prefill_paged_fp8", out);
    NEED("attention_prefill_paged_fp8", q);
    NEED("attention_prefill_paged_fp8", k_cache);
    NEED("attention_prefill_paged_fp8", v_cache);
    NEED("attention_prefill_paged_fp8", block_table);
    NEED("attention_prefill_paged_fp8", q_starts);
    NEED("attention_prefill_paged_fp8", kv_lens);
    NEED("attention_prefill_paged_fp8", k_scale);
    NEED("attention_prefill_paged_fp8", v_scale);
    return TS_OK;
}

int ts_gemm(void *out, const void *x, const void *w, const void *bias, const ts_gemm_config *cfg, void *stream) {
    logf_("ts_gemm in_dtype=%d out_dtype=%d m=%d n=%d k=%d bias=%d stream=%d", cfg->in_dtype, cfg->out_dtype, cfg->m,
          cfg->n, cfg->k, bias != NULL, stream != NULL);
    int st = enter("ts_gemm", 1);
    if (st) return st;
    NEED("gemm", out);
    NEED("gemm", x);
    NEED("gemm", w);
    return TS_OK;
}

int ts_softmax(void *out, const void *x, const ts_softmax_config *cfg, void *stream) {
    logf_("ts_softmax in_dtype=%d rows=%d n=%d stream=%d", cfg->in_dtype, cfg->rows, cfg->n, stream != NULL);
    int st = enter("ts_softmax", 1);
    if (st) return st;
    NEED("softmax", out);
    NEED("softmax", x);
    return TS_OK;
}

int ts_logit_softcap(void *out, const void *x, const ts_logit_softcap_config *cfg, void *stream) {
    logf_("ts_logit_softcap dtype=%d n=%lld softcap=%g inplace=%d stream=%d", cfg->dtype, (long long)cfg->n,
          (double)cfg->softcap, out == x, stream != NULL);
    int st = enter("ts_logit_softcap", 1);
    if (st) return st;
    NEED("logit_softcap", out);
    NEED("logit_softcap", x);
    return TS_OK;
}

int ts_quant_fp8(void *out, float *scales, const void *x, const float *scale, const ts_quant_config *cfg,
                 void *stream) {
    logf_("ts_quant_fp8 in_dtype=%d rows=%d hidden=%d group_size=%d static=%d stream=%d", cfg->in_dtype, cfg->rows,
          cfg->hidden, cfg->group_size, scale != NULL, stream != NULL);
    int st = enter("ts_quant_fp8", 1);
    if (st) return st;
    NEED("quant_fp8", out);
    NEED("quant_fp8", x);
    if (scale == NULL) NEED("quant_fp8", scales);
    return TS_OK;
}

int ts_gemm_fp8(void *out, const void *x, const float *x_scales, const void *w, const float *w_scales,
                const ts_gemm_fp8_config *cfg, void *stream) {
    logf_("ts_gemm_fp8 out_dtype=%d m=%d n=%d k=%d block=%d stream=%d", cfg->out_dtype, cfg->m, cfg->n, cfg->k,
          cfg->block_scales, stream != NULL);
    int st = enter("ts_gemm_fp8", 1);
    if (st) return st;
    NEED("gemm_fp8", out);
    NEED("gemm_fp8", x);
    NEED("gemm_fp8", x_scales);
    NEED("gemm_fp8", w);
    NEED("gemm_fp8", w_scales);
    return TS_OK;
}

int ts_rmsnorm_quant_fp8(void *out, float *scales, void *sum, const void *x, const void *residual, const void *weight,
                         const float *scale, const ts_norm_quant_config *cfg, void *stream) {
    logf_("ts_rmsnorm_quant_fp8 dtype=%d rows=%d hidden=%d group_size=%d eps=%g residual=%d static=%d stream=%d",
          cfg->dtype, cfg->rows, cfg->hidden, cfg->group_size, cfg->eps, residual != NULL, scale != NULL,
          stream != NULL);
    int st = enter("ts_rmsnorm_quant_fp8", 1);
    if (st) return st;
    NEED("rmsnorm_quant_fp8", out);
    NEED("rmsnorm_quant_fp8", x);
    NEED("rmsnorm_quant_fp8", weight);
    if (scale == NULL) NEED("rmsnorm_quant_fp8", scales);
    if (residual != NULL) NEED("rmsnorm_quant_fp8", sum);
    return TS_OK;
}

int ts_swiglu_quant_fp8(void *out, float *scales, const void *gate, const void *up, const float *scale,
                        const ts_quant_config *cfg, void *stream) {
    logf_("ts_swiglu_quant_fp8 in_dtype=%d rows=%d hidden=%d group_size=%d static=%d stream=%d", cfg->in_dtype,
          cfg->rows, cfg->hidden, cfg->group_size, scale != NULL, stream != NULL);
    int st = enter("ts_swiglu_quant_fp8", 1);
    if (st) return st;
    NEED("swiglu_quant_fp8", out);
    NEED("swiglu_quant_fp8", gate);
    NEED("swiglu_quant_fp8", up);
    if (scale == NULL) NEED("swiglu_quant_fp8", scales);
    return TS_OK;
}

int ts_gemm_w4a16(void *out, const void *x, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                  const int32_t *g_idx, const ts_w4a16_config *cfg, void *stream) {
    logf_("ts_gemm_w4a16 dtype=%d m=%d n=%d k=%d group_size=%d format=%d g_idx=%d stream=%d", cfg->dtype, cfg->m,
          cfg->n, cfg->k, cfg->group_size, cfg->format, g_idx != NULL, stream != NULL);
    int st = enter("ts_gemm_w4a16", 1);
    if (st) return st;
    NEED("gemm_w4a16", out);
    NEED("gemm_w4a16", x);
    NEED("gemm_w4a16", qweight);
    if (cfg->format != TS_W4_TILED) {
        NEED("gemm_w4a16", qzeros);
        NEED("gemm_w4a16", scales);
    }
    return TS_OK;
}

/* The real sizes of the tiled layout (cuda/w4a16_tiled.cuh), so that the Go side allocates what
 * the library would write. */
int ts_w4a16_tiled_bytes(const ts_w4a16_config *cfg, size_t *bytes) {
    logf_("ts_w4a16_tiled_bytes n=%d k=%d group_size=%d", cfg->n, cfg->k, cfg->group_size);
    int st = enter("ts_w4a16_tiled_bytes", 0);
    if (st) return st;
    const size_t tiles = (size_t)(cfg->n + 63) / 64, groups = (size_t)(cfg->k / cfg->group_size);
    *bytes = tiles * 64 * (size_t)cfg->k / 2 + groups * tiles * 64 * 3;
    return TS_OK;
}

int ts_w4a16_tile(void *tiled, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                  const ts_w4a16_config *cfg, void *stream) {
    logf_("ts_w4a16_tile dtype=%d n=%d k=%d group_size=%d format=%d stream=%d", cfg->dtype, cfg->n, cfg->k,
          cfg->group_size, cfg->format, stream != NULL);
    int st = enter("ts_w4a16_tile", 1);
    if (st) return st;
    NEED("w4a16_tile", tiled);
    NEED("w4a16_tile", qweight);
    NEED("w4a16_tile", qzeros);
    NEED("w4a16_tile", scales);
    return TS_OK;
}

int ts_sample(int32_t *tokens, const float *logits, const ts_sample_config *cfg, void *stream) {
    logf_("ts_sample rows=%d vocab=%d temperature=%g top_k=%d top_p=%g seed=%llu step=%llu stream=%d", cfg->rows,
          cfg->vocab, cfg->temperature, cfg->top_k, cfg->top_p, (unsigned long long)cfg->seed,
          (unsigned long long)cfg->step, stream != NULL);
    int st = enter("ts_sample", 1);
    if (st) return st;
    NEED("sample", tokens);
    NEED("sample", logits);
    if (cfg->temperature == 0) { /* greedy: enough to see the buffers arrive in the right places */
        for (int r = 0; r < cfg->rows; r++) {
            const float *x = logits + (size_t)r * cfg->vocab;
            int best = 0;
            for (int i = 1; i < cfg->vocab; i++)
                if (x[i] > x[best]) best = i;
            tokens[r] = best;
        }
    }
    oob("ts_sample", tokens, NULL, (size_t)cfg->rows * 4);
    return TS_OK;
}

/* Philox4x32-10 as docs/sampling.md defines it, so a test can check the config's 64-bit fields
 * cross the boundary intact. */
int ts_philox(uint32_t *out, const ts_philox_config *cfg, void *stream) {
    logf_("ts_philox seed=%llu step=%llu row=%u n=%d stream=%d", (unsigned long long)cfg->seed,
          (unsigned long long)cfg->step, cfg->row, cfg->n, stream != NULL);
    int st = enter("ts_philox", 1);
    if (st) return st;
    NEED("philox", out);
    for (int i = 0; i < cfg->n; i++) {
        const uint64_t step = cfg->step + (uint64_t)i;
        uint32_t c[4] = {(uint32_t)step, (uint32_t)(step >> 32), cfg->row, 0};
        uint32_t k0 = (uint32_t)cfg->seed, k1 = (uint32_t)(cfg->seed >> 32);
        for (int round = 0; round < 10; round++) {
            if (round > 0) {
                k0 += 0x9E3779B9u;
                k1 += 0xBB67AE85u;
            }
            const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
            c[1] = (uint32_t)p1;
            c[3] = (uint32_t)p0;
            c[0] = n0;
            c[2] = n2;
        }
        memcpy(out + 4 * (size_t)i, c, sizeof c);
    }
    oob("ts_philox", out, NULL, (size_t)cfg->n * 16);
    return TS_OK;
}
