"""The kernel case table: every case of every op (Case: op, name, tier, kwargs of the op's
reference in ops.py), committed and full tier, fp16 and bf16 (named bf16-...). A new case is a
row here; build(case) runs one."""

import math
import re
from collections import namedtuple

import torch

from common.dtypes import F64
from common.seeds import Draw, case_seed
from kernels.inputs import (all_but_one, block_magnitudes, causal_mask, constant_rows,
                            e4m3_boundaries, gelu_inputs, log_magnitude, normal, odd_rows_scaled,
                            outlier_channels, random_mask, row_offsets, row_scales, table_rows,
                            uniform, with_large, with_spans, with_zeros)
from kernels.ops import OPS

# ---------------------------------------------------------------------------------------------
# Case table
#
# Model dimensions: Qwen2.5-0.5B hidden 896, 14 q / 2 kv heads, head_dim 64, ffn 4864,
# rope_theta 1e6, rms eps 1e-6. Phi-3-mini hidden 3072, 32 / 32 heads, head_dim 96, ffn 8192,
# rope_theta 1e4, rms eps 1e-5. GPT-2 hidden 768, 12 heads, head_dim 64, ffn 3072, 1024
# positions, LayerNorm eps 1e-5.
#
# Committed cases must stay small (golden/kernels within COMMITTED_BUDGET of __main__.py), so
# weight-, table- and cache-heavy ops use cut-down sizes here and their real model sizes in the
# full tier.

Case = namedtuple("Case", "op name tier kwargs")
COMMITTED, FULL = "committed", "full"

QWEN = dict(nH=14, nKV=2, D=64)
PHI3 = dict(nH=32, nKV=32, D=96)
GPT2 = dict(nH=12, nKV=12, D=64)


def _cases(tier, op, rows):
    return [Case(op, name, tier, kw) for name, kw in rows]


CASES = []

CASES += _cases(COMMITTED, "residual_add", [
    ("qwen2.5-0.5b_t4", dict(shape=(4, 896), inplace=False)),
    ("phi3-mini_t2_inplace", dict(shape=(2, 3072), inplace=True)),
    ("gpt2_t1", dict(shape=(1, 768), inplace=False)),
    ("odd-h1001_t3_inplace", dict(shape=(3, 1001), inplace=True)),
    ("batch2x5-h896", dict(shape=(2, 5, 896), inplace=False)),
    # |x|, |residual| <= 3e4 so every sum stays inside fp16 range (65504).
    ("large-mag", dict(shape=(4, 896), inplace=True, dist=uniform(-3e4, 3e4))),
])

CASES += _cases(COMMITTED, "rmsnorm", [
    ("qwen2.5-0.5b_t4", dict(T=4, H=896, eps=1e-6)),
    ("phi3-mini_t2", dict(T=2, H=3072, eps=1e-5)),
    ("qwen2.5-0.5b_t1", dict(T=1, H=896, eps=1e-6)),
    # mean(x^2) ~ 1e-6: eps is as large as (or larger than) the signal, so a wrong eps is wrong.
    ("small-rms_eps1e-6", dict(T=4, H=896, eps=1e-6, dist=normal(1e-3))),
    ("small-rms_eps1e-5", dict(T=2, H=3072, eps=1e-5, dist=normal(1e-3))),
    ("odd-h1001_t3", dict(T=3, H=1001, eps=1e-6)),
    ("long-h8192_t2", dict(T=2, H=8192, eps=1e-5)),
    # |x| in [1e3, 1e4]: x^2 overflows fp16, so fp16 accumulation gives inf/0.
    ("large-mag", dict(T=4, H=896, eps=1e-6, dist=log_magnitude(1e3, 1e4))),
])

CASES += _cases(COMMITTED, "layernorm", [
    ("gpt2_t4", dict(T=4, H=768, eps=1e-5)),
    ("gpt2_t1", dict(T=1, H=768, eps=1e-5)),
    ("odd-h1001_t3", dict(T=3, H=1001, eps=1e-5)),
    ("long-h8192_t2", dict(T=2, H=8192, eps=1e-5)),
    # mean 300, variance 1: a one-pass E[x^2] - E[x]^2 in fp32 cancels away most of the variance.
    ("mean-offset300", dict(T=4, H=768, eps=1e-5, dist=normal(1.0, mean=300.0))),
])

CASES += _cases(COMMITTED, "layernorm_residual", [
    ("gpt2_t4", dict(T=4, H=768, eps=1e-5)),
    ("gpt2_t1", dict(T=1, H=768, eps=1e-5)),
    ("gpt2_t16", dict(T=16, H=768, eps=1e-5)),
    ("odd-h1001_t3", dict(T=3, H=1001, eps=1e-5)),
    ("long-h8192_t2", dict(T=2, H=8192, eps=1e-5)),
])

# The pre-norm step of the RMSNorm families: decode (one row) and prefill rows at their hidden
# sizes, in place (sum written over residual, as a decode step updates its residual stream) and
# not. Hidden 896, 3072 and 8192 take the CUDA row kernel with 1, 2 and 4 vectors per thread.
CASES += _cases(COMMITTED, "rmsnorm_residual", [
    ("qwen2.5-0.5b_t1_inplace", dict(T=1, H=896, eps=1e-6, inplace=True)),
    ("qwen2.5-0.5b_t4", dict(T=4, H=896, eps=1e-6, inplace=False)),
    ("phi3-mini_t1", dict(T=1, H=3072, eps=1e-5, inplace=False)),
    ("phi3-mini_t2_inplace", dict(T=2, H=3072, eps=1e-5, inplace=True)),
    # Odd hidden: the scalar path, which re-reads the stored sum (here written over residual).
    ("odd-h1001_t3_inplace", dict(T=3, H=1001, eps=1e-6, inplace=True)),
    ("long-h8192_t1", dict(T=1, H=8192, eps=1e-5, inplace=False)),
    # mean(sum^2) ~ 2e-6: eps is as large as the signal, so a wrong or ignored eps is wrong.
    ("small-rms_eps1e-6", dict(T=4, H=896, eps=1e-6, inplace=False, dist=normal(1e-3))),
    ("small-rms_eps1e-5", dict(T=1, H=3072, eps=1e-5, inplace=False, dist=normal(1e-3))),
    # |sum| mostly >= 256: sum^2 overflows fp16, so fp16 accumulation gives inf/0.
    ("large-mag", dict(T=2, H=896, eps=1e-6, inplace=False, dist=log_magnitude(1e3, 1e4))),
])

CASES += _cases(COMMITTED, "rope", [
    ("qwen2.5-0.5b_t7", dict(QWEN, base=1e6, positions=list(range(7)))),
    ("phi3-mini_t5", dict(PHI3, base=1e4, positions=list(range(5)))),
    ("qwen2.5-0.5b_decode-pos4095", dict(QWEN, base=1e6, positions=[4095])),
    ("partial-r32-d64_t3", dict(nH=8, nKV=2, D=64, rope_dim=32, base=1e4,
                                positions=[10, 11, 12])),
    ("batch2-seq4", dict(QWEN, base=1e6, positions=[0, 1, 2, 3, 0, 1, 2, 3])),
    # theta up to 3e4 rad: catches fp32 angle arithmetic that loses the phase.
    ("long-pos30000_t4", dict(QWEN, base=1e6, positions=[30000, 30001, 30002, 30003])),
])

# The whole context a served model reaches: an fp32 angle pos * inv_freq is off by up to
# pos * 2^-24 rad (8e-3 at 2^17), which these cases see at every freq_base a model family uses.
# Qwen2.5-7B (28 / 4 heads of 128, base 1e6, 32768 positions), Llama-3.1-8B (32 / 8 of 128, base
# 5e5, 131072 positions), Phi-3 (base 1e4), partial rotary (64 of 128) and a ragged batch whose
# tokens sit at positions from 0 to 2^17 - 1.
QWEN7B = dict(nH=28, nKV=4, D=128)
LLAMA3 = dict(nH=32, nKV=8, D=128)
NEAR_2_15 = [32760, 32761, 32762, 32763, 32764, 32765, 32766, 32767]
NEAR_2_17 = [131064, 131065, 131066, 131067, 131068, 131069, 131070, 131071]
CASES += _cases(COMMITTED, "rope", [
    ("qwen2.5-7b_base1e6_pos32760-32767", dict(QWEN7B, base=1e6, positions=NEAR_2_15)),
    ("llama3.1-8b_base5e5_pos131064-131071", dict(LLAMA3, base=5e5, positions=NEAR_2_17)),
    ("phi3-mini_base1e4_pos131068-131071", dict(PHI3, base=1e4, positions=NEAR_2_17[4:])),
    ("partial-r64-d128_base1e4_pos131068-131071", dict(nH=16, nKV=4, D=128, rope_dim=64, base=1e4,
                                                   positions=NEAR_2_17[4:])),
    ("ragged-pos0-to-131071_base5e5_t8", dict(nH=8, nKV=2, D=128, base=5e5,
                                            positions=[0, 131071, 17, 32768, 4097, 65535, 1,
                                                       100000])),
    # rope_dim/2 = 12 is no multiple of 8: the scalar path (one pair per item), head_dim 80.
    ("scalar-r24-d80_base1e4_pos131069-131071", dict(nH=4, nKV=2, D=80, rope_dim=24, base=1e4,
                                                 positions=NEAR_2_17[5:])),
    # q/k with outlier channels (|x| ~ 20 in 2 dims of each head): errors scale with the pair.
    ("outliers-d128_base1e6_pos32764-32767", dict(nH=8, nKV=2, D=128, base=1e6,
                                                positions=NEAR_2_15[4:],
                                                dist=outlier_channels((5, 70), 20.0))),
    # head_dim 256 (Gemma): 128 pairs per head.
    ("d256_base1e4_pos32766-32767", dict(nH=8, nKV=1, D=256, base=1e4, positions=NEAR_2_15[6:])),
])

# Scaled RoPE (the published configs of common/configs.py's PUBLISHED_ROPE, checked against
# transformers when built): the freq_divisor / long_divisor tables and the attention factor as op inputs and
# params. Llama 3.1 / 3.2 (llama3: three frequency bands), Qwen2.5-7B with Qwen's YaRN recipe
# (factor 4 over 32768, attention factor 0.1 ln 4 + 1, to position 131071), Phi-3.5-mini's
# LongRoPE (48 short and 48 long factors, attention factor sqrt(1 + ln 32 / ln 4096)): a ragged
# batch with tokens on both sides of long_from 4096 (what decode steps past the original context
# see) and a prefill with long_from 0 (what the engine passes for a prompt longer than 4096: every
# token takes the long factors, as transformers does). Head counts cut where the case is about
# the tables, not the layout (8 of Phi-3.5's 32 MHA heads).
PHI35_8H = dict(nH=8, nKV=8, D=96)
CASES += _cases(COMMITTED, "rope", [
    ("llama3.1-8b-llama3_pos131064-131071", dict(LLAMA3, scaling="llama3.1-8b",
                                                positions=NEAR_2_17)),
    ("llama3.2-1b-llama3_ragged-pos0-to-131071", dict(nH=8, nKV=2, D=64, scaling="llama3.2-1b",
                                                     positions=[0, 131071, 8191, 2048, 65536,
                                                                1, 8192, 100000])),
    ("qwen2.5-7b-yarn4_pos131064-131071", dict(QWEN7B, scaling="qwen2.5-7b-yarn",
                                              positions=NEAR_2_17)),
    ("phi3.5-mini-longrope_switch-ragged", dict(PHI35_8H, scaling="phi3.5-mini", long_from=4096,
                                               positions=[0, 4095, 4096, 4097, 2048, 131071, 17,
                                                          65536])),
    ("phi3.5-mini-longrope_prefill-all-long_t8", dict(PHI35_8H, scaling="phi3.5-mini",
                                                     long_from=0, positions=list(range(8)))),
    # outlier channels (|x| ~ 20 in 2 dims of each head) on the YaRN table: the attention factor
    # scales them too.
    ("outliers-qwen2.5-7b-yarn4-d128_pos131068-131071",
     dict(nH=8, nKV=2, D=128, scaling="qwen2.5-7b-yarn", positions=NEAR_2_17[4:],
          dist=outlier_channels((5, 70), 20.0))),
])

CASES += _cases(COMMITTED, "attention_prefill", [
    ("qwen2.5-0.5b_s16", dict(QWEN, B=1, S=16)),
    ("qwen2.5-0.5b_s48", dict(QWEN, B=1, S=48)),
    ("qwen2.5-0.5b_s1", dict(QWEN, B=1, S=1)),
    ("phi3-mini_s8", dict(PHI3, B=1, S=8)),
    ("gpt2_b2_s16", dict(GPT2, B=2, S=16)),
    # q, k ~ N(0, 4^2): scores reach ~50, so exp without max-subtraction overflows fp16 (e^11).
    ("large-mag_s16", dict(QWEN, B=1, S=16, qk=normal(4.0))),
])

CASES += _cases(COMMITTED, "attention_decode", [
    ("qwen2.5-0.5b_b3_lens1-77-300", dict(QWEN, L=320, cache_lens=[1, 77, 300])),
    ("gpt2_len72_l80", dict(GPT2, L=80, cache_lens=[72])),
    ("phi3-mini_len20_l24", dict(PHI3, L=24, cache_lens=[20])),
    ("qwen2.5-0.5b_len1", dict(QWEN, L=8, cache_lens=[1])),
])

CASES += _cases(COMMITTED, "swiglu", [
    ("qwen2.5-0.5b_t4", dict(T=4, ffn=4864)),
    ("qwen2.5-0.5b_t1", dict(T=1, ffn=4864)),
    ("phi3-mini_t2", dict(T=2, ffn=8192)),
    ("odd-h1001_t3", dict(T=3, ffn=1001)),
    # silu(-30) ~ -3e-12: exp(30) overflows fp16 in a naive 1/(1+exp(-x)).
    ("large-gate30", dict(T=2, ffn=4864, gate=uniform(-30.0, 30.0))),
])

CASES += _cases(COMMITTED, "swiglu_ffn", [
    ("h896-f96_t4", dict(T=4, H=896, ffn=96)),
    ("h896-f48_t1", dict(T=1, H=896, ffn=48)),
    ("odd-h129-f300_t3", dict(T=3, H=129, ffn=300)),
    ("h256-f144_t33", dict(T=33, H=256, ffn=144)),
])

for _op in ("gelu", "gelu_tanh"):
    CASES += _cases(COMMITTED, _op, [
        ("gpt2-ffn_t4", dict(T=4, H=3072)),
        ("gpt2-ffn_t1", dict(T=1, H=3072)),
        ("odd-h1001_t3", dict(T=3, H=1001)),
        ("long-h8192_t2", dict(T=2, H=8192)),
        ("large-mag", dict(T=2, H=3072, dist=with_zeros(normal(8.0), 0.05))),
    ])

CASES += _cases(COMMITTED, "pos_embedding", [
    ("gpt2-p16_t8", dict(H=768, P=16, positions=list(range(8)))),
    ("gpt2-p32_last-pos_t1", dict(H=768, P=32, positions=[31])),
    ("gpt2-p8_2seq-t5", dict(H=768, P=8, positions=[0, 1, 2, 3, 4, 0, 1, 2, 3, 4])),
    ("odd-h1001-p64_t3", dict(H=1001, P=64, positions=[17, 18, 19])),
])

CASES += _cases(COMMITTED, "embedding", [
    ("qwen2.5-0.5b-v64_t6", dict(V=64, H=896, T=6)),
    ("gpt2-v80_t5", dict(V=80, H=768, T=5)),
    ("phi3-mini-v16_t4", dict(V=16, H=3072, T=4)),
    ("odd-h1001-v50_t3", dict(V=50, H=1001, T=3)),
    ("qwen2.5-0.5b-v32_t1", dict(V=32, H=896, T=1)),
])

# KV-cache rows: [n_kv_heads, head_dim] of each family.
QWEN_KV, PHI3_KV, GPT2_KV = (2, 64), (32, 96), (12, 64)

CASES += _cases(COMMITTED, "set_rows", [
    ("qwen2.5-0.5b_l64_prefill-t16", dict(R=64, row=QWEN_KV, rows=list(range(16)))),
    ("qwen2.5-0.5b_l64_decode-row37", dict(R=64, row=QWEN_KV, rows=[37])),
    ("qwen2.5-0.5b_l48_scattered-t5", dict(R=48, row=QWEN_KV, rows=[40, 3, 17, 47, 0])),
    ("phi3-mini_l16_decode-last-row15", dict(R=16, row=PHI3_KV, rows=[15])),
    ("gpt2_l16_prefill-t8", dict(R=16, row=GPT2_KV, rows=list(range(8)))),
    ("qwen2.5-0.5b_l32_scattered-t3_f32", dict(R=32, row=QWEN_KV, rows=[31, 0, 9], dtype="f32")),
    # Row lengths that rule out 16-byte copies: 2002 bytes (2-byte units), 300 bytes (4-byte).
    ("odd-h1001_l8_t2", dict(R=8, row=(1001,), rows=[6, 1])),
    ("odd-3x50_l16_t3", dict(R=16, row=(3, 50), rows=[15, 4, 9])),
])

CASES += _cases(COMMITTED, "gemm", [
    ("qwen2.5-0.5b-q_proj_m7", dict(M=7, N=896, K=896, has_bias=True, out_dtype="f16")),
    ("qwen2.5-0.5b-k_proj_m16", dict(M=16, N=128, K=896, has_bias=True, out_dtype="f16")),
    ("gpt2-k768-n128_m5", dict(M=5, N=128, K=768, has_bias=False, out_dtype="f16")),
    ("odd-m3-n257-k1001", dict(M=3, N=257, K=1001, has_bias=True, out_dtype="f16")),
    ("decode-m1-n128-k896", dict(M=1, N=128, K=896, has_bias=False, out_dtype="f16")),
    ("decode-m2-n96-k896_bias", dict(M=2, N=96, K=896, has_bias=True, out_dtype="f16")),
    ("decode-m3-n64-k768", dict(M=3, N=64, K=768, has_bias=False, out_dtype="f16")),
    ("logits-m2-n4096-k48_f32", dict(M=2, N=4096, K=48, has_bias=False, out_dtype="f32")),
    ("large-mag-x100", dict(M=4, N=128, K=256, has_bias=True, out_dtype="f32",
                            dist=uniform(-100.0, 100.0))),
])

CASES += _cases(COMMITTED, "softmax", [
    ("gpt2-vocab-f32_t1", dict(T=1, N=50257, dtype="f32", dist=normal(3.0),
                               mask=random_mask(0.01))),
    ("long-f32_t2", dict(T=2, N=8192, dtype="f32", mask=random_mask(0.1))),
    ("attn-causal-f16_t8", dict(T=8, N=128, dtype="f16", mask=causal_mask(120))),
    # rows around +1e4, -1e4, spread over +-1e4, and 9000: exp overflows / underflows to 0/0
    # in any precision without max-subtraction.
    ("large-mag-f32_t4", dict(T=4, N=1024, dtype="f32",
                              dist=row_offsets([1e4, -1e4, None, 9e3], 3.0),
                              mask=random_mask(0.05))),
    ("odd-f16_t3", dict(T=3, N=1001, dtype="f16", mask=random_mask(0.02))),
    ("qwen2.5-0.5b-f16_t1", dict(T=1, N=896, dtype="f16")),
    ("qwen2.5-vocab-f32_t1", dict(T=1, N=151936, dtype="f32", dist=normal(3.0))),
])

# Operating range: head layouts of other served models (head_dim 80, 128, 256; GQA 4:1 and 6:1;
# MQA), non-causal prefill, scales other than 1/sqrt(head_dim), ragged cache lengths 1 and just
# past a power of two, odd prime sizes, outlier channels and large-rms rows (where an error that
# grows with the data must not be judged by a fixed absolute limit), constant rows for every
# norm, softmax rows that are -inf but for one entry.
GQA4_D128 = dict(nH=8, nKV=2, D=128)     # Llama-3-8B's 4:1 grouping and head_dim, 8 of its 32 heads
QWEN_1_5B = dict(nH=12, nKV=2, D=128)    # GQA 6:1
FALCON_MQA = dict(nH=71, nKV=1, D=64)    # MQA: 71 query heads on one KV head
GEMMA_MQA = dict(nH=8, nKV=1, D=256)     # Gemma-2B: head_dim 256, MQA
PHI2 = dict(nH=8, nKV=8, D=80)           # Phi-2's head_dim 80 (MHA), 8 of its 32 heads
OUTLIERS = outlier_channels((3, 100, 517), 20.0)  # three channels of |x| ~ 20, as in real LLMs
# Attention logit growth (models without QK-norm; ViT-22B reports logits in the tens of
# thousands): q and k share three outlier channels of |x| ~ 60, so scaled scores reach +-950,
# past where exp overflows or underflows even in fp64 (|s| > 709) unless the row max is
# subtracted. The outlier products spread the scores by tens, so each row's softmax is peaked
# and the output does not hinge on the last bits of a score.
LOGIT_GROWTH = outlier_channels((5, 40, 77), 60.0)

CASES += _cases(COMMITTED, "attention_prefill", [
    ("llama3-8b-gqa4_d128_s24", dict(GQA4_D128, B=1, S=24)),
    ("qwen2.5-1.5b-gqa6_d128_s20", dict(QWEN_1_5B, B=1, S=20)),
    ("falcon-mqa71_d64_s9", dict(FALCON_MQA, B=1, S=9)),
    ("gemma-mqa_d256_s17", dict(GEMMA_MQA, B=1, S=17)),
    ("phi2_d80_b2_s12", dict(PHI2, B=2, S=12)),
    ("noncausal_qwen2.5-0.5b_s24", dict(QWEN, B=1, S=24, causal=False)),
    ("noncausal_d128-gqa4_b2_s9", dict(nH=8, nKV=2, D=128, B=2, S=9, causal=False)),
    # Gemma-2 scales by query_pre_attn_scalar^-0.5 = 1/sqrt(224) with head_dim 256; 1.0 (no
    # scaling) with small q, k; 0.05 with head_dim 64.
    ("scale-1over-sqrt224_d256_s8", dict(GEMMA_MQA, B=1, S=8, scale=224 ** -0.5)),
    ("scale1.0_d64_s12", dict(QWEN, B=1, S=12, scale=1.0, qk=normal(0.2))),
    ("scale0.05_d64_noncausal_s10", dict(QWEN, B=1, S=10, scale=0.05, causal=False)),
    # v rows with a few outlier channels (|v| ~ 20): the output's scale follows them.
    ("outlier-v_d128_s16", dict(nH=8, nKV=2, D=128, B=1, S=16, vdist=outlier_channels((7, 90), 20.0))),
    ("logit-growth-scores950_d128_s16", dict(nH=8, nKV=2, D=128, B=1, S=16, qk=LOGIT_GROWTH)),
])

CASES += _cases(COMMITTED, "attention_decode", [
    ("llama3-8b-gqa4_d128_lens1-130-257", dict(GQA4_D128, L=260, cache_lens=[1, 130, 257])),
    ("qwen2.5-1.5b-gqa6_d128_lens64-129", dict(QWEN_1_5B, L=136, cache_lens=[64, 129])),
    # Lengths 1 and 4097 (one past 2^12) in one ragged batch, MQA.
    ("falcon-mqa71_d64_lens1-4097", dict(FALCON_MQA, L=4104, cache_lens=[1, 4097])),
    ("gemma-mqa_d256_lens33", dict(GEMMA_MQA, L=40, cache_lens=[33])),
    ("phi2_d80_lens1-50", dict(PHI2, L=56, cache_lens=[1, 50])),
    ("scale-1over-sqrt224_d256_len20", dict(GEMMA_MQA, L=24, cache_lens=[20], scale=224 ** -0.5)),
    ("scale0.05_d64_lens7-40", dict(QWEN, L=40, cache_lens=[7, 40], scale=0.05)),
    ("outlier-v_d128_len96", dict(nH=8, nKV=2, D=128, L=96, cache_lens=[96],
                                  vdist=outlier_channels((7, 90), 20.0))),
    ("logit-growth-scores950_d128_lens1-70", dict(nH=8, nKV=2, D=128, L=72, cache_lens=[1, 70],
                                                  qk=LOGIT_GROWTH)),
    # The decode kernels' second path (head_dim not a multiple of 32: Phi-2's 80) at its longest
    # context (2047 keys before the new token): each thread sums ~170 keys, where an accumulator
    # of reduced precision shows.
    ("phi2-d80-mqa4_len2047", dict(nH=4, nKV=1, D=80, L=2048, cache_lens=[2047])),
])

CASES += _cases(COMMITTED, "gemm", [
    # x rows with three outlier channels of |x| ~ 20: the outputs' rms doubles.
    ("outliers-x20_m8-n128-k896", dict(M=8, N=128, K=896, has_bias=True, out_dtype="f16",
                                       dist=OUTLIERS)),
    # rows of rms from 0.01 to 30 in one matrix: each row is judged at its own scale.
    ("row-scales-0.01-30_m12-n128-k768", dict(M=12, N=128, K=768, has_bias=False, out_dtype="f16",
                                             dist=row_scales(0.01, 30.0))),
    ("prime-m5-n127-k997", dict(M=5, N=127, K=997, has_bias=True, out_dtype="f16")),
    ("outliers-x20_m4-n128-k896_f32", dict(M=4, N=128, K=896, has_bias=False, out_dtype="f32",
                                           dist=OUTLIERS)),
])

CASES += _cases(COMMITTED, "swiglu_ffn", [
    ("outliers-x20_h896-f48_t4", dict(T=4, H=896, ffn=48, dist=OUTLIERS)),
    ("row-scales-0.05-20_h896-f32_t6", dict(T=6, H=896, ffn=32, dist=row_scales(0.05, 20.0))),
    ("prime-h521-f61_t3", dict(T=3, H=521, ffn=61)),
])

_NORM_ROWS = constant_rows({1: 0.75, 3: -2.0})
CASES += _cases(COMMITTED, "rmsnorm", [
    ("outliers-x20_h896_t4", dict(T=4, H=896, eps=1e-6, dist=OUTLIERS)),
    ("constant-rows_h896_t4", dict(T=4, H=896, eps=1e-6, dist=_NORM_ROWS)),
    ("prime-h1009_t3", dict(T=3, H=1009, eps=1e-5)),
])
CASES += _cases(COMMITTED, "layernorm", [
    ("outliers-x20_h768_t4", dict(T=4, H=768, eps=1e-5, dist=outlier_channels((3, 100, 517), 20.0))),
    ("constant-rows_h768_t4", dict(T=4, H=768, eps=1e-5, dist=_NORM_ROWS)),
    ("prime-h1009_t3", dict(T=3, H=1009, eps=1e-5)),
])
CASES += _cases(COMMITTED, "rmsnorm_residual", [
    ("outliers-x20_h896_t4", dict(T=4, H=896, eps=1e-6, inplace=False, dist=OUTLIERS)),
    ("constant-rows_h896_t4", dict(T=4, H=896, eps=1e-6, inplace=True,
                                   dist=constant_rows({1: 0.375, 3: -1.0}))),
    ("prime-h1009_t3", dict(T=3, H=1009, eps=1e-5, inplace=False)),
])
CASES += _cases(COMMITTED, "layernorm_residual", [
    ("outliers-x20_h768_t4", dict(T=4, H=768, eps=1e-5, dist=outlier_channels((3, 100, 517), 20.0))),
    ("constant-rows_h768_t4", dict(T=4, H=768, eps=1e-5, dist=constant_rows({1: 0.375, 3: -1.0}))),
    ("prime-h1009_t3", dict(T=3, H=1009, eps=1e-5)),
])
CASES += _cases(COMMITTED, "softmax", [
    ("all-inf-but-one-f32_t4", dict(T=4, N=1000, dtype="f32", mask=all_but_one([0, 2, 3]))),
    ("all-inf-but-one-f16_t3", dict(T=3, N=4099, dtype="f16", mask=all_but_one([0, 1, 2]))),
    ("prime-f32_t3", dict(T=3, N=1009, dtype="f32", mask=random_mask(0.05))),
])
CASES += _cases(COMMITTED, "residual_add", [
    ("prime-h1009_t3", dict(shape=(3, 1009), inplace=False)),
])
CASES += _cases(COMMITTED, "swiglu", [
    ("prime-ffn1009_t3", dict(T=3, ffn=1009)),
])
for _op in ("gelu", "gelu_tanh"):
    CASES += _cases(COMMITTED, _op, [
        ("prime-h1009_t3", dict(T=3, H=1009)),
        # in place (out == x): GPT-2's activation at decode and an odd tail
        ("gpt2-ffn_t1_inplace", dict(T=1, H=3072, inplace=True)),
        ("odd-h1001_t2_inplace", dict(T=2, H=1001, inplace=True)),
    ])

# Dispatch paths (engine/backend/cuda: KernelPaths): every kernel instance the CUDA library can
# choose gets a committed case. Norm rows held in registers, 2 and 8 vectors per thread: hidden
# 2560 (Phi-2's LayerNorm width) and 16384 (Llama-3.1-405B's).
CASES += _cases(COMMITTED, "rmsnorm", [("llama3.1-405b-h16384_t1", dict(T=1, H=16384, eps=1e-5))])
CASES += _cases(COMMITTED, "rmsnorm_residual", [
    ("llama3.1-405b-h16384_t1", dict(T=1, H=16384, eps=1e-5, inplace=False)),
])
CASES += _cases(COMMITTED, "layernorm", [
    ("phi2-h2560_t2", dict(T=2, H=2560, eps=1e-5)),
    ("h16384_t1", dict(T=1, H=16384, eps=1e-5)),
])
CASES += _cases(COMMITTED, "layernorm_residual", [
    ("phi2-h2560_t2", dict(T=2, H=2560, eps=1e-5)),
    ("h16384_t1", dict(T=1, H=16384, eps=1e-5)),
])
# An even width that is not a multiple of 8: rows copied in 4-byte units.
CASES += _cases(COMMITTED, "embedding", [("even-h1002-v50_t3", dict(V=50, H=1002, T=3))])
# Prefill head_dim 32, 160 and 192 (the kernel's other padded widths).
CASES += _cases(COMMITTED, "attention_prefill", [
    ("d32-gqa2_s7", dict(nH=4, nKV=2, D=32, B=1, S=7)),
    ("d160_s5", dict(nH=2, nKV=2, D=160, B=1, S=5)),
    ("d192-gqa2_s6", dict(nH=4, nKV=2, D=192, B=1, S=6)),
])
# Prefill across several tiles (64 query rows a block; 64 keys a tile up to head_dim 128, 32
# above): the online softmax's rescaling between key tiles, causal diagonals inside the later
# tiles, partial last tiles of queries and keys, and GQA groups read by several query tiles.
CASES += _cases(COMMITTED, "attention_prefill", [
    ("gqa2_d64_s130", dict(nH=2, nKV=1, D=64, B=1, S=130)),
    ("d128-gqa2_s100", dict(nH=2, nKV=1, D=128, B=1, S=100)),
    ("d256_s70", dict(nH=1, nKV=1, D=256, B=1, S=70)),
    ("noncausal_d96_s130", dict(nH=1, nKV=1, D=96, B=1, S=130, causal=False)),
    # Non-causal prefill takes the two-m-tile kernel at every head_dim up to 128 (pick_two_mtiles).
    ("noncausal_d32-gqa2_s6", dict(nH=2, nKV=1, D=32, B=1, S=6, causal=False)),
    ("noncausal_d80_s7", dict(nH=2, nKV=2, D=80, B=1, S=7, causal=False)),
])
# Decode: the tensor-core kernel's 16-wide head groups (Llama-3.1-405B's 128 query heads on 8
# KV heads is 16:1) at head_dim 32, 96 and 128, and head_dim 32 with 8; the second kernel with
# 2 heads per KV head and a cache long enough to split (its combine kernel).
CASES += _cases(COMMITTED, "attention_decode", [
    ("d32-gqa8_lens3-9", dict(nH=8, nKV=1, D=32, L=12, cache_lens=[3, 9])),
    ("d32-gqa16_len20", dict(nH=16, nKV=1, D=32, L=20, cache_lens=[20])),
    ("d96-gqa16_len17", dict(nH=16, nKV=1, D=96, L=24, cache_lens=[17])),
    ("llama3.1-405b-gqa16_d128_len33", dict(nH=16, nKV=1, D=128, L=40, cache_lens=[33])),
    # Two key splits of the tensor-core kernel at head_dim 128 (a split that only fills the GPU
    # has at least 4 steps of every warp, 256 keys here), so its cross-split merge runs.
    ("gqa4_d128_len515_l520", dict(nH=4, nKV=1, D=128, L=520, cache_lens=[515])),
    ("d80-gqa2_lens1-130", dict(nH=4, nKV=2, D=80, L=136, cache_lens=[1, 130])),
])

# attention_decode_paged (vLLM's paged KV cache: one pool of pages, a block table a sequence,
# the pages handed out in a shuffled order with spare poison pages left over): every block size
# from 1 to 256; lengths of 1, on a page boundary, one past one, mid-page and filling the whole
# table (max_blocks * block_size); -1 entries after each sequence's last page; GQA 7:1 (Qwen2.5's
# 14:2), 4:1 (Llama's 32:8) and MHA at head_dim 64 and 128, 16:1 at 32, head_dim 80; caches both
# decode kernels split; a shared prefix. Small caches: every spare page and every poisoned tail
# is committed data too.
CASES += _cases(COMMITTED, "attention_decode_paged", [
    # the default block size at Qwen2.5-0.5B's heads: lengths 1, two full pages, 13 into a third
    ("qwen2.5-0.5b_bs16_lens1-32-45", dict(QWEN, block_size=16, cache_lens=[1, 32, 45])),
    # a table a column wider than the longest sequence: a row stride taken from the lengths, not
    # the table's width, reads the next row's pages
    ("llama3-8b-gqa4_d128_bs8_lens24-13_mb4", dict(GQA4_D128, block_size=8, cache_lens=[24, 13],
                                                   max_blocks=4)),
    # one position a page, MHA: every position through its own table entry
    ("gpt2-mha_d64_bs1_lens7-3", dict(GPT2, block_size=1, cache_lens=[7, 3])),
    # a length that fills the table (2 pages of 32) beside one a position past a page
    ("gqa4_d64_bs32_lens64-33", dict(nH=4, nKV=1, D=64, block_size=32, cache_lens=[64, 33])),
    ("gqa7_d64_bs64_lens65-3", dict(nH=7, nKV=1, D=64, block_size=64, cache_lens=[65, 3])),
    # the largest block size, one page filled (and one spare: a page is 32 KB a cache)
    ("gqa4_d64_bs256_len256", dict(nH=4, nKV=1, D=64, block_size=256, cache_lens=[256],
                                   spare=1)),
    # attention_decode's gqa4_d128_len515_l520 through 33 pages: the tensor-core kernel splits
    # the keys in two (its cross-split merge)
    ("gqa4_d128_bs16_len515", dict(nH=4, nKV=1, D=128, block_size=16, cache_lens=[515])),
    # the second decode kernel (head_dim 80) with a cache long enough to split (its combine)
    ("phi2-d80-gqa2_bs16_lens70-1", dict(nH=2, nKV=1, D=80, block_size=16, cache_lens=[70, 1])),
    # the tensor-core kernel's 16-wide head groups (16 query heads a KV head) at head_dim 32
    ("d32-gqa16_bs16_lens20-9", dict(nH=16, nKV=1, D=32, block_size=16, cache_lens=[20, 9])),
    # prefix caching: sequences 0 and 2 hold the same two physical pages as their first 32
    # positions, then pages of their own
    ("qwen2.5-0.5b_bs16_lens40-9-37_shared2", dict(QWEN, block_size=16, cache_lens=[40, 9, 37],
                                                   shared=(0, 2, 2))),
])
# The paged kernels' other instances (engine/backend/cuda/pathtable.go), each once in fp16 and
# once in bf16 with the smallest caches that take it: the tensor-core kernel's head dims 32, 64,
# 96 and 128 with groups of up to 8 and of 16 query heads a KV head, the split kernel (head dims
# 80 and 256) with 1, 4 and 8 query heads a KV head.
_PAGED_PATHS = [
    ("d32-gqa8_bs4_len9", dict(nH=8, nKV=1, D=32, block_size=4, cache_lens=[9])),  # mma<32, 8, 2>
    ("d64-gqa16_bs8_len9", dict(nH=16, nKV=1, D=64, block_size=8,
                                cache_lens=[9])),                                # mma<64, 16, 2>
    ("phi3-mini-d96-mha_bs4_len9", dict(nH=2, nKV=2, D=96, block_size=4,
                                        cache_lens=[9])),                        # mma<96, 8, 1>
    ("d96-gqa16_bs4_len9", dict(nH=16, nKV=1, D=96, block_size=4,
                                cache_lens=[9])),                                # mma<96, 16, 1>
    ("llama3.1-405b-gqa16_d128_bs8_len9", dict(nH=16, nKV=1, D=128, block_size=8,
                                               cache_lens=[9])),                 # mma<128, 16, 1>
    ("phi2-d80-mha_bs2_len9", dict(nH=1, nKV=1, D=80, block_size=2, cache_lens=[9])),  # split<1>
    ("d256-gqa4_bs4_len9", dict(nH=4, nKV=1, D=256, block_size=4, cache_lens=[9])),    # split<4>
    ("d80-gqa8_bs8_len9", dict(nH=8, nKV=1, D=80, block_size=8, cache_lens=[9])),      # split<8>
]
CASES += _cases(COMMITTED, "attention_decode_paged", _PAGED_PATHS)

# attention_prefill_paged (chunked prefill and prefix caching through attention_decode_paged's
# pool: new tokens' queries, concatenated over the batch, attend causally to their sequence's
# cached prefix and to the new tokens up to their own, every key and value read through the
# block table; seqs (prefix, new) a sequence): a prefix of 0, ending mid-page, on a page
# boundary, spanning several 64-key tiles; new tokens crossing pages and filling several 64-row
# query tiles; one new token beside many (a decode inside the prefill launch); ragged batches;
# a shared prefix; block sizes 1 to 256; GQA 7:1 (Qwen2.5's 14:2) at head_dim 64, 4:1 (Llama's
# 32:8), 2:1 and MHA at head_dim 64 and 128; head_dim 80, 96 and 256 (the prefill kernel's
# padded widths).
CASES += _cases(COMMITTED, "attention_prefill_paged", [
    # plain prefill through pages: no prefix, 18 new tokens on two pages of 16 (the second partial)
    ("qwen2.5-0.5b_bs16_pre0_new18", dict(QWEN, block_size=16, seqs=[(0, 18)])),
    # a prefix ending mid-page (16 + 5): the first new token shares a page with the prefix and
    # the new tokens cross page boundaries at 32 and 48
    ("gqa4_d128_bs16_pre21_new30", dict(nH=4, nKV=1, D=128, block_size=16, seqs=[(21, 30)])),
    # a prefix ending exactly at a page boundary: the new tokens start a page; 70 queries (two
    # 64-row query tiles) over 134 keys (three 64-key tiles)
    ("gqa2_d64_bs64_pre64_new70", dict(nH=2, nKV=1, D=64, block_size=64, seqs=[(64, 70)],
                                       spare=1)),
    # decodes inside a prefill launch: one new token on a 40-token prefix and on an 18-token
    # one, beside a 24-token plain prefill
    ("gqa4_d64_bs16_pre40-0-18_new1-24-1", dict(nH=4, nKV=1, D=64, block_size=16,
                                                 seqs=[(40, 1), (0, 24), (18, 1)])),
    # a ragged batch of four, MHA at head_dim 128, pages of 8, a table a column wider than the
    # longest sequence (a row stride taken from the lengths reads the next row's pages)
    ("mha_d128_bs8_b4_pre0-13-6-21_new5-1-9-4_mb5",
     dict(nH=2, nKV=2, D=128, block_size=8, seqs=[(0, 5), (13, 1), (6, 9), (21, 4)],
          max_blocks=5)),
    # prefix caching: sequences 0 and 2 hold the same two physical pages as their first 32
    # prefix positions; sequence 0's new tokens start the page after them
    ("qwen2.5-0.5b_bs16_pre32-9-37_new3-2-4_shared2",
     dict(QWEN, block_size=16, seqs=[(32, 3), (9, 2), (37, 4)], shared=(0, 2, 2))),
    # one position a page, MHA: every key through its own table entry
    ("gpt2-mha_d64_bs1_pre6-0_new4-3", dict(GPT2, block_size=1, seqs=[(6, 4), (0, 3)])),
    # the largest block size: a 130-token prefix (three 64-key tiles) and 40 new tokens on one
    # page of 256, its last 86 slots poison
    ("gqa2_d64_bs256_pre130_new40", dict(nH=2, nKV=1, D=64, block_size=256, seqs=[(130, 40)],
                                         spare=1)),
    # 130 new tokens (three 64-row query tiles, the last partial) on a prefix ending mid-page
    ("gqa2_d64_bs32_pre45_new130", dict(nH=2, nKV=1, D=64, block_size=32, seqs=[(45, 130)],
                                        spare=1)),
    # head_dim 128: 70 queries over 120 keys (two query tiles, two key tiles)
    ("gqa2_d128_bs16_pre50_new70", dict(nH=2, nKV=1, D=128, block_size=16, seqs=[(50, 70)],
                                        spare=1)),
    # the padded head dims: 80 (Phi-2; a one-token sequence with no prefix beside a chunk),
    # 96 (Phi-3-mini) and 256 (Gemma, MQA, its 1/sqrt(224) scale)
    ("phi2-d80-mha_bs16_pre19-0_new12-1", dict(nH=2, nKV=2, D=80, block_size=16,
                                               seqs=[(19, 12), (0, 1)])),
    ("phi3-mini-d96-mha_bs8_pre40_new9", dict(nH=2, nKV=2, D=96, block_size=8, seqs=[(40, 9)])),
    ("gemma-mqa_d256_bs16_pre33_new17", dict(nH=2, nKV=1, D=256, block_size=16, seqs=[(33, 17)],
                                             spare=1, scale=224 ** -0.5)),
    # The kernel's other padded head dims, one tiny case each (every instance the path table
    # lists runs): 32, 160 and 192.
    ("d32-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=32, block_size=8, seqs=[(9, 3)])),
    ("d160-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=160, block_size=8, seqs=[(9, 3)])),
    ("d192-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=192, block_size=8, seqs=[(9, 3)])),
])

# gemm_swiglu (fused gate/up projection and activation): decode and prefill rows at the real
# hidden sizes with the ffn width cut down (the full tier has the real ones), outlier channels,
# rows of very different rms, odd primes.
CASES += _cases(COMMITTED, "gemm_swiglu", [
    ("qwen2.5-0.5b-h896-f64_decode-t1", dict(T=1, H=896, ffn=64)),
    ("qwen2.5-0.5b-h896-f48_prefill-t16", dict(T=16, H=896, ffn=48)),
    ("phi3-mini-h3072-f16_t2", dict(T=2, H=3072, ffn=16)),
    ("outliers-x20_h896-f32_t4", dict(T=4, H=896, ffn=32, dist=OUTLIERS)),
    ("row-scales-0.05-20_h896-f32_t6", dict(T=6, H=896, ffn=32, dist=row_scales(0.05, 20.0))),
    ("prime-h521-f61_t3", dict(T=3, H=521, ffn=61)),
])

# rmsnorm_gemm (pre-norm + projection): every decode tile (rows 1, 2, 3-4, 5-8, 9-16) and the
# prefill path above 16 rows, with and without residual and bias, at the real hidden sizes with
# N cut down (the full tier has the real projections); outlier channels, row scales, odd widths.
CASES += _cases(COMMITTED, "rmsnorm_gemm", [
    ("qwen2.5-0.5b-h896-n96_decode-t1", dict(T=1, H=896, N=96, bias=True, residual=True)),
    ("qwen2.5-0.5b-h896-n64_t2", dict(T=2, H=896, N=64, bias=False, residual=True)),
    ("phi3-mini-h3072-n24_t3", dict(T=3, H=3072, N=24, bias=False, residual=False, eps=1e-5)),
    ("outliers-x20_h896-n32_t8", dict(T=8, H=896, N=32, bias=True, residual=True, dist=OUTLIERS)),
    ("row-scales-0.05-20_h896-n32_t16", dict(T=16, H=896, N=32, bias=False, residual=True,
                                             dist=row_scales(0.05, 20.0))),
    ("qwen2.5-0.5b-h896-n32_prefill-t24", dict(T=24, H=896, N=32, bias=True, residual=True)),
    ("phi3-mini-h3072-n16_t6", dict(T=6, H=3072, N=16, bias=False, residual=True, eps=1e-5)),
    ("prefill-no-residual_t20", dict(T=20, H=896, N=24, bias=False, residual=False)),
    ("prime-h521-n61_t3", dict(T=3, H=521, N=61, bias=True, residual=True)),
])

# layernorm_gemm (GPT-2's ln_1 + c_attn, Phi-2-like widths): every decode tile (rows 1, 2, 3-4)
# and the two-step path (more rows, odd widths), with and without residual and bias, N cut down;
# outlier channels and a large mean (a one-pass variance would cancel it away).
CASES += _cases(COMMITTED, "layernorm_gemm", [
    ("gpt2-h768-n24_decode-t1", dict(T=1, H=768, N=24, bias=True, residual=True)),
    ("gpt2-h768-n16_t2", dict(T=2, H=768, N=16, bias=False, residual=True)),
    ("phi2-h2560-n8_t3", dict(T=3, H=2560, N=8, bias=True, residual=False)),
    ("outliers-x20_h768-n16_t4", dict(T=4, H=768, N=16, bias=True, residual=True,
                                      dist=outlier_channels((3, 100, 517), 20.0))),
    ("mean-offset300_h768-n16_t1", dict(T=1, H=768, N=16, bias=True, residual=False,
                                        dist=normal(1.0, mean=300.0))),
    ("phi2-h2560-n8_t6", dict(T=6, H=2560, N=8, bias=False, residual=True)),
    ("gpt2-h768-n8_prefill-t5", dict(T=5, H=768, N=8, bias=True, residual=True)),
    ("prefill-no-residual_h768-n8_t5", dict(T=5, H=768, N=8, bias=True, residual=False)),
    ("prime-h521-n17_t3", dict(T=3, H=521, N=17, bias=True, residual=True)),
    ("prime-h521-n13_t2_no-residual", dict(T=2, H=521, N=13, bias=False, residual=False)),
])

# swiglu_gemm (a SwiGLU FFN's activation and down projection): every decode tile and the
# two-step path, Qwen2.5's and Phi-3's hidden sizes as N with the ffn width cut down (the full
# tier has the real ones), a bias, a large-gate tail, odd widths.
CASES += _cases(COMMITTED, "swiglu_gemm", [
    ("qwen2.5-0.5b-f32-n896_decode-t1", dict(T=1, ffn=32, N=896)),
    ("qwen2.5-0.5b-f48-n896_t2", dict(T=2, ffn=48, N=896)),
    ("phi3-mini-f16-n3072_t3_bias", dict(T=3, ffn=16, N=3072, bias=True)),
    ("gate-std8-f64-n256_t4", dict(T=4, ffn=64, N=256, gate=normal(8.0))),
    ("prefill-f16-n896_t12_bias", dict(T=12, ffn=16, N=896, bias=True)),
    ("prime-f61-n127_t3", dict(T=3, ffn=61, N=127)),
])

# gpt_ffn (GPT-2's MLP, fused): both GELUs, decode tiles and the prefill path, GPT-2's and
# Phi-2's hidden sizes with the ffn width cut down, no biases, outliers, odd widths.
CASES += _cases(COMMITTED, "gpt_ffn", [
    ("gpt2-h768-f32_decode-t1", dict(T=1, H=768, ffn=32, gelu="tanh")),
    ("gpt2-h768-f48_t5_erf", dict(T=5, H=768, ffn=48, gelu="erf")),
    ("gpt2-h768-f32_prefill-t20", dict(T=20, H=768, ffn=32, gelu="tanh")),
    ("phi2-h2560-f16_t2", dict(T=2, H=2560, ffn=16, gelu="tanh")),
    ("no-bias_h256-f40_t2_erf", dict(T=2, H=256, ffn=40, gelu="erf", bias=False)),
    ("outliers-x20_h768-f32_t12", dict(T=12, H=768, ffn=32, gelu="tanh", dist=OUTLIERS)),
    ("prime-h521-f61_t3_erf", dict(T=3, H=521, ffn=61, gelu="erf")),
    # every pre-activation near -3 and no output bias: the GELU's negative tail is the output
    ("gelu-tail_h768-f64_t3_erf", dict(T=3, H=768, ffn=64, gelu="erf", dist=normal(0.1),
                                       b1=(-3.0, 0.3), b2_std=0.0)),
    ("gelu-tail_h768-f64_t2_tanh", dict(T=2, H=768, ffn=64, gelu="tanh", dist=normal(0.1),
                                        b1=(-3.0, 0.3), b2_std=0.0)),
])

# gelu_scale (a GELU with a scale folded in, one rounding): both GELUs at GPT-2's FFN width, scales
# exact in fp16 (0.125, -0.75, 1.5, 3.0) and one that is not (1/sqrt(2), whose fp16 rounding the
# unfused gemm by [[scale]] makes), a negative scale, in place, an odd and a prime length (the
# vector path's scalar tail) and large magnitudes with exact zeros. Qwen2.5 and Phi-3 use SwiGLU,
# not GELU, so no width of theirs belongs here; the committed tier is near its size budget, so
# each case is one row.
CASES += _cases(COMMITTED, "gelu_scale", [
    ("gpt2-ffn_t1_erf_s0.125", dict(T=1, H=3072, gelu="erf", scale=0.125)),
    ("gpt2-ffn_t1_tanh_s-0.75_inplace", dict(T=1, H=3072, gelu="tanh", scale=-0.75, inplace=True)),
    ("odd-h1001_t1_tanh_s1.5", dict(T=1, H=1001, gelu="tanh", scale=1.5)),
    ("prime-h1009_t1_erf_s1oversqrt2", dict(T=1, H=1009, gelu="erf", scale=2 ** -0.5)),
    ("large-mag_h1024_t1_erf_s3.0_inplace", dict(T=1, H=1024, gelu="erf", scale=3.0, inplace=True,
                                                 dist=with_zeros(normal(8.0), 0.05))),
])

# attention_scores_softmax (the probabilities): GQA, MHA and MQA layouts at the real head
# sizes, a decode chunk (the queries the last positions of a longer key set), no mask, the
# logit-growth scores of ~1000 and head_dim 256.
CASES += _cases(COMMITTED, "attention_scores_softmax", [
    ("qwen2.5-0.5b-gqa7_s16", dict(QWEN, B=1, Sq=16, Sk=16)),
    ("qwen2.5-0.5b-chunk_q3-k40", dict(QWEN, B=1, Sq=3, Sk=40)),
    ("phi3-mini-mha_s6", dict(PHI3, B=1, Sq=6, Sk=6)),
    ("gpt2-noncausal_s12", dict(GPT2, B=1, Sq=12, Sk=12, causal=False)),
    ("falcon-mqa71_d64_q2-k9", dict(FALCON_MQA, B=1, Sq=2, Sk=9)),
    ("logit-growth-scores950_d128_s16", dict(nH=8, nKV=2, D=128, B=1, Sq=16, Sk=16, qk=LOGIT_GROWTH)),
    ("gemma-mqa_d256_s5", dict(GEMMA_MQA, B=1, Sq=5, Sk=5)),
])

# ---------------------------------------------------------------------------------------------
# bf16 storage (docs/golden-format.md, "bf16"): cases named "bf16-...", every 16-bit input bf16
# and every rounding of the op's contract to bf16. The CUDA library dispatches on shape and
# alignment exactly as for fp16 (engine/backend/cuda/pathtable.go, each path instantiated for
# both types), so the committed bf16 cases below are the fewest and smallest that together take
# every path of every op once more, aligned and (the suites' second run) one element off a
# 16-byte boundary, which takes the generic / scalar paths; each row's comment names the path it
# is there for. Model dims of Llama-3.2-1B (hidden 2048, 32 q / 8 kv heads of 64, ffn 8192,
# rope llama3, eps 1e-5) and Qwen2.5-0.5B where the size allows (weight-heavy ops keep the
# hidden size and cut the other dimension), an outlier-channel case for the norms and gemm, and
# magnitudes beyond fp16's range (bf16's is fp32's) where a kernel that went through fp16 would
# overflow. vec<4> / vec<8> of the row kernels take their narrowest widths (4104, 8200: the
# committed tier's budget); the full tier has the real sizes.


def _bf16_cases(tier, op, rows):
    """A table's rows as bf16 cases: the name gets the "bf16-" prefix, the kwargs dtype "bf16"."""
    return [Case(op, "bf16-" + name, tier, dict(kw, dtype="bf16")) for name, kw in rows]


LLAMA32_1B = dict(nH=32, nKV=8, D=64)
LARGE_1E6 = log_magnitude(1e4, 1e6)  # every |x| in [1e4, 1e6]: most of them beyond fp16's range

CASES += _bf16_cases(COMMITTED, "residual_add", [
    ("llama3.2-1b_t1", dict(shape=(1, 2048), inplace=False)),             # binary_kernel<true>
    # sums up to 2e6; an odd row (the scalar tail), in place
    ("large-mag-1e6_odd-h1001_t2_inplace", dict(shape=(2, 1001), inplace=True,
                                                dist=uniform(-1e6, 1e6))),
])
CASES += _bf16_cases(COMMITTED, "rmsnorm", [
    ("outliers-x20_llama3.2-1b_t2", dict(T=2, H=2048, eps=1e-5, dist=OUTLIERS)),  # vec<1>
    ("llama3.2-3b-h3072_t1", dict(T=1, H=3072, eps=1e-5)),                       # vec<2>
    ("h4104_t1", dict(T=1, H=4104, eps=1e-5)),                                   # vec<4>
    ("h8200_t1", dict(T=1, H=8200, eps=1e-5)),                                   # vec<8>
    ("large-mag-1e6_prime-h1009_t1", dict(T=1, H=1009, eps=1e-5, dist=LARGE_1E6)),  # generic
])
CASES += _bf16_cases(COMMITTED, "rmsnorm_residual", [
    ("outliers-x20_llama3.2-1b_t1_inplace", dict(T=1, H=2048, eps=1e-5, inplace=True,
                                                 dist=OUTLIERS)),                # vec<1>
    ("llama3.2-3b-h3072_t1", dict(T=1, H=3072, eps=1e-5, inplace=False)),        # vec<2>
    ("h4104_t1_inplace", dict(T=1, H=4104, eps=1e-5, inplace=True)),             # vec<4>
    ("h8200_t1", dict(T=1, H=8200, eps=1e-5, inplace=False)),                    # vec<8>
    ("large-mag-1e6_prime-h1009_t1", dict(T=1, H=1009, eps=1e-5, inplace=False,
                                          dist=LARGE_1E6)),                      # generic
])
CASES += _bf16_cases(COMMITTED, "layernorm", [
    ("outliers-x20_gpt2_t1", dict(T=1, H=768, eps=1e-5, dist=OUTLIERS)),         # vec<1>
    ("phi2-h2560_t1", dict(T=1, H=2560, eps=1e-5)),                              # vec<2>
    ("h4104_t1", dict(T=1, H=4104, eps=1e-5)),                                   # vec<4>
    ("h8200_t1", dict(T=1, H=8200, eps=1e-5)),                                   # vec<8>
    ("large-mag-1e6_prime-h1009_t1", dict(T=1, H=1009, eps=1e-5, dist=LARGE_1E6)),  # generic
])
CASES += _bf16_cases(COMMITTED, "layernorm_residual", [
    ("outliers-x20_gpt2_t1", dict(T=1, H=768, eps=1e-5, dist=OUTLIERS)),         # vec<1>
    ("phi2-h2560_t1", dict(T=1, H=2560, eps=1e-5)),                              # vec<2>
    ("h4104_t1", dict(T=1, H=4104, eps=1e-5)),                                   # vec<4>
    ("h8200_t1", dict(T=1, H=8200, eps=1e-5)),                                   # vec<8>
    ("large-mag-1e6_prime-h1009_t1", dict(T=1, H=1009, eps=1e-5, dist=LARGE_1E6)),  # generic
])
CASES += _bf16_cases(COMMITTED, "rope", [
    # rope_kernel<true>: Llama-3.2-1B's heads and published llama3 table, ragged positions
    ("llama3.2-1b-llama3_ragged-pos0-to-131071_t3",
     dict(LLAMA32_1B, scaling="llama3.2-1b", positions=[0, 131071, 65536])),
    ("outliers-x20_qwen2.5-0.5b_base1e6_pos32765-32767",
     dict(QWEN, base=1e6, positions=NEAR_2_15[5:], dist=outlier_channels((5, 40), 20.0))),
    # rope_kernel<false>: rope_dim/2 = 12, head_dim 80
    ("scalar-r24-d80_base1e4_pos131069-131071", dict(nH=4, nKV=2, D=80, rope_dim=24, base=1e4,
                                                     positions=NEAR_2_17[5:])),
])
CASES += _bf16_cases(COMMITTED, "attention_prefill", [
    # <64, 1> and <64, 2> (non-causal) at Llama-3.2-1B's and Qwen2.5-0.5B's heads
    ("llama3.2-1b_s3", dict(LLAMA32_1B, B=1, S=3)),
    ("noncausal_qwen2.5-0.5b_s4", dict(QWEN, B=1, S=4, causal=False)),
    ("d32-gqa2_s7", dict(nH=4, nKV=2, D=32, B=1, S=7)),                           # <32, 1>
    ("noncausal_d32-gqa2_s6", dict(nH=2, nKV=1, D=32, B=1, S=6, causal=False)),   # <32, 2>
    ("phi2-d80_s7", dict(nH=2, nKV=2, D=80, B=1, S=7)),                           # <80, 1>
    ("noncausal_d80_s7", dict(nH=2, nKV=2, D=80, B=1, S=7, causal=False)),        # <80, 2>
    ("phi3-mini-d96_s8", dict(nH=2, nKV=2, D=96, B=1, S=8)),                      # <96, 1>
    ("noncausal_d96_b2_s5", dict(nH=1, nKV=1, D=96, B=2, S=5, causal=False)),     # <96, 2>
    # <128, 1>: scores to ~1000 (q and k sharing outlier channels of ~60)
    ("logit-growth-scores950_d128-gqa2_s8", dict(nH=2, nKV=1, D=128, B=1, S=8, qk=LOGIT_GROWTH)),
    # <128, 2>: v with outlier channels
    ("noncausal_outlier-v_d128-gqa2_s9", dict(nH=2, nKV=1, D=128, B=1, S=9, causal=False,
                                              vdist=outlier_channels((7, 90), 20.0))),
    ("d160_s5", dict(nH=2, nKV=2, D=160, B=1, S=5)),                              # <160, 1>
    ("d192-gqa2_s6", dict(nH=2, nKV=1, D=192, B=1, S=6)),                         # <192, 1>
    ("gemma-mqa_d256_s5", dict(nH=2, nKV=1, D=256, B=1, S=5, scale=224 ** -0.5)),  # <256, 1>
])
CASES += _bf16_cases(COMMITTED, "attention_decode", [
    ("llama3.2-1b_len13", dict(LLAMA32_1B, L=16, cache_lens=[13])),              # mma<64, 8, 2>
    ("d64-gqa16_len9", dict(nH=16, nKV=1, D=64, L=12, cache_lens=[9])),          # mma<64, 16, 2>
    ("d32-gqa8_lens1-9", dict(nH=8, nKV=1, D=32, L=12, cache_lens=[1, 9])),      # mma<32, 8, 2>
    ("d32-gqa16_len9", dict(nH=16, nKV=1, D=32, L=12, cache_lens=[9])),          # mma<32, 16, 2>
    ("phi3-mini-d96-mha_len9", dict(nH=2, nKV=2, D=96, L=12, cache_lens=[9])),    # mma<96, 8, 1>
    ("d96-gqa16_len9", dict(nH=16, nKV=1, D=96, L=12, cache_lens=[9])),          # mma<96, 16, 1>
    # mma<128, 8, 1>: scores to ~1000
    ("logit-growth-scores950_d128-gqa4_len33", dict(nH=4, nKV=1, D=128, L=36, cache_lens=[33],
                                                    qk=LOGIT_GROWTH)),
    # mma<128, 16, 1>: Llama-3.1-405B's 16 query heads per KV head
    ("llama3.1-405b-gqa16_d128_len9", dict(nH=16, nKV=1, D=128, L=12, cache_lens=[9])),
    ("phi2-d80-mha_len9", dict(nH=1, nKV=1, D=80, L=12, cache_lens=[9])),        # split<1>
    # split<2> with a cache long enough to split (max_len > 64): the combine kernel
    ("d80-gqa2_len70", dict(nH=2, nKV=1, D=80, L=72, cache_lens=[70])),
    ("d256-gqa4_len9", dict(nH=4, nKV=1, D=256, L=12, cache_lens=[9])),          # split<4>
    ("gemma-mqa_d256_len9", dict(GEMMA_MQA, L=12, cache_lens=[9],
                                 scale=224 ** -0.5)),                            # split<8>
])
CASES += _bf16_cases(COMMITTED, "attention_decode_paged", [
    # Llama-3.2-1B's heads through two pages of 8, the second mid-page
    ("llama3.2-1b_bs8_len13", dict(LLAMA32_1B, block_size=8, cache_lens=[13])),  # mma<64, 8, 2>
    # one past two pages, and a one-page sequence
    ("gqa4_d128_bs16_lens33-9", dict(nH=4, nKV=1, D=128, block_size=16,
                                     cache_lens=[33, 9])),                       # mma<128, 8, 1>
    ("d32-gqa16_bs16_lens20-9", dict(nH=16, nKV=1, D=32, block_size=16,
                                     cache_lens=[20, 9])),                       # mma<32, 16, 2>
    # split<2> with a reach past 64 positions: the combine kernel
    ("phi2-d80-gqa2_bs16_len70", dict(nH=2, nKV=1, D=80, block_size=16, cache_lens=[70])),
] + _PAGED_PATHS)
CASES += _bf16_cases(COMMITTED, "attention_prefill_paged", [
    # Llama-3.2-1B's 32 query heads on 8 KV heads through pages of 4: a chunk on a prefix ending
    # mid-page beside a plain prefill
    ("llama3.2-1b_bs4_pre10-0_new2-3", dict(LLAMA32_1B, block_size=4, seqs=[(10, 2), (0, 3)])),
    # a prefix ending mid-page, new tokens across two page boundaries
    ("gqa4_d128_bs16_pre21_new30", dict(nH=4, nKV=1, D=128, block_size=16, seqs=[(21, 30)])),
    # decodes beside a prefill
    ("gqa4_d64_bs16_pre40-0-18_new1-24-1", dict(nH=4, nKV=1, D=64, block_size=16,
                                                 seqs=[(40, 1), (0, 24), (18, 1)])),
    # prefix caching
    ("qwen2.5-0.5b_bs16_pre32-9-37_new3-2-4_shared2",
     dict(QWEN, block_size=16, seqs=[(32, 3), (9, 2), (37, 4)], shared=(0, 2, 2))),
    # every other padded head dim of the kernel once in bf16 (its path-table instances)
    ("d32-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=32, block_size=8, seqs=[(9, 3)])),
    ("d80-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=80, block_size=8, seqs=[(9, 3)])),
    ("d96-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=96, block_size=8, seqs=[(9, 3)])),
    ("d160-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=160, block_size=8, seqs=[(9, 3)])),
    ("d192-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=192, block_size=8, seqs=[(9, 3)])),
    ("d256-gqa2_bs8_pre9_new3", dict(nH=2, nKV=1, D=256, block_size=8, seqs=[(9, 3)])),
])
CASES += _bf16_cases(COMMITTED, "attention_scores_softmax", [
    ("llama3.2-1b_s4", dict(LLAMA32_1B, B=1, Sq=4, Sk=4)),
    ("qwen2.5-0.5b-chunk_q3-k40", dict(QWEN, B=1, Sq=3, Sk=40)),
])
CASES += _bf16_cases(COMMITTED, "swiglu", [
    ("qwen2.5-0.5b_t1", dict(T=1, ffn=4864)),                         # binary_kernel<true>
    # gate in [-30, 30], up ~ N(0, 1e4^2): products past fp16's range, an odd row
    ("large-mag_odd-h1001_t2", dict(T=2, ffn=1001, gate=uniform(-30.0, 30.0), up_std=1e4)),
])
CASES += _bf16_cases(COMMITTED, "gelu", [
    ("gpt2-ffn_t1", dict(T=1, H=3072)),                               # unary_kernel<true>
    # a tenth of the values |x| in [1e5, 1e6]; an odd row, in place
    ("large-mag-1e6_odd-h1001_t2_inplace", dict(T=2, H=1001, inplace=True,
                                                dist=with_large(gelu_inputs(), 0.1, 1e5, 1e6))),
])
CASES += _bf16_cases(COMMITTED, "gelu_tanh", [
    ("gpt2-ffn_t1", dict(T=1, H=3072)),
    ("large-mag-1e6_odd-h1001_t2_inplace", dict(T=2, H=1001, inplace=True,
                                                dist=with_large(gelu_inputs(), 0.1, 1e5, 1e6))),
])
CASES += _bf16_cases(COMMITTED, "gelu_scale", [
    ("gpt2-ffn_t1_erf_s0.125", dict(T=1, H=3072, gelu="erf", scale=0.125)),      # GeluScaleErfOp
    # GeluScaleTanhOp: outputs to ~9e5 (x up to 300, scale -3000), an odd row, in place
    ("large-out_odd-h1001_t1_tanh_s-3000_inplace",
     dict(T=1, H=1001, gelu="tanh", scale=-3000.0, inplace=True,
          dist=with_large(gelu_inputs(), 0.1, 30.0, 300.0))),
])
CASES += _bf16_cases(COMMITTED, "softmax", [
    ("attn-causal_t8", dict(T=8, N=128, dtype="bf16", mask=causal_mask(120))),   # <bf16, true>
    ("odd_t2", dict(T=2, N=1001, dtype="bf16", mask=random_mask(0.02))),         # <bf16, false>
    # rows around +1e5, -1e5 (past fp16's range), spread over +-1e4, 9e4
    ("large-mag_t4", dict(T=4, N=256, dtype="bf16",
                          dist=row_offsets([1e5, -1e5, None, 9e4], 300.0),
                          mask=all_but_one([1]))),
])
CASES += _bf16_cases(COMMITTED, "pos_embedding", [
    ("gpt2-p4_t4", dict(H=768, P=4, positions=[3, 0, 2, 2])),                    # <true>
    ("odd-h1001-p4_t2", dict(H=1001, P=4, positions=[3, 1])),                    # <false>
])
CASES += _bf16_cases(COMMITTED, "embedding", [
    ("llama3.2-1b-v4_t2", dict(V=4, H=2048, T=2)),                               # <uint4>
    ("even-h1002-v4_t2", dict(V=4, H=1002, T=2)),                                # <unsigned int>
])  # <unsigned short>: both one element off a 16-byte boundary
CASES += _bf16_cases(COMMITTED, "set_rows", [
    # <uint4>: Llama-3.2-1B's KV row (8 heads of 64), scattered rows
    ("llama3.2-1b_l8_scattered-t3", dict(R=8, row=(8, 64), rows=[6, 0, 3], dtype="bf16")),
    ("odd-3x50_l8_t3", dict(R=8, row=(3, 50), rows=[7, 4, 1], dtype="bf16")),    # <unsigned int>
    ("odd-h129_l4_t2", dict(R=4, row=(129,), rows=[3, 1], dtype="bf16")),        # <unsigned short>
])
CASES += _bf16_cases(COMMITTED, "gemm", [
    ("llama3.2-1b-k2048-n8_decode-m1", dict(M=1, N=8, K=2048, has_bias=False,
                                            out_dtype="bf16")),                  # gemv<1>
    ("qwen2.5-0.5b-k896-n8_m2_bias", dict(M=2, N=8, K=896, has_bias=True,
                                          out_dtype="bf16")),                    # gemv<2>
    ("k768-n8_m3", dict(M=3, N=8, K=768, has_bias=False, out_dtype="bf16")),     # gemv<4>
    # cublasLt's bias epilogue (bias_add_kernel<bf16> without cublasLt)
    ("qwen2.5-0.5b-k896-n16_m7_bias", dict(M=7, N=16, K=896, has_bias=True, out_dtype="bf16")),
    # fp32 out with a bias: cublasGemmEx, then bias_add_kernel<float>
    ("outliers-x20_m8-n16-k896_f32", dict(M=8, N=16, K=896, has_bias=True, out_dtype="f32",
                                          dist=OUTLIERS)),
    # cublasGemmEx, no bias, odd sizes: |x| up to 1e5, outputs past fp16's range, in bf16
    ("large-mag-x1e5_prime-m5-n31-k131", dict(M=5, N=31, K=131, has_bias=False, out_dtype="bf16",
                                              dist=uniform(-1e5, 1e5))),
])
CASES += _bf16_cases(COMMITTED, "gemm_swiglu", [
    ("llama3.2-1b-h2048-f8_decode-t1", dict(T=1, H=2048, ffn=8)),
    ("outliers-x20_qwen2.5-0.5b-h896-f8_t6", dict(T=6, H=896, ffn=8, dist=OUTLIERS)),
])
CASES += _bf16_cases(COMMITTED, "swiglu_ffn", [
    ("qwen2.5-0.5b-h896-f8_decode-t1", dict(T=1, H=896, ffn=8)),                 # gemv<1>
    ("h256-f8_t4", dict(T=4, H=256, ffn=8)),                                     # gemv<4>
    ("prime-h127-f29_t3", dict(T=3, H=127, ffn=29)),                             # cublasGemmEx
])
CASES += _bf16_cases(COMMITTED, "rmsnorm_gemm", [
    ("llama3.2-1b-h2048-n4_decode-t1", dict(T=1, H=2048, N=4, bias=False, residual=True,
                                            eps=1e-5)),                          # gemv<1>
    ("qwen2.5-0.5b-h896-n4_t2_bias", dict(T=2, H=896, N=4, bias=True, residual=True)),  # gemv<2>
    ("qwen2.5-0.5b-h896-n4_t3_no-residual", dict(T=3, H=896, N=4, bias=False,
                                                 residual=False)),               # gemv<4>
    # rmsnorm_residual_vec<1> into the workspace, then cublasLt with the bias
    ("outliers-x20_h896-n8_t5_bias", dict(T=5, H=896, N=8, bias=True, residual=True,
                                          dist=OUTLIERS)),
    # rmsnorm_residual_vec<2> (2048 < hidden <= 4096), cublasGemmEx
    ("h2056-n2_t5", dict(T=5, H=2056, N=2, bias=False, residual=True, eps=1e-5)),
    # rmsnorm_vec<1>, no residual
    ("h896-n4_prefill-t5_no-residual", dict(T=5, H=896, N=4, bias=False, residual=False)),
])
CASES += _bf16_cases(COMMITTED, "layernorm_gemm", [
    ("gpt2-h768-n4_decode-t1_bias", dict(T=1, H=768, N=4, bias=True, residual=True)),  # gemv<1>
    ("h768-n4_t2", dict(T=2, H=768, N=4, bias=False, residual=True)),            # gemv<2>
    ("h768-n4_t3_bias_no-residual", dict(T=3, H=768, N=4, bias=True, residual=False)),  # gemv<4>
    # layernorm_residual_vec<1>, cublasLt with the bias; outliers
    ("outliers-x20_h768-n8_t5_bias", dict(T=5, H=768, N=8, bias=True, residual=True,
                                          dist=outlier_channels((3, 100, 517), 20.0))),
    ("h2056-n2_t5", dict(T=5, H=2056, N=2, bias=False, residual=True)),          # residual_vec<2>
    # layernorm_vec<1>, no residual; a mean of 300 (bf16's spacing there is 2)
    ("mean-offset300_h768-n4_prefill-t5_no-residual",
     dict(T=5, H=768, N=4, bias=True, residual=False, dist=normal(1.0, mean=300.0))),
])
CASES += _bf16_cases(COMMITTED, "swiglu_gemm", [
    ("llama3.2-1b-f8-n2048_decode-t1", dict(T=1, ffn=8, N=2048)),                # gemv<1>
    ("qwen2.5-0.5b-f8-n896_t2", dict(T=2, ffn=8, N=896)),                        # gemv<2>
    ("gate-std8-f32-n128_t4", dict(T=4, ffn=32, N=128, gate=normal(8.0))),       # gemv<4>
    # binary_kernel<true> into the workspace, cublasLt with the bias (cublasGemmEx and
    # bias_add_kernel without cublasLt)
    ("prefill-f16-n256_t6_bias", dict(T=6, ffn=16, N=256, bias=True)),
])
# gpt_ffn with a narrow intermediate (each output sums few activations, so one activation rounded
# the other way is a visible share of its row: the case class the allowance exists for), written
# apart from the cases above: GPT-2-large's hidden width 1280 (and 512, to keep the tier small),
# both GELUs, with and without biases, prefill rows (cuBLAS, bias_gelu) and decode rows
# (gelu_gemv), and a wide intermediate.
CASES += _cases(COMMITTED, "gpt_ffn", [
    ("narrow-h1280-f64_prefill-t24_tanh_no-bias", dict(T=24, H=1280, ffn=64, gelu="tanh",
                                                        bias=False)),
    ("narrow-h512-f16_prefill-t24_erf", dict(T=24, H=512, ffn=16, gelu="erf")),
    # decode tiles the committed tier already takes for both storage types (pathtable.go):
    # gelu_gemv<4, false>, gelu_gemv<16, true>
    ("narrow-h512-f32_decode-t4_erf", dict(T=4, H=512, ffn=32, gelu="erf")),
    ("narrow-h512-f32_decode-t16_tanh_no-bias", dict(T=16, H=512, ffn=32, gelu="tanh", bias=False)),
    ("wide-h128-f512_prefill-t24_tanh", dict(T=24, H=128, ffn=512, gelu="tanh")),
])
CASES += _bf16_cases(COMMITTED, "gpt_ffn", [
    ("narrow-h512-f32_prefill-t24_tanh_no-bias", dict(T=24, H=512, ffn=32, gelu="tanh",
                                                       bias=False)),
])
CASES += _bf16_cases(COMMITTED, "gpt_ffn", [
    # gelu_gemv<1, true>, gemv<1> (the down projection with its bias)
    ("h256-f16_decode-t1", dict(T=1, H=256, ffn=16, gelu="tanh")),
    ("no-bias_h128-f16_t2_erf", dict(T=2, H=128, ffn=16, gelu="erf", bias=False)),  # <2, false>
    ("h128-f16_t2_tanh", dict(T=2, H=128, ffn=16, gelu="tanh")),      # <2, true>, gemv<2>
    # gelu_gemv<4, false>, gemv<4>: every pre-activation in the GELU's negative tail
    ("gelu-tail_h128-f16_t3_erf", dict(T=3, H=128, ffn=16, gelu="erf", dist=normal(0.1),
                                       b1=(-3.0, 0.3), b2_std=0.0)),
    # gelu_gemv<8, false>; the down projection by cuBLAS with cublasLt's bias
    ("h128-f16_t5_erf", dict(T=5, H=128, ffn=16, gelu="erf")),
    ("outliers-x20_h256-f16_t12", dict(T=12, H=256, ffn=16, gelu="tanh",
                                       dist=outlier_channels((3, 100, 201), 20.0))),  # <16, true>
    ("prefill-h128-f16_t17", dict(T=17, H=128, ffn=16, gelu="tanh")),             # bias_gelu<true>
    ("prime-h127-f29_t3_erf", dict(T=3, H=127, ffn=29, gelu="erf")),              # bias_gelu<false>
])

# quant_fp8 (docs/quantization.md): dynamic per token (group_size H) and in the 1x128 groups of
# fine-grained FP8 checkpoints, at Qwen2.5-0.5B's, Llama-3.2-1B's, Phi-3-mini's and Llama-3-8B's
# hidden sizes, x in f16, bf16 and f32; outlier channels (x ~100 in four columns: each group's
# scale follows its own values), an all-zero row and an all-zero group of +-0 (the amax floor);
# static with scale 1 over every boundary of the conversion (E4M3_TABLE: the conversion
# itself) and with a scale that is no power of two; +inf and NaN in a group (its scale inf or
# NaN, its bytes what the formula gives); and reciprocal traps, values whose byte differs where
# a kernel multiplies by 1 / s instead of dividing (random float32 draws almost never are one;
# 16-bit ones sometimes divide to a tie exactly).
E4M3_TABLE = e4m3_boundaries()
E4M3_TABLE_ROWS = -(-len(E4M3_TABLE) // 128)
QUANT_OUTLIERS = with_spans(constant_rows({2: 0.0}, outlier_channels((7, 1000, 1001, 2900), 100.0)),
                            ((1, 256, (0.0, -0.0) * 64),))
QUANT_NON_FINITE = with_spans(normal(), ((0, 40, (math.inf,)), (1, 200, (math.nan,))))
CASES += _cases(COMMITTED, "quant_fp8", [
    ("dynamic-per-token_qwen2.5-0.5b_t4", dict(T=4, H=896, mode="dynamic", group_size=896)),
    ("dynamic-g128_outliers-x100_zero-row-and-group_phi3-mini_t5",
     dict(T=5, H=3072, mode="dynamic", group_size=128, dist=QUANT_OUTLIERS)),
    ("dynamic-g128_reciprocal-traps_h256_t2_f32",
     dict(T=2, H=256, mode="dynamic", group_size=128, dtype="f32", traps=4)),
    ("static_s1_e4m3-boundaries_h128_f32",
     dict(T=E4M3_TABLE_ROWS, H=128, mode="static", scale=1.0, dtype="f32",
          dist=table_rows(E4M3_TABLE))),
    ("static_s0.0123_h1024_t8", dict(T=8, H=1024, mode="static", scale=0.0123)),
    # row 0: +inf in group 0 (scale inf: its finite values give +-0, the inf inf / inf = NaN);
    # row 1: NaN in group 1 (scale NaN, every byte NaN); row 2 and the other groups finite
    ("dynamic-g128_inf-nan-groups_h256_t3_f32",
     dict(T=3, H=256, mode="dynamic", group_size=128, dtype="f32", dist=QUANT_NON_FINITE)),
    ("static_s0.0123_reciprocal-traps_h128_t1_f32",
     dict(T=1, H=128, mode="static", scale=0.0123, dtype="f32", traps=16)),
])
CASES += _bf16_cases(COMMITTED, "quant_fp8", [
    ("dynamic-g128_llama3.2-1b_t3", dict(T=3, H=2048, mode="dynamic", group_size=128)),
    ("dynamic-per-token_llama3-8b_decode-t1", dict(T=1, H=4096, mode="dynamic", group_size=4096)),
    ("static_s0.0123_h256_t2", dict(T=2, H=256, mode="static", scale=0.0123)),  # the bf16 static kernel
])

# The fused FP8 quantisers (docs/quantization.md, "Fused quantisers"): rmsnorm_quant_fp8 at
# Qwen2.5-0.5B's, Llama-3.2-1B's, Phi-3-mini's, Llama-3-8B's, Qwen2.5-14B's, DeepSeek-V3's and
# Llama-3-405B's hidden sizes (every row plan of the norm: 8-value vectors per thread 1, 2, 4 and
# 8 times, in fp16 and bf16), per token and in 1x128 groups, with and without a residual (sum
# written in place over it and beside it), outlier channels (x ~20 in four columns: their groups'
# scales ~10x the others'), rows of rms ~1e-3 where eps = 1e-6 is as large as the signal (a
# dropped eps moves every scale by sqrt(2)) and an all-zero row (the amax floor), static scales
# small enough to saturate the largest values. swiglu_quant_fp8 at Qwen2.5-0.5B's (4864),
# Phi-3-mini's and Llama-3.2-1B's (8192) intermediate sizes, per token (a group longer than the
# kernel's registers), 1x128 and static, outlier gate channels, an all-zero gate row (+-0).
FUSED_QUANT_OUTLIERS = outlier_channels((7, 1000, 1001, 2900), 20.0)
CASES += _cases(COMMITTED, "rmsnorm_quant_fp8", [
    ("dynamic-per-token_qwen2.5-0.5b_t4",
     dict(T=4, H=896, eps=1e-6, mode="dynamic", group_size=896)),
    ("dynamic-per-token_residual_qwen2.5-0.5b_t2_inplace",
     dict(T=2, H=896, eps=1e-6, mode="dynamic", group_size=896, residual=True, inplace=True)),
    ("dynamic-g128_outliers-x20_residual_phi3-mini_t2",
     dict(T=2, H=3072, eps=1e-5, mode="dynamic", group_size=128, residual=True,
          dist=FUSED_QUANT_OUTLIERS)),
    ("static_s0.008_qwen2.5-14b_t1", dict(T=1, H=5120, eps=1e-6, mode="static", scale=0.008)),
    ("dynamic-per-token_small-rms_zero-row_eps1e-6_h1024_t3",
     dict(T=3, H=1024, eps=1e-6, mode="dynamic", group_size=1024,
          dist=constant_rows({0: 0.0}, normal(1e-3)))),
    ("dynamic-g128_llama3-405b_decode-t1",
     dict(T=1, H=16384, eps=1e-5, mode="dynamic", group_size=128)),
])
CASES += _bf16_cases(COMMITTED, "rmsnorm_quant_fp8", [
    ("dynamic-g128_llama3.2-1b_t3", dict(T=3, H=2048, eps=1e-5, mode="dynamic", group_size=128)),
    ("dynamic-per-token_residual_llama3-8b_t2",
     dict(T=2, H=4096, eps=1e-5, mode="dynamic", group_size=4096, residual=True)),
    ("dynamic-g128_outliers-x20_residual_deepseek-v3_t1_inplace",
     dict(T=1, H=7168, eps=1e-6, mode="dynamic", group_size=128, residual=True, inplace=True,
          dist=FUSED_QUANT_OUTLIERS)),
    ("static_s0.008_llama3-405b_t1", dict(T=1, H=16384, eps=1e-5, mode="static", scale=0.008)),
])
CASES += _cases(COMMITTED, "swiglu_quant_fp8", [
    ("dynamic-per-token_qwen2.5-0.5b_t2", dict(T=2, ffn=4864, mode="dynamic", group_size=4864)),
    ("dynamic-g128_phi3-mini_t2", dict(T=2, ffn=8192, mode="dynamic", group_size=128)),
    ("static_s0.02_qwen2.5-0.5b_t1", dict(T=1, ffn=4864, mode="static", scale=0.02)),
    ("dynamic-per-token_zero-row_f1024_t3",
     dict(T=3, ffn=1024, mode="dynamic", group_size=1024, gate=constant_rows({1: 0.0}, normal(2.0)))),
    ("dynamic-g128_outliers-x20_f2048_t2",
     dict(T=2, ffn=2048, mode="dynamic", group_size=128,
          gate=outlier_channels((7, 1000, 1001, 2000), 20.0))),
])
CASES += _bf16_cases(COMMITTED, "swiglu_quant_fp8", [
    ("dynamic-g128_llama3.2-1b_t2", dict(T=2, ffn=8192, mode="dynamic", group_size=128)),
    ("dynamic-per-token_qwen2.5-0.5b_t1", dict(T=1, ffn=4864, mode="dynamic", group_size=4864)),
    ("static_s0.02_f2048_t2", dict(T=2, ffn=2048, mode="static", scale=0.02)),
])

# gemm_fp8 (w8a8, docs/golden-format.md): fine-grained block scales (1x128 activation groups,
# 128x128 weight blocks: DeepSeek-V3 and transformers' FineGrainedFP8) and per-channel scales
# (per token x per output channel: compressed-tensors FP8-dynamic), both out dtypes. Decode and
# prefill rows, a partial last weight row-block (N = 200), a decode row, activations with
# outlier channels (x100 in two columns: their groups' scales ~30x the others' of the row),
# weight blocks of very different magnitudes (factors log-uniform in [1/8, 8]: the four scales
# span 7x, where N(0, 1/K) blocks differ by 10-20%), and DeepSeek-V3's hidden size as K (56
# scale groups a row; N = 16, one partial row-block, to keep it small). No case is named bf16-:
# that prefix means bf16 inputs (dtype="bf16"), and these are f8e4m3 and f32 whatever the
# output; out_dtype names the output, and the name ends in _out-<out_dtype>.
GEMM_FP8_OUTLIERS = outlier_channels((7, 300), 100.0)
CASES += _cases(COMMITTED, "gemm_fp8", [
    ("block_decode-m4-n256-k512_out-bf16",
     dict(M=4, N=256, K=512, scales="block", out_dtype="bf16")),
    ("block_m16-n384-k256_out-f16", dict(M=16, N=384, K=256, scales="block", out_dtype="f16")),
    ("block_partial-row-block-n200_m3-k384_out-bf16",
     dict(M=3, N=200, K=384, scales="block", out_dtype="bf16")),
    ("channel_m8-n256-k512_out-bf16", dict(M=8, N=256, K=512, scales="channel", out_dtype="bf16")),
    ("channel_decode-m1-n320-k256_out-f16",
     dict(M=1, N=320, K=256, scales="channel", out_dtype="f16")),
    ("block_outliers-x100_m5-n256-k512_out-bf16",
     dict(M=5, N=256, K=512, scales="block", out_dtype="bf16", dist=GEMM_FP8_OUTLIERS)),
    ("block_weight-blocks-x0.125-8_m4-n256-k256_out-f16",
     dict(M=4, N=256, K=256, scales="block", out_dtype="f16",
          wdist=block_magnitudes(128, 0.125, 8.0))),
    ("block_deepseek-v3-k7168_m2-n16_out-bf16",
     dict(M=2, N=16, K=7168, scales="block", out_dtype="bf16")),
    # a K that is no multiple of 128 or 16 (per channel allows any), and one decode row with
    # block scales
    ("channel_odd-k200_m2-n64_out-bf16", dict(M=2, N=64, K=200, scales="channel", out_dtype="bf16")),
    ("block_decode-m1-n128-k256_out-bf16", dict(M=1, N=128, K=256, scales="block", out_dtype="bf16")),
    # prefill rows (m > 16: the cuBLASLt path on the GPU), both scale layouts and out dtypes
    ("block_prefill-m40-n256-k384_out-bf16", dict(M=40, N=256, K=384, scales="block", out_dtype="bf16")),
    ("channel_prefill-m24-n128-k256_out-f16", dict(M=24, N=128, K=256, scales="channel", out_dtype="f16")),
    ("channel_decode-m12-n128-k384_out-bf16", dict(M=12, N=128, K=384, scales="channel", out_dtype="bf16")),
    ("block_decode-m12-n256-k256_out-bf16", dict(M=12, N=256, K=256, scales="block", out_dtype="bf16")),
    # K = 128: one k split, the decode kernel writes out itself
    ("channel_decode-m16-n128-k128_out-f16", dict(M=16, N=128, K=128, scales="channel", out_dtype="f16")),
])

# gemm_w4a16 (docs/quantization.md, "4-bit weights"): AWQ (asymmetric, zero points, the
# interleaved nibble order) and GPTQ (symmetric, and asymmetric with act-order g_idx) weights in
# groups of 128 inputs, at decode rows 1, 2 and 4 and a prefill of 24 rows, Qwen2.5-0.5B's
# hidden size as K (seven groups), both storage dtypes.
CASES += _cases(COMMITTED, "gemm_w4a16", [
    ("awq-g128_decode-m1-n128-k896", dict(M=1, N=128, K=896, format="awq", group_size=128)),
    ("awq-g128_m2-n64-k256", dict(M=2, N=64, K=256, format="awq", group_size=128)),
    ("awq-g128_m4-n64-k256", dict(M=4, N=64, K=256, format="awq", group_size=128)),
    ("awq-g128_prefill-m24-n64-k256", dict(M=24, N=64, K=256, format="awq", group_size=128)),
    ("gptq-sym-g128_decode-m1-n128-k256", dict(M=1, N=128, K=256, format="gptq", group_size=128,
                                                sym=True)),
    ("gptq-act-order-g128_m24-n64-k384", dict(M=24, N=64, K=384, format="gptq", group_size=128,
                                              act_order=True)),
    # the decode gemv's other paths: rows 9-16, a last column tile cut short (N = 72 AWQ, 40
    # GPTQ), one k split (K <= 128, written without the reduction; four groups in it for GPTQ),
    # and AWQ groups of 12 (a lane's eight rows straddle two groups: scales per pair)
    ("awq-g128_decode-m12-n72-k256", dict(M=12, N=72, K=256, format="awq", group_size=128)),
    ("gptq-g64_decode-m16-n40-k384", dict(M=16, N=40, K=384, format="gptq", group_size=64)),
    ("awq-g32_decode-m1-n128-k32", dict(M=1, N=128, K=32, format="awq", group_size=32)),
    ("gptq-g32_decode-m2-n64-k128", dict(M=2, N=64, K=128, format="gptq", group_size=32)),
    ("awq-g12_decode-m1-n64-k96", dict(M=1, N=64, K=96, format="awq", group_size=12)),
])
CASES += _bf16_cases(COMMITTED, "gemm_w4a16", [
    ("awq-g128_decode-m1-n64-k256", dict(M=1, N=64, K=256, format="awq", group_size=128)),
    ("awq-g128_m2-n64-k256", dict(M=2, N=64, K=256, format="awq", group_size=128)),
    ("awq-g128_m4-n64-k256", dict(M=4, N=64, K=256, format="awq", group_size=128)),
    ("gptq-act-order-g128_m3-n64-k256", dict(M=3, N=64, K=256, format="gptq", group_size=128,
                                             act_order=True)),
    ("awq-g128_decode-m9-n64-k256", dict(M=9, N=64, K=256, format="awq", group_size=128)),
    ("gptq-act-order-g64_decode-m10-n32-k256", dict(M=10, N=32, K=256, format="gptq", group_size=64,
                                                    act_order=True)),
    # past 16 rows: the dequantiser and cuBLAS
    ("awq-g128_prefill-m17-n64-k256", dict(M=17, N=64, K=256, format="awq", group_size=128)),
    ("gptq-act-order-g128_prefill-m17-n64-k256", dict(M=17, N=64, K=256, format="gptq", group_size=128,
                                                      act_order=True)),
])

# set_rows_fp8 (the FP8 KV-cache append): scales per KV head (headroom < 1: some values
# saturate) and per tensor, the 8-wide path (<true, T>: 16-bit rows of whole 8-element heads) and
# the element-wise one (fp32 src, heads of 50), both storage types.
CASES += _cases(COMMITTED, "set_rows_fp8", [
    ("llama3.2-1b_l16_decode-row13_per-head", dict(R=16, heads=8, D=64, rows=[13], scale_heads=8,
                                                    headroom=0.8)),
    ("qwen2.5-0.5b_l16_prefill-t8_per-tensor", dict(R=16, heads=2, D=64, rows=list(range(8)),
                                                     scale_heads=1)),
    ("f32_l8_scattered-t3_per-head", dict(R=8, heads=2, D=64, rows=[7, 0, 3], scale_heads=2,
                                          headroom=0.7, dtype="f32")),
    ("odd-d50_l8_t2_per-head", dict(R=8, heads=3, D=50, rows=[5, 2], scale_heads=3)),
])
CASES += _bf16_cases(COMMITTED, "set_rows_fp8", [
    ("llama3.2-1b_l16_scattered-t3_per-head", dict(R=16, heads=8, D=64, rows=[9, 0, 15],
                                                   scale_heads=8, headroom=0.8)),
    ("odd-d50_l8_t2_per-tensor", dict(R=8, heads=3, D=50, rows=[6, 1], scale_heads=1)),
])

# attention_decode_fp8 (an FP8 KV cache): every head dim the kernel takes (32, 64, 96, 128) with
# groups of up to 8 query heads a KV head and of more (MQA, 16:1), per-head and per-tensor
# scales, saturating calibrations (headroom < 1), ragged lengths from 1, both storage types.
_DECODE_FP8 = [
    ("qwen2.5-0.5b_d64_lens1-45_per-head", dict(QWEN, L=48, cache_lens=[1, 45], scale_heads=2,
                                                 headroom=0.9)),
    ("llama3-8b-gqa4_d128_lens66-5_per-tensor", dict(GQA4_D128, L=72, cache_lens=[66, 5],
                                                      scale_heads=1)),
    ("phi3-mini-4h_d96_len20_per-head", dict(nH=4, nKV=4, D=96, L=24, cache_lens=[20],
                                             scale_heads=4, headroom=0.8)),
    ("d32_lens33_per-head", dict(nH=4, nKV=2, D=32, L=40, cache_lens=[33], scale_heads=2)),
    ("mqa16_d64_len57_per-tensor", dict(nH=16, nKV=1, D=64, L=64, cache_lens=[57], scale_heads=1,
                                        vdist=outlier_channels((7, 40), 20.0))),
    ("gqa16_d128_len40_per-head", dict(nH=32, nKV=2, D=128, L=48, cache_lens=[40], scale_heads=2,
                                       qk=LOGIT_GROWTH)),
    ("mqa12_d96_len9_per-tensor", dict(nH=12, nKV=1, D=96, L=16, cache_lens=[9], scale_heads=1)),
    ("mqa16_d32_len70_per-tensor", dict(nH=16, nKV=1, D=32, L=72, cache_lens=[70], scale_heads=1,
                                        headroom=0.7)),
]
CASES += _cases(COMMITTED, "attention_decode_fp8", _DECODE_FP8)
CASES += _bf16_cases(COMMITTED, "attention_decode_fp8", [
    (name, dict(kw, L=min(kw["L"], 48), cache_lens=[min(n, 48) for n in kw["cache_lens"]]))
    for name, kw in _DECODE_FP8])

# Full tier: real model sizes, generated into golden/.cache (never committed).
BIG = (2048, 8192)  # 16.8M elements per tensor

CASES += _cases(FULL, "residual_add", [("big-2048x8192", dict(shape=BIG, inplace=False))])
CASES += _cases(FULL, "rmsnorm", [("big-2048x8192", dict(T=BIG[0], H=BIG[1], eps=1e-5))])
CASES += _cases(FULL, "layernorm", [("big-2048x8192", dict(T=BIG[0], H=BIG[1], eps=1e-5))])
CASES += _cases(FULL, "layernorm_residual", [
    ("big-2048x8192", dict(T=BIG[0], H=BIG[1], eps=1e-5)),
])
CASES += _cases(FULL, "rmsnorm_residual", [
    ("big-4096x4096", dict(T=4096, H=4096, eps=1e-5, inplace=False)),
])
CASES += _cases(FULL, "rope", [
    ("qwen2.5-0.5b_t2048", dict(QWEN, base=1e6, positions=list(range(2048)))),
    ("phi3-mini_t512", dict(PHI3, base=1e4, positions=list(range(512)))),
    # Prefill chunks at the end of the context window of each base.
    ("qwen2.5-7b_base1e6_pos30720-32767_t2048",
     dict(QWEN7B, base=1e6, positions=list(range(30720, 32768)))),
    ("llama3.1-8b_base5e5_pos129024-131071_t2048",
     dict(LLAMA3, base=5e5, positions=list(range(129024, 131072)))),
    ("phi3-mini_base1e4_pos130560-131071_t512",
     dict(PHI3, base=1e4, positions=list(range(130560, 131072)))),
    ("partial-r64-d128_base1e4_pos130048-131071_t1024",
     dict(nH=32, nKV=8, D=128, rope_dim=64, base=1e4, positions=list(range(130048, 131072)))),
    # 16 sequences of 64 tokens each starting at a different depth: a ragged batched prefill.
    ("ragged-16seq-to-131071_base5e5_t1024",
     dict(LLAMA3, base=5e5, positions=[start + t for start in range(8128, 131072, 8192)
                                       for t in range(64)])),
    # Scaled RoPE: 2048-token prefill chunks at the end of the 128k context (llama3, yarn), a
    # LongRoPE prefill straddling 4096 with long_from 0 (a prompt past the original context: every
    # token long), and 16 ragged LongRoPE sequences of 64 tokens around and far past long_from
    # 4096 (one crossing it: 4064-4127).
    ("llama3.1-8b-llama3_pos129024-131071_t2048",
     dict(LLAMA3, scaling="llama3.1-8b", positions=list(range(129024, 131072)))),
    ("qwen2.5-7b-yarn4_pos129024-131071_t2048",
     dict(QWEN7B, scaling="qwen2.5-7b-yarn", positions=list(range(129024, 131072)))),
    ("phi3.5-mini-longrope_prefill-all-long_pos3072-5119_t2048",
     dict(PHI3, scaling="phi3.5-mini", long_from=0, positions=list(range(3072, 5120)))),
    ("phi3.5-mini-longrope_ragged-16seq_t1024",
     dict(PHI3, scaling="phi3.5-mini", long_from=4096,
          positions=[start + t for start in (0, 1024, 2048, 3072, 4032, 4064, 4096, 8128, 16320,
                                             32704, 49152, 65472, 81920, 98240, 114688, 131008)
                     for t in range(64)])),
])
CASES += _cases(FULL, "gelu", [("big-2048x8192", dict(T=BIG[0], H=BIG[1]))])
CASES += _cases(FULL, "gelu_tanh", [("big-2048x8192", dict(T=BIG[0], H=BIG[1]))])
CASES += _cases(FULL, "gelu_scale", [
    ("big-2048x8192_erf_s0.125", dict(T=BIG[0], H=BIG[1], gelu="erf", scale=0.125)),
    ("big-2048x8192_tanh_s-1oversqrt2_inplace", dict(T=BIG[0], H=BIG[1], gelu="tanh",
                                                     scale=-(2 ** -0.5), inplace=True)),
])
CASES += _cases(FULL, "swiglu", [("big-2048x8192", dict(T=BIG[0], ffn=BIG[1]))])
CASES += _cases(FULL, "quant_fp8", [
    ("dynamic-per-token_big-2048x8192", dict(T=BIG[0], H=BIG[1], mode="dynamic",
                                             group_size=BIG[1])),
])
# DeepSeek-V3's hidden size (7168) as N and K: a prefill chunk and a decode batch with block
# scales; Llama-3-8B-like 4096 x 4096 with per-channel scales.
CASES += _cases(FULL, "gemm_fp8", [
    ("block_deepseek-v3-h7168_prefill-m4096_out-bf16",
     dict(M=4096, N=7168, K=7168, scales="block", out_dtype="bf16")),
    ("block_deepseek-v3-h7168_decode-m16_out-bf16",
     dict(M=16, N=7168, K=7168, scales="block", out_dtype="bf16")),
    ("channel_m2048-n4096-k4096_out-bf16",
     dict(M=2048, N=4096, K=4096, scales="channel", out_dtype="bf16")),
])
# Llama-3-8B's MLP at decode (AWQ) and a prefill chunk (GPTQ with act-order).
CASES += _cases(FULL, "gemm_w4a16", [
    ("awq-g128_llama3-8b-up_decode-m1", dict(M=1, N=14336, K=4096, format="awq", group_size=128)),
    ("gptq-act-order-g128_llama3-8b-down_m512",
     dict(M=512, N=4096, K=14336, format="gptq", group_size=128, act_order=True)),
    # the decode gemv at real widths: act-order's per-row groups over K = 14336, and one group
    # the whole of K (GPTQ's group_size -1) at 16 rows
    ("gptq-act-order-g128_llama3-8b-down_decode-m4",
     dict(M=4, N=4096, K=14336, format="gptq", group_size=128, act_order=True)),
    ("gptq-sym-channel_llama3-8b-up_decode-m16",
     dict(M=16, N=14336, K=4096, format="gptq", group_size=4096, sym=True)),
])
# An FP8 KV cache at Llama-3-8B's and Qwen2.5-0.5B's decode shapes: 4096-position caches,
# ragged batches, per-head scales.
CASES += _cases(FULL, "attention_decode_fp8", [
    ("llama3-8b-gqa4_d128_b4_l4096_per-head", dict(GQA4_D128, L=4096, cache_lens=[4096, 3001, 17, 2048],
                                                   scale_heads=2, headroom=0.9)),
    ("qwen2.5-0.5b_d64_b8_l4096_per-tensor", dict(QWEN, L=4096, cache_lens=[4096, 1, 777, 4000, 2048, 64,
                                                                          4095, 1500], scale_heads=1)),
])
CASES += _cases(FULL, "set_rows_fp8", [
    ("llama3-8b_l4096_prefill-t2048_per-head", dict(R=4096, heads=8, D=128, rows=list(range(1000, 3048)),
                                                    scale_heads=8, headroom=0.9)),
])
CASES += _cases(FULL, "softmax", [
    ("qwen2.5-vocab-f32_t32", dict(T=32, N=151936, dtype="f32", dist=normal(3.0),
                                   mask=random_mask(0.01))),
])
CASES += _cases(FULL, "gemm_swiglu", [
    ("qwen2.5-0.5b_decode-t1", dict(T=1, H=896, ffn=4864)),
    ("qwen2.5-0.5b_t16", dict(T=16, H=896, ffn=4864)),
    ("phi3-mini_decode-t1", dict(T=1, H=3072, ffn=8192)),
    ("phi3-mini_t4", dict(T=4, H=3072, ffn=8192)),
])
CASES += _cases(FULL, "attention_scores_softmax", [
    ("qwen2.5-0.5b_s512", dict(QWEN, B=1, Sq=512, Sk=512)),
    ("phi3-mini_s256", dict(PHI3, B=1, Sq=256, Sk=256)),
    ("gpt2_chunk_q64-k1024", dict(GPT2, B=1, Sq=64, Sk=1024)),
])
CASES += _cases(FULL, "rmsnorm_gemm", [
    ("qwen2.5-0.5b-qkv_decode-t1", dict(T=1, H=896, N=1152, bias=True, residual=True)),
    ("qwen2.5-0.5b-gate-up_decode-t1", dict(T=1, H=896, N=9728, bias=False, residual=True)),
    ("phi3-mini-qkv_decode-t1", dict(T=1, H=3072, N=9216, bias=False, residual=True, eps=1e-5)),
    ("phi3-mini-gate-up_decode-t16", dict(T=16, H=3072, N=16384, bias=False, residual=True, eps=1e-5)),
    ("qwen2.5-0.5b-qkv_prefill-t2048", dict(T=2048, H=896, N=1152, bias=True, residual=True)),
    ("phi3-mini-qkv_prefill-t512", dict(T=512, H=3072, N=9216, bias=False, residual=False, eps=1e-5)),
])
CASES += _cases(FULL, "layernorm_gemm", [
    ("gpt2-qkv_decode-t1", dict(T=1, H=768, N=2304, bias=True, residual=True)),
    ("gpt2-qkv_decode-t1_first-layer", dict(T=1, H=768, N=2304, bias=True, residual=False)),
    ("phi2-qkv_decode-t4", dict(T=4, H=2560, N=7680, bias=True, residual=True)),
    ("gpt2-qkv_prefill-t1024", dict(T=1024, H=768, N=2304, bias=True, residual=True)),
])
CASES += _cases(FULL, "swiglu_gemm", [
    ("qwen2.5-0.5b_decode-t1", dict(T=1, ffn=4864, N=896)),
    ("phi3-mini_decode-t1", dict(T=1, ffn=8192, N=3072)),
    ("qwen2.5-0.5b_t16", dict(T=16, ffn=4864, N=896)),
])
CASES += _cases(FULL, "gpt_ffn", [
    ("gpt2_decode-t1", dict(T=1, H=768, ffn=3072, gelu="tanh")),
    ("gpt2_decode-t8_erf", dict(T=8, H=768, ffn=3072, gelu="erf")),
    ("gpt2_prefill-t1024", dict(T=1024, H=768, ffn=3072, gelu="tanh")),
    ("phi2_decode-t1", dict(T=1, H=2560, ffn=10240, gelu="tanh")),
    # GPT-2-large's hidden width with a narrow intermediate at 512 prefill rows (both GELUs, with
    # and without biases), its decode rows, and its real intermediate (5120)
    ("narrow-h1280-f64_prefill-t512_tanh", dict(T=512, H=1280, ffn=64, gelu="tanh")),
    ("narrow-h1280-f64_prefill-t512_tanh_no-bias", dict(T=512, H=1280, ffn=64, gelu="tanh",
                                                         bias=False)),
    ("narrow-h1280-f64_prefill-t512_erf", dict(T=512, H=1280, ffn=64, gelu="erf")),
    ("narrow-h1280-f64_decode-t8_tanh_no-bias", dict(T=8, H=1280, ffn=64, gelu="tanh", bias=False)),
    ("gpt2-large_prefill-t512", dict(T=512, H=1280, ffn=5120, gelu="tanh")),
])
CASES += _cases(FULL, "swiglu_ffn", [
    ("qwen2.5-0.5b_t16", dict(T=16, H=896, ffn=4864)),
    ("phi3-mini_t4", dict(T=4, H=3072, ffn=8192)),
    ("h896-f512_t4", dict(T=4, H=896, ffn=512)),
    ("h896-f256_t1", dict(T=1, H=896, ffn=256)),
    ("h256-f688_t33", dict(T=33, H=256, ffn=688)),
])
CASES += _cases(FULL, "gemm", [
    ("phi3-mini-qkv_proj_m8", dict(M=8, N=9216, K=3072, has_bias=False, out_dtype="f16")),
    ("phi3-mini-gate_up_m8", dict(M=8, N=16384, K=3072, has_bias=False, out_dtype="f16")),
    ("gpt2-c_fc_m16", dict(M=16, N=3072, K=768, has_bias=True, out_dtype="f16")),
    ("gpt2-c_proj_m5", dict(M=5, N=768, K=768, has_bias=False, out_dtype="f16")),
    ("decode-m1-n896-k512", dict(M=1, N=896, K=512, has_bias=False, out_dtype="f16")),
    ("logits-m2-n4096-k256_f32", dict(M=2, N=4096, K=256, has_bias=False, out_dtype="f32")),
    ("qwen2.5-0.5b-lm_head_m1_f32", dict(M=1, N=151936, K=896, has_bias=False,
                                         out_dtype="f32")),
])
CASES += _cases(FULL, "attention_decode", [
    ("gpt2_len4096", dict(GPT2, L=4096, cache_lens=[4096])),
    ("qwen2.5-0.5b_len4096", dict(QWEN, L=4096, cache_lens=[4096])),
    ("phi3-mini_len4096", dict(PHI3, L=4096, cache_lens=[4096])),
    ("qwen2.5-0.5b_b4_len4096", dict(QWEN, L=4096, cache_lens=[4096, 4096, 4096, 4096])),
    ("gpt2_len512_l600", dict(GPT2, L=600, cache_lens=[512])),
    ("phi3-mini_len256", dict(PHI3, L=256, cache_lens=[256])),
    # A decode batch of 17 Phi-2 sequences (MHA, head_dim 80) at up to its 2048-token context:
    # 17 x 32 (sequence, KV head) pairs is past 4x the SMs of an H100 or H200, so the second
    # decode kernel runs each cache unsplit and a thread sums ~170 keys, where an accumulator
    # of reduced precision shows (the committed cases split every cache into 64-key chunks).
    ("phi2-b17-mha_d80_lens495-2047",
     dict(PHI2, nH=32, nKV=32, L=2048, cache_lens=[2047 - 97 * i for i in range(17)])),
    # More (sequence, KV head) groups than an H100 or H200 holds blocks at once (512 and 576):
    # the tensor-core kernel then raises the key splits above one to fill its waves
    # (decode_splits), with ragged lengths so some splits of the short caches are empty.
    ("phi3-mini_b16_lens61-256", dict(PHI3, L=256, cache_lens=[256 - 13 * i for i in range(16)])),
    ("gpt2_b48_lens33-128", dict(GPT2, L=128, cache_lens=[128 - 2 * i for i in range(48)])),
])
# Paged decode at the real widths: 16 ragged Llama-3.2-1B sequences (1 to 4096: page boundaries,
# one past and one short of them) at vLLM's default block size of 16, Qwen2.5-0.5B's whole
# context through pages of 16 and of 256, Llama-3-8B's 32 heads of 128 through pages of 32.
RAGGED16 = [4096, 1, 4095, 17, 2048, 3001, 16, 777, 4000, 64, 1500, 255, 3333, 2, 1024, 2049]
CASES += _cases(FULL, "attention_decode_paged", [
    ("llama3.2-1b_bs16_b16_lens1-4096", dict(LLAMA32_1B, block_size=16, cache_lens=RAGGED16)),
    ("qwen2.5-0.5b_bs16_len4096", dict(QWEN, block_size=16, cache_lens=[4096])),
    ("qwen2.5-0.5b_bs256_len4096", dict(QWEN, block_size=256, cache_lens=[4096])),
    ("llama3-8b_d128_bs32_b4_lens17-4096", dict(LLAMA3, block_size=32,
                                                cache_lens=[4096, 3001, 17, 2048])),
])
# Paged prefill at the real widths, pages of 16 unless stated: Llama-3.2-1B's chunked prefill
# of 512 tokens on a 3584-token prefix (the chunk a 4096 context ends with); a mixed batch of
# Qwen2.5-0.5B sequences, a plain prefill, two decodes (on prefixes of 1000 and 2047) and a
# 700-token chunk on a 500-token prefix; Llama-3-8B's 32 heads of 128 through pages of 32, 256
# new tokens on a 1024-token prefix beside a plain prefill of 256.
CASES += _cases(FULL, "attention_prefill_paged", [
    ("llama3.2-1b_bs16_pre3584_new512", dict(LLAMA32_1B, block_size=16, seqs=[(3584, 512)])),
    ("qwen2.5-0.5b_bs16_b4_pre0-1000-2047-500_new300-1-1-700",
     dict(QWEN, block_size=16, seqs=[(0, 300), (1000, 1), (2047, 1), (500, 700)])),
    ("llama3-8b_d128_bs32_b2_pre1024-0_new256-256", dict(LLAMA3, block_size=32,
                                                         seqs=[(1024, 256), (0, 256)])),
])
CASES += _cases(FULL, "attention_prefill", [
    # The lengths the models reach: Qwen2.5-0.5B's 14 heads at 2048 (the benchmark shape) and
    # Phi-3-mini-4k's whole context, 4096, at 4 of its 32 heads.
    ("qwen2.5-0.5b_s2048", dict(QWEN, B=1, S=2048)),
    ("phi3-mini-4heads_s4096", dict(nH=4, nKV=4, D=96, B=1, S=4096)),
    ("phi3-mini_s512", dict(PHI3, B=1, S=512)),
    ("qwen2.5-0.5b_s128", dict(QWEN, B=1, S=128)),
    ("gpt2_b2_s32", dict(GPT2, B=2, S=32)),
])
CASES += _cases(FULL, "embedding", [
    ("qwen2.5-0.5b-full-vocab_t16", dict(V=151936, H=896, T=16)),
    ("qwen2.5-0.5b-v1024_t8", dict(V=1024, H=896, T=8)),
    ("gpt2-v2000_t8", dict(V=2000, H=768, T=8)),
    ("phi3-mini-v256_t4", dict(V=256, H=3072, T=4)),
])
CASES += _cases(FULL, "set_rows", [
    ("phi3-mini_l4096_decode-row3001", dict(R=4096, row=PHI3_KV, rows=[3001])),
])
CASES += _cases(FULL, "pos_embedding", [
    ("gpt2_decode-pos1023_t1", dict(H=768, P=1024, positions=[1023])),
    ("gpt2-p1024_t8", dict(H=768, P=1024, positions=list(range(8)))),
    ("gpt2-p1024_2seq-t5", dict(H=768, P=1024, positions=[0, 1, 2, 3, 4, 0, 1, 2, 3, 4])),
])

# Full tier, bf16: twins of the main full-tier cases at model sizes, and Llama-3.2-1B's (the bf16
# model set llama3.2-1b-bf16) where the fp16 tier has only other models.
LLAMA32_1B_KV = (8, 64)
for _op in ("residual_add", "rmsnorm", "layernorm", "layernorm_residual", "gelu", "gelu_tanh",
            "swiglu"):
    CASES += _bf16_cases(FULL, _op, [
        ("big-2048x8192", dict(shape=BIG, inplace=False) if _op == "residual_add" else
         dict(T=BIG[0], ffn=BIG[1]) if _op == "swiglu" else
         dict(T=BIG[0], H=BIG[1]) if _op.startswith("gelu") else
         dict(T=BIG[0], H=BIG[1], eps=1e-5)),
    ])
CASES += _bf16_cases(FULL, "rmsnorm_residual", [
    ("big-4096x4096", dict(T=4096, H=4096, eps=1e-5, inplace=False)),
])
CASES += _bf16_cases(FULL, "quant_fp8", [
    ("dynamic-g128_big-4096x4096", dict(T=4096, H=4096, mode="dynamic", group_size=128)),
])
# The fused FP8 quantisers at real sizes: Llama-3-8B's hidden (4096) and intermediate (14336)
# sizes at a 4096- and 2048-token prefill, fine-grained groups; per token at 2048 x 8192.
CASES += _bf16_cases(FULL, "rmsnorm_quant_fp8", [
    ("dynamic-g128_residual_llama3-8b_t4096",
     dict(T=4096, H=4096, eps=1e-5, mode="dynamic", group_size=128, residual=True)),
])
CASES += _cases(FULL, "rmsnorm_quant_fp8", [
    ("dynamic-per-token_big-2048x8192",
     dict(T=BIG[0], H=BIG[1], eps=1e-5, mode="dynamic", group_size=BIG[1])),
])
CASES += _bf16_cases(FULL, "swiglu_quant_fp8", [
    ("dynamic-g128_llama3-8b_t2048", dict(T=2048, ffn=14336, mode="dynamic", group_size=128)),
])
CASES += _cases(FULL, "swiglu_quant_fp8", [
    ("dynamic-per-token_big-2048x8192", dict(T=BIG[0], ffn=BIG[1], mode="dynamic",
                                             group_size=BIG[1])),
])
CASES += _bf16_cases(FULL, "gelu_scale", [
    ("big-2048x8192_erf_s0.125", dict(T=BIG[0], H=BIG[1], gelu="erf", scale=0.125)),
])
CASES += _bf16_cases(FULL, "rope", [
    ("qwen2.5-0.5b_t2048", dict(QWEN, base=1e6, positions=list(range(2048)))),
    ("llama3.2-1b-llama3_pos129024-131071_t2048",
     dict(LLAMA32_1B, scaling="llama3.2-1b", positions=list(range(129024, 131072)))),
    ("llama3.1-8b-llama3_pos129024-131071_t2048",
     dict(LLAMA3, scaling="llama3.1-8b", positions=list(range(129024, 131072)))),
])
CASES += _bf16_cases(FULL, "softmax", [
    ("qwen2.5-vocab_t32", dict(T=32, N=151936, dtype="bf16", dist=normal(3.0),
                               mask=random_mask(0.01))),
])
CASES += _bf16_cases(FULL, "gemm_swiglu", [
    ("qwen2.5-0.5b_decode-t1", dict(T=1, H=896, ffn=4864)),
    ("qwen2.5-0.5b_t16", dict(T=16, H=896, ffn=4864)),
    ("llama3.2-1b_decode-t1", dict(T=1, H=2048, ffn=8192)),
    ("llama3.2-1b_t16", dict(T=16, H=2048, ffn=8192)),
])
CASES += _bf16_cases(FULL, "attention_scores_softmax", [
    ("qwen2.5-0.5b_s512", dict(QWEN, B=1, Sq=512, Sk=512)),
    ("llama3.2-1b_s512", dict(LLAMA32_1B, B=1, Sq=512, Sk=512)),
])
CASES += _bf16_cases(FULL, "rmsnorm_gemm", [
    ("qwen2.5-0.5b-qkv_decode-t1", dict(T=1, H=896, N=1152, bias=True, residual=True)),
    ("qwen2.5-0.5b-qkv_prefill-t2048", dict(T=2048, H=896, N=1152, bias=True, residual=True)),
    ("llama3.2-1b-qkv_decode-t1", dict(T=1, H=2048, N=3072, bias=False, residual=True, eps=1e-5)),
    ("llama3.2-1b-gate-up_decode-t1", dict(T=1, H=2048, N=16384, bias=False, residual=True,
                                           eps=1e-5)),
    ("llama3.2-1b-qkv_prefill-t2048", dict(T=2048, H=2048, N=3072, bias=False, residual=True,
                                           eps=1e-5)),
])
CASES += _bf16_cases(FULL, "layernorm_gemm", [
    ("gpt2-qkv_decode-t1", dict(T=1, H=768, N=2304, bias=True, residual=True)),
    ("gpt2-qkv_prefill-t1024", dict(T=1024, H=768, N=2304, bias=True, residual=True)),
])
CASES += _bf16_cases(FULL, "swiglu_gemm", [
    ("qwen2.5-0.5b_decode-t1", dict(T=1, ffn=4864, N=896)),
    ("llama3.2-1b_decode-t1", dict(T=1, ffn=8192, N=2048)),
    ("llama3.2-1b_t16", dict(T=16, ffn=8192, N=2048)),
])
CASES += _bf16_cases(FULL, "gpt_ffn", [
    ("gpt2_decode-t1", dict(T=1, H=768, ffn=3072, gelu="tanh")),
    ("gpt2_prefill-t1024", dict(T=1024, H=768, ffn=3072, gelu="tanh")),
    ("narrow-h1280-f64_prefill-t512_tanh_no-bias", dict(T=512, H=1280, ffn=64, gelu="tanh",
                                                         bias=False)),
])
CASES += _bf16_cases(FULL, "swiglu_ffn", [
    ("qwen2.5-0.5b_t16", dict(T=16, H=896, ffn=4864)),
    ("llama3.2-1b_t4", dict(T=4, H=2048, ffn=8192)),
])
CASES += _bf16_cases(FULL, "gemm", [
    ("llama3.2-1b-qkv_proj_m8", dict(M=8, N=3072, K=2048, has_bias=False, out_dtype="bf16")),
    ("llama3.2-1b-gate_up_m8", dict(M=8, N=16384, K=2048, has_bias=False, out_dtype="bf16")),
    ("llama3.2-1b-down_proj_m4", dict(M=4, N=2048, K=8192, has_bias=False, out_dtype="bf16")),
    ("qwen2.5-0.5b-lm_head_m1_f32", dict(M=1, N=151936, K=896, has_bias=False,
                                         out_dtype="f32")),
])
CASES += _bf16_cases(FULL, "attention_decode", [
    ("qwen2.5-0.5b_len4096", dict(QWEN, L=4096, cache_lens=[4096])),
    ("llama3.2-1b_len4096", dict(LLAMA32_1B, L=4096, cache_lens=[4096])),
    ("llama3.2-1b_b4_len4096", dict(LLAMA32_1B, L=4096, cache_lens=[4096, 4096, 4096, 4096])),
    ("phi2-b17-mha_d80_lens495-2047",
     dict(PHI2, nH=32, nKV=32, L=2048, cache_lens=[2047 - 97 * i for i in range(17)])),
    ("phi3-mini_b16_lens61-256", dict(PHI3, L=256, cache_lens=[256 - 13 * i for i in range(16)])),
])
CASES += _bf16_cases(FULL, "attention_decode_paged", [
    ("llama3.2-1b_bs16_b16_lens1-4096", dict(LLAMA32_1B, block_size=16, cache_lens=RAGGED16)),
])
CASES += _bf16_cases(FULL, "attention_prefill", [
    ("qwen2.5-0.5b_s2048", dict(QWEN, B=1, S=2048)),
    ("llama3.2-1b_s2048", dict(LLAMA32_1B, B=1, S=2048)),
])
CASES += _bf16_cases(FULL, "embedding", [
    ("qwen2.5-0.5b-full-vocab_t16", dict(V=151936, H=896, T=16)),
    ("llama3.2-1b-v1024_t8", dict(V=1024, H=2048, T=8)),
])
CASES += _bf16_cases(FULL, "set_rows", [
    ("llama3.2-1b_l4096_decode-row3001", dict(R=4096, row=LLAMA32_1B_KV, rows=[3001],
                                              dtype="bf16")),
])
CASES += _bf16_cases(FULL, "pos_embedding", [
    ("gpt2-p1024_t8", dict(H=768, P=1024, positions=list(range(8)))),
])


# ---------------------------------------------------------------------------------------------
# Mixture of experts (transformers 5's MixtralTopKRouter / Qwen3MoeTopKRouter and
# MixtralExperts). Router widths of the real models: Mixtral-8x7B 8 experts, top 2,
# renormalised; Qwen3-30B-A3B 128, top 8, norm_topk_prob; Qwen1.5-MoE-A2.7B 60 (no multiple of
# 32), top 4, not renormalised. Router logits N(0, 2^2) unless a case says otherwise.


def int_logits(lo, hi, step=1.0):
    """Router logits on a grid: step * a uniform integer in [lo, hi): many exact ties among each
    row's top values (equal logits, so equal probabilities, at the k-th place and inside the
    top k), which the contract breaks to the lower expert index."""
    return lambda r, shape: step * r.randint(lo, hi, shape).to(F64)


def outlier_expert(expert, mean, gap):
    """N(mean, 1) logits with `expert` in every row gap + U(0, 1) above the row's largest other
    logit: that expert always first, the others' probabilities e^-gap and below. A mean near 90
    puts the outlier past 88.7, where an fp32 exp without the row's maximum subtracted
    overflows."""
    def draw(r, shape):
        x = mean + r.randn(shape)
        others = torch.cat([x[:, :expert], x[:, expert + 1:]], dim=1)
        x[:, expert] = others.max(-1).values + gap + r.rand(shape[:1])
        return x
    return draw


def hot_expert(expert, seconds):
    """Router logits where every token picks `expert` first (0.5 + U(0, 1) above the rest of its
    row) and one of `seconds` second: the other experts sit 5.5 below and stay idle. One expert
    takes every token, most take none (a collapsed router, or a batch of one topic)."""
    def draw(r, shape):
        x = -4.0 + 0.5 * r.randn(shape)
        x[:, list(seconds)] = 1.5 + 0.5 * r.randn((shape[0], len(seconds)))
        x[:, expert] = x.max(-1).values + 0.5 + r.rand(shape[:1])
        return x
    return draw


MIXTRAL_ROUTER = dict(E=8, top_k=2, renormalize=True)
QWEN3_MOE_ROUTER = dict(E=128, top_k=8, renormalize=True)
QWEN15_MOE_ROUTER = dict(E=60, top_k=4, renormalize=False)
CASES += _cases(COMMITTED, "moe_router", [
    ("mixtral_e8-k2_t7", dict(MIXTRAL_ROUTER, T=7)),
    ("mixtral_e8-k2_decode-t1", dict(MIXTRAL_ROUTER, T=1)),
    ("qwen3-moe_e128-k8_t7", dict(QWEN3_MOE_ROUTER, T=7)),
    ("qwen3-moe_e128-k8_t33", dict(QWEN3_MOE_ROUTER, T=33)),
    ("qwen1.5-moe_e60-k4_t33_no-renorm", dict(QWEN15_MOE_ROUTER, T=33)),
    # k = E: every expert, the whole row sorted
    ("all-experts_e8-k8_t3", dict(E=8, top_k=8, renormalize=True, T=3)),
    # integer logits 0..3: ties at the k-th place, inside the top 2, and none, row by row
    ("ties-int_e8-k2_t33", dict(MIXTRAL_ROUTER, T=33, dist=int_logits(0, 4))),
    # expert 5 8 above the rest, logits near 90: e^90 overflows fp32 without the max subtracted
    ("outlier-expert5-near90_e8-k2_t7", dict(MIXTRAL_ROUTER, T=7,
                                               dist=outlier_expert(5, 84.0, 8.0))),
])
CASES += _bf16_cases(COMMITTED, "moe_router", [
    ("mixtral_e8-k2_t7", dict(MIXTRAL_ROUTER, T=7)),
    ("qwen3-moe_e128-k8_t7", dict(QWEN3_MOE_ROUTER, T=7)),
    # logits 0, 0.5, .., 11.5 over 128 experts: about 5 experts a level, so the 8th place ties
    ("ties-half-int_e128-k8_t33", dict(QWEN3_MOE_ROUTER, T=33, dist=int_logits(0, 24, 0.5))),
])
CASES += _cases(FULL, "moe_router", [
    ("qwen3-moe_e128-k8_t4096", dict(QWEN3_MOE_ROUTER, T=4096)),
    ("qwen3-moe_e128-k8_t4096_no-renorm", dict(QWEN3_MOE_ROUTER, T=4096, renormalize=False)),
    ("mixtral_e8-k2_t2048", dict(MIXTRAL_ROUTER, T=2048)),
    ("e256-k8_t4096", dict(E=256, top_k=8, renormalize=True, T=4096)),
])

# The expert block: SwiGLU experts stored as transformers 5 stores them (gate_up [E, 2F, H],
# down [E, H, F]). The committed golden budget is nearly spent, so the committed experts are
# tiny (E x 2F x H + E x H x F 16-bit values: 96 KB for Mixtral-like E=8 H=64 F=32, 192 KB for
# Qwen3-like E=64 H=32 F=16); the full tier has the real models: Qwen3-30B-A3B (128 experts,
# top 8, hidden 2048, moe_intermediate 768) and Mixtral-8x7B (8, top 2, 4096, 14336: 2.8 GB of
# experts a set).
MIXTRAL_LIKE = dict(E=8, top_k=2, H=64, ffn=32)
QWEN3_MOE_LIKE = dict(E=64, top_k=8, H=32, ffn=16)
HOT3 = dict(E=8, top_k=2, H=32, ffn=16, logits=hot_expert(3, (0, 6)))
CASES += _cases(COMMITTED, "moe_ffn", [
    ("mixtral-like_e8-k2-h64-f32_decode-t5", dict(MIXTRAL_LIKE, T=5)),
    ("mixtral-like_e8-k2-h64-f32_prefill-t40", dict(MIXTRAL_LIKE, T=40)),
    ("mixtral-like_e8-k2-h64-f32_decode-t1", dict(MIXTRAL_LIKE, T=1)),
    ("qwen3-moe-like_e64-k8-h32-f16_t3", dict(QWEN3_MOE_LIKE, T=3)),
    # every token: expert 3 first, expert 0 or 6 second; experts 1, 2, 4, 5 and 7 idle
    ("hot-expert3_e8-k2-h32-f16_t16", dict(HOT3, T=16)),
    # 16 choices an expert on average: the CUDA kernels' 64-row tiles (prefill)
    ("mixtral-like_e8-k2-h32-f16_prefill-t64", dict(MIXTRAL_LIKE, H=32, ffn=16, T=64)),
])
CASES += _bf16_cases(COMMITTED, "moe_ffn", [
    ("mixtral-like_e8-k2-h64-f32_decode-t5", dict(MIXTRAL_LIKE, T=5)),
    ("hot-expert3_e8-k2-h32-f16_t16", dict(HOT3, T=16)),
    ("mixtral-like_e8-k2-h32-f16_prefill-t64", dict(MIXTRAL_LIKE, H=32, ffn=16, T=64)),
])
QWEN3_30B_A3B = dict(E=128, top_k=8, H=2048, ffn=768)
MIXTRAL_8X7B = dict(E=8, top_k=2, H=4096, ffn=14336)
CASES += _cases(FULL, "moe_ffn", [
    ("qwen3-30b-a3b_e128-k8-h2048-f768_decode-t8", dict(QWEN3_30B_A3B, T=8)),
    ("qwen3-30b-a3b_e128-k8-h2048-f768_prefill-t1024", dict(QWEN3_30B_A3B, T=1024)),
    ("mixtral-8x7b_e8-k2-h4096-f14336_decode-t4", dict(MIXTRAL_8X7B, T=4)),
    ("mixtral-8x7b_e8-k2-h4096-f14336_prefill-t512", dict(MIXTRAL_8X7B, T=512)),
])
CASES += _bf16_cases(FULL, "moe_ffn", [
    ("qwen3-30b-a3b_e128-k8-h2048-f768_decode-t8", dict(QWEN3_30B_A3B, T=8)),
])


# ---------------------------------------------------------------------------------------------
# Gemma 3 (transformers' Gemma3ForCausalLM): its RMSNorm's fp32 weight 1 + w (rmsnorm and
# rmsnorm_residual with w32), its scaled embedding (sqrt(hidden) rounded to the storage type) and
# its GeGLU MLP (geglu, gelu_pytorch_tanh). Gemma-3-1B: hidden 1152, 4 q / 1 kv heads of 256, ffn
# 6912, vocab 262144; Gemma-3-4B: hidden 2560, 8 q / 4 kv heads of 256, ffn 10240; rms eps 1e-6.
# The fp32-weight row kernels take every plan once in fp16 and bf16 (1152: vec<1>, 2560: vec<2>,
# 4104 and 8200: vec<4> and vec<8> at their narrowest widths, as the bf16 cases do), the
# per-head q/k norm its rows of head_dim 256; outlier channels (|x| ~ 20) dominate a row's rms.
GEMMA3_1B, GEMMA3_4B = 1152, 2560
CASES += _cases(COMMITTED, "rmsnorm", [
    ("gemma-3-1b_w32_t4", dict(T=4, H=GEMMA3_1B, eps=1e-6, w32=True)),                # vec<1, float>
    ("gemma-3-4b_w32_t2", dict(T=2, H=GEMMA3_4B, eps=1e-6, w32=True)),                # vec<2, float>
    # q_norm over each head of 2 tokens x 8 query heads: 16 rows of 256
    ("gemma-3-4b-q-norm_d256_w32_t16", dict(T=16, H=256, eps=1e-6, w32=True)),
    ("outliers-x20_gemma-3-1b_w32_t2", dict(T=2, H=GEMMA3_1B, eps=1e-6, w32=True, dist=OUTLIERS)),
    ("h4104_w32_t1", dict(T=1, H=4104, eps=1e-6, w32=True)),                          # vec<4, float>
    ("h8200_w32_t1", dict(T=1, H=8200, eps=1e-6, w32=True)),                          # vec<8, float>
])
CASES += _bf16_cases(COMMITTED, "rmsnorm", [
    ("gemma-3-1b_w32_t2", dict(T=2, H=GEMMA3_1B, eps=1e-6, w32=True)),
    ("gemma-3-4b_w32_t1", dict(T=1, H=GEMMA3_4B, eps=1e-6, w32=True)),
    # k_norm over each head of 2 tokens x 4 kv heads
    ("gemma-3-4b-k-norm_d256_w32_t8", dict(T=8, H=256, eps=1e-6, w32=True)),
    ("h4104_w32_t1", dict(T=1, H=4104, eps=1e-6, w32=True)),
    ("h8200_w32_t1", dict(T=1, H=8200, eps=1e-6, w32=True)),
])
CASES += _cases(COMMITTED, "rmsnorm_residual", [
    ("gemma-3-1b_w32_t2", dict(T=2, H=GEMMA3_1B, eps=1e-6, inplace=False, w32=True)),
    ("gemma-3-4b_w32_t1_inplace", dict(T=1, H=GEMMA3_4B, eps=1e-6, inplace=True, w32=True)),
    ("outliers-x20_gemma-3-1b_w32_t2", dict(T=2, H=GEMMA3_1B, eps=1e-6, inplace=False, w32=True,
                                            dist=OUTLIERS)),
    ("h4104_w32_t1_inplace", dict(T=1, H=4104, eps=1e-6, inplace=True, w32=True)),
    ("h8200_w32_t1", dict(T=1, H=8200, eps=1e-6, inplace=False, w32=True)),
])
CASES += _bf16_cases(COMMITTED, "rmsnorm_residual", [
    ("gemma-3-1b_w32_t1_inplace", dict(T=1, H=GEMMA3_1B, eps=1e-6, inplace=True, w32=True)),
    ("gemma-3-4b_w32_t2", dict(T=2, H=GEMMA3_4B, eps=1e-6, inplace=False, w32=True)),
    ("h4104_w32_t1", dict(T=1, H=4104, eps=1e-6, inplace=False, w32=True)),
    ("h8200_w32_t1_inplace", dict(T=1, H=8200, eps=1e-6, inplace=True, w32=True)),
])
# The scaled gather: ids at 0 and vocab - 1 (embedding's draw), sqrt(1152) = 33.94 (33.9375 in
# fp16, 34 in bf16), sqrt(2560); odd rows 3000 times larger, so that half of their products pass
# fp16's 65504 (|x| > 0.64) and round to inf, as the reference's fp16 product does.
CASES += _cases(COMMITTED, "embedding", [
    ("gemma-3-1b-v8_t4_scaled", dict(V=8, H=GEMMA3_1B, T=4, scale=math.sqrt(GEMMA3_1B))),
    ("gemma-3-4b-v4_t2_scaled", dict(V=4, H=GEMMA3_4B, T=2, scale=math.sqrt(GEMMA3_4B))),
    ("overflow-inf_gemma-3-1b-v8_t4_scaled", dict(V=8, H=GEMMA3_1B, T=4, scale=math.sqrt(GEMMA3_1B),
                                                  dist=odd_rows_scaled(3000.0))),
])
CASES += _bf16_cases(COMMITTED, "embedding", [
    ("gemma-3-1b-v8_t3_scaled", dict(V=8, H=GEMMA3_1B, T=3, scale=math.sqrt(GEMMA3_1B))),
])
# GeGLU at Gemma-3-1B's ffn, both GELUs (the tanh one is Gemma's); a length that is no multiple of
# 8 (the vector loop's scalar tail); gates to +-40 (tanh's tails: gelu(-40) underflows to -0,
# gelu(40) = 40); outlier channels in gate and up; bf16 gates past fp16's range.
GEGLU_OUTLIERS = outlier_channels((3, 100, 517, 4000), 20.0)
CASES += _cases(COMMITTED, "geglu", [
    ("gemma-3-1b_f6912_t1_tanh", dict(T=1, ffn=6912, gelu="tanh")),
    ("gemma-3-1b_f6912_t1_erf", dict(T=1, ffn=6912, gelu="erf")),
    ("odd-f1001_t3_tanh", dict(T=3, ffn=1001, gelu="tanh")),
    ("large-gate40_f6912_t1_tanh", dict(T=1, ffn=6912, gelu="tanh", gate=uniform(-40.0, 40.0))),
    ("outliers-x20_f6912_t1_erf", dict(T=1, ffn=6912, gelu="erf", gate=GEGLU_OUTLIERS,
                                       up=GEGLU_OUTLIERS)),
])
CASES += _bf16_cases(COMMITTED, "geglu", [
    ("gemma-3-1b_f6912_t1_tanh", dict(T=1, ffn=6912, gelu="tanh")),
    ("large-mag-1e6_odd-f1001_t2_erf", dict(T=2, ffn=1001, gelu="erf",
                                            gate=with_large(gelu_inputs(), 0.1, 1e5, 1e6))),
])
# Full tier: Gemma-3-4B's widths at a prefill of 2048 tokens, Gemma-3-1B's whole vocabulary.
CASES += _cases(FULL, "rmsnorm", [("gemma-3-4b_w32_t2048", dict(T=2048, H=GEMMA3_4B, eps=1e-6, w32=True))])
CASES += _cases(FULL, "rmsnorm_residual", [
    ("gemma-3-4b_w32_t2048", dict(T=2048, H=GEMMA3_4B, eps=1e-6, inplace=False, w32=True)),
])
CASES += _cases(FULL, "geglu", [("gemma-3-4b_f10240_t2048_tanh", dict(T=2048, ffn=10240, gelu="tanh"))])
CASES += _bf16_cases(FULL, "geglu", [("gemma-3-4b_f10240_t2048_tanh", dict(T=2048, ffn=10240, gelu="tanh"))])
CASES += _cases(FULL, "embedding", [
    ("gemma-3-1b-full-vocab_t16_scaled", dict(V=262144, H=GEMMA3_1B, T=16, scale=math.sqrt(GEMMA3_1B))),
])

# Gemma 2's final logit soft cap (transformers' Gemma2ForCausalLM, final_logit_softcapping 30.0 in
# every published config; vocab 256000): logits of std 40, far past the cap (70% beyond half of
# it), with 5% outliers of |x| in [100, 1e4] (the saturation region, tanh within 3e-3 of 1 and
# beyond, up to where e^(2x / cap) overflows fp32 at |x| > 1331) and, in each case's first row, exact
# ±1e4, ±cap, 0, both sides of that overflow and, in the fp16 cases, ±inf (fp16 logits past
# 65504). fp32 (the engine's logits: the lm-head gemm writes f32), fp16 and bf16 (libraries that
# keep logits in the storage type), each in place and not; lengths no multiple of the vector
# width (4 fp32, 8 16-bit values: the scalar tails); one logit alone; and one case at 50
# (Gemma 2's attention cap, which a kernel with the final cap hard-coded gets wrong).
LOGIT_EDGES = (1e4, -1e4, 30.0, -30.0, 0.0, 1320.0, -1320.0, 1340.0, -1340.0, 0.5, -0.5)
LOGITS = with_spans(with_large(normal(40.0), 0.05, 100.0, 1e4), [(0, 0, LOGIT_EDGES)])
LOGIT_INFS = ((0, len(LOGIT_EDGES), 1), (0, len(LOGIT_EDGES) + 1, -1))
CASES += _cases(COMMITTED, "logit_softcap", [
    ("gemma2-f32_v2051_t1_cap30", dict(T=1, V=2051, softcap=30.0, dtype="f32", dist=LOGITS)),
    ("gemma2-f32_v1001_t2_cap30_inplace", dict(T=2, V=1001, softcap=30.0, dtype="f32", dist=LOGITS,
                                               inplace=True)),
    ("one-logit-f32_v1_t1_cap30", dict(T=1, V=1, softcap=30.0, dtype="f32", dist=normal(40.0))),
    ("attn-cap-f32_v515_t1_cap50", dict(T=1, V=515, softcap=50.0, dtype="f32", dist=LOGITS)),
    ("gemma2-f16_v2053_t1_cap30", dict(T=1, V=2053, softcap=30.0, dtype="f16", dist=LOGITS,
                                       infs=LOGIT_INFS)),
    ("gemma2-f16_v1001_t1_cap30_inplace", dict(T=1, V=1001, softcap=30.0, dtype="f16", dist=LOGITS,
                                               infs=LOGIT_INFS, inplace=True)),
])
CASES += _bf16_cases(COMMITTED, "logit_softcap", [
    ("gemma2_v2053_t1_cap30", dict(T=1, V=2053, softcap=30.0, dist=LOGITS)),
    ("gemma2_v1001_t1_cap30_inplace", dict(T=1, V=1001, softcap=30.0, dist=LOGITS, inplace=True)),
])
# At Gemma-2's whole vocabulary: a decode step's row and a batch of 16.
CASES += _cases(FULL, "logit_softcap", [
    ("gemma2-f32_v256000_t1_cap30", dict(T=1, V=256000, softcap=30.0, dtype="f32", dist=LOGITS)),
    ("gemma2-f32_v256000_t16_cap30", dict(T=16, V=256000, softcap=30.0, dtype="f32", dist=LOGITS)),
])

# Qwen2-MoE's gated shared expert (moe_shared_add: transformers' Qwen2MoeSparseMoeBlock adds the
# shared expert's output through sigmoid(shared_expert_gate(x))): Qwen1.5-MoE-A2.7B's hidden 2048
# at a decode step (T = 1, its logit near 0: the sigmoid's linear part) and a prefill of 17 (logits
# over [-6, 6], two rows with cancelling halves), Qwen2-57B-A14B's 3584 at a decode step (|logit|
# 4.5: saturating) and in place over routed; 8 (one 16-byte vector, a warp's one load) and 100 (no
# multiple of 8: the scalar kernel) wide. Each in fp16 and bf16; the kernel's vec<1> (2048, 8),
# vec<2> (3584) and generic (100) paths each in both.
MOE_SHARED = [
    ("tiny_h8_t1", dict(T=1, H=8, span=2.0)),
    ("odd-h100_t3", dict(T=3, H=100, span=5.0, cancel=(1,))),
    ("qwen1.5-moe-a2.7b_h2048_decode-t1", dict(T=1, H=2048, span=0.4)),
    ("qwen1.5-moe-a2.7b_h2048_prefill-t17", dict(T=17, H=2048, span=6.0, cancel=(4, 11))),
    ("qwen2-57b-a14b_h3584_decode-t1", dict(T=1, H=3584, span=4.5)),
    ("qwen1.5-moe-a2.7b_h2048_t4_inplace", dict(T=4, H=2048, span=3.5, inplace=True, cancel=(2,))),
]
CASES += _cases(COMMITTED, "moe_shared_add", MOE_SHARED)
CASES += _bf16_cases(COMMITTED, "moe_shared_add", MOE_SHARED)
# A prefill of 4096 tokens at both widths (each of x, routed and shared 16 or 28 MB).
MOE_SHARED_FULL = [
    ("qwen1.5-moe-a2.7b_h2048_prefill-t4096", dict(T=4096, H=2048, span=6.0, cancel=(7, 1000))),
    ("qwen2-57b-a14b_h3584_prefill-t4096", dict(T=4096, H=3584, span=6.0, cancel=(7, 1000))),
]
CASES += _cases(FULL, "moe_shared_add", MOE_SHARED_FULL)
CASES += _bf16_cases(FULL, "moe_shared_add", MOE_SHARED_FULL)


def cases_for(tier, ops=None):
    return [c for c in CASES if c.tier == tier and (ops is None or c.op in ops)]


# The ops whose expected outputs are exact (ops.py: given in their stored dtype, not fp64), and
# those dtypes: quant_fp8's, the fused quantisers' out and scales (quant_fp8 of the rounded
# intermediate; their sum is an fp64 reference), set_rows_fp8's cache codes, moe_router's
# expert ids and the scaled embedding's out (the 16-bit product as f32, inf where it overflows). They may hold what the contract gives for non-finite inputs (an inf or NaN
# scale); an fp64 reference is always finite.
EXACT_OPS = {"quant_fp8": (torch.float8_e4m3fn, torch.float32),
             "rmsnorm_quant_fp8": (torch.float8_e4m3fn, torch.float32),
             "swiglu_quant_fp8": (torch.float8_e4m3fn, torch.float32),
             "set_rows_fp8": (torch.float8_e4m3fn,),
             "moe_router": (torch.int32,),
             "embedding": (torch.float32,)}  # the scaled gather: its product rounded once


def build(case):
    """Run one case: returns (seed, params, inputs, expected)."""
    seed = case_seed(case.op, case.name)
    params, inputs, expected = OPS[case.op](Draw(seed), **case.kwargs)
    for name, t in expected.items():
        if t.dtype != F64:
            assert t.dtype in EXACT_OPS.get(case.op, ()), (case.op, name, t.dtype)
            continue
        assert torch.isfinite(t).all(), "%s/%s: %s not finite" % (case.op, case.name, name)
    return seed, params, inputs, expected

# ---------------------------------------------------------------------------------------------
# Sliding windows (Mistral's sliding_window, Qwen2's use_sliding_window layers, Gemma-2/3's local
# layers): the query at position p sees keys p - window + 1 .. p (transformers: key > p - window).
# Windows shorter than the sequence, ending mid-tile and mid-page, of 1 (a query sees only
# itself), longer than some sequences and not others; a decode window that spans several of the
# tensor-core kernel's key splits and one that starts inside its first 16-key tile; the split
# kernel (head_dim 80); paged decode with pages of 1 and 16; paged prefill with a prefix longer
# than the window.
CASES += _cases(COMMITTED, "attention_prefill", [
    # 150 queries (three 64-row tiles), a 37-key window: tiles before a block's first window are
    # skipped, its edge falls mid-tile
    ("gqa2_d64_s150_w37", dict(nH=2, nKV=1, D=64, B=1, S=150, window=37)),
    # a window of 1: every query attends to itself alone (out = its v)
    ("mha_d64_b2_s12_w1", dict(nH=2, nKV=2, D=64, B=2, S=12, window=1)),
    # a window longer than the sequence: plain causal
    ("qwen2.5-0.5b_s16_w64", dict(QWEN, B=1, S=16, window=64)),
])
CASES += _bf16_cases(COMMITTED, "attention_prefill", [
    ("gqa2_d128_s100_w45", dict(nH=2, nKV=1, D=128, B=1, S=100, window=45)),
])
CASES += _cases(COMMITTED, "attention_decode", [
    # lengths below, at and far past the window; 300's window starts at 236, inside the 16-key
    # tile at 224
    ("gqa7_d64_b3_lens1-64-300_w64", dict(nH=7, nKV=1, D=64, L=304, cache_lens=[1, 64, 300],
                                          window=64)),
    # a 1050-token cache with a 600-key window: the window spans several of the 4 key splits
    ("gqa4_d64_len1050_l1100_w600", dict(nH=4, nKV=1, D=64, L=1100, cache_lens=[1050], window=600)),
    # the split kernel (head_dim 80) with a window that starts mid-tile
    ("phi2-d80-gqa2_len150_w77", dict(nH=2, nKV=1, D=80, L=160, cache_lens=[150, 20], window=77)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode", [
    ("gqa4_d64_len190_w100", dict(nH=8, nKV=2, D=64, L=192, cache_lens=[190], window=100)),
])
CASES += _cases(COMMITTED, "attention_decode_paged", [
    # pages of 16 (one table read a tile): a window starting mid-page
    ("qwen2.5-0.5b_bs16_lens45-200_w40", dict(QWEN, block_size=16, cache_lens=[45, 200], window=40)),
    # a position a page
    ("gpt2-mha_bs1_lens30-7_w9", dict(GPT2, block_size=1, cache_lens=[30, 7], window=9)),
    # the split kernel through pages
    ("phi2-d80-gqa2_bs8_len90_w33", dict(nH=2, nKV=1, D=80, block_size=8, cache_lens=[90], window=33)),
])
CASES += _cases(COMMITTED, "attention_prefill_paged", [
    # a chunk of 40 on a 100-token prefix with a 48-key window (the prefix's first 92 positions
    # unseen), a decode on a 70-token prefix, a plain prefill of 20 shorter than the window
    ("gqa7_d64_bs16_pre100-70-0_new40-1-20_w48",
     dict(nH=7, nKV=1, D=64, block_size=16, seqs=[(100, 40), (70, 1), (0, 20)], window=48)),
])
CASES += _bf16_cases(COMMITTED, "attention_prefill_paged", [
    ("gqa4_d128_bs8_pre30_new20_w25", dict(nH=4, nKV=1, D=128, block_size=8, seqs=[(30, 20)],
                                           window=25)),
])
# At the real widths: Mistral-7B's 4096-key window over an 8192 cache (32 heads of 128 on 8),
# and its prefill of 8192 at 4 of its heads; Phi-3-mini's 32 heads (two m-tiles a warp) with a
# 2047-key window (Phi-3-mini-4k's config) over 3000 positions; Qwen2.5's paged decode and
# chunked prefill past a 1024-key window.
CASES += _cases(FULL, "attention_decode", [
    ("mistral-7b_b4_lens8192-4097-4096-100_w4096",
     dict(LLAMA3, L=8192, cache_lens=[8192, 4097, 4096, 100], window=4096)),
])
CASES += _cases(FULL, "attention_prefill", [
    ("mistral-7b-4heads_s8192_w4096", dict(nH=4, nKV=1, D=128, B=1, S=8192, window=4096)),
    ("phi3-mini_s3000_w2047", dict(PHI3, B=1, S=3000, window=2047)),
])
CASES += _cases(FULL, "attention_decode_paged", [
    ("qwen2.5-0.5b_bs16_b4_lens4096-1025-1024-3_w1024",
     dict(QWEN, block_size=16, cache_lens=[4096, 1025, 1024, 3], window=1024)),
])
CASES += _cases(FULL, "attention_prefill_paged", [
    ("qwen2.5-0.5b_bs16_b2_pre3000-0_new600-1500_w1024",
     dict(QWEN, block_size=16, seqs=[(3000, 600), (0, 1500)], window=1024)),
])

# ---------------------------------------------------------------------------------------------
# Gemma 2's attention logit soft-capping (attn_logit_softcapping 50.0; ABI v24's softcap): each
# scaled score s becomes 50 tanh(s / 50) before the mask. At Gemma-2's head layouts: 2B's 8 query
# heads on 4 KV heads of 256 (scale 256^-0.5), 9B's 16 on 8 of 256, 27B's 32 on 16 of 128 with
# query_pre_attn_scalar 144 (scale 144^-0.5). q and k are drawn with std 8 so that the scaled
# scores have a spread of about 64 (2B, 9B) and 60 (27B): far beyond +-50, and the generator
# asserts that at least CAP_BITES of them lie beyond half the cap (check_cap_bites), so a kernel
# that ignores the cap, caps the unscaled product or clamps instead of tanh is far off. Gemma 2
# alternates sliding (window 4096) and global layers: the sliding cases use small windows ending
# mid-tile, where most of a late row's keys are masked.
GEMMA2_2B = dict(nH=8, nKV=4, D=256, scale=256 ** -0.5, softcap=50.0)
GEMMA2_9B = dict(nH=16, nKV=8, D=256, scale=256 ** -0.5, softcap=50.0)
GEMMA2_27B = dict(nH=32, nKV=16, D=128, scale=144 ** -0.5, softcap=50.0)
CAP_QK = normal(8.0)
CASES += _cases(COMMITTED, "attention_prefill", [
    ("gemma2-2b_s10_cap50", dict(GEMMA2_2B, B=1, S=10, qk=CAP_QK)),
    ("gemma2-27b-4heads_s24_w7_cap50", dict(GEMMA2_27B, nH=4, nKV=2, B=1, S=24, window=7, qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_prefill", [
    ("gemma2-9b-4heads_s18_w5_cap50", dict(GEMMA2_9B, nH=4, nKV=2, B=1, S=18, window=5, qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_decode", [
    # head_dim 256: the split kernel; 27B's 128: the tensor-core kernel, a window of 9
    ("gemma2-2b_b2_lens24-7_cap50", dict(GEMMA2_2B, L=24, cache_lens=[24, 7], qk=CAP_QK)),
    ("gemma2-27b-4heads_len70_w9_cap50", dict(GEMMA2_27B, nH=4, nKV=2, L=72, cache_lens=[70], window=9,
                                               qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode", [
    ("gemma2-27b-8heads_len50_cap50", dict(GEMMA2_27B, nH=8, nKV=4, L=56, cache_lens=[50], qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_decode_paged", [
    ("gemma2-9b-4heads_bs16_lens33-5_cap50", dict(GEMMA2_9B, nH=4, nKV=2, block_size=16,
                                                  cache_lens=[33, 5], qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode_paged", [
    ("gemma2-27b-4heads_bs8_len40_w11_cap50", dict(GEMMA2_27B, nH=4, nKV=2, block_size=8,
                                                   cache_lens=[40], window=11, qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_prefill_paged", [
    ("gemma2-27b-4heads_bs16_pre20_new12_cap50", dict(GEMMA2_27B, nH=4, nKV=2, block_size=16,
                                                      seqs=[(20, 12)], qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_decode_fp8", [
    ("gemma2-27b-8heads_per-head_len48_cap50", dict(GEMMA2_27B, nH=8, nKV=4, L=48, cache_lens=[48],
                                                    scale_heads=4, qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode_fp8", [
    ("gemma2-27b-8heads_len30_cap50", dict(GEMMA2_27B, nH=8, nKV=4, L=32, cache_lens=[30], scale_heads=1,
                                           qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_scores_softmax", [
    ("gemma2-2b_s10_cap50", dict(GEMMA2_2B, B=1, Sq=10, Sk=10, qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_scores_softmax", [
    ("gemma2-27b-4heads_sq5_sk12_cap50", dict(GEMMA2_27B, nH=4, nKV=2, B=1, Sq=5, Sk=12, qk=CAP_QK)),
])
# The soft cap is a template argument of the attention kernels (a kernel instance of its own):
# each capped instance the cases above take in one storage type alone is taken in the other
# here (engine/backend/cuda/pathtable.go), at 2 query heads on 1 KV head. Prefill at head_dim
# 128 and paged prefill in bf16; the split decode and the paged split decode at 256 in bf16;
# the paged tensor-core decode at 128 in fp16.
CASES += _bf16_cases(COMMITTED, "attention_prefill", [
    ("gemma2-27b-2heads_s12_cap50", dict(GEMMA2_27B, nH=2, nKV=1, B=1, S=12, qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode", [
    ("gemma2-2b-2heads_len9_cap50", dict(GEMMA2_2B, nH=2, nKV=1, L=9, cache_lens=[9], qk=CAP_QK)),
])
CASES += _cases(COMMITTED, "attention_decode_paged", [
    ("gemma2-27b-2heads_bs8_len13_cap50", dict(GEMMA2_27B, nH=2, nKV=1, block_size=8, cache_lens=[13],
                                               qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_decode_paged", [
    ("gemma2-2b-2heads_bs4_len11_cap50", dict(GEMMA2_2B, nH=2, nKV=1, block_size=4, cache_lens=[11],
                                              qk=CAP_QK)),
])
CASES += _bf16_cases(COMMITTED, "attention_prefill_paged", [
    ("gemma2-27b-2heads_bs8_pre5_new6_cap50", dict(GEMMA2_27B, nH=2, nKV=1, block_size=8, seqs=[(5, 6)],
                                                   qk=CAP_QK)),
])
# At the real lengths: Gemma-2-9B's prefill of 2048 (global and with a 1024 window) and decode
# of B = 4 up to 4096.
CASES += _cases(FULL, "attention_prefill", [
    ("gemma2-9b_s2048_cap50", dict(GEMMA2_9B, B=1, S=2048, qk=CAP_QK)),
    ("gemma2-9b_s2048_w1024_cap50", dict(GEMMA2_9B, B=1, S=2048, window=1024, qk=CAP_QK)),
])
CASES += _bf16_cases(FULL, "attention_prefill", [
    ("gemma2-27b_s2048_cap50", dict(GEMMA2_27B, B=1, S=2048, qk=CAP_QK)),
])
CASES += _cases(FULL, "attention_decode", [
    ("gemma2-9b_b4_lens4096-4000-1025-3_cap50", dict(GEMMA2_9B, L=4096, cache_lens=[4096, 4000, 1025, 3],
                                                     qk=CAP_QK)),
    ("gemma2-27b_b4_lens4096-2000_w1024_cap50", dict(GEMMA2_27B, L=4096, cache_lens=[4096, 2000, 4096, 17],
                                                     window=1024, qk=CAP_QK)),
])
CASES += _cases(FULL, "attention_decode_paged", [
    ("gemma2-27b_bs16_b4_lens4096-1000-30-4096_cap50", dict(GEMMA2_27B, block_size=16,
                                                           cache_lens=[4096, 1000, 30, 4096], qk=CAP_QK)),
])
CASES += _cases(FULL, "attention_decode_fp8", [
    ("gemma2-27b_b4_l4096_cap50", dict(GEMMA2_27B, L=4096, cache_lens=[4096, 4096, 2049, 1],
                                       scale_heads=16, qk=CAP_QK)),
])

# ---------------------------------------------------------------------------------------------
# attention_decode_paged_fp8 and attention_prefill_paged_fp8 (vLLM's paged cache with
# kv_cache_dtype "fp8"): attention_decode_paged's and attention_prefill_paged's pools, tables and
# lengths, the pool quantised as attention_decode_fp8 quantises its caches (per tensor or per KV
# head, calibrated over the held slots, headroom < 1 saturating some codes at +-448), every slot
# no sequence holds the code 0x7E (+448). Small pools: a page is block_size x n_kv_heads x
# head_dim bytes a cache, and every spare page and poisoned tail is committed data too; the
# query heads are cut where the 16-bit paged cases hold the real layouts.
#
# Decode: the kernel's head dims 32, 64, 96 and 128, each with up to 8 query heads a KV head and
# with 16 (its two head groups), the soft-capping instance at 128; block sizes 1, 4, 8 and 16;
# lengths of 1, on a page boundary, one past one and mid-page; a table wider than needed;
# a shared prefix; a window whose edge falls inside a page; outlier value channels.
_DECODE_PAGED_FP8 = [
    # Qwen2.5-0.5B's heads (7 a KV head), pages of 16: a length of 1 beside one 13 into its
    # second page; per-head scales with a saturating calibration
    ("qwen2.5-0.5b_d64_bs16_lens1-29_per-head", dict(QWEN, block_size=16, cache_lens=[1, 29],
                                                     spare=1, scale_heads=2, headroom=0.9)),
    # Llama-3-8B's 4:1 at head_dim 128 through pages of 4: a length on a page boundary beside
    # one a position past one, a table a column wider than the longest sequence (a row stride
    # taken from the lengths reads the next row's pages)
    ("llama3-8b-gqa4_d128_bs4_lens8-5_mb3_per-tensor", dict(GQA4_D128, block_size=4,
                                                            cache_lens=[8, 5], max_blocks=3,
                                                            scale_heads=1)),
    # one position a page at head_dim 32, 8 query heads a KV head
    ("d32-gqa8_bs1_lens7-3_per-head", dict(nH=16, nKV=2, D=32, block_size=1, cache_lens=[7, 3],
                                           scale_heads=2)),
    # prefix caching: sequences 0 and 2 hold the same two physical pages as their first 8
    # positions; Phi-3-mini's head_dim 96, a saturating calibration
    ("phi3-mini-d96-gqa2_bs4_lens10-3-9_per-head_shared2",
     dict(nH=4, nKV=2, D=96, block_size=4, cache_lens=[10, 3, 9], shared=(0, 2, 2),
          scale_heads=2, headroom=0.8)),
    # 16 query heads a KV head (MQA 16:1) at head_dim 32 with a 40-key window starting 5 into
    # the first page; a calibration saturating the top 30%
    ("d32-mqa16_bs16_len45_per-tensor_w40", dict(nH=16, nKV=1, D=32, block_size=16, cache_lens=[45],
                                                 scale_heads=1, headroom=0.7, window=40)),
    # MQA 16:1 at head_dim 64, values with outlier channels of ~20: the calibration spends its
    # range on them, the other values take the low codes
    ("outlier-v_d64-mqa16_bs16_len20_per-tensor", dict(nH=16, nKV=1, D=64, block_size=16,
                                                       cache_lens=[20], spare=1, scale_heads=1,
                                                       vdist=outlier_channels((7, 40), 20.0))),
    # 16 query heads a KV head at head_dim 96 and at 128 (Llama-3.1-405B's grouping)
    ("d96-mqa16_bs4_len9_per-tensor", dict(nH=16, nKV=1, D=96, block_size=4, cache_lens=[9],
                                           scale_heads=1)),
    ("llama3.1-405b-gqa16_d128_bs8_len9_per-tensor", dict(nH=16, nKV=1, D=128, block_size=8,
                                                          cache_lens=[9], scale_heads=1)),
]
CASES += _cases(COMMITTED, "attention_decode_paged_fp8", _DECODE_PAGED_FP8 + [
    # Gemma-2-27B's soft cap (the kernel's capped instance at head_dim 128), per-head scales
    ("gemma2-27b-4heads_per-head_bs8_len13_cap50", dict(GEMMA2_27B, nH=4, nKV=2, block_size=8,
                                                        cache_lens=[13], scale_heads=2, qk=CAP_QK)),
])
# every instance once more in bf16, with fewer query heads where the fp16 case has the model's
CASES += _bf16_cases(COMMITTED, "attention_decode_paged_fp8", [
    ("gqa7_d64_bs8_lens1-13_per-tensor", dict(nH=7, nKV=1, D=64, block_size=8, cache_lens=[1, 13],
                                              scale_heads=1, headroom=0.9)),
    ("gqa4_d128_bs4_lens8-5_mb3_per-tensor", dict(nH=4, nKV=1, D=128, block_size=4,
                                                  cache_lens=[8, 5], max_blocks=3, scale_heads=1)),
    ("d96-mha_bs4_len10_per-head", dict(nH=2, nKV=2, D=96, block_size=4, cache_lens=[10],
                                        scale_heads=2, headroom=0.8)),
] + [_DECODE_PAGED_FP8[i] for i in (2, 4, 5, 6, 7)] + [
    ("gemma2-27b-2heads_bs4_len11_cap50", dict(GEMMA2_27B, nH=2, nKV=1, block_size=4,
                                               cache_lens=[11], scale_heads=1, qk=CAP_QK)),
])

# Prefill: a prefix ending mid-page with new tokens crossing pages; a prefix on a page boundary
# with 65 new tokens (two 64-row query tiles) over 129 keys (three 64-key tiles) in pages of 64;
# decodes beside a plain prefill; a ragged batch of four with a table wider than needed; a
# shared prefix; pages of 1 to 64; head dims 32, 64, 128, 256 and 80 (a padded width of the
# prefill kernel); a window; Gemma-2-27B's soft cap.
_PREFILL_PAGED_FP8 = [
    # a prefix 1 into its second page of 4, new tokens across the page boundary at 8
    ("mha_d128_bs4_pre5_new6_per-head", dict(nH=2, nKV=2, D=128, block_size=4, seqs=[(5, 6)],
                                             scale_heads=2, headroom=0.8)),
    # a prefix of one whole page of 64 (the new tokens start a page), 65 new tokens: two query
    # tiles, the second of one row, over three key tiles
    ("d32-mha_bs64_pre64_new65_per-tensor", dict(nH=1, nKV=1, D=32, block_size=64,
                                                 seqs=[(64, 65)], spare=1, scale_heads=1)),
    # decodes inside a prefill launch, one position a page: one new token on a 12-token prefix
    # and on a 5-token one beside a plain prefill of 6
    ("mha_d64_bs1_pre12-0-5_new1-6-1_per-head", dict(nH=2, nKV=2, D=64, block_size=1,
                                                     seqs=[(12, 1), (0, 6), (5, 1)],
                                                     scale_heads=2)),
    # a ragged batch of four at head_dim 80, pages of 4, a table a column wider than the longest
    # sequence's 3 pages; a calibration saturating the top 30%
    ("d80-gqa2_bs4_b4_pre0-5-3-9_new3-1-4-2_mb4_per-tensor",
     dict(nH=2, nKV=1, D=80, block_size=4, seqs=[(0, 3), (5, 1), (3, 4), (9, 2)], max_blocks=4,
          scale_heads=1, headroom=0.7)),
    # prefix caching: sequences 0 and 2 hold the same two physical pages as their first 8
    # prefix positions; sequence 0's new tokens start the page after them
    ("gqa2_d64_bs4_pre8-3-10_new2-1-3_per-head_shared2",
     dict(nH=4, nKV=2, D=64, block_size=4, seqs=[(8, 2), (3, 1), (10, 3)], shared=(0, 2, 2),
          scale_heads=2)),
    # the widest head dim, Gemma's 256
    ("d256-gqa2_bs4_pre5_new2_per-tensor", dict(nH=2, nKV=1, D=256, block_size=4, seqs=[(5, 2)],
                                                spare=1, scale_heads=1)),
]
CASES += _cases(COMMITTED, "attention_prefill_paged_fp8", _PREFILL_PAGED_FP8 + [
    # a chunk of 6 on a 22-token prefix with a 9-key window (its first query sees 14..22, from
    # inside the second page of 8), a decode on a 12-token prefix
    ("gqa2_d64_bs8_pre22-12_new6-1_per-tensor_w9", dict(nH=2, nKV=1, D=64, block_size=8,
                                                        seqs=[(22, 6), (12, 1)], scale_heads=1,
                                                        window=9)),
    # Gemma-2-27B's soft cap (the kernel's capped instance at head_dim 128)
    ("gemma2-27b-2heads_bs8_pre5_new6_per-tensor_cap50", dict(GEMMA2_27B, nH=2, nKV=1, block_size=8,
                                                              seqs=[(5, 6)], scale_heads=1, qk=CAP_QK)),
])
# head dims 128, 80, 64 and the capped 128 once more in bf16
CASES += _bf16_cases(COMMITTED, "attention_prefill_paged_fp8", [
    _PREFILL_PAGED_FP8[0], _PREFILL_PAGED_FP8[3], _PREFILL_PAGED_FP8[4],
    ("gemma2-27b-2heads_bs4_pre5_new3_per-tensor_cap50", dict(GEMMA2_27B, nH=2, nKV=1, block_size=4,
                                                              seqs=[(5, 3)], scale_heads=1, qk=CAP_QK)),
])

# Full tier: the FP8 pools at the real sizes, pages of 16 (vLLM's default): Llama-3-8B's 32:8
# heads of 128 in a decode batch of four up to 4096 positions (in bf16 too) and Qwen2.5-0.5B's
# 14:2 in one of 16 (per-head and per-tensor scales); Llama-3-8B's chunked prefill of 512
# tokens on a 3584-token prefix, and a mixed Qwen2.5-0.5B batch (a plain prefill, two decodes
# on long prefixes, a chunk on a 500-token prefix).
_DECODE_PAGED_FP8_FULL = [
    ("llama3-8b-gqa4_d128_bs16_b4_lens17-4096_per-head",
     dict(LLAMA3, block_size=16, cache_lens=[4096, 3001, 17, 2048], scale_heads=8, headroom=0.9)),
]
CASES += _cases(FULL, "attention_decode_paged_fp8", _DECODE_PAGED_FP8_FULL + [
    ("qwen2.5-0.5b_d64_bs16_b16_lens1-4096_per-tensor",
     dict(QWEN, block_size=16, cache_lens=RAGGED16, scale_heads=1)),
])
CASES += _bf16_cases(FULL, "attention_decode_paged_fp8", _DECODE_PAGED_FP8_FULL)
CASES += _cases(FULL, "attention_prefill_paged_fp8", [
    ("llama3-8b-gqa4_d128_bs16_pre3584_new512_per-head",
     dict(LLAMA3, block_size=16, seqs=[(3584, 512)], scale_heads=8, headroom=0.9)),
    ("qwen2.5-0.5b_bs16_b4_pre0-1000-2047-500_new300-1-1-700_per-tensor",
     dict(QWEN, block_size=16, seqs=[(0, 300), (1000, 1), (2047, 1), (500, 700)], scale_heads=1)),
])

# The prefill kernel's other padded head dims (96, 160, 192), and each head dim's bf16 instance
# the cases above leave out (32, 96, 160, 192, 256): one small chunk on a prefix each.
_PREFILL_PAGED_FP8_WIDTHS = [
    ("d96-mha_bs4_pre3_new2_per-tensor", dict(nH=1, nKV=1, D=96, block_size=4, seqs=[(3, 2)],
                                               spare=1, scale_heads=1)),
    ("d160-mha_bs4_pre3_new2_per-tensor", dict(nH=1, nKV=1, D=160, block_size=4, seqs=[(3, 2)],
                                               spare=1, scale_heads=1, headroom=0.8)),
    ("d192-gqa2_bs4_pre2_new3_per-tensor", dict(nH=2, nKV=1, D=192, block_size=4, seqs=[(2, 3)],
                                                 spare=1, scale_heads=1)),
]
CASES += _cases(COMMITTED, "attention_prefill_paged_fp8", _PREFILL_PAGED_FP8_WIDTHS)
CASES += _bf16_cases(COMMITTED, "attention_prefill_paged_fp8", _PREFILL_PAGED_FP8_WIDTHS + [
    ("d32-mha_bs8_pre9_new4_per-tensor", dict(nH=1, nKV=1, D=32, block_size=8, seqs=[(9, 4)],
                                               spare=1, scale_heads=1)),
    ("d256-gqa2_bs4_pre5_new2_per-tensor", dict(nH=2, nKV=1, D=256, block_size=4, seqs=[(5, 2)],
                                                 spare=1, scale_heads=1)),
])

_NAME = re.compile(r"^[a-z0-9._-]+$")
_seen = set()
for _c in CASES:
    assert _c.op in OPS and _NAME.match(_c.name), _c
    assert (_c.op, _c.name) not in _seen, "duplicate case %s/%s" % (_c.op, _c.name)
    # bf16 storage exactly in the cases named bf16-... (the Go side and the docs rely on it)
    assert _c.name.startswith("bf16-") == (_c.kwargs.get("dtype") == "bf16"), _c
    _seen.add((_c.op, _c.name))
