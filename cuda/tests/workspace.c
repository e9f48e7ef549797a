/*
 * workspace: an op whose library workspace grows on this very call must still see what its
 * first kernel wrote there. rmsnorm_gemm's prefill path normalises into a workspace and reads it
 * back through cuBLAS; each call below needs a larger workspace than the last, so each one grows
 * it (a fresh zeroed allocation), and its output must equal a second call's on the grown
 * workspace, bit for bit. A zeroing that is not ordered before the op's own kernels shows as an
 * all-zero normalised input, so an all-zero output (guards off, as a model pass runs).
 *
 * Needs a GPU: without one it says so and exits 2 (make cuda-test treats that as "not run").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "touchstone.h"

static int failures;

static void check(int st, const char *what) {
    if (st != TS_OK) {
        fprintf(stderr, "workspace: %s: %s (%s)\n", what, ts_status_name(st), ts_last_error());
        exit(1);
    }
}

/* A device buffer of n fp16 values in +-[0.5, 1) from a fixed LCG. */
static void *f16(size_t n) {
    uint16_t *h = malloc(n * 2);
    static uint32_t s = 2024;
    for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        h[i] = (uint16_t)(((s >> 31) << 15) | (14u << 10) | ((s >> 8) & 0x3ffu));
    }
    void *d = NULL;
    check(ts_malloc(&d, n * 2), "malloc");
    check(ts_copy_to_device(d, h, n * 2, NULL), "copy to device");
    free(h);
    return d;
}

static uint16_t *host(const void *d, size_t n) {
    uint16_t *h = malloc(n * 2);
    check(ts_copy_to_host(h, d, n * 2, NULL), "copy to host");
    return h;
}

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count == 0) {
        printf("workspace: no CUDA device, not run\n");
        return 2;
    }
    check(ts_init(0), "init");
    const int hidden = 896, n = 32, max_rows = 4096;
    void *x = f16((size_t)max_rows * hidden), *res = f16((size_t)max_rows * hidden);
    void *g = f16(hidden), *w = f16((size_t)n * hidden);
    void *sum = NULL, *out = NULL;
    check(ts_malloc(&sum, (size_t)max_rows * hidden * 2), "malloc sum");
    check(ts_malloc(&out, (size_t)max_rows * n * 2), "malloc out");
    int cases = 0;
    /* 16 rows and up take the workspace path; growing by half each time outruns the
     * workspace's own 1/4 headroom, so every call grows it. */
    for (int rows = 16; rows <= max_rows; rows += rows / 2) {
        ts_norm_gemm_config c = {TS_F16, rows, hidden, n, 1e-6f};
        const size_t elems = (size_t)rows * n;
        check(ts_rmsnorm_gemm(out, sum, x, res, g, w, NULL, &c, NULL), "rmsnorm_gemm (growing)");
        uint16_t *first = host(out, elems);
        check(ts_memset(out, 0, elems * 2, NULL), "memset");
        check(ts_rmsnorm_gemm(out, sum, x, res, g, w, NULL, &c, NULL), "rmsnorm_gemm (grown)");
        uint16_t *again = host(out, elems);
        size_t zeros = 0;
        for (size_t i = 0; i < elems; ++i) zeros += (first[i] & 0x7fffu) == 0;
        if (memcmp(first, again, elems * 2) != 0) {
            failures++;
            fprintf(stderr, "FAIL rows=%d: the call that grew the workspace differs from a repeat (%zu of %zu zero)\n",
                    rows, zeros, elems);
        }
        free(first);
        free(again);
        cases++;
    }
    printf("%d passed, %d failed\n", cases - failures, failures);
    check(ts_shutdown(), "shutdown");
    return failures == 0 ? 0 : 1;
}
