/*
 * abi_args: every ts_* op refuses bad arguments with a named status and a message that names
 * the op, the argument and the value, before any launch.
 *
 * Plain C against include/touchstone.h alone, so it also proves the header is C. Validation
 * runs before the library touches CUDA, so this needs no GPU: CI runs it on the library that
 * .ci/nvcc-check links, and GPU hosts run it too (make -C cuda abi-test).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "touchstone.h"

static int failures, checks;

/* A pointer that is never dereferenced: validation must fail before any launch. */
#define P ((void *)0x1000)
#define P2 ((void *)0x2000)

static void expect(const char *what, int status, int want, const char *op, const char *arg, const char *value) {
    const char *msg = ts_last_error();
    checks++;
    int ok = status == want && strstr(msg, op) != NULL && strstr(msg, arg) != NULL &&
             (value == NULL || strstr(msg, value) != NULL);
    if (!ok) {
        failures++;
        fprintf(stderr, "FAIL %s: status %s (want %s), message \"%s\" (want it to name %s, %s%s%s)\n", what,
                ts_status_name(status), ts_status_name(want), msg, op, arg, value ? " and " : "", value ? value : "");
    }
}

int main(void) {
    if (ts_abi_version() != TS_ABI_VERSION) {
        fprintf(stderr, "FAIL abi version %d, header %d\n", ts_abi_version(), TS_ABI_VERSION);
        return 1;
    }
    ts_elementwise_config ew = {TS_F16, 1024};
    ts_norm_config nc = {TS_F16, 4, 896, 1e-6f, (ts_dtype)0};
    ts_rope_config rc = {TS_F16, 7, 14, 64, 64, 1e6f, NULL, NULL, 0, 1.0f};
    ts_attention_config ac = {TS_F16, 1, 16, 14, 2, 64, 1, 0.125f, 0, 0.0f};
    ts_decode_config dc = {TS_F16, 1, 4096, 14, 2, 64, 0.125f, 0, 0.0f};
    ts_ffn_config fc = {TS_F16, 4, 896, 4864};
    ts_embedding_config ec = {TS_F16, 8, 896, 151936, 0.0f};
    ts_gemm_config gc = {TS_F16, TS_F16, 7, 896, 896};
    ts_softmax_config sc = {TS_F32, 2, 151936};

    /* elementwise */
    expect("residual null out", ts_residual_add(NULL, P, P, &ew, NULL), TS_ERR_INVALID_ARGUMENT, "residual_add", "out", NULL);
    expect("residual null cfg", ts_residual_add(P, P, P, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "residual_add", "cfg", NULL);
    ts_elementwise_config ew0 = {TS_F16, 0};
    expect("residual n 0", ts_residual_add(P, P, P, &ew0, NULL), TS_ERR_INVALID_ARGUMENT, "residual_add", "n", "0");
    ts_elementwise_config ewneg = {TS_F16, -5};
    expect("gelu n < 0", ts_gelu(P, P, &ewneg, NULL), TS_ERR_INVALID_ARGUMENT, "gelu", "n", "-5");
    ts_elementwise_config ewbad = {(ts_dtype)7, 1024};
    expect("gelu_tanh dtype 7", ts_gelu_tanh(P, P, &ewbad, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_tanh", "dtype", "7");
    ts_elementwise_config ewf32 = {TS_F32, 1024};
    expect("gelu_tanh dtype f32", ts_gelu_tanh(P, P, &ewf32, NULL), TS_ERR_UNSUPPORTED, "gelu_tanh", "dtype", NULL);
    expect("swiglu null up", ts_swiglu(P, P, NULL, &ew, NULL), TS_ERR_INVALID_ARGUMENT, "swiglu", "up", NULL);

    /* norms */
    ts_norm_config nc0 = nc;
    nc0.hidden = 0;
    expect("rmsnorm hidden 0", ts_rmsnorm(P, P, P, &nc0, NULL), TS_ERR_INVALID_ARGUMENT, "rmsnorm", "hidden", "0");
    ts_norm_config nceps = nc;
    nceps.eps = 0;
    expect("rmsnorm eps 0", ts_rmsnorm(P, P, P, &nceps, NULL), TS_ERR_INVALID_ARGUMENT, "rmsnorm", "eps", "0");
    nceps.eps = NAN;
    expect("layernorm eps nan", ts_layernorm(P, P, P, P, &nceps, NULL), TS_ERR_INVALID_ARGUMENT, "layernorm", "eps", NULL);
    expect("layernorm null beta", ts_layernorm(P, P, P, NULL, &nc, NULL), TS_ERR_INVALID_ARGUMENT, "layernorm", "beta", NULL);
    ts_norm_config ncrows = nc;
    ncrows.rows = -1;
    expect("layernorm_residual rows", ts_layernorm_residual(P, P, P, P, P, P, &ncrows, NULL), TS_ERR_INVALID_ARGUMENT,
           "layernorm_residual", "rows", "-1");
    expect("rmsnorm_residual rows", ts_rmsnorm_residual(P, P, P, P, P, &ncrows, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_residual", "rows", "-1");
    expect("rmsnorm_residual null sum", ts_rmsnorm_residual(NULL, P, P, P, P, &nc, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_residual", "sum", NULL);
    expect("rmsnorm_residual null weight", ts_rmsnorm_residual(P, P, P, P, NULL, &nc, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_residual", "weight", NULL);
    nceps.eps = -1e-6f;
    expect("rmsnorm_residual eps < 0", ts_rmsnorm_residual(P, P, P, P, P, &nceps, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_residual", "eps", NULL);

    /* rope */
    ts_rope_config rodd = rc;
    rodd.head_dim = 63;
    rodd.rope_dim = 62;
    expect("rope odd head_dim", ts_rope(P, P, P, &rodd, NULL), TS_ERR_INVALID_ARGUMENT, "rope", "head_dim", "63");
    ts_rope_config rbig = rc;
    rbig.rope_dim = 128;
    expect("rope rope_dim > head_dim", ts_rope(P, P, P, &rbig, NULL), TS_ERR_SHAPE_MISMATCH, "rope", "rope_dim", "128");
    ts_rope_config rbase = rc;
    rbase.freq_base = 1;
    expect("rope freq_base 1", ts_rope(P, P, P, &rbase, NULL), TS_ERR_INVALID_ARGUMENT, "rope", "freq_base", "1");
    expect("rope null positions", ts_rope(P, P, NULL, &rc, NULL), TS_ERR_INVALID_ARGUMENT, "rope", "positions", NULL);
    ts_rope_config rfactor = rc;
    rfactor.attention_factor = 0;
    expect("rope attention_factor 0", ts_rope(P, P, P, &rfactor, NULL), TS_ERR_INVALID_ARGUMENT, "rope",
           "attention_factor", "0");
    rfactor.attention_factor = -1.5f;
    expect("rope attention_factor < 0", ts_rope(P, P, P, &rfactor, NULL), TS_ERR_INVALID_ARGUMENT, "rope",
           "attention_factor", "-1.5");
    ts_rope_config rlong = rc;
    rlong.freq_divisor = (const float *)P;
    rlong.long_divisor = (const float *)P;
    rlong.long_from = -1;
    expect("rope long_from < 0", ts_rope(P, P, P, &rlong, NULL), TS_ERR_INVALID_ARGUMENT, "rope", "long_from", "-1");

    /* attention */
    ts_attention_config a3 = ac;
    a3.n_kv_heads = 3;
    expect("prefill heads do not divide", ts_attention_prefill(P, P, P, P, &a3, NULL), TS_ERR_SHAPE_MISMATCH,
           "attention_prefill", "n_kv_heads", "3");
    ts_attention_config as = ac;
    as.scale = 0;
    expect("prefill scale 0", ts_attention_prefill(P, P, P, P, &as, NULL), TS_ERR_INVALID_ARGUMENT, "attention_prefill",
           "scale", "0");
    ts_attention_config aseq = ac;
    aseq.seq_len = 0;
    expect("prefill seq_len 0", ts_attention_prefill(P, P, P, P, &aseq, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_prefill", "seq_len", "0");
    ts_attention_config awn = ac;
    awn.window = -1;
    expect("prefill window -1", ts_attention_prefill(P, P, P, P, &awn, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_prefill", "window", "-1");
    ts_attention_config awc = ac;
    awc.window = 8;
    awc.causal = 0;
    expect("prefill window without causal", ts_attention_prefill(P, P, P, P, &awc, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_prefill", "window", "8");
    ts_decode_config dwn = dc;
    dwn.window = -4;
    expect("decode window -4", ts_attention_decode(P, P, P, P, P, &dwn, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_decode", "window", "-4");
    ts_decode_config d0 = dc;
    d0.max_len = 0;
    expect("decode max_len 0", ts_attention_decode(P, P, P, P, P, &d0, NULL), TS_ERR_INVALID_ARGUMENT, "attention_decode",
           "max_len", "0");
    expect("decode null cache_lens", ts_attention_decode(P, P, P, P, NULL, &dc, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_decode", "cache_lens", NULL);

    /* ffn, embeddings, gemm, softmax */
    ts_ffn_config f0 = fc;
    f0.ffn = 0;
    expect("ffn ffn 0", ts_swiglu_ffn(P, P, P, P, P, &f0, NULL), TS_ERR_INVALID_ARGUMENT, "swiglu_ffn", "ffn", "0");
    expect("gemm_swiglu ffn 0", ts_gemm_swiglu(P, P, P, &f0, NULL), TS_ERR_INVALID_ARGUMENT, "gemm_swiglu", "ffn", "0");
    expect("gemm_swiglu null w_gate_up", ts_gemm_swiglu(P, P, NULL, &fc, NULL), TS_ERR_INVALID_ARGUMENT, "gemm_swiglu",
           "w_gate_up", "NULL");
    expect("gemm_swiglu valid", ts_gemm_swiglu(P, P, P, &fc, NULL), TS_ERR_NOT_INITIALIZED, "gemm_swiglu", "ts_init", NULL);
    ts_norm_gemm_config ng = {TS_F16, 1, 896, 1152, 1e-6f};
    expect("rmsnorm_gemm valid", ts_rmsnorm_gemm(P, NULL, P, NULL, P, P, NULL, &ng, NULL), TS_ERR_NOT_INITIALIZED,
           "rmsnorm_gemm", "ts_init", NULL);
    expect("rmsnorm_gemm residual without sum", ts_rmsnorm_gemm(P, NULL, P, P, P, P, NULL, &ng, NULL),
           TS_ERR_INVALID_ARGUMENT, "rmsnorm_gemm", "sum", NULL);
    expect("rmsnorm_gemm sum is x", ts_rmsnorm_gemm(P, P, P, P2, P, P, NULL, &ng, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_gemm", "overlap", NULL);
    ts_norm_gemm_config ng0 = ng;
    ng0.n = 0;
    expect("rmsnorm_gemm n 0", ts_rmsnorm_gemm(P, NULL, P, NULL, P, P, NULL, &ng0, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_gemm", "n", "0");
    ng0 = ng;
    ng0.eps = -1.0f;
    expect("rmsnorm_gemm eps", ts_rmsnorm_gemm(P, NULL, P, NULL, P, P, NULL, &ng0, NULL), TS_ERR_INVALID_ARGUMENT,
           "rmsnorm_gemm", "eps", NULL);
    expect("layernorm_gemm valid", ts_layernorm_gemm(P, NULL, P, NULL, P, P, P, NULL, &ng, NULL),
           TS_ERR_NOT_INITIALIZED, "layernorm_gemm", "ts_init", NULL);
    expect("layernorm_gemm null beta", ts_layernorm_gemm(P, NULL, P, NULL, P, NULL, P, NULL, &ng, NULL),
           TS_ERR_INVALID_ARGUMENT, "layernorm_gemm", "beta", "NULL");
    expect("layernorm_gemm residual without sum", ts_layernorm_gemm(P, NULL, P, P, P, P, P, NULL, &ng, NULL),
           TS_ERR_INVALID_ARGUMENT, "layernorm_gemm", "sum", NULL);
    expect("layernorm_gemm sum is residual", ts_layernorm_gemm(P, P2, P, P2, P, P, P, NULL, &ng, NULL),
           TS_ERR_INVALID_ARGUMENT, "layernorm_gemm", "overlap", NULL);
    ng0 = ng;
    ng0.hidden = -3;
    expect("layernorm_gemm hidden", ts_layernorm_gemm(P, NULL, P, NULL, P, P, P, NULL, &ng0, NULL),
           TS_ERR_INVALID_ARGUMENT, "layernorm_gemm", "hidden", "-3");
    expect("rmsnorm_gemm null norm_weight", ts_rmsnorm_gemm(P, NULL, P, NULL, NULL, P, NULL, &ng, NULL),
           TS_ERR_INVALID_ARGUMENT, "rmsnorm_gemm", "norm_weight", "NULL");
    ts_scores_config asc = {TS_F16, 1, 16, 16, 14, 2, 64, 1, 0.125f, 0.0f};
    expect("scores valid", ts_attention_scores_softmax(P, P, P, &asc, NULL), TS_ERR_NOT_INITIALIZED,
           "attention_scores_softmax", "ts_init", NULL);
    ts_scores_config as0 = asc;
    as0.seq_q = 17;
    expect("scores seq_q > seq_k", ts_attention_scores_softmax(P, P, P, &as0, NULL), TS_ERR_SHAPE_MISMATCH,
           "attention_scores_softmax", "seq_q", "17");
    as0 = asc;
    as0.n_kv_heads = 3;
    expect("scores heads", ts_attention_scores_softmax(P, P, P, &as0, NULL), TS_ERR_SHAPE_MISMATCH,
           "attention_scores_softmax", "n_kv_heads", "3");
    as0 = asc;
    as0.head_dim = 288;
    expect("scores head_dim", ts_attention_scores_softmax(P, P, P, &as0, NULL), TS_ERR_UNSUPPORTED,
           "attention_scores_softmax", "head_dim", "288");
    as0 = asc;
    as0.scale = 0.0f;
    expect("scores scale", ts_attention_scores_softmax(P, P, P, &as0, NULL), TS_ERR_INVALID_ARGUMENT,
           "attention_scores_softmax", "scale", NULL);
    ts_gemm_config sg = {TS_F16, TS_F16, 1, 896, 4864};
    expect("swiglu_gemm valid", ts_swiglu_gemm(P, P, P, P, NULL, &sg, NULL), TS_ERR_NOT_INITIALIZED, "swiglu_gemm",
           "ts_init", NULL);
    expect("swiglu_gemm null up", ts_swiglu_gemm(P, P, NULL, P, NULL, &sg, NULL), TS_ERR_INVALID_ARGUMENT,
           "swiglu_gemm", "up", "NULL");
    ts_gemm_config sg0 = sg;
    sg0.out_dtype = TS_F32;
    expect("swiglu_gemm f32 out", ts_swiglu_gemm(P, P, P, P, NULL, &sg0, NULL), TS_ERR_UNSUPPORTED, "swiglu_gemm",
           "out_dtype", NULL);
    ts_gpt_ffn_config gf = {TS_F16, 1, 768, 3072, TS_GELU_TANH};
    expect("gpt_ffn valid", ts_gpt_ffn(P, P, P, NULL, P, NULL, &gf, NULL), TS_ERR_NOT_INITIALIZED, "gpt_ffn", "ts_init",
           NULL);
    ts_gpt_ffn_config gf0 = gf;
    gf0.gelu = 7;
    expect("gpt_ffn gelu kind", ts_gpt_ffn(P, P, P, NULL, P, NULL, &gf0, NULL), TS_ERR_INVALID_ARGUMENT, "gpt_ffn",
           "gelu", "7");
    gf0 = gf;
    gf0.ffn = 0;
    expect("gpt_ffn ffn 0", ts_gpt_ffn(P, P, P, NULL, P, NULL, &gf0, NULL), TS_ERR_INVALID_ARGUMENT, "gpt_ffn", "ffn",
           "0");
    expect("gpt_ffn null w2", ts_gpt_ffn(P, P, P, NULL, NULL, NULL, &gf, NULL), TS_ERR_INVALID_ARGUMENT, "gpt_ffn", "w2",
           "NULL");
    ts_gelu_scale_config gs = {TS_F16, 3072, TS_GELU_ERF, -0.75f};
    expect("gelu_scale valid", ts_gelu_scale(P2, P, &gs, NULL), TS_ERR_NOT_INITIALIZED, "gelu_scale", "ts_init", NULL);
    expect("gelu_scale in place valid", ts_gelu_scale(P, P, &gs, NULL), TS_ERR_NOT_INITIALIZED, "gelu_scale", "ts_init",
           NULL);
    ts_gelu_scale_config gs0 = gs;
    gs0.gelu = 2;
    expect("gelu_scale gelu kind", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "gelu", "2");
    gs0 = gs;
    gs0.scale = INFINITY;
    expect("gelu_scale scale inf", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "scale", "inf");
    gs0.scale = NAN;
    expect("gelu_scale scale nan", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "scale", "nan");
    gs0 = gs;
    gs0.scale = 0.0f; /* any finite scale is valid, zero and negative ones too */
    expect("gelu_scale scale 0 valid", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_NOT_INITIALIZED, "gelu_scale", "ts_init",
           NULL);
    gs0 = gs;
    gs0.n = 0;
    expect("gelu_scale n 0", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "n", "0");
    gs0 = gs;
    gs0.dtype = TS_F32;
    expect("gelu_scale dtype f32", ts_gelu_scale(P, P, &gs0, NULL), TS_ERR_UNSUPPORTED, "gelu_scale", "dtype", NULL);
    expect("gelu_scale null x", ts_gelu_scale(P, NULL, &gs, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "x", "NULL");
    expect("gelu_scale null cfg", ts_gelu_scale(P, P, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "gelu_scale", "cfg", "NULL");
    /* logit_softcap (ABI v24): fp32, fp16 or bf16 logits, in place or not, n >= 0, a positive
     * finite cap. */
    ts_logit_softcap_config lc = {TS_F32, 256000, 30.0f};
    expect("logit_softcap valid", ts_logit_softcap(P2, P, &lc, NULL), TS_ERR_NOT_INITIALIZED, "logit_softcap", "ts_init",
           NULL);
    expect("logit_softcap in place valid", ts_logit_softcap(P, P, &lc, NULL), TS_ERR_NOT_INITIALIZED, "logit_softcap",
           "ts_init", NULL);
    ts_logit_softcap_config lc0 = lc;
    lc0.n = 0; /* nothing to cap: valid, launches nothing */
    expect("logit_softcap n 0 valid", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_NOT_INITIALIZED, "logit_softcap",
           "ts_init", NULL);
    lc0.n = -3;
    expect("logit_softcap n < 0", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap", "cfg->n",
           "-3");
    lc0 = lc;
    lc0.dtype = TS_F16;
    expect("logit_softcap f16 valid", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_NOT_INITIALIZED, "logit_softcap",
           "ts_init", NULL);
    lc0.dtype = TS_BF16;
    expect("logit_softcap bf16 valid", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_NOT_INITIALIZED, "logit_softcap",
           "ts_init", NULL);
    lc0.dtype = TS_I32;
    expect("logit_softcap dtype i32", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_UNSUPPORTED, "logit_softcap",
           "cfg->dtype", "TS_I32");
    lc0.dtype = (ts_dtype)9;
    expect("logit_softcap dtype 9", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "cfg->dtype", "9");
    lc0 = lc;
    lc0.softcap = 0.0f;
    expect("logit_softcap softcap 0", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "cfg->softcap", "0");
    lc0.softcap = -30.0f;
    expect("logit_softcap softcap < 0", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "cfg->softcap", "-30");
    lc0.softcap = NAN;
    expect("logit_softcap softcap nan", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "cfg->softcap", "nan");
    lc0.softcap = INFINITY;
    expect("logit_softcap softcap inf", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "cfg->softcap", "inf");
    lc0.n = 0; /* the cap is checked even when nothing runs */
    expect("logit_softcap n 0 softcap inf", ts_logit_softcap(P, P, &lc0, NULL), TS_ERR_INVALID_ARGUMENT,
           "logit_softcap", "cfg->softcap", "inf");
    expect("logit_softcap null out", ts_logit_softcap(NULL, P, &lc, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap",
           "out", "NULL");
    expect("logit_softcap null x", ts_logit_softcap(P, NULL, &lc, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap", "x",
           "NULL");
    expect("logit_softcap null cfg", ts_logit_softcap(P, P, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "logit_softcap", "cfg",
           "NULL");
    ts_embedding_config v0 = ec;
    v0.table_rows = 0;
    expect("embedding vocab 0", ts_embedding(P, P, P, &v0, NULL), TS_ERR_INVALID_ARGUMENT, "embedding", "table_rows", "0");
    expect("pos_embedding null table", ts_pos_embedding(P, P, NULL, P, &ec, NULL), TS_ERR_INVALID_ARGUMENT,
           "pos_embedding", "table", NULL);

    /* Gemma 3 (ABI 23): fp32 norm weights (rmsnorm and rmsnorm_residual only; the LayerNorms share
     * the config and refuse them by name), the scaled embedding (pos_embedding refuses a scale),
     * and geglu. */
    {
        ts_norm_config w32 = {TS_F16, 4, 1152, 1e-6f, TS_F32};
        expect("rmsnorm f32 weight valid", ts_rmsnorm(P, P, P, &w32, NULL), TS_ERR_NOT_INITIALIZED, "rmsnorm",
               "ts_init", NULL);
        expect("rmsnorm_residual f32 weight valid", ts_rmsnorm_residual(P, P2, P, P, P, &w32, NULL),
               TS_ERR_NOT_INITIALIZED, "rmsnorm_residual", "ts_init", NULL);
        ts_norm_config b_w32 = {TS_BF16, 4, 2560, 1e-6f, TS_F32};
        expect("bf16 rmsnorm f32 weight valid", ts_rmsnorm(P, P, P, &b_w32, NULL), TS_ERR_NOT_INITIALIZED, "rmsnorm",
               "ts_init", NULL);
        ts_norm_config same = {TS_BF16, 4, 2560, 1e-6f, TS_BF16};
        expect("rmsnorm weight_dtype = dtype valid", ts_rmsnorm(P, P, P, &same, NULL), TS_ERR_NOT_INITIALIZED,
               "rmsnorm", "ts_init", NULL);
        expect("layernorm weight_dtype = dtype valid", ts_layernorm(P, P, P, P, &same, NULL), TS_ERR_NOT_INITIALIZED,
               "layernorm", "ts_init", NULL);
        expect("layernorm f32 weight", ts_layernorm(P, P, P, P, &w32, NULL), TS_ERR_UNSUPPORTED, "layernorm",
               "weight_dtype", "= 2 (TS_F32)");
        expect("layernorm_residual f32 weight", ts_layernorm_residual(P, P2, P, P, P, P, &w32, NULL),
               TS_ERR_UNSUPPORTED, "layernorm_residual", "weight_dtype", "= 2 (TS_F32)");
        ts_norm_config mixw = {TS_F16, 4, 1152, 1e-6f, TS_BF16};
        expect("rmsnorm bf16 weight of f16 x", ts_rmsnorm(P, P, P, &mixw, NULL), TS_ERR_UNSUPPORTED, "rmsnorm",
               "weight_dtype", "= 4 (TS_BF16)");
        mixw.weight_dtype = (ts_dtype)9;
        expect("rmsnorm_residual weight_dtype 9", ts_rmsnorm_residual(P, P2, P, P, P, &mixw, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_residual", "weight_dtype", "= 9");

        ts_embedding_config es = {TS_F16, 8, 1152, 262144, 33.9375f};
        expect("embedding scaled valid", ts_embedding(P, P, P, &es, NULL), TS_ERR_NOT_INITIALIZED, "embedding", "ts_init",
               NULL);
        es.scale = -2.0f;
        expect("embedding negative scale valid", ts_embedding(P, P, P, &es, NULL), TS_ERR_NOT_INITIALIZED, "embedding",
               "ts_init", NULL);
        es.scale = NAN;
        expect("embedding scale nan", ts_embedding(P, P, P, &es, NULL), TS_ERR_INVALID_ARGUMENT, "embedding", "scale",
               "nan");
        es.scale = INFINITY;
        expect("embedding scale inf", ts_embedding(P, P, P, &es, NULL), TS_ERR_INVALID_ARGUMENT, "embedding", "scale",
               "inf");
        es.scale = 1.0f;
        expect("pos_embedding scale 1 valid", ts_pos_embedding(P, P, P, P, &es, NULL), TS_ERR_NOT_INITIALIZED,
               "pos_embedding", "ts_init", NULL);
        es.scale = 2.0f;
        expect("pos_embedding scale 2", ts_pos_embedding(P, P, P, P, &es, NULL), TS_ERR_INVALID_ARGUMENT,
               "pos_embedding", "scale", "= 2");

        ts_geglu_config gg = {TS_F16, 6912, TS_GELU_TANH};
        expect("geglu valid", ts_geglu(P2, P, P, &gg, NULL), TS_ERR_NOT_INITIALIZED, "geglu", "ts_init", NULL);
        expect("geglu in place valid", ts_geglu(P, P, P2, &gg, NULL), TS_ERR_NOT_INITIALIZED, "geglu", "ts_init", NULL);
        ts_geglu_config g0 = gg;
        g0.gelu = 2;
        expect("geglu gelu kind", ts_geglu(P, P, P, &g0, NULL), TS_ERR_INVALID_ARGUMENT, "geglu", "gelu", "2");
        g0 = gg;
        g0.n = 0;
        expect("geglu n 0", ts_geglu(P, P, P, &g0, NULL), TS_ERR_INVALID_ARGUMENT, "geglu", "n", "0");
        g0 = gg;
        g0.dtype = TS_F32;
        expect("geglu dtype f32", ts_geglu(P, P, P, &g0, NULL), TS_ERR_UNSUPPORTED, "geglu", "dtype", "TS_F32");
        expect("geglu null up", ts_geglu(P, P, NULL, &gg, NULL), TS_ERR_INVALID_ARGUMENT, "geglu", "up", "NULL");
        expect("geglu null gate", ts_geglu(P, NULL, P, &gg, NULL), TS_ERR_INVALID_ARGUMENT, "geglu", "gate", "NULL");
        expect("geglu null cfg", ts_geglu(P, P, P, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "geglu", "cfg", "NULL");
        ts_geglu_config b_gg = {TS_BF16, 10240, TS_GELU_ERF};
        expect("bf16 geglu valid", ts_geglu(P, P, P, &b_gg, NULL), TS_ERR_NOT_INITIALIZED, "geglu", "ts_init", NULL);
    }
    ts_set_rows_config sr = {TS_F16, 4096, 1, 128};
    const int32_t *rows = (const int32_t *)P;
    expect("set_rows null dst", ts_set_rows(NULL, P, rows, &sr, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "dst", "NULL");
    expect("set_rows null src", ts_set_rows(P, NULL, rows, &sr, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "src", "NULL");
    expect("set_rows null rows", ts_set_rows(P, P, NULL, &sr, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "rows", "NULL");
    expect("set_rows null cfg", ts_set_rows(P, P, rows, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "cfg", "NULL");
    ts_set_rows_config sr_bad = sr;
    sr_bad.dst_rows = 0;
    expect("set_rows dst_rows 0", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "dst_rows",
           "0");
    sr_bad = sr;
    sr_bad.src_rows = -1;
    expect("set_rows src_rows -1", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows",
           "src_rows", "-1");
    sr_bad = sr;
    sr_bad.row_elems = 0;
    expect("set_rows row_elems 0", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows",
           "row_elems", "0");
    sr_bad = sr;
    sr_bad.dtype = TS_I32;
    expect("set_rows dtype i32", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_UNSUPPORTED, "set_rows", "dtype", NULL);
    sr_bad.dtype = (ts_dtype)9;
    expect("set_rows dtype 9", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "dtype", "9");
    sr_bad = sr;
    sr_bad.dst_rows = 2147483647;
    sr_bad.row_elems = 2147483647;
    expect("set_rows dst beyond 2^59 elements", ts_set_rows(P, P, rows, &sr_bad, NULL), TS_ERR_INVALID_ARGUMENT,
           "set_rows", "dst", "2^59");
    /* Both dtypes pass validation and stop only at the missing ts_init: nothing launched. */
    expect("set_rows f16 valid", ts_set_rows(P, P, rows, &sr, NULL), TS_ERR_NOT_INITIALIZED, "set_rows", "ts_init", NULL);
    ts_set_rows_config sr_f32 = {TS_F32, 16, 3, 1001};
    expect("set_rows f32 valid", ts_set_rows(P, P, rows, &sr_f32, NULL), TS_ERR_NOT_INITIALIZED, "set_rows", "ts_init",
           NULL);
    /* set_rows_fp8: the scale and its heads. */
    {
        const float *sc = (const float *)P;
        ts_set_rows_fp8_config q8 = {TS_BF16, 4096, 1, 1024, 8};
        expect("set_rows_fp8 valid", ts_set_rows_fp8(P, P, rows, sc, &q8, NULL), TS_ERR_NOT_INITIALIZED, "set_rows_fp8",
               "ts_init", NULL);
        expect("set_rows_fp8 null scale", ts_set_rows_fp8(P, P, rows, NULL, &q8, NULL), TS_ERR_INVALID_ARGUMENT,
               "set_rows_fp8", "scale", "NULL");
        ts_set_rows_fp8_config q3 = q8;
        q3.scale_heads = 3;
        expect("set_rows_fp8 3 heads of 1024", ts_set_rows_fp8(P, P, rows, sc, &q3, NULL), TS_ERR_INVALID_ARGUMENT,
               "set_rows_fp8", "scale_heads", "3");
        ts_set_rows_fp8_config qi = q8;
        qi.dtype = TS_I32;
        expect("set_rows_fp8 dtype i32", ts_set_rows_fp8(P, P, rows, sc, &qi, NULL), TS_ERR_UNSUPPORTED, "set_rows_fp8",
               "dtype", NULL);
    }
    /* moe_router and moe_ffn: the experts, top_k and the widths. */
    {
        int32_t *ids = (int32_t *)P;
        float *wt = (float *)P;
        ts_moe_router_config mr = {TS_F16, 7, 128, 8, 1};
        expect("moe_router valid", ts_moe_router(wt, ids, P, &mr, NULL), TS_ERR_NOT_INITIALIZED, "moe_router", "ts_init",
               NULL);
        expect("moe_router null ids", ts_moe_router(wt, NULL, P, &mr, NULL), TS_ERR_INVALID_ARGUMENT, "moe_router", "ids",
               "NULL");
        ts_moe_router_config mk = mr;
        mk.top_k = 129;
        expect("moe_router top_k past experts", ts_moe_router(wt, ids, P, &mk, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_router", "top_k", "129");
        ts_moe_router_config me = mr;
        me.experts = 1025;
        expect("moe_router 1025 experts", ts_moe_router(wt, ids, P, &me, NULL), TS_ERR_INVALID_ARGUMENT, "moe_router",
               "experts", "1025");
        ts_moe_router_config mn = mr;
        mn.renormalize = 2;
        expect("moe_router renormalize 2", ts_moe_router(wt, ids, P, &mn, NULL), TS_ERR_INVALID_ARGUMENT, "moe_router",
               "renormalize", "2");
        ts_moe_ffn_config mf = {TS_BF16, 8, 2048, 768, 128, 8};
        expect("moe_ffn valid", ts_moe_ffn(P, P, ids, wt, P, P, &mf, NULL), TS_ERR_NOT_INITIALIZED, "moe_ffn", "ts_init",
               NULL);
        expect("moe_ffn null gate_up", ts_moe_ffn(P, P, ids, wt, NULL, P, &mf, NULL), TS_ERR_INVALID_ARGUMENT, "moe_ffn",
               "gate_up", "NULL");
        ts_moe_ffn_config mt = mf;
        mt.top_k = 0;
        expect("moe_ffn top_k 0", ts_moe_ffn(P, P, ids, wt, P, P, &mt, NULL), TS_ERR_INVALID_ARGUMENT, "moe_ffn", "top_k",
               "0");
        ts_moe_ffn_config mh = mf;
        mh.hidden = 2044;
        expect("moe_ffn hidden 2044", ts_moe_ffn(P, P, ids, wt, P, P, &mh, NULL), TS_ERR_UNSUPPORTED, "moe_ffn", "hidden",
               "2044");
    }
    /* moe_shared_add (ABI v25): every pointer, a storage dtype, tokens and hidden positive (no token is refused,
     * as the row ops refuse it), in place over routed or x allowed, odd widths allowed (the scalar kernel). */
    {
        ts_moe_shared_config ms = {TS_BF16, 4096, 3584};
        expect("moe_shared_add valid", ts_moe_shared_add(P2, P, P, P, P, &ms, NULL), TS_ERR_NOT_INITIALIZED,
               "moe_shared_add", "ts_init", NULL);
        expect("moe_shared_add in place over routed valid", ts_moe_shared_add(P, P, P2, P2, P2, &ms, NULL),
               TS_ERR_NOT_INITIALIZED, "moe_shared_add", "ts_init", NULL);
        expect("moe_shared_add in place over x valid", ts_moe_shared_add(P, P2, P2, P, P2, &ms, NULL),
               TS_ERR_NOT_INITIALIZED, "moe_shared_add", "ts_init", NULL);
        ts_moe_shared_config mo = {TS_F16, 3, 100};
        expect("moe_shared_add odd hidden valid", ts_moe_shared_add(P, P, P, P, P, &mo, NULL), TS_ERR_NOT_INITIALIZED,
               "moe_shared_add", "ts_init", NULL);
        expect("moe_shared_add null out", ts_moe_shared_add(NULL, P, P, P, P, &ms, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "out", "NULL");
        expect("moe_shared_add null routed", ts_moe_shared_add(P, NULL, P, P, P, &ms, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "routed", "NULL");
        expect("moe_shared_add null shared", ts_moe_shared_add(P, P, NULL, P, P, &ms, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "shared", "NULL");
        expect("moe_shared_add null x", ts_moe_shared_add(P, P, P, NULL, P, &ms, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "x", "NULL");
        expect("moe_shared_add null gate", ts_moe_shared_add(P, P, P, P, NULL, &ms, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "gate", "NULL");
        expect("moe_shared_add null cfg", ts_moe_shared_add(P, P, P, P, P, NULL, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg", "NULL");
        ts_moe_shared_config md = ms;
        md.dtype = TS_F32;
        expect("moe_shared_add dtype f32", ts_moe_shared_add(P, P, P, P, P, &md, NULL), TS_ERR_UNSUPPORTED,
               "moe_shared_add", "cfg->dtype", "TS_F32");
        md.dtype = TS_F8E4M3;
        expect("moe_shared_add dtype f8e4m3", ts_moe_shared_add(P, P, P, P, P, &md, NULL), TS_ERR_UNSUPPORTED,
               "moe_shared_add", "cfg->dtype", "TS_F8E4M3");
        md.dtype = (ts_dtype)9;
        expect("moe_shared_add dtype 9", ts_moe_shared_add(P, P, P, P, P, &md, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg->dtype", "9");
        ts_moe_shared_config mt = ms;
        mt.tokens = 0;
        expect("moe_shared_add tokens 0", ts_moe_shared_add(P, P, P, P, P, &mt, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg->tokens", "0");
        mt.tokens = -1;
        expect("moe_shared_add tokens -1", ts_moe_shared_add(P, P, P, P, P, &mt, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg->tokens", "-1");
        ts_moe_shared_config mh = ms;
        mh.hidden = 0;
        expect("moe_shared_add hidden 0", ts_moe_shared_add(P, P, P, P, P, &mh, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg->hidden", "0");
        mh.hidden = -2048;
        expect("moe_shared_add hidden -2048", ts_moe_shared_add(P, P, P, P, P, &mh, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "cfg->hidden", "-2048");
        ts_moe_shared_config mx = {TS_F16, 1 << 30, 1 << 30}; /* 2^60 elements: past the library's 2^59 */
        expect("moe_shared_add 2^60 elements", ts_moe_shared_add(P, P, P, P, P, &mx, NULL), TS_ERR_INVALID_ARGUMENT,
               "moe_shared_add", "x", "1073741824");
    }
    /* attention_decode_paged: the page size, the table, the pool. */
    {
        const int32_t *tb = (const int32_t *)P;
        ts_paged_decode_config pg = {TS_BF16, 2, 64, 16, 8, 32, 8, 64, 0.125f, 0, 0.0f};
        expect("decode_paged valid", ts_attention_decode_paged(P, P, P, P, tb, tb, &pg, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_decode_paged", "ts_init", NULL);
        expect("decode_paged null block_table", ts_attention_decode_paged(P, P, P, P, NULL, tb, &pg, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "block_table", "NULL");
        ts_paged_decode_config p24 = pg;
        p24.block_size = 24;
        expect("decode_paged block_size 24", ts_attention_decode_paged(P, P, P, P, tb, tb, &p24, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "block_size", "24");
        ts_paged_decode_config p512 = pg;
        p512.block_size = 512;
        expect("decode_paged block_size 512", ts_attention_decode_paged(P, P, P, P, tb, tb, &p512, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "block_size", "512");
        ts_paged_decode_config pw = pg;
        pw.table_width = 0;
        expect("decode_paged table_width 0", ts_attention_decode_paged(P, P, P, P, tb, tb, &pw, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "table_width", "0");
        ts_paged_decode_config pn = pg;
        pn.num_blocks = -1;
        expect("decode_paged num_blocks -1", ts_attention_decode_paged(P, P, P, P, tb, tb, &pn, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "num_blocks", "-1");
        ts_paged_decode_config pwn = pg;
        pwn.window = -2;
        expect("decode_paged window -2", ts_attention_decode_paged(P, P, P, P, tb, tb, &pwn, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "window", "-2");
        ts_paged_decode_config ph = pg;
        ph.n_kv_heads = 3;
        expect("decode_paged 32 heads on 3 kv heads", ts_attention_decode_paged(P, P, P, P, tb, tb, &ph, NULL),
               TS_ERR_SHAPE_MISMATCH, "attention_decode_paged", "n_kv_heads", "3");
    }
    /* attention_prefill_paged: the page size, the starts, the head dims it takes. */
    {
        const int32_t *tb = (const int32_t *)P;
        ts_paged_prefill_config pp = {TS_F16, 2, 70, 64, 16, 8, 14, 2, 64, 0.125f, 0, 0.0f};
        expect("prefill_paged valid", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &pp, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_prefill_paged", "ts_init", NULL);
        expect("prefill_paged null q_starts", ts_attention_prefill_paged(P, P, P, P, tb, NULL, tb, &pp, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged", "q_starts", "NULL");
        ts_paged_prefill_config p12 = pp;
        p12.block_size = 12;
        expect("prefill_paged block_size 12", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &p12, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged", "block_size", "12");
        ts_paged_prefill_config pt = pp;
        pt.total_q = 0;
        expect("prefill_paged total_q 0", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &pt, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged", "total_q", "0");
        ts_paged_prefill_config pwn = pp;
        pwn.window = -3;
        expect("prefill_paged window -3", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &pwn, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged", "window", "-3");
        ts_paged_prefill_config pd = pp;
        pd.head_dim = 320;
        pd.n_heads = 2;
        expect("prefill_paged head_dim 320", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &pd, NULL),
               TS_ERR_UNSUPPORTED, "attention_prefill_paged", "head_dim", "320");
    }
    /* attention_decode_fp8: the scales, their heads, the head dims it reads. */
    {
        const float *sc = (const float *)P;
        ts_decode_fp8_config d8 = {TS_F16, 2, 256, 8, 2, 128, 0.088f, 2, 0.0f};
        expect("decode_fp8 valid", ts_attention_decode_fp8(P, P, P, P, P, sc, sc, &d8, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_decode_fp8", "ts_init", NULL);
        expect("decode_fp8 null v_scale", ts_attention_decode_fp8(P, P, P, P, P, sc, NULL, &d8, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_fp8", "v_scale", "NULL");
        ts_decode_fp8_config dh = d8;
        dh.scale_heads = 8;
        expect("decode_fp8 scale_heads 8 of 2 kv heads", ts_attention_decode_fp8(P, P, P, P, P, sc, sc, &dh, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_fp8", "scale_heads", "8");
        ts_decode_fp8_config dd = d8;
        dd.head_dim = 80;
        expect("decode_fp8 head_dim 80", ts_attention_decode_fp8(P, P, P, P, P, sc, sc, &dd, NULL), TS_ERR_UNSUPPORTED,
               "attention_decode_fp8", "head_dim", "80");
        ts_decode_fp8_config d1 = d8;
        d1.scale_heads = 1;
        expect("decode_fp8 per-tensor valid", ts_attention_decode_fp8(P, P, P, P, P, sc, sc, &d1, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_decode_fp8", "ts_init", NULL);
    }
    /* attention_decode_paged_fp8 and attention_prefill_paged_fp8 (ABI v26): the paged checks
     * under their names, the scales, their heads, the decode's head dims. */
    {
        const int32_t *tb = (const int32_t *)P;
        const float *sc = (const float *)P;
        ts_paged_decode_fp8_config pg = {TS_BF16, 2, 64, 16, 8, 32, 8, 64, 0.125f, 0, 0.0f, 8};
        expect("decode_paged_fp8 valid", ts_attention_decode_paged_fp8(P, P, P, P, tb, tb, sc, sc, &pg, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_decode_paged_fp8", "ts_init", NULL);
        expect("decode_paged_fp8 null k_scale", ts_attention_decode_paged_fp8(P, P, P, P, tb, tb, NULL, sc, &pg, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged_fp8", "k_scale", "NULL");
        ts_paged_decode_fp8_config p24 = pg;
        p24.block_size = 24;
        expect("decode_paged_fp8 block_size 24", ts_attention_decode_paged_fp8(P, P, P, P, tb, tb, sc, sc, &p24, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_decode_paged_fp8", "block_size", "24");
        ts_paged_decode_fp8_config ph = pg;
        ph.scale_heads = 4;
        expect("decode_paged_fp8 scale_heads 4 of 8 kv heads",
               ts_attention_decode_paged_fp8(P, P, P, P, tb, tb, sc, sc, &ph, NULL), TS_ERR_INVALID_ARGUMENT,
               "attention_decode_paged_fp8", "scale_heads", "4");
        ts_paged_decode_fp8_config pd = pg;
        pd.head_dim = 80;
        expect("decode_paged_fp8 head_dim 80", ts_attention_decode_paged_fp8(P, P, P, P, tb, tb, sc, sc, &pd, NULL),
               TS_ERR_UNSUPPORTED, "attention_decode_paged_fp8", "head_dim", "80");
        ts_paged_prefill_fp8_config pp = {TS_F16, 3, 300, 64, 16, 8, 14, 2, 64, 0.125f, 0, 0.0f, 1};
        expect("prefill_paged_fp8 valid", ts_attention_prefill_paged_fp8(P, P, P, P, tb, tb, tb, sc, sc, &pp, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_prefill_paged_fp8", "ts_init", NULL);
        expect("prefill_paged_fp8 null v_scale",
               ts_attention_prefill_paged_fp8(P, P, P, P, tb, tb, tb, sc, NULL, &pp, NULL), TS_ERR_INVALID_ARGUMENT,
               "attention_prefill_paged_fp8", "v_scale", "NULL");
        ts_paged_prefill_fp8_config pt = pp;
        pt.total_q = 0;
        expect("prefill_paged_fp8 total_q 0", ts_attention_prefill_paged_fp8(P, P, P, P, tb, tb, tb, sc, sc, &pt, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged_fp8", "total_q", "0");
        ts_paged_prefill_fp8_config ps = pp;
        ps.scale_heads = 3;
        expect("prefill_paged_fp8 scale_heads 3 of 2 kv heads",
               ts_attention_prefill_paged_fp8(P, P, P, P, tb, tb, tb, sc, sc, &ps, NULL), TS_ERR_INVALID_ARGUMENT,
               "attention_prefill_paged_fp8", "scale_heads", "3");
        ts_paged_prefill_fp8_config pc = pp;
        pc.softcap = -1.0f;
        expect("prefill_paged_fp8 softcap -1", ts_attention_prefill_paged_fp8(P, P, P, P, tb, tb, tb, sc, sc, &pc, NULL),
               TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged_fp8", "softcap", "-1");
    }
    /* softcap (ABI v24): 0 or positive and finite, checked by every attention entry. */
    {
        const int32_t *tb = (const int32_t *)P;
        const float *scl = (const float *)P;
        const float bad[] = {-1.0f, NAN, INFINITY};
        const char *badv[] = {"-1", "nan", "inf"};
        for (int i = 0; i < 3; ++i) {
            ts_attention_config a = ac;
            a.softcap = bad[i];
            expect("prefill softcap", ts_attention_prefill(P, P, P, P, &a, NULL), TS_ERR_INVALID_ARGUMENT,
                   "attention_prefill", "softcap", badv[i]);
            ts_decode_config d = dc;
            d.softcap = bad[i];
            expect("decode softcap", ts_attention_decode(P, P, P, P, P, &d, NULL), TS_ERR_INVALID_ARGUMENT,
                   "attention_decode", "softcap", badv[i]);
            ts_scores_config s = {TS_F16, 1, 16, 16, 14, 2, 64, 1, 0.125f, bad[i]};
            expect("scores softcap", ts_attention_scores_softmax(P, P, P, &s, NULL), TS_ERR_INVALID_ARGUMENT,
                   "attention_scores_softmax", "softcap", badv[i]);
            ts_paged_decode_config pg = {TS_BF16, 2, 64, 16, 8, 32, 8, 64, 0.125f, 0, bad[i]};
            expect("decode_paged softcap", ts_attention_decode_paged(P, P, P, P, tb, tb, &pg, NULL),
                   TS_ERR_INVALID_ARGUMENT, "attention_decode_paged", "softcap", badv[i]);
            ts_paged_prefill_config pp = {TS_F16, 2, 70, 64, 16, 8, 14, 2, 64, 0.125f, 0, bad[i]};
            expect("prefill_paged softcap", ts_attention_prefill_paged(P, P, P, P, tb, tb, tb, &pp, NULL),
                   TS_ERR_INVALID_ARGUMENT, "attention_prefill_paged", "softcap", badv[i]);
            ts_decode_fp8_config d8 = {TS_F16, 2, 256, 8, 2, 128, 0.088f, 2, bad[i]};
            expect("decode_fp8 softcap", ts_attention_decode_fp8(P, P, P, P, P, scl, scl, &d8, NULL),
                   TS_ERR_INVALID_ARGUMENT, "attention_decode_fp8", "softcap", badv[i]);
        }
        ts_attention_config a = ac;
        a.softcap = 50.0f;
        expect("prefill softcap 50 valid", ts_attention_prefill(P, P, P, P, &a, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_prefill", "ts_init", NULL);
        ts_decode_config d = dc;
        d.softcap = 50.0f;
        expect("decode softcap 50 valid", ts_attention_decode(P, P, P, P, P, &d, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_decode", "ts_init", NULL);
        ts_decode_fp8_config d8 = {TS_F16, 2, 256, 8, 2, 128, 0.088f, 2, 50.0f};
        expect("decode_fp8 softcap 50 valid", ts_attention_decode_fp8(P, P, P, P, P, scl, scl, &d8, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_decode_fp8", "ts_init", NULL);
    }
    ts_gemm_config gk = gc;
    gk.k = 0;
    expect("gemm k 0", ts_gemm(P, P, P, NULL, &gk, NULL), TS_ERR_INVALID_ARGUMENT, "gemm", "k", "0");
    ts_gemm_config gout = gc;
    gout.out_dtype = TS_I32;
    expect("gemm out_dtype i32", ts_gemm(P, P, P, NULL, &gout, NULL), TS_ERR_UNSUPPORTED, "gemm", "out_dtype", NULL);
    ts_softmax_config s0 = sc;
    s0.n = 0;
    expect("softmax n 0", ts_softmax(P, P, &s0, NULL), TS_ERR_INVALID_ARGUMENT, "softmax", "n", "0");
    ts_softmax_config si = sc;
    si.in_dtype = TS_I32;
    expect("softmax in_dtype i32", ts_softmax(P, P, &si, NULL), TS_ERR_UNSUPPORTED, "softmax", "in_dtype", NULL);

    /* quant_fp8: dynamic needs scales and a group that divides hidden; static no group, no scales */
    {
        float *F = (float *)P;
        ts_quant_config q = {TS_BF16, 3, 2048, 128};
        expect("quant_fp8 valid", ts_quant_fp8(P, F, P, NULL, &q, NULL), TS_ERR_NOT_INITIALIZED, "quant_fp8", "ts_init",
               NULL);
        ts_quant_config qg = q;
        qg.group_size = 100;
        expect("quant_fp8 group 100", ts_quant_fp8(P, F, P, NULL, &qg, NULL), TS_ERR_INVALID_ARGUMENT, "quant_fp8",
               "group_size", "100");
        expect("quant_fp8 no scales", ts_quant_fp8(P, NULL, P, NULL, &q, NULL), TS_ERR_INVALID_ARGUMENT, "quant_fp8",
               "scales", "NULL");
        expect("quant_fp8 static with a group", ts_quant_fp8(P, NULL, P, F, &q, NULL), TS_ERR_INVALID_ARGUMENT,
               "quant_fp8", "group_size", "128");
        ts_quant_config qs = q;
        qs.group_size = 0;
        expect("quant_fp8 static with scales", ts_quant_fp8(P, F, P, F, &qs, NULL), TS_ERR_INVALID_ARGUMENT, "quant_fp8",
               "scales", NULL);
        expect("quant_fp8 static valid", ts_quant_fp8(P, NULL, P, F, &qs, NULL), TS_ERR_NOT_INITIALIZED, "quant_fp8",
               "ts_init", NULL);
        ts_quant_config qi = q;
        qi.in_dtype = TS_F8E4M3;
        expect("quant_fp8 in_dtype f8e4m3", ts_quant_fp8(P, F, P, NULL, &qi, NULL), TS_ERR_UNSUPPORTED, "quant_fp8",
               "in_dtype", "TS_F8E4M3");
        qi.in_dtype = (ts_dtype)9;
        expect("quant_fp8 in_dtype 9", ts_quant_fp8(P, F, P, NULL, &qi, NULL), TS_ERR_INVALID_ARGUMENT, "quant_fp8",
               "in_dtype", "9");

        /* gemm_fp8: block scales need k % 128 == 0; a 16-bit out_dtype; block_scales 0 or 1 */
        ts_gemm_fp8_config g8 = {TS_BF16, 4, 200, 512, 1};
        expect("gemm_fp8 valid", ts_gemm_fp8(P, P, F, P, F, &g8, NULL), TS_ERR_NOT_INITIALIZED, "gemm_fp8", "ts_init",
               NULL);
        ts_gemm_fp8_config gk = g8;
        gk.k = 200;
        expect("gemm_fp8 block k 200", ts_gemm_fp8(P, P, F, P, F, &gk, NULL), TS_ERR_INVALID_ARGUMENT, "gemm_fp8", "k",
               "200");
        gk.block_scales = 0;
        expect("gemm_fp8 channel k 200", ts_gemm_fp8(P, P, F, P, F, &gk, NULL), TS_ERR_NOT_INITIALIZED, "gemm_fp8",
               "ts_init", NULL);
        ts_gemm_fp8_config gb = g8;
        gb.block_scales = 2;
        expect("gemm_fp8 block_scales 2", ts_gemm_fp8(P, P, F, P, F, &gb, NULL), TS_ERR_INVALID_ARGUMENT, "gemm_fp8",
               "block_scales", "2");
        ts_gemm_fp8_config go = g8;
        go.out_dtype = TS_F32;
        expect("gemm_fp8 out f32", ts_gemm_fp8(P, P, F, P, F, &go, NULL), TS_ERR_UNSUPPORTED, "gemm_fp8", "out_dtype",
               NULL);
        expect("gemm_fp8 no w_scales", ts_gemm_fp8(P, P, F, P, NULL, &g8, NULL), TS_ERR_INVALID_ARGUMENT, "gemm_fp8",
               "w_scales", "NULL");
    }

    /* rmsnorm_quant_fp8 and swiglu_quant_fp8: quant_fp8's rules for scale, scales and group_size,
     * a storage dtype; sum and residual together or neither; at most 8192 groups a row */
    {
        float *F = (float *)P;
        ts_norm_quant_config rq = {TS_BF16, 3, 2048, 128, 1e-5f};
        expect("rmsnorm_quant_fp8 valid", ts_rmsnorm_quant_fp8(P, F, P2, P, P2, P, NULL, &rq, NULL),
               TS_ERR_NOT_INITIALIZED, "rmsnorm_quant_fp8", "ts_init", NULL);
        expect("rmsnorm_quant_fp8 in place, no residual", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, NULL, &rq, NULL),
               TS_ERR_NOT_INITIALIZED, "rmsnorm_quant_fp8", "ts_init", NULL);
        expect("rmsnorm_quant_fp8 sum without residual", ts_rmsnorm_quant_fp8(P, F, P2, P, NULL, P, NULL, &rq, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "residual", "give both");
        expect("rmsnorm_quant_fp8 null weight", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, NULL, NULL, &rq, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "weight", NULL);
        expect("rmsnorm_quant_fp8 no scales", ts_rmsnorm_quant_fp8(P, NULL, NULL, P, NULL, P, NULL, &rq, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "scales", "NULL");
        ts_norm_quant_config rg = rq;
        rg.group_size = 100;
        expect("rmsnorm_quant_fp8 group 100", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, NULL, &rg, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "group_size", "100");
        rg.hidden = 16384;
        rg.group_size = 1;
        expect("rmsnorm_quant_fp8 16384 groups", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, NULL, &rg, NULL),
               TS_ERR_UNSUPPORTED, "rmsnorm_quant_fp8", "group_size", "8192");
        expect("rmsnorm_quant_fp8 static with a group", ts_rmsnorm_quant_fp8(P, NULL, NULL, P, NULL, P, F, &rq, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "group_size", "128");
        ts_norm_quant_config rs = rq;
        rs.group_size = 0;
        expect("rmsnorm_quant_fp8 static with scales", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, F, &rs, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "scales", NULL);
        expect("rmsnorm_quant_fp8 static valid", ts_rmsnorm_quant_fp8(P, NULL, NULL, P, NULL, P, F, &rs, NULL),
               TS_ERR_NOT_INITIALIZED, "rmsnorm_quant_fp8", "ts_init", NULL);
        ts_norm_quant_config re = rq;
        re.eps = 0.0f;
        expect("rmsnorm_quant_fp8 eps 0", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, NULL, &re, NULL),
               TS_ERR_INVALID_ARGUMENT, "rmsnorm_quant_fp8", "eps", NULL);
        re = rq;
        re.dtype = TS_F32;
        expect("rmsnorm_quant_fp8 dtype f32", ts_rmsnorm_quant_fp8(P, F, NULL, P, NULL, P, NULL, &re, NULL),
               TS_ERR_UNSUPPORTED, "rmsnorm_quant_fp8", "dtype", "TS_F32");

        ts_quant_config sq = {TS_F16, 2, 4864, 4864};
        expect("swiglu_quant_fp8 valid", ts_swiglu_quant_fp8(P, F, P, P2, NULL, &sq, NULL), TS_ERR_NOT_INITIALIZED,
               "swiglu_quant_fp8", "ts_init", NULL);
        expect("swiglu_quant_fp8 null up", ts_swiglu_quant_fp8(P, F, P, NULL, NULL, &sq, NULL), TS_ERR_INVALID_ARGUMENT,
               "swiglu_quant_fp8", "up", NULL);
        ts_quant_config sg = sq;
        sg.group_size = 100;
        expect("swiglu_quant_fp8 group 100 of 4864", ts_swiglu_quant_fp8(P, F, P, P2, NULL, &sg, NULL),
               TS_ERR_INVALID_ARGUMENT, "swiglu_quant_fp8", "group_size", "100");
        ts_quant_config ss = sq;
        ss.group_size = 0;
        expect("swiglu_quant_fp8 static valid", ts_swiglu_quant_fp8(P, NULL, P, P2, F, &ss, NULL), TS_ERR_NOT_INITIALIZED,
               "swiglu_quant_fp8", "ts_init", NULL);
        expect("swiglu_quant_fp8 static with scales", ts_swiglu_quant_fp8(P, F, P, P2, F, &ss, NULL),
               TS_ERR_INVALID_ARGUMENT, "swiglu_quant_fp8", "scales", NULL);
        ts_quant_config sd = sq;
        sd.in_dtype = TS_F32;
        expect("swiglu_quant_fp8 in_dtype f32", ts_swiglu_quant_fp8(P, F, P, P2, NULL, &sd, NULL), TS_ERR_UNSUPPORTED,
               "swiglu_quant_fp8", "in_dtype", "TS_F32");
    }

    /* gemm_w4a16: the format, the group size, k and n in whole words, g_idx by format. */
    {
        const int32_t *I = (const int32_t *)P;
        ts_w4a16_config w4 = {TS_F16, 1, 64, 256, 128, TS_W4_AWQ};
        expect("gemm_w4a16 awq valid", ts_gemm_w4a16(P, P, I, I, P, NULL, &w4, NULL), TS_ERR_NOT_INITIALIZED,
               "gemm_w4a16", "ts_init", NULL);
        expect("gemm_w4a16 awq with g_idx", ts_gemm_w4a16(P, P, I, I, P, I, &w4, NULL), TS_ERR_INVALID_ARGUMENT,
               "gemm_w4a16", "g_idx", NULL);
        expect("gemm_w4a16 null qzeros", ts_gemm_w4a16(P, P, I, NULL, P, NULL, &w4, NULL), TS_ERR_INVALID_ARGUMENT,
               "gemm_w4a16", "qzeros", NULL);
        ts_w4a16_config gq = w4;
        gq.format = TS_W4_GPTQ;
        expect("gemm_w4a16 gptq valid", ts_gemm_w4a16(P, P, I, I, P, I, &gq, NULL), TS_ERR_NOT_INITIALIZED,
               "gemm_w4a16", "ts_init", NULL);
        expect("gemm_w4a16 gptq without g_idx", ts_gemm_w4a16(P, P, I, I, P, NULL, &gq, NULL),
               TS_ERR_INVALID_ARGUMENT, "gemm_w4a16", "g_idx", "NULL");
        ts_w4a16_config bad = w4;
        bad.format = 3;
        expect("gemm_w4a16 format 3", ts_gemm_w4a16(P, P, I, I, P, NULL, &bad, NULL), TS_ERR_INVALID_ARGUMENT,
               "gemm_w4a16", "format", "3");
        /* TS_W4_TILED: qweight is the whole tiled weight; k and the group multiples of 32. */
        ts_w4a16_config tw = w4;
        tw.format = TS_W4_TILED;
        expect("gemm_w4a16 tiled valid", ts_gemm_w4a16(P, P, I, NULL, NULL, NULL, &tw, NULL), TS_ERR_NOT_INITIALIZED,
               "gemm_w4a16", "ts_init", NULL);
        expect("gemm_w4a16 tiled with scales", ts_gemm_w4a16(P, P, I, NULL, P, NULL, &tw, NULL),
               TS_ERR_INVALID_ARGUMENT, "gemm_w4a16", "TS_W4_TILED", "NULL");
        tw.group_size = 16;
        tw.k = 64;
        expect("gemm_w4a16 tiled group 16", ts_gemm_w4a16(P, P, I, NULL, NULL, NULL, &tw, NULL), TS_ERR_UNSUPPORTED,
               "gemm_w4a16", "group_size", "16");
        /* 1 tile of 64 columns: codes 64 * 256 / 2 bytes, scales 2 groups * 64 * 2, zeros 2 * 64;
         * n = 72 takes 2 tiles, the second padded. Sizes need no ts_init. */
        const int tile_n[2] = {64, 72};
        for (int i = 0; i < 2; ++i) {
            size_t tb = 0;
            tw = w4;
            tw.n = tile_n[i];
            const int st = ts_w4a16_tiled_bytes(&tw, &tb);
            const size_t want = (size_t)(i + 1) * (64 * 256 / 2 + 2 * 64 * 2 + 2 * 64);
            checks++;
            if (st != TS_OK || tb != want) {
                failures++;
                fprintf(stderr, "FAIL w4a16_tiled_bytes n %d: status %s, %zu bytes (want TS_OK, %zu)\n", tile_n[i],
                        ts_status_name(st), tb, want);
            }
        }
        tw = w4;
        expect("w4a16_tile valid", ts_w4a16_tile(P, I, I, P, &tw, NULL), TS_ERR_NOT_INITIALIZED, "w4a16_tile",
               "ts_init", NULL);
        tw.format = TS_W4_TILED;
        expect("w4a16_tile from tiled", ts_w4a16_tile(P, I, I, P, &tw, NULL), TS_ERR_INVALID_ARGUMENT, "w4a16_tile",
               "format", "2");
        tw = w4;
        tw.k = 96;
        tw.group_size = 48;
        expect("w4a16_tile group 48", ts_w4a16_tile(P, I, I, P, &tw, NULL), TS_ERR_UNSUPPORTED, "w4a16_tile",
               "group_size", "48");
        expect("w4a16_tile null qzeros", ts_w4a16_tile(P, I, NULL, P, &w4, NULL), TS_ERR_INVALID_ARGUMENT,
               "w4a16_tile", "qzeros", NULL);
        bad = w4;
        bad.group_size = 96;
        expect("gemm_w4a16 group 96 of 256", ts_gemm_w4a16(P, P, I, I, P, NULL, &bad, NULL), TS_ERR_INVALID_ARGUMENT,
               "gemm_w4a16", "group_size", "96");
        bad = w4;
        bad.n = 60;
        expect("gemm_w4a16 n 60", ts_gemm_w4a16(P, P, I, I, P, NULL, &bad, NULL), TS_ERR_INVALID_ARGUMENT,
               "gemm_w4a16", "cfg->n", "60");
        bad = w4;
        bad.dtype = TS_F32;
        expect("gemm_w4a16 dtype f32", ts_gemm_w4a16(P, P, I, I, P, NULL, &bad, NULL), TS_ERR_UNSUPPORTED,
               "gemm_w4a16", "dtype", "TS_F32");
    }

    /* bf16 storage: every op that takes TS_F16 takes TS_BF16, so a bf16 config passes validation
     * and stops only at the missing ts_init (nothing launched); a 16-bit out_dtype must be the
     * in_dtype (no mixing of TS_F16 and TS_BF16), and the messages name the refused value. */
    {
        ts_elementwise_config b_ew = {TS_BF16, 1024};
        expect("bf16 residual_add valid", ts_residual_add(P, P, P, &b_ew, NULL), TS_ERR_NOT_INITIALIZED, "residual_add",
               "ts_init", NULL);
        expect("bf16 swiglu valid", ts_swiglu(P, P, P, &b_ew, NULL), TS_ERR_NOT_INITIALIZED, "swiglu", "ts_init", NULL);
        expect("bf16 gelu valid", ts_gelu(P, P, &b_ew, NULL), TS_ERR_NOT_INITIALIZED, "gelu", "ts_init", NULL);
        expect("bf16 gelu_tanh valid", ts_gelu_tanh(P, P, &b_ew, NULL), TS_ERR_NOT_INITIALIZED, "gelu_tanh", "ts_init",
               NULL);
        ts_gelu_scale_config b_gs = {TS_BF16, 3072, TS_GELU_TANH, 0.5f};
        expect("bf16 gelu_scale valid", ts_gelu_scale(P, P, &b_gs, NULL), TS_ERR_NOT_INITIALIZED, "gelu_scale",
               "ts_init", NULL);
        ts_norm_config b_nc = {TS_BF16, 4, 2048, 1e-5f, (ts_dtype)0};
        expect("bf16 rmsnorm valid", ts_rmsnorm(P, P, P, &b_nc, NULL), TS_ERR_NOT_INITIALIZED, "rmsnorm", "ts_init", NULL);
        expect("bf16 layernorm valid", ts_layernorm(P, P, P, P, &b_nc, NULL), TS_ERR_NOT_INITIALIZED, "layernorm",
               "ts_init", NULL);
        expect("bf16 layernorm_residual valid", ts_layernorm_residual(P, P2, P, P, P, P, &b_nc, NULL),
               TS_ERR_NOT_INITIALIZED, "layernorm_residual", "ts_init", NULL);
        expect("bf16 rmsnorm_residual valid", ts_rmsnorm_residual(P, P2, P, P, P, &b_nc, NULL), TS_ERR_NOT_INITIALIZED,
               "rmsnorm_residual", "ts_init", NULL);
        ts_rope_config b_rc = {TS_BF16, 7, 32, 64, 64, 5e5f, NULL, NULL, 0, 1.0f};
        expect("bf16 rope valid", ts_rope(P, P, P, &b_rc, NULL), TS_ERR_NOT_INITIALIZED, "rope", "ts_init", NULL);
        ts_attention_config b_ac = {TS_BF16, 1, 16, 32, 8, 64, 1, 0.125f, 0, 0.0f};
        expect("bf16 attention_prefill valid", ts_attention_prefill(P, P, P, P, &b_ac, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_prefill", "ts_init", NULL);
        ts_decode_config b_dc = {TS_BF16, 2, 4096, 32, 8, 64, 0.125f, 0, 0.0f};
        expect("bf16 attention_decode valid", ts_attention_decode(P, P, P, P, P, &b_dc, NULL), TS_ERR_NOT_INITIALIZED,
               "attention_decode", "ts_init", NULL);
        ts_scores_config b_sc = {TS_BF16, 1, 16, 16, 32, 8, 64, 1, 0.125f, 0.0f};
        expect("bf16 attention_scores_softmax valid", ts_attention_scores_softmax(P, P, P, &b_sc, NULL),
               TS_ERR_NOT_INITIALIZED, "attention_scores_softmax", "ts_init", NULL);
        ts_ffn_config b_fc = {TS_BF16, 4, 2048, 8192};
        expect("bf16 swiglu_ffn valid", ts_swiglu_ffn(P, P, P, P, P, &b_fc, NULL), TS_ERR_NOT_INITIALIZED, "swiglu_ffn",
               "ts_init", NULL);
        expect("bf16 gemm_swiglu valid", ts_gemm_swiglu(P, P, P, &b_fc, NULL), TS_ERR_NOT_INITIALIZED, "gemm_swiglu",
               "ts_init", NULL);
        ts_norm_gemm_config b_ng = {TS_BF16, 1, 2048, 3072, 1e-5f};
        expect("bf16 rmsnorm_gemm valid", ts_rmsnorm_gemm(P, P2, P, P, P, P, NULL, &b_ng, NULL), TS_ERR_NOT_INITIALIZED,
               "rmsnorm_gemm", "ts_init", NULL);
        expect("bf16 layernorm_gemm valid", ts_layernorm_gemm(P, NULL, P, NULL, P, P, P, P, &b_ng, NULL),
               TS_ERR_NOT_INITIALIZED, "layernorm_gemm", "ts_init", NULL);
        ts_gpt_ffn_config b_gf = {TS_BF16, 1, 768, 3072, TS_GELU_ERF};
        expect("bf16 gpt_ffn valid", ts_gpt_ffn(P, P, P, P, P, P, &b_gf, NULL), TS_ERR_NOT_INITIALIZED, "gpt_ffn",
               "ts_init", NULL);
        ts_embedding_config b_ec = {TS_BF16, 8, 2048, 128256, 0.0f};
        expect("bf16 embedding valid", ts_embedding(P, P, P, &b_ec, NULL), TS_ERR_NOT_INITIALIZED, "embedding", "ts_init",
               NULL);
        expect("bf16 pos_embedding valid", ts_pos_embedding(P, P, P, P, &b_ec, NULL), TS_ERR_NOT_INITIALIZED,
               "pos_embedding", "ts_init", NULL);
        ts_set_rows_config b_sr = {TS_BF16, 4096, 1, 1024};
        expect("bf16 set_rows valid", ts_set_rows(P, P, rows, &b_sr, NULL), TS_ERR_NOT_INITIALIZED, "set_rows",
               "ts_init", NULL);
        ts_softmax_config b_sm = {TS_BF16, 2, 1001};
        expect("bf16 softmax valid", ts_softmax(P, P, &b_sm, NULL), TS_ERR_NOT_INITIALIZED, "softmax", "ts_init", NULL);

        /* gemm: bf16 in with bf16 or fp32 out; fp16 in still takes fp16 or fp32 out. */
        ts_gemm_config b_g = {TS_BF16, TS_BF16, 1, 3072, 2048};
        expect("bf16 gemm bf16 out valid", ts_gemm(P, P, P, P, &b_g, NULL), TS_ERR_NOT_INITIALIZED, "gemm", "ts_init",
               NULL);
        b_g.out_dtype = TS_F32;
        expect("bf16 gemm f32 out valid", ts_gemm(P, P, P, NULL, &b_g, NULL), TS_ERR_NOT_INITIALIZED, "gemm", "ts_init",
               NULL);
        ts_gemm_config f_g = {TS_F16, TS_F32, 1, 3072, 2048};
        expect("f16 gemm f32 out valid", ts_gemm(P, P, P, NULL, &f_g, NULL), TS_ERR_NOT_INITIALIZED, "gemm", "ts_init",
               NULL);
        /* The mixes: refused, naming the out_dtype's value and the in_dtype it does not match. */
        ts_gemm_config mix = {TS_F16, TS_BF16, 1, 3072, 2048};
        expect("gemm f16 in bf16 out", ts_gemm(P, P, P, NULL, &mix, NULL), TS_ERR_UNSUPPORTED, "gemm", "out_dtype",
               "= 4 (TS_BF16)");
        expect("gemm f16 in bf16 out names in_dtype", ts_gemm(P, P, P, NULL, &mix, NULL), TS_ERR_UNSUPPORTED, "gemm",
               "in_dtype", "= 1 (TS_F16)");
        mix.in_dtype = TS_BF16;
        mix.out_dtype = TS_F16;
        expect("gemm bf16 in f16 out", ts_gemm(P, P, P, NULL, &mix, NULL), TS_ERR_UNSUPPORTED, "gemm", "out_dtype",
               "= 1 (TS_F16)");
        expect("gemm bf16 in f16 out names in_dtype", ts_gemm(P, P, P, NULL, &mix, NULL), TS_ERR_UNSUPPORTED, "gemm",
               "in_dtype", "= 4 (TS_BF16)");
        /* swiglu_gemm: out_dtype is in_dtype, 16-bit only. */
        ts_gemm_config b_sg = {TS_BF16, TS_BF16, 1, 2048, 8192};
        expect("bf16 swiglu_gemm valid", ts_swiglu_gemm(P, P, P, P, P, &b_sg, NULL), TS_ERR_NOT_INITIALIZED,
               "swiglu_gemm", "ts_init", NULL);
        b_sg.out_dtype = TS_F16;
        expect("swiglu_gemm bf16 in f16 out", ts_swiglu_gemm(P, P, P, P, NULL, &b_sg, NULL), TS_ERR_UNSUPPORTED,
               "swiglu_gemm", "out_dtype", "= 1 (TS_F16)");
        b_sg.in_dtype = TS_F16;
        b_sg.out_dtype = TS_BF16;
        expect("swiglu_gemm f16 in bf16 out", ts_swiglu_gemm(P, P, P, P, NULL, &b_sg, NULL), TS_ERR_UNSUPPORTED,
               "swiglu_gemm", "out_dtype", "= 4 (TS_BF16)");
        b_sg.in_dtype = TS_BF16;
        b_sg.out_dtype = TS_F32;
        expect("swiglu_gemm bf16 in f32 out", ts_swiglu_gemm(P, P, P, P, NULL, &b_sg, NULL), TS_ERR_UNSUPPORTED,
               "swiglu_gemm", "out_dtype", "TS_F32");

        /* A storage dtype is TS_F16 or TS_BF16: another known dtype is unsupported (the message
         * names both that are), an unknown value invalid. */
        ts_norm_config b_bad = b_nc;
        b_bad.dtype = TS_F32;
        expect("rmsnorm dtype f32", ts_rmsnorm(P, P, P, &b_bad, NULL), TS_ERR_UNSUPPORTED, "rmsnorm", "dtype",
               "TS_F16 or TS_BF16");
        b_bad.dtype = TS_F8E4M3;
        expect("rmsnorm dtype f8e4m3", ts_rmsnorm(P, P, P, &b_bad, NULL), TS_ERR_UNSUPPORTED, "rmsnorm", "dtype",
               "TS_F8E4M3");
        b_bad.dtype = (ts_dtype)7;
        expect("rmsnorm dtype 7", ts_rmsnorm(P, P, P, &b_bad, NULL), TS_ERR_INVALID_ARGUMENT, "rmsnorm", "dtype",
               "= 7: not a ts_dtype");
        ts_gemm_config g_bad = {(ts_dtype)7, TS_BF16, 1, 64, 64};
        expect("gemm in_dtype 7", ts_gemm(P, P, P, NULL, &g_bad, NULL), TS_ERR_INVALID_ARGUMENT, "gemm", "in_dtype",
               "7");
        g_bad.in_dtype = TS_F32;
        expect("gemm in_dtype f32", ts_gemm(P, P, P, NULL, &g_bad, NULL), TS_ERR_UNSUPPORTED, "gemm", "in_dtype",
               "TS_F32");
        ts_softmax_config s_bad = {TS_I32, 2, 64};
        expect("softmax in_dtype i32 names the three", ts_softmax(P, P, &s_bad, NULL), TS_ERR_UNSUPPORTED, "softmax",
               "in_dtype", "TS_F16, TS_BF16 or TS_F32");
        ts_set_rows_config r_bad = {(ts_dtype)0, 16, 1, 64};
        expect("set_rows dtype 0", ts_set_rows(P, P, rows, &r_bad, NULL), TS_ERR_INVALID_ARGUMENT, "set_rows", "dtype",
               "0");
    }

    /* sampling */
    ts_sample_config smp = {4, 151936, 0.7f, 50, 0.9f, 42, 7};
    int32_t *tok = (int32_t *)P;
    const float *lg = (const float *)P;
    expect("sample null tokens", ts_sample(NULL, lg, &smp, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "tokens", "NULL");
    expect("sample null logits", ts_sample(tok, NULL, &smp, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "logits", "NULL");
    expect("sample null cfg", ts_sample(tok, lg, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "cfg", "NULL");
    ts_sample_config s_rows = smp;
    s_rows.rows = 0;
    expect("sample rows 0", ts_sample(tok, lg, &s_rows, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "rows", "0");
    ts_sample_config s_vocab = smp;
    s_vocab.vocab = -3;
    expect("sample vocab -3", ts_sample(tok, lg, &s_vocab, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "vocab", "-3");
    ts_sample_config s_t = smp;
    s_t.temperature = NAN;
    expect("sample temperature nan", ts_sample(tok, lg, &s_t, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "temperature",
           "nan");
    s_t.temperature = -1.0f;
    expect("sample temperature -1", ts_sample(tok, lg, &s_t, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "temperature",
           "-1");
    s_t.temperature = INFINITY;
    expect("sample temperature inf", ts_sample(tok, lg, &s_t, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "temperature",
           "inf");
    ts_sample_config s_k = smp;
    s_k.top_k = -1;
    expect("sample top_k -1", ts_sample(tok, lg, &s_k, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "top_k", "-1");
    ts_sample_config s_p = smp;
    s_p.top_p = 0.0f;
    expect("sample top_p 0", ts_sample(tok, lg, &s_p, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "top_p", "0");
    s_p.top_p = 1.5f;
    expect("sample top_p 1.5", ts_sample(tok, lg, &s_p, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "top_p", "1.5");
    s_p.top_p = NAN;
    expect("sample top_p nan", ts_sample(tok, lg, &s_p, NULL), TS_ERR_INVALID_ARGUMENT, "sample", "top_p", "nan");
    /* Valid configs pass validation and stop only at the missing ts_init: nothing launched. */
    ts_sample_config s_greedy = {1, 7, 0.0f, 0, 1.0f, 0, 0};
    expect("sample greedy valid", ts_sample(tok, lg, &s_greedy, NULL), TS_ERR_NOT_INITIALIZED, "sample", "ts_init", NULL);
    ts_sample_config s_big_k = {2, 1001, 1.0f, 5000, 1.0f, 0, 0};
    expect("sample top_k > vocab valid", ts_sample(tok, lg, &s_big_k, NULL), TS_ERR_NOT_INITIALIZED, "sample", "ts_init",
           NULL);
    ts_philox_config ph = {1, 2, 3, 16};
    uint32_t *words = (uint32_t *)P;
    expect("philox null out", ts_philox(NULL, &ph, NULL), TS_ERR_INVALID_ARGUMENT, "philox", "out", "NULL");
    expect("philox null cfg", ts_philox(words, NULL, NULL), TS_ERR_INVALID_ARGUMENT, "philox", "cfg", "NULL");
    ts_philox_config ph0 = ph;
    ph0.n = 0;
    expect("philox n 0", ts_philox(words, &ph0, NULL), TS_ERR_INVALID_ARGUMENT, "philox", "n", "0");
    ph0.n = -2;
    expect("philox n -2", ts_philox(words, &ph0, NULL), TS_ERR_INVALID_ARGUMENT, "philox", "n", "-2");

    /* graphs: arguments first, then the missing ts_init */
    expect("graph_end null graph", ts_graph_end(NULL, NULL), TS_ERR_INVALID_ARGUMENT, "ts_graph_end", "graph", "NULL");
    expect("graph_launch null graph", ts_graph_launch(NULL, NULL), TS_ERR_INVALID_ARGUMENT, "ts_graph_launch", "graph",
           "NULL");
    expect("graph_begin before init", ts_graph_begin(NULL), TS_ERR_NOT_INITIALIZED, "ts_graph_begin", "ts_init", NULL);
    checks++;
    if (ts_graph_destroy(NULL) != TS_OK) {
        failures++;
        fprintf(stderr, "FAIL graph_destroy(NULL) is not a no-op: %s\n", ts_last_error());
    }

    /* path recording needs no ts_init; refused calls (all of the above) launch nothing */
    checks++;
    size_t needed = 99;
    char text[8] = "x";
    if (ts_record_paths(1) != TS_OK || ts_philox(NULL, &ph, NULL) == TS_OK ||
        ts_recorded_paths(text, sizeof text, &needed) != TS_OK || needed != 1 || text[0] != '\0' ||
        ts_recorded_paths(NULL, 0, NULL) != TS_OK || ts_record_paths(0) != TS_OK) {
        failures++;
        fprintf(stderr, "FAIL path recording without a launch: needed %zu, text \"%s\"\n", needed, text);
    }

    /* batch-invariant mode: needs no ts_init, round-trips, refuses anything but 0 and 1 */
    expect("batch_invariant on 2", ts_set_batch_invariant(2), TS_ERR_INVALID_ARGUMENT, "ts_set_batch_invariant", "on", "2");
    expect("batch_invariant null", ts_batch_invariant(NULL), TS_ERR_INVALID_ARGUMENT, "ts_batch_invariant", "on", NULL);
    checks++;
    int bi_on = -1, bi_off = -1;
    if (ts_set_batch_invariant(1) != TS_OK || ts_batch_invariant(&bi_on) != TS_OK || bi_on != 1 ||
        ts_set_batch_invariant(0) != TS_OK || ts_batch_invariant(&bi_off) != TS_OK || bi_off != 0) {
        failures++;
        fprintf(stderr, "FAIL batch-invariant mode round trip: on %d, off %d (%s)\n", bi_on, bi_off, ts_last_error());
    }

    /* the decode gemv's row limit: needs no ts_init, round-trips, refuses what its launches lack */
    expect("gemv_rows -1", ts_set_gemv_rows(-1), TS_ERR_INVALID_ARGUMENT, "ts_set_gemv_rows", "max_rows", "-1");
    expect("gemv_rows 5", ts_set_gemv_rows(5), TS_ERR_INVALID_ARGUMENT, "ts_set_gemv_rows", "max_rows", "5");
    expect("gemv_rows null", ts_gemv_rows(NULL), TS_ERR_INVALID_ARGUMENT, "ts_gemv_rows", "max_rows", NULL);
    checks++;
    int gr_default = -1, gr_two = -1, gr_back = -1;
    if (ts_gemv_rows(&gr_default) != TS_OK || ts_set_gemv_rows(2) != TS_OK || ts_gemv_rows(&gr_two) != TS_OK ||
        gr_two != 2 || ts_set_gemv_rows(gr_default) != TS_OK || ts_gemv_rows(&gr_back) != TS_OK ||
        gr_back != gr_default) {
        failures++;
        fprintf(stderr, "FAIL gemv row limit round trip: default %d, set 2 read %d, restored %d (%s)\n", gr_default,
                gr_two, gr_back, ts_last_error());
    }

    /* The deadline of the waits (deadline.cu): positive, at most a day; needs no ts_init. */
    expect("deadline zero", ts_set_deadline(0.0), TS_ERR_INVALID_ARGUMENT, "ts_set_deadline", "seconds", "0");
    expect("deadline negative", ts_set_deadline(-1.0), TS_ERR_INVALID_ARGUMENT, "ts_set_deadline", "seconds", "-1");
    expect("deadline NaN", ts_set_deadline(NAN), TS_ERR_INVALID_ARGUMENT, "ts_set_deadline", "seconds", "nan");
    expect("deadline past a day", ts_set_deadline(1e6), TS_ERR_INVALID_ARGUMENT, "ts_set_deadline", "seconds", "1e+06");
    expect("deadline NULL out", ts_deadline(NULL), TS_ERR_INVALID_ARGUMENT, "ts_deadline", "seconds", "NULL");
    double dl = 0;
    checks++;
    if (ts_deadline(&dl) != TS_OK || dl != TS_DEFAULT_DEADLINE_S || ts_set_deadline(2.5) != TS_OK ||
        ts_deadline(&dl) != TS_OK || dl != 2.5 || ts_set_deadline(TS_DEFAULT_DEADLINE_S) != TS_OK) {
        failures++;
        fprintf(stderr, "FAIL deadline round trip: %g (%s)\n", dl, ts_last_error());
    }
    checks++;
    if (strcmp(ts_status_name(TS_ERR_TIMEOUT), "TS_ERR_TIMEOUT") != 0) {
        failures++;
        fprintf(stderr, "FAIL status name of TS_ERR_TIMEOUT: %s\n", ts_status_name(TS_ERR_TIMEOUT));
    }

    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
