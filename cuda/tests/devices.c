/*
 * devices: every call of the library runs on the device it was initialised on, whatever the
 * calling thread's current device is. The CUDA current device is per host thread, and a Go
 * caller's OS thread changes from one cgo call to the next (goroutines move between threads),
 * so a device chosen once at ts_init is not the device of a later call unless every entry makes
 * it current.
 *
 * The library is initialised on the last device from the main thread; then several fresh
 * threads, one after another (a capture on the library stream is process-wide, so they do not
 * overlap), each with another device made current before every call, allocate, copy, run an
 * elementwise op (a kernel), a GEMM (the cuBLAS handle), a captured graph and a timer, and read
 * the results back. Each allocation must live on the library's device and the results
 * must be right; a quarter GiB allocated from those threads must not appear on the other
 * device.
 *
 * Needs two GPUs: with fewer it says so and exits 2 (make cuda-test treats that as "not run").
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "touchstone.h"

enum { THREADS = 4, M = 4, N = 8, K = 16 };

static int lib_device, other_device;
static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&mu);
    failures++;
    fprintf(stderr, "FAIL ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&mu);
    va_end(ap);
}

static int ok(int st, const char *what) {
    if (st == TS_OK) return 1;
    pthread_mutex_lock(&mu);
    failures++;
    fprintf(stderr, "FAIL %s: %s (%s)\n", what, ts_status_name(st), ts_last_error());
    pthread_mutex_unlock(&mu);
    return 0;
}

/* What another library on this thread might have done since the last call. */
static void stray(void) {
    if (cudaSetDevice(other_device) != cudaSuccess) fail("cudaSetDevice(%d) failed", other_device);
}

static void on_library_device(const void *p, const char *what) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        fail("%s: cudaPointerGetAttributes failed", what);
        return;
    }
    if (a.device != lib_device) fail("%s: allocated on device %d, the library runs on device %d", what, a.device, lib_device);
}

static void *alloc(size_t bytes, const char *what) {
    void *p = NULL;
    stray();
    if (!ok(ts_malloc(&p, bytes), what)) return NULL;
    on_library_device(p, what);
    return p;
}

static void *filled(size_t n, uint16_t bits, const char *what) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; ++i) h[i] = bits;
    void *d = alloc(n * 2, what);
    stray();
    if (d) ok(ts_copy_to_device(d, h, n * 2, NULL), what);
    free(h);
    return d;
}

static void expect_all(const void *d, size_t n, uint16_t want, const char *what) {
    uint16_t *h = calloc(n, 2);
    stray();
    if (ok(ts_copy_to_host(h, d, n * 2, NULL), what))
        for (size_t i = 0; i < n; ++i)
            if (h[i] != want) {
                fail("%s: element %zu is 0x%04x", what, i, (unsigned)h[i]);
                break;
            }
    free(h);
}

static void *worker(void *arg) {
    (void)arg;
    const uint16_t one = 0x3c00, two = 0x4000, three = 0x4200, half = 0x3800, eight = 0x4800;
    void *x = filled(M * K, one, "x"), *r = filled(M * K, two, "residual"), *w = filled(N * K, half, "w");
    void *sum = alloc(M * K * 2, "sum"), *out = alloc(M * N * 2, "out");
    void *big = alloc((size_t)256 << 20, "a quarter GiB");
    if (!x || !r || !w || !sum || !out || !big) return NULL;

    ts_elementwise_config ec = {TS_F16, M * K};
    stray();
    ok(ts_residual_add(sum, x, r, &ec, NULL), "residual_add");
    expect_all(sum, M * K, three, "residual_add: 1 + 2");

    ts_gemm_config gc = {TS_F16, TS_F16, M, N, K};
    stray();
    ok(ts_gemm(out, x, w, NULL, &gc, NULL), "gemm");
    expect_all(out, M * N, eight, "gemm: 16 products of 1 * 0.5");

    /* A graph captured and replayed from this thread, on the library's stream. */
    ts_graph *graph = NULL;
    stray();
    if (ok(ts_memset(sum, 0, M * K * 2, NULL), "memset")) {
        stray();
        ok(ts_graph_begin(NULL), "graph_begin");
        stray();
        ok(ts_residual_add(sum, x, r, &ec, NULL), "residual_add (captured)");
        stray();
        if (ok(ts_graph_end(NULL, &graph), "graph_end")) {
            stray();
            ok(ts_graph_launch(graph, NULL), "graph_launch");
            expect_all(sum, M * K, three, "graph replay of residual_add");
            stray();
            ok(ts_graph_destroy(graph), "graph_destroy");
        }
    }

    ts_timer *timer = NULL;
    float ms = -1;
    stray();
    if (ok(ts_timer_create(&timer), "timer_create")) {
        stray();
        ok(ts_timer_start(timer, NULL), "timer_start");
        stray();
        ok(ts_gemm(out, x, w, NULL, &gc, NULL), "gemm (timed)");
        stray();
        ok(ts_timer_stop(timer, NULL, &ms), "timer_stop");
        stray();
        ok(ts_timer_destroy(timer), "timer_destroy");
    }
    stray();
    ok(ts_synchronize(NULL), "synchronize");
    void *bufs[] = {x, r, w, sum, out, big};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) {
        stray();
        ok(ts_free(bufs[i]), "free");
    }
    return NULL;
}

static size_t used_on(int device) {
    size_t free_b = 0, total = 0;
    if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
    return total - free_b;
}

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count < 2) {
        printf("devices: %d CUDA device(s), two needed: not run\n", count);
        return 2;
    }
    lib_device = count - 1;
    other_device = 0;
    if (!ok(ts_init(lib_device), "init")) return 1;
    /* Contexts on both devices exist before the baseline, so creating one is not counted. */
    const size_t other_before = used_on(other_device);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; ++i) {
        pthread_create(&t[i], NULL, worker, NULL);
        pthread_join(t[i], NULL);
    }
    /* The quarter GiB buffers of the threads were allocated and freed between the two readings;
     * a leak onto the other device would show while they were live, so read it again with one
     * held. */
    void *held = NULL;
    stray();
    if (ok(ts_malloc(&held, (size_t)256 << 20), "malloc held")) {
        on_library_device(held, "held");
        const size_t other_after = used_on(other_device);
        if (other_after > other_before + ((size_t)64 << 20))
            fail("device %d grew by %zu bytes while the library's device held a quarter GiB", other_device,
                 other_after - other_before);
        stray();
        ok(ts_free(held), "free held");
    }
    stray();
    ok(ts_shutdown(), "shutdown");
    if (failures) {
        fprintf(stderr, "devices: %d failure(s)\n", failures);
        return 1;
    }
    printf("devices: %d threads, each with device %d current before every call, ran on device %d: ok\n", THREADS,
           other_device, lib_device);
    return 0;
}
