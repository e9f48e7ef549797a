/*
 * deadline: a kernel that never finishes is a verdict, not a stuck caller. ts_debug_hang
 * launches one; the next wait for the device must return TS_ERR_TIMEOUT within the deadline
 * plus a little, naming the wait, the op and the kernel that hung; every later call must
 * refuse at once with the same status and message, as after a sticky error.
 *
 * Needs a GPU: without one it says so and exits 2 (make cuda-test treats that as "not run").
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "touchstone.h"

static int failures, checks;

static void expect(const char *what, int cond) {
    checks++;
    if (!cond) {
        failures++;
        fprintf(stderr, "FAIL %s (status message: \"%s\")\n", what, ts_last_error());
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count == 0) {
        printf("deadline: no CUDA device, not run\n");
        return 2;
    }
    expect("init", ts_init(0) == TS_OK);
    const double deadline = 2.0;
    expect("set the deadline", ts_set_deadline(deadline) == TS_OK);

    /* A wait that finishes in time leaves the library usable. */
    void *x = NULL;
    const int64_t n = 1 << 20;
    expect("malloc", ts_malloc(&x, (size_t)n * 2) == TS_OK);
    ts_elementwise_config cfg = {TS_F16, n};
    expect("memset", ts_memset(x, 0, (size_t)n * 2, NULL) == TS_OK);
    expect("an op", ts_gelu(x, x, &cfg, NULL) == TS_OK);
    expect("a wait in time", ts_synchronize(NULL) == TS_OK);

    expect("launch the hang", ts_debug_hang(NULL) == TS_OK);
    expect("an op queued behind it", ts_gelu(x, x, &cfg, NULL) == TS_OK);
    const double t0 = now();
    const int st = ts_synchronize(NULL);
    const double waited = now() - t0;
    char first[1536];
    snprintf(first, sizeof first, "%s", ts_last_error());
    expect("the wait times out", st == TS_ERR_TIMEOUT);
    expect("within the deadline plus 2 s", waited >= deadline && waited < deadline + 2.0);
    expect("the message names the wait", strstr(first, "ts_synchronize") != NULL);
    expect("the message names the op that hung", strstr(first, "debug_hang (") != NULL);
    expect("the message names its kernel", strstr(first, "debug_hang_kernel") != NULL);
    expect("the message names the deadline", strstr(first, "deadline of 2 s") != NULL);

    const double t1 = now();
    expect("a later op refuses", ts_gelu(x, x, &cfg, NULL) == TS_ERR_TIMEOUT);
    expect("with the first message", strcmp(ts_last_error(), first) == 0);
    expect("a later copy back refuses", ts_copy_to_host(first, x, 2, NULL) == TS_ERR_TIMEOUT);
    expect("a later malloc refuses", ts_malloc(&x, 64) == TS_ERR_TIMEOUT);
    expect("shutdown refuses", ts_shutdown() == TS_ERR_TIMEOUT);
    expect("the refusals do not wait", now() - t1 < 0.5);

    printf("deadline: timed out after %.2f s: \"%s\"\n", waited, first);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
