/*
 * fused_bytes: each fused op and its unfused composition (the equivalent touchstone.h states)
 * once, at the decode shapes of Qwen2.5-0.5B, Phi-3-mini and GPT-2 (gelu_scale, elementwise, at 128
 * tokens of GPT-2's FFN width), for a profiler to count the DRAM bytes each form moves:
 *
 *     make fused-bytes   (ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum, one row per kernel)
 *
 * The inputs are non-zero fp16 values in +-[0.5, 1); every form runs once to warm up (cuBLAS
 * picks its kernels, workspaces grow), then after a 256 MiB memset that leaves nothing of the
 * operands in L2, as in a model step, it runs again: that run is the one to read. A residual_add
 * of 8 elements between the forms marks where one ends in the profiler's kernel list; stdout
 * names each form in order. Exit 2: no device.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "touchstone.h"

static void *flush_buf;
static void *marker;

static void check(int st, const char *what) {
    if (st != TS_OK) {
        fprintf(stderr, "fused_bytes: %s: %s (%s)\n", what, ts_status_name(st), ts_last_error());
        exit(1);
    }
}

/* A device buffer of n fp16 values in +-[0.5, 1) from a fixed LCG (or zeros). */
static void *f16(size_t n, int zero) {
    uint16_t *h = malloc(n * 2);
    static uint32_t s = 12345;
    for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        h[i] = zero ? 0 : (uint16_t)(((s >> 31) << 15) | (14u << 10) | ((s >> 8) & 0x3ffu));
    }
    void *d = NULL;
    check(ts_malloc(&d, n * 2), "malloc");
    check(ts_copy_to_device(d, h, n * 2, NULL), "copy");
    free(h);
    return d;
}

static void mark(void) {
    ts_elementwise_config c = {TS_F16, 8};
    check(ts_residual_add(marker, marker, marker, &c, NULL), "marker");
}

typedef void (*form_fn)(void **a);

/* Warm-up, flush, the measured run, a marker. */
static void run(const char *name, form_fn f, void **a) {
    f(a);
    check(ts_memset(flush_buf, 0, (size_t)256 << 20, NULL), "flush");
    check(ts_synchronize(NULL), "sync");
    printf("%s\n", name);
    f(a);
    mark();
    check(ts_synchronize(NULL), "sync");
}

static int H, N, F;

/* rmsnorm_gemm with a residual: a = {out, sum, x, residual, norm_w, w, bias, h} */
static void norm_fused(void **a) {
    ts_norm_gemm_config c = {TS_F16, 1, H, N, 1e-6f};
    check(ts_rmsnorm_gemm(a[0], a[1], a[2], a[3], a[4], a[5], a[6], &c, NULL), "rmsnorm_gemm");
}
static void norm_unfused(void **a) {
    ts_norm_config n = {TS_F16, 1, H, 1e-6f, (ts_dtype)0};
    ts_gemm_config g = {TS_F16, TS_F16, 1, N, H};
    check(ts_rmsnorm_residual(a[1], a[7], a[2], a[3], a[4], &n, NULL), "rmsnorm_residual");
    check(ts_gemm(a[0], a[7], a[5], a[6], &g, NULL), "gemm");
}
/* gpt_ffn: a = {out, x, w1, b1, w2, b2, h, act} */
static void ffn_fused(void **a) {
    ts_gpt_ffn_config c = {TS_F16, 1, H, F, TS_GELU_TANH};
    check(ts_gpt_ffn(a[0], a[1], a[2], a[3], a[4], a[5], &c, NULL), "gpt_ffn");
}
static void ffn_unfused(void **a) {
    ts_gemm_config up = {TS_F16, TS_F16, 1, F, H}, down = {TS_F16, TS_F16, 1, H, F};
    ts_elementwise_config e = {TS_F16, F};
    check(ts_gemm(a[6], a[1], a[2], a[3], &up, NULL), "gemm up");
    check(ts_gelu_tanh(a[7], a[6], &e, NULL), "gelu_tanh");
    check(ts_gemm(a[0], a[7], a[4], a[5], &down, NULL), "gemm down");
}
/* gemm_swiglu: a = {out, x, w_gate_up, g, u} (w_up is the second half of w_gate_up) */
static void swiglu_fused(void **a) {
    ts_ffn_config c = {TS_F16, 1, H, F};
    check(ts_gemm_swiglu(a[0], a[1], a[2], &c, NULL), "gemm_swiglu");
}
static void swiglu_unfused(void **a) {
    ts_gemm_config g = {TS_F16, TS_F16, 1, F, H};
    ts_elementwise_config e = {TS_F16, F};
    check(ts_gemm(a[3], a[1], a[2], NULL, &g, NULL), "gemm gate");
    check(ts_gemm(a[4], a[1], (char *)a[2] + (size_t)F * H * 2, NULL, &g, NULL), "gemm up");
    check(ts_swiglu(a[0], a[3], a[4], &e, NULL), "swiglu");
}

/* gelu_scale: a = {out, x, h, w} (w the [1, 1] weight of the unfused gemm by [[scale]]) */
static void gelu_scale_fused(void **a) {
    ts_gelu_scale_config c = {TS_F16, (int64_t)N, TS_GELU_ERF, 0.125f};
    check(ts_gelu_scale(a[0], a[1], &c, NULL), "gelu_scale");
}
static void gelu_scale_unfused(void **a) {
    ts_elementwise_config e = {TS_F16, N};
    ts_gemm_config g = {TS_F16, TS_F16, N, 1, 1};
    check(ts_gelu(a[2], a[1], &e, NULL), "gelu");
    check(ts_gemm(a[0], a[2], a[3], NULL, &g, NULL), "gemm by [[scale]]");
}

static void norm_case(const char *name, int h, int n, int bias) {
    H = h, N = n;
    void *a[8] = {f16(n, 1), f16(h, 1), f16(h, 0), f16(h, 0), f16(h, 0), f16((size_t)n * h, 0), bias ? f16(n, 0) : NULL,
                  f16(h, 1)};
    char label[128];
    snprintf(label, sizeof label, "%s fused", name);
    run(label, norm_fused, a);
    snprintf(label, sizeof label, "%s unfused", name);
    run(label, norm_unfused, a);
    for (int i = 0; i < 8; ++i) ts_free(a[i]);
}

int main(void) {
    int count = 0;
    if (ts_device_count(&count) != TS_OK || count == 0) {
        fprintf(stderr, "fused_bytes: no CUDA device\n");
        return 2;
    }
    check(ts_init(0), "init");
    check(ts_malloc(&flush_buf, (size_t)256 << 20), "malloc flush");
    marker = f16(8, 1);
    norm_case("rmsnorm_gemm qwen2.5-0.5b qkv (H 896, N 1152, bias)", 896, 1152, 1);
    norm_case("rmsnorm_gemm qwen2.5-0.5b gate_up (H 896, N 9728)", 896, 9728, 0);
    norm_case("rmsnorm_gemm phi3-mini qkv (H 3072, N 9216)", 3072, 9216, 0);
    {
        H = 768, F = 3072;
        void *a[8] = {f16(H, 1), f16(H, 0), f16((size_t)F * H, 0), f16(F, 0), f16((size_t)H * F, 0), f16(H, 0),
                      f16(F, 1), f16(F, 1)};
        run("gpt_ffn gpt2 (H 768, F 3072, tanh) fused", ffn_fused, a);
        run("gpt_ffn gpt2 (H 768, F 3072, tanh) unfused", ffn_unfused, a);
        for (int i = 0; i < 8; ++i) ts_free(a[i]);
    }
    {
        N = 128 * 3072; /* GPT-2's activation for 128 tokens */
        void *a[4] = {f16((size_t)N, 1), f16((size_t)N, 0), f16((size_t)N, 1), f16(1, 0)};
        run("gelu_scale gpt2 FFN width, 128 tokens (n 393216, erf) fused", gelu_scale_fused, a);
        run("gelu_scale gpt2 FFN width, 128 tokens (n 393216, erf) unfused", gelu_scale_unfused, a);
        for (int i = 0; i < 4; ++i) ts_free(a[i]);
    }
    {
        H = 896, F = 4864;
        void *a[5] = {f16(F, 1), f16(H, 0), f16((size_t)2 * F * H, 0), f16(F, 1), f16(F, 1)};
        run("gemm_swiglu qwen2.5-0.5b (H 896, F 4864) fused", swiglu_fused, a);
        run("gemm_swiglu qwen2.5-0.5b (H 896, F 4864) unfused", swiglu_unfused, a);
        for (int i = 0; i < 5; ++i) ts_free(a[i]);
    }
    ts_free(flush_buf);
    ts_free(marker);
    check(ts_shutdown(), "shutdown");
    return 0;
}
