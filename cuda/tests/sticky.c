/*
 * sticky: an illegal address inside a kernel corrupts the CUDA context. The library must
 * report it once, naming the op that caused it, and then refuse every later call at once
 * with TS_ERR_STICKY instead of hanging or failing in confusing ways.
 *
 * Needs a GPU: without one it says so and exits 2 (make cuda-test treats that as "not run").
 */
#include <stdio.h>
#include <string.h>

#include "touchstone.h"

static int failures;

static void expect(const char *what, int cond) {
    if (!cond) {
        failures++;
        fprintf(stderr, "FAIL %s (status message: \"%s\")\n", what, ts_last_error());
    }
}

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count == 0) {
        printf("sticky: no CUDA device, not run\n");
        return 2;
    }
    expect("init", ts_init(0) == TS_OK);
    void *x = NULL;
    const int64_t n = 1 << 20;
    expect("malloc", ts_malloc(&x, (size_t)n * 2) == TS_OK);
    ts_elementwise_config cfg = {TS_F16, n};
    /* A device address nothing owns: the write faults on the GPU. */
    void *bogus = (void *)(uintptr_t)0x10000;
    int st = ts_residual_add(bogus, x, x, &cfg, NULL);
    if (st == TS_OK)
        st = ts_synchronize(NULL);
    expect("the fault is reported as sticky", st == TS_ERR_STICKY);
    expect("the report names the op", strstr(ts_last_error(), "residual_add") != NULL);
    char first[1024];
    snprintf(first, sizeof first, "%s", ts_last_error());

    void *y = NULL;
    expect("a later malloc fails fast", ts_malloc(&y, 64) == TS_ERR_STICKY);
    expect("with the first message", strstr(ts_last_error(), "residual_add") != NULL);
    expect("a later op fails fast", ts_gelu(x, x, &cfg, NULL) == TS_ERR_STICKY);
    expect("a later sync fails fast", ts_synchronize(NULL) == TS_ERR_STICKY);

    printf("sticky: first report \"%s\"\n", first);
    printf("%d passed, %d failed\n", 7 - failures, failures);
    return failures == 0 ? 0 : 1;
}
