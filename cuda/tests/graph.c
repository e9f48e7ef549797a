/*
 * graph: the capture contract of touchstone.h ("graphs"). A capture records ops without
 * running them; calls that wait, allocate or free are refused with TS_ERR_UNSUPPORTED and
 * leave the capture open; a replay reads the buffers' contents at replay time, so an input
 * rewritten between launches changes the result; replays are bit-identical.
 *
 * Needs a GPU: without one it says so and exits 2 (make cuda-test treats that as "not run").
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "touchstone.h"

static int failures, checks;

static void expect(const char *what, int cond) {
    checks++;
    if (!cond) {
        failures++;
        fprintf(stderr, "FAIL %s (last message: \"%s\")\n", what, ts_last_error());
    }
}

#define N 65536
static uint16_t host[N];

static void fill(uint16_t bits) {
    for (int i = 0; i < N; i++) host[i] = bits;
}

/* Every element of host equals bits. */
static int all(uint16_t bits) {
    for (int i = 0; i < N; i++)
        if (host[i] != bits) return 0;
    return 1;
}

enum { F16_HALF = 0x3800, F16_ONE = 0x3C00, F16_TWO = 0x4000, F16_2_5 = 0x4100, F16_THREE = 0x4200 };

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count == 0) {
        printf("graph: no CUDA device, not run\n");
        return 2;
    }
    expect("init", ts_init(0) == TS_OK);
    void *x = NULL, *y = NULL, *out = NULL, *spare = NULL;
    const size_t bytes = sizeof host;
    expect("malloc", ts_malloc(&x, bytes) == TS_OK && ts_malloc(&y, bytes) == TS_OK && ts_malloc(&out, bytes) == TS_OK);
    fill(F16_ONE);
    expect("x = 1", ts_copy_to_device(x, host, bytes, NULL) == TS_OK);
    fill(F16_TWO);
    expect("y = 2", ts_copy_to_device(y, host, bytes, NULL) == TS_OK);
    expect("out = 0", ts_memset(out, 0, bytes, NULL) == TS_OK && ts_synchronize(NULL) == TS_OK);

    ts_elementwise_config cfg = {TS_F16, N};
    expect("begin", ts_graph_begin(NULL) == TS_OK);
    expect("a second begin is refused", ts_graph_begin(NULL) == TS_ERR_INVALID_ARGUMENT &&
                                            strstr(ts_last_error(), "already open") != NULL);
    expect("residual_add is recorded", ts_residual_add(out, x, y, &cfg, NULL) == TS_OK);
    ts_elementwise_config bad = {TS_F16, 0};
    expect("a bad argument is still refused at the call",
           ts_residual_add(out, x, y, &bad, NULL) == TS_ERR_INVALID_ARGUMENT);
    expect("copy to host is refused", ts_copy_to_host(host, out, bytes, NULL) == TS_ERR_UNSUPPORTED &&
                                          strstr(ts_last_error(), "ts_copy_to_host") != NULL);
    expect("synchronize is refused", ts_synchronize(NULL) == TS_ERR_UNSUPPORTED);
    expect("malloc is refused", ts_malloc(&spare, 256) == TS_ERR_UNSUPPORTED && spare == NULL);
    expect("copy to device is refused", ts_copy_to_device(x, host, bytes, NULL) == TS_ERR_UNSUPPORTED);
    ts_graph *g = NULL;
    expect("end", ts_graph_end(NULL, &g) == TS_OK && g != NULL);
    ts_graph *none = g;
    expect("a second end is refused", ts_graph_end(NULL, &none) == TS_ERR_INVALID_ARGUMENT && none == NULL);

    expect("nothing ran during the capture",
           ts_copy_to_host(host, out, bytes, NULL) == TS_OK && all(0));
    expect("launch", ts_graph_launch(g, NULL) == TS_OK);
    expect("the replay computed 1 + 2", ts_copy_to_host(host, out, bytes, NULL) == TS_OK && all(F16_THREE));
    fill(F16_HALF);
    expect("x = 0.5", ts_copy_to_device(x, host, bytes, NULL) == TS_OK);
    for (int i = 0; i < 3; i++) {
        expect("launch with the new x", ts_graph_launch(g, NULL) == TS_OK);
        expect("the replay read x at replay time: 0.5 + 2, every time",
               ts_copy_to_host(host, out, bytes, NULL) == TS_OK && all(F16_2_5));
    }
    expect("destroy", ts_graph_destroy(g) == TS_OK);
    expect("free", ts_free(x) == TS_OK && ts_free(y) == TS_OK && ts_free(out) == TS_OK);
    expect("shutdown", ts_shutdown() == TS_OK);
    printf("graph: %d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
