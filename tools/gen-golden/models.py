"""Model references: synthetic checkpoints, the transformers forward pass with every tap, greedy
decoding through the KV cache (docs/golden-format.md, "Model sets").

One set per model: golden/models/<model>/ (committed tiny variants) or
golden/.cache/models/<model>/ (full size, or a real checkpoint given with --checkpoint). A set holds
the checkpoint the Go side loads (config.json + model.safetensors, fp16 or bf16 for synthetic
ones: the set's params.dtype), the
prompt, the taps of the prefill and of the first `decode_steps` decode steps, the 32 greedy
tokens with their top-2 margins and top-5 lists, 32 tokens of seeded generation from the same
prompt (docs/sampling.md, through sampling.py) with their model margins, and calibration.json: the
per-tap error of the same forward rounded to fp16 (bf16 for a bf16 set) where the engine rounds,
from which the Go side derives each tap's limits.

The reference is transformers itself (Qwen2ForCausalLM, Phi3ForCausalLM, LlamaForCausalLM,
GPT2LMHeadModel) loaded with from_pretrained from the set's own checkpoint files, upcast to fp32,
eager attention, on the CPU. Taps are captured with module hooks; the rotated Q/K are captured by
wrapping the apply_rotary_pos_emb that the modeling module calls, so they are exactly what
transformers fed to attention, never recomputed here.
"""

import decimal
import hashlib
import json
import math
import os
import re
import shutil
import struct
import threading
import time
from collections import namedtuple
from contextlib import contextmanager
from typing import List, Optional

import numpy as np
import torch

import kernels
import manifest
import sampling

F16, BF16, F32, F64, I32 = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32

# A set's dtype (params.dtype: what the engine runs it in, what its synthetic checkpoint stores and
# what its calibration rounds to) -> the torch dtype, the safetensors dtype, config.json's
# torch_dtype.
DTYPES = ("f16", "bf16")
TORCH_DTYPE = {"f16": F16, "bf16": BF16}
ST_NAME = {"f16": "F16", "bf16": "BF16"}
CONFIG_DTYPE = {"f16": "float16", "bf16": "bfloat16"}

CASE = "greedy32"
PROMPT_LEN = 16
GREEDY_TOKENS = 32
# Seeded generation (docs/sampling.md) from the same prompt: a typical chat configuration, whose
# temperature and top_p are the fp32 values a C caller passes (0.8f, 0.95f).
SAMPLE_TOKENS = 32
SAMPLE_TEMPERATURE = sampling.f32(0.8)
SAMPLE_TOP_K = 40
SAMPLE_TOP_P = sampling.f32(0.95)
COMMITTED, FULL = "committed", "full"
SYNTHETIC, CHECKPOINT = "synthetic", "checkpoint"

# ---------------------------------------------------------------------------------------------
# Configs. The full-size ones are the published config.json files of the real checkpoints
# (Qwen/Qwen2.5-0.5B, microsoft/Phi-3-mini-4k-instruct, openai-community/gpt2,
# meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B, microsoft/Phi-3.5-mini-instruct,
# Qwen/Qwen2.5-7B-Instruct with its model card's YaRN rope_scaling) with the fields
# that only matter for remote code or provenance dropped (_name_or_path, auto_map,
# transformers_version) and torch_dtype set to what the synthetic checkpoint stores (float16; the
# bf16 sets' copies, bf16_config, bfloat16).
# Field names follow the hub files (rope_theta at the top level, GPT-2's n_embd/n_layer/...);
# transformers 5.17 maps them onto its config classes (rope_theta -> rope_parameters).

QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

PHI3_MINI_4K = {
    "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "model_type": "phi3",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 32064,
}

GPT2_124M = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "torch_dtype": "float16",
    "vocab_size": 50257,
}


# Llama 3 (meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B): Qwen2's layout without biases, RoPE
# scaled with rope_type llama3 (three frequency bands around the original 8192-token context).
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128256,
}

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128256,
}

# Qwen2.5-7B-Instruct with the YaRN recipe of its model card added (the hub config has no
# rope_scaling; the card's uses the old "type" key): factor 4 over the original 32768 positions.
QWEN_YARN4 = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
QWEN25_7B_YARN = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_scaling": QWEN_YARN4,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}


def derived(base, **overrides):
    cfg = dict(base)
    for k, v in overrides.items():
        assert k in cfg, "override of unknown config key %s" % k
        cfg[k] = v
    return dict(sorted(cfg.items()))


# microsoft/Phi-3.5-mini-instruct: Phi-3-mini's layout with LongRoPE to 131072 positions (the short
# factors up to the original 4096, the long ones past it; original_max_position_embeddings at the
# top level, as Phi-3 configs keep it).
PHI35_MINI = derived(PHI3_MINI_4K, max_position_embeddings=131072,
                     original_max_position_embeddings=4096, sliding_window=262144,
                     rope_scaling={"rope_type": "longrope",
                                   "long_factor": list(kernels.PHI35_LONG_FACTOR),
                                   "short_factor": list(kernels.PHI35_SHORT_FACTOR)})

# The published configs whose RoPE tables the scaled `rope` kernel cases use
# (kernels.published_rope).
PUBLISHED_ROPE = {"llama3.1-8b": LLAMA31_8B, "llama3.2-1b": LLAMA32_1B,
                  "qwen2.5-7b-yarn": QWEN25_7B_YARN, "phi3.5-mini": PHI35_MINI}


# Tiny variants: 2 layers, small vocab, the distinguishing features kept. Head dims are multiples
# of 8 (what the CUDA attention kernels support) and keep rope_dim/2 a multiple of 8 like the real
# models, so RoPE runs the same kernel path as at full size.
#  qwen2-tiny: GQA 7:1 with two KV heads (14 q / 2 kv, head_dim 16), Q/K/V bias, tied LM head,
#              rope_theta 1e6, rms eps 1e-6, intermediate 160 (no power of two, like 4864).
#  phi3-tiny:  fused qkv_proj and gate_up_proj, MHA (2 heads), head_dim 48 (no power of two, like
#              96), rms eps 1e-5, untied LM head, rope_theta 1e4, sliding_window 2047 (inactive:
#              sequences stay under 48 tokens).
#  gpt2-tiny:  Conv1D (weights stored [in, out]), learned positions, LayerNorm with bias, gelu_new,
#              tied LM head, odd vocab (503, like 50257).
QWEN2_TINY = derived(QWEN25_05B, hidden_size=224, intermediate_size=160, num_hidden_layers=2,
                     max_window_layers=2, vocab_size=384, bos_token_id=0, eos_token_id=0)
PHI3_TINY = derived(PHI3_MINI_4K, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, vocab_size=320, bos_token_id=1,
                    eos_token_id=2, pad_token_id=2)
GPT2_TINY = derived(GPT2_124M, n_embd=96, n_head=3, n_layer=2, n_positions=64, n_ctx=64,
                    vocab_size=503, bos_token_id=502, eos_token_id=502)
#  llama3-tiny:     Llama-3.2-1B's config cut down: no biases, GQA 4:1 (8 q / 2 kv heads), an
#                   explicit head_dim 16, tied head, theta 5e5, eps 1e-5, the published llama3
#                   scaling (factor 32 over 8192: at head_dim 16 pairs 0-3 keep their frequency, 4
#                   is blended (divided by 3.29), 5-7 are divided by 32).
#  phi3.5-tiny:     phi3-tiny's dimensions with Phi-3.5-mini's LongRoPE: every second published
#                   factor (24 short, 24 long for head_dim 48), max_position_embeddings 640 and the
#                   original context cut to 20, so the prefill (16 tokens) takes the short factors
#                   and decode step 4 (position 20) onwards the long ones: transformers switches
#                   when a pass's largest position + 1 exceeds the original (the cached keys keep
#                   their short rotation); attention factor sqrt(1 + ln 32 / ln 20).
#  qwen2-yarn-tiny: qwen2-tiny with Qwen's YaRN recipe (factor 4 over 32768, old "type" key): at
#                   head_dim 16 pairs 0-2 keep their frequency, 3-4 are ramped, 5-7 divided by 4;
#                   attention factor 0.1 ln 4 + 1.
LLAMA3_TINY = derived(LLAMA32_1B, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=16, vocab_size=384,
                      bos_token_id=382, eos_token_id=383)
PHI35_TINY = derived(PHI35_MINI, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, vocab_size=320, bos_token_id=1,
                     eos_token_id=2, pad_token_id=2, max_position_embeddings=640,
                     original_max_position_embeddings=20,
                     rope_scaling={"rope_type": "longrope",
                                   "long_factor": kernels.PHI35_LONG_FACTOR[::2],
                                   "short_factor": kernels.PHI35_SHORT_FACTOR[::2]})
QWEN2_YARN_TINY = dict(sorted(dict(QWEN2_TINY, rope_scaling=dict(QWEN_YARN4)).items()))


def bf16_config(cfg):
    """The config of a bf16 set: the same model, torch_dtype "bfloat16" (what its checkpoint
    stores, as on the hub: Qwen2.5 and Llama 3 ship bf16)."""
    return derived(cfg, torch_dtype=CONFIG_DTYPE["bf16"])

# margin_epsilon (logit units): the reference's top-2 margin below which a differing greedy token
# is accepted (together with the top-5 cross-check). Synthetic logits have std ~4 by construction
# (see init_specs), median top-2 margin ~0.7-1. To size it, the same transformers forward was run
# with fp16 weights and fp16 activations everywhere (logits included, so more lossy than an
# implementation with fp32 logits), teacher-forced on the reference tokens: the largest change of
# the top-2 margin over the 32 steps was 0.012-0.030 for the tiny sets (rms <= 0.011), 0.030 for
# gpt2-124m and 0.039 for qwen2.5-0.5b (24 layers). Committed sets use 0.1 (> 3x the worst tiny
# drift); full-size and real-checkpoint sets use 0.2 (5x Qwen's, room for Phi-3's 32 layers). The
# selftest re-measures the drift and fails if it reaches half the epsilon.
#
# bf16 sets (dtype "bf16") store 8 significant bits instead of 11: the same drift measured with
# bf16 weights and activations (transformers in torch.bfloat16, logits included) was 0.18 on
# qwen2-tiny-bf16 and 0.15 on llama3-tiny-bf16, and 0.15-0.28 on the six fp16 tiny configs run in
# bf16 (about 8x their fp16 drift, as the unit roundoffs 2^-8 / 2^-11 predict); 0.28 on
# qwen2.5-0.5b-bf16 and 0.34 on llama3.2-1b-bf16. bf16 sets use EPSILON_BF16_COMMITTED 0.5 (2.8x
# the committed bf16 sets' drift, 1.8x the worst tiny config's) and EPSILON_BF16_FULL 0.8
# (full-size and bf16 checkpoint sets: 2.4x Llama's), which the selftest holds to the same rule
# (at least twice the bf16 drift).
ModelSpec = namedtuple("ModelSpec", "name family tier config decode_steps margin_epsilon dtype",
                       defaults=("f16",))
EPSILON_COMMITTED, EPSILON_FULL = 0.1, 0.2
EPSILON_BF16_COMMITTED, EPSILON_BF16_FULL = 0.5, 0.8

MODELS = [
    ModelSpec("qwen2-tiny", "qwen2", COMMITTED, QWEN2_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("phi3-tiny", "phi3", COMMITTED, PHI3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("gpt2-tiny", "gpt2", COMMITTED, GPT2_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("llama3-tiny", "llama", COMMITTED, LLAMA3_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("phi3.5-tiny", "phi3", COMMITTED, PHI35_TINY, 8, EPSILON_COMMITTED),
    ModelSpec("qwen2-yarn-tiny", "qwen2", COMMITTED, QWEN2_YARN_TINY, 8, EPSILON_COMMITTED),
    # bf16: qwen2-tiny's and llama3-tiny's configs in bf16, drawn from their own seeds (the names')
    ModelSpec("qwen2-tiny-bf16", "qwen2", COMMITTED, bf16_config(QWEN2_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    ModelSpec("llama3-tiny-bf16", "llama", COMMITTED, bf16_config(LLAMA3_TINY), 8,
              EPSILON_BF16_COMMITTED, "bf16"),
    ModelSpec("qwen2.5-0.5b", "qwen2", FULL, QWEN25_05B, 8, EPSILON_FULL),
    ModelSpec("phi3-mini-4k", "phi3", FULL, PHI3_MINI_4K, 8, EPSILON_FULL),
    ModelSpec("gpt2-124m", "gpt2", FULL, GPT2_124M, 8, EPSILON_FULL),
    ModelSpec("llama3.2-1b", "llama", FULL, LLAMA32_1B, 8, EPSILON_FULL),
    ModelSpec("phi3.5-mini", "phi3", FULL, PHI35_MINI, 8, EPSILON_FULL),
    ModelSpec("qwen2.5-0.5b-bf16", "qwen2", FULL, bf16_config(QWEN25_05B), 8, EPSILON_BF16_FULL,
              "bf16"),
    ModelSpec("llama3.2-1b-bf16", "llama", FULL, bf16_config(LLAMA32_1B), 8, EPSILON_BF16_FULL,
              "bf16"),
]
FAMILY_OF_MODEL_TYPE = {"qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2", "llama": "llama"}
ARCH = {"qwen2": "Qwen2ForCausalLM", "phi3": "Phi3ForCausalLM", "gpt2": "GPT2LMHeadModel",
        "llama": "LlamaForCausalLM"}
# Checkpoint sets (real weights): the full-size epsilon. Real logit scales differ from the
# synthetic ones; the value is recorded in the set, so a consumer can see what was assumed.
CHECKPOINT_EPSILON = EPSILON_FULL
CHECKPOINT_EPSILON_BF16 = EPSILON_BF16_FULL  # a bf16 checkpoint set (set_dtype)
CHECKPOINT_DECODE_STEPS = 8


def models_for(tier, names=None):
    return [m for m in MODELS if m.tier == tier and (not names or m.name in names)]


def with_layers(spec, n_layers):
    """A cut-down copy of a spec (smoke tests of the full-size code path): n_layers layers, named
    <model>-l<n>; everything else unchanged."""
    key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
    over = {key: n_layers}
    if spec.family == "qwen2":
        over["max_window_layers"] = min(spec.config["max_window_layers"], n_layers)
    return spec._replace(name="%s-l%d" % (spec.name, n_layers),
                         config=derived(spec.config, **over))


# Full sets of the 8B-class configs cut to 2 layers (the embeddings and heads alone are 2 GB of
# fp16): the real layer shapes and RoPE tables at a size the generator handles in a minute.
MODELS += [
    with_layers(ModelSpec("llama3.1-8b", "llama", FULL, LLAMA31_8B, 8, EPSILON_FULL), 2),
    with_layers(ModelSpec("qwen2.5-7b-yarn", "qwen2", FULL, QWEN25_7B_YARN, 8, EPSILON_FULL), 2),
]
BY_NAME = {m.name: m for m in MODELS}
assert len(BY_NAME) == len(MODELS)
for _m in MODELS:  # a bf16 set is named so, and its config says what its checkpoint stores
    assert _m.dtype in DTYPES, _m.name
    assert re.sub(r"-l\d+$", "", _m.name).endswith("-bf16") == (_m.dtype == "bf16"), _m.name
    assert _m.config["torch_dtype"] == CONFIG_DTYPE[_m.dtype], _m.name


# ---------------------------------------------------------------------------------------------
# Seeds and dimensions


def set_seed(model):
    """The set's 32-bit seed: sha256("<master>:models/<model>/<case>")[:4], big-endian."""
    return kernels.case_seed("models/" + model, CASE)


def sample_seed(model):
    """The RNG key of a set's seeded generation: sha256("<master>:models/<model>/sample32")[:8],
    big-endian, a uint64 (so both Philox key words are exercised)."""
    text = "%d:models/%s/sample%d" % (kernels.MASTER_SEED, model, SAMPLE_TOKENS)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def tensor_seed(seed, name):
    """Each checkpoint tensor has its own generator, keyed by the set seed and the tensor name, so a
    tensor's values do not depend on the order tensors are drawn in."""
    digest = hashlib.sha256(("%d:%s" % (seed, name)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


PROMPT_SEED = kernels.case_seed("models", "prompt")


def prompt_ids(vocab_size):
    """The prompt of every set: PROMPT_LEN fp64 uniforms u from one fixed seed, ids = floor(u * V).
    The same draws for every model, scaled to its vocabulary."""
    g = torch.Generator(device="cpu").manual_seed(PROMPT_SEED)
    u = torch.rand((PROMPT_LEN,), generator=g, dtype=F64)
    return torch.clamp((u * vocab_size).floor().to(torch.int64), 0, vocab_size - 1).to(I32)


Dims = namedtuple("Dims", "family H L nH nKV D I V P tied eps")


def dims(family, cfg):
    """The dimensions a forward needs, read from an HF config dict."""
    if family == "gpt2":
        H, nH = cfg["n_embd"], cfg["n_head"]
        return Dims(family, H, cfg["n_layer"], nH, nH, H // nH, cfg.get("n_inner") or 4 * H,
                    cfg["vocab_size"], cfg["n_positions"], cfg.get("tie_word_embeddings", True),
                    cfg.get("layer_norm_epsilon", 1e-5))
    H, nH = cfg["hidden_size"], cfg["num_attention_heads"]
    nKV = cfg.get("num_key_value_heads") or nH
    D = cfg.get("head_dim") or H // nH
    return Dims(family, H, cfg["num_hidden_layers"], nH, nKV, D, cfg["intermediate_size"],
                cfg["vocab_size"], cfg["max_position_embeddings"],
                cfg.get("tie_word_embeddings", False), cfg["rms_norm_eps"])


def rope_theta(cfg):
    if "rope_theta" in cfg:
        return float(cfg["rope_theta"])
    return float(cfg["rope_parameters"]["rope_theta"])


# ---------------------------------------------------------------------------------------------
# Synthetic weights
#
# Init (fp64 draws, rounded to fp32 then fp16 like every kernel input, or bf16 for a bf16 set; the
# 16-bit values on disk are exactly what both the Go side and the reference load):
#   token embedding (embed_tokens / wte), GPT-2 positions (wpe), untied lm_head:
#       N(0, (4/sqrt(H))^2): after the final norm (elements ~1) logits have std ~4, so greedy
#       choices are mostly clear (median top-2 margin ~0.7-1) while small margins still occur;
#   input-side matrices (q/k/v, qkv_proj, gate/up, gate_up_proj, c_attn, c_fc):
#       N(0, 1/fan_in): projections are O(1), and q.k/sqrt(D) ~ N(0, 1) so attention is far from
#       uniform (a wrong position, mask or rotation changes the result visibly);
#   output-side matrices (o_proj, down_proj, GPT-2 attn/mlp c_proj):
#       N(0, 16^2/(fan_in * 2L)): 2L residual updates of variance ~16^2 * 0.3 / (2L) grow the
#       residual stream from the embedding (rms 4/sqrt(H)) to rms ~10 (max ~50) after the last
#       layer at any depth, as in trained models. Layer updates must dominate the embedding:
#       with a tied LM head the logit of the token just fed gets a head start of about
#       4 / rms(updates) logit-stds, and with small updates (HF's 0.02 init) greedy decoding
#       repeats the fed token forever;
#   norm weights (RMSNorm weight, LayerNorm gamma): 1 + 0.1 N(0, 1);
#   biases (Qwen2 q/k/v, GPT-2 Conv1D and LayerNorm beta): 0.1 N(0, 1) (a dropped bias is
#       hundreds of fp16 ulps off).

Init = namedtuple("Init", "kind std")  # kind: normal | norm | bias
RESID_GAIN = 16.0  # output-side std multiplier: residual stream rms ~10 after the last layer


def init_specs(family, cfg):
    """[(tensor name, shape, Init)] of a synthetic checkpoint, named as save_pretrained names them
    (tied LM heads are not stored)."""
    d = dims(family, cfg)
    H, L, I, V = d.H, d.L, d.I, d.V
    emb = Init("normal", 4.0 / math.sqrt(H))
    w_in = Init("normal", 1.0 / math.sqrt(H))
    norm, bias = Init("norm", 0.1), Init("bias", 0.1)
    attn_out = Init("normal", RESID_GAIN / math.sqrt(d.nH * d.D * 2 * L))
    ffn_out = Init("normal", RESID_GAIN / math.sqrt(I * 2 * L))
    specs = []
    if family in ("qwen2", "phi3", "llama"):
        qd, kvd = d.nH * d.D, d.nKV * d.D
        specs.append(("model.embed_tokens.weight", (V, H), emb))
        for i in range(L):
            p = "model.layers.%d." % i
            specs.append((p + "input_layernorm.weight", (H,), norm))
            if family in ("qwen2", "llama"):  # Llama: attention_bias false, no biases
                for n, rows in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd)):
                    specs.append((p + "self_attn.%s.weight" % n, (rows, H), w_in))
                    if family == "qwen2":
                        specs.append((p + "self_attn.%s.bias" % n, (rows,), bias))
            else:
                specs.append((p + "self_attn.qkv_proj.weight", (qd + 2 * kvd, H), w_in))
            specs.append((p + "self_attn.o_proj.weight", (H, qd), attn_out))
            specs.append((p + "post_attention_layernorm.weight", (H,), norm))
            if family in ("qwen2", "llama"):
                specs.append((p + "mlp.gate_proj.weight", (I, H), w_in))
                specs.append((p + "mlp.up_proj.weight", (I, H), w_in))
            else:
                specs.append((p + "mlp.gate_up_proj.weight", (2 * I, H), w_in))
            specs.append((p + "mlp.down_proj.weight", (H, I), ffn_out))
        specs.append(("model.norm.weight", (H,), norm))
        if not d.tied:
            specs.append(("lm_head.weight", (V, H), emb))
    elif family == "gpt2":
        specs.append(("transformer.wte.weight", (V, H), emb))
        specs.append(("transformer.wpe.weight", (d.P, H), emb))
        for i in range(L):
            p = "transformer.h.%d." % i
            specs += [
                (p + "ln_1.weight", (H,), norm), (p + "ln_1.bias", (H,), bias),
                (p + "attn.c_attn.weight", (H, 3 * H), w_in),
                (p + "attn.c_attn.bias", (3 * H,), bias),
                (p + "attn.c_proj.weight", (H, H), attn_out), (p + "attn.c_proj.bias", (H,), bias),
                (p + "ln_2.weight", (H,), norm), (p + "ln_2.bias", (H,), bias),
                (p + "mlp.c_fc.weight", (H, I), w_in), (p + "mlp.c_fc.bias", (I,), bias),
                (p + "mlp.c_proj.weight", (I, H), ffn_out), (p + "mlp.c_proj.bias", (H,), bias),
            ]
        specs.append(("transformer.ln_f.weight", (H,), norm))
        specs.append(("transformer.ln_f.bias", (H,), bias))
        if not d.tied:
            specs.append(("lm_head.weight", (V, H), emb))
    else:
        raise KeyError(family)
    return specs


def draw_tensor(seed, name, shape, init, chunk=None, dtype="f16"):
    """One synthetic fp16 (dtype "bf16": bf16) tensor: the float64 draw scaled as `init` says,
    rounded to fp32 and then to fp16 (kernels.to_f16; bf16: kernels.to_bf16, round to nearest
    even). Its definition is draw_tensor_whole; this computes the same bytes
    DRAW_CHUNK values at a time, in cache, where the whole-tensor form streams a float64 buffer
    through memory five times (uniforms, Box-Muller, scale, two roundings): 1.9x faster on two
    cores (200M values, 3.2 -> 1.7 s). On a 16-core GPU host the draw alone of Phi-3-mini's
    3.8G values still takes 10.9 s, about what its 111 core-seconds allow (docs/PERF.md).

    Why the chunks give the same values: torch's float64 normal fill (ATen normal_fill, for
    contiguous fills of >= 16 values) first takes one uniform per value from the generator in
    order, then transforms them 16 at a time (Box-Muller on 8 pairs) and, when the count is not a
    multiple of 16, redraws the last 16 values from fresh uniforms. Chunks that are multiples of 16
    consume the generator's stream exactly as one fill does, and the last chunk (which keeps at
    least 16 values, so it takes the same path) ends exactly as the whole fill ends. The selftest
    checks chunked against whole draws at sizes around every boundary."""
    chunk = DRAW_CHUNK if chunk is None else chunk
    if chunk % 16:
        raise ValueError("draw chunk %d is not a multiple of 16" % chunk)
    if init.kind == "normal" or init.kind == "bias":
        shift = None
    elif init.kind == "norm":
        shift = 1.0
    else:
        raise KeyError(init.kind)
    g = torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name))
    n = int(np.prod(shape, dtype=np.int64))
    h = torch.empty(shape, dtype=TORCH_DTYPE[dtype])
    flat = h.view(-1)
    b64, b32 = torch.empty(chunk, dtype=F64), torch.empty(chunk, dtype=F32)
    i = 0
    while i < n:
        m = n - i if n - i < chunk + 16 else chunk  # the last chunk keeps >= 16 values
        if m > len(b64):
            b64, b32 = torch.empty(m, dtype=F64), torch.empty(m, dtype=F32)
        x = b64[:m]
        torch.randn((m,), generator=g, dtype=F64, out=x)
        x.mul_(init.std)  # in place: the same IEEE product s * x (and sum 1.0 + s * x)
        if shift is not None:
            x.add_(shift)
        y = b32[:m]
        y.copy_(x)
        flat[i:i + m].copy_(y)
        i += m
    if not torch.isfinite(h).all():
        raise ValueError("%s overflows %s" % (name, dtype))
    return h


def draw_tensor_whole(seed, name, shape, init, dtype="f16"):
    """draw_tensor's definition, one whole-tensor float64 draw (the selftest's reference)."""
    x = kernels.Draw(tensor_seed(seed, name)).randn(shape)
    if init.kind in ("normal", "bias"):
        x = init.std * x
    elif init.kind == "norm":
        x = 1.0 + init.std * x
    else:
        raise KeyError(init.kind)
    return kernels.storage(dtype)(x)


# Values a draw_tensor chunk holds: a multiple of 16 (see draw_tensor); 2 MiB of float64, which
# stays in a core's cache hierarchy while it is drawn, scaled and rounded.
DRAW_CHUNK = 1 << 18


# Elementwise passes over big tensors go CHUNK elements at a time: a whole-tensor temporary is
# fresh memory every time (page faults, and munmap's TLB shootdowns across all threads), which
# costs more than the arithmetic. The values are the same.
CHUNK = 1 << 20


# ---------------------------------------------------------------------------------------------
# safetensors, written by hand so the bytes are fixed by this file alone: an 8-byte little-endian
# header length, the JSON header (keys "__metadata__" first, then tensors in sorted name order,
# compact separators, padded with spaces to a multiple of 8), then the tensors' bytes in the same
# sorted order, contiguous, no gaps. Metadata is {"format": "pt"}, nothing else (no timestamps).
# Synthetic checkpoints hold F16 or BF16 tensors (a set's dtype), all of one dtype.

ST_BYTES = {"F16": 2, "BF16": 2, "F32": 4}


def safetensors_header(entries):
    """entries: [(name, dtype, shape)] -> header bytes (length prefix included)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in sorted(entries):
        n = int(np.prod(shape, dtype=np.int64)) * ST_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                        "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _pwrite_all(fd, data, offset):
    view = memoryview(data).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def write_safetensors(path, entries, pool=None, dtype="f16"):
    """Write a safetensors file of fp16 tensors (dtype "bf16": bf16): entries [(name, shape,
    make)], make() returning the tensor's values (a torch tensor of that dtype and shape).
    Returns the file's sha256.

    Without a pool the tensors are made and written one after the other. With a pool (from
    one_thread_workers) each tensor is made and written at its offset by a pool thread, and
    this thread hashes them in file order as they come (at most 2 per thread in flight). Every
    tensor has its own seed (tensor_seed) and a float64 draw, so the bytes do not depend on which
    thread made what, nor on how many there are."""
    ordered = sorted(entries, key=lambda e: e[0])
    want = TORCH_DTYPE[dtype]
    head = safetensors_header([(n, ST_NAME[dtype], s) for n, s, _ in ordered])
    offsets, end = [], len(head)
    for _, shape, _ in ordered:
        offsets.append(end)
        end += 2 * int(np.prod(shape, dtype=np.int64))

    def job(i):
        name, shape, make = ordered[i]
        t = make()
        if t.dtype != want or tuple(t.shape) != tuple(shape):
            raise RuntimeError("%s: %s %s for %s %s" % (name, t.dtype, tuple(t.shape), want, shape))
        # the 16-bit patterns, little-endian (numpy has no bfloat16: its bits as uint16)
        data = np.ascontiguousarray(t.contiguous().view(torch.int16).numpy(), dtype="<i2")
        _pwrite_all(fd, data, offsets[i])
        return data

    h = hashlib.sha256(head)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, head, 0)
        if pool is None:
            for i in range(len(ordered)):
                h.update(job(i))
        else:
            window, todo = [], iter(range(len(ordered)))
            try:
                for i in todo:
                    window.append(pool.submit(job, i))
                    if len(window) >= 2 * pool.size:
                        break
                while window:
                    h.update(window[0].result())
                    window.pop(0)
                    i = next(todo, None)
                    if i is not None:
                        window.append(pool.submit(job, i))
            except BaseException:
                for f in window:  # no thread may write to fd once it is closed (and reused)
                    f.cancel()
                import concurrent.futures as cf
                cf.wait(window)
                raise
        if os.fstat(fd).st_size != end:
            raise RuntimeError("%s: %d bytes written, want %d" % (path, os.fstat(fd).st_size, end))
    finally:
        os.close(fd)
    return h.hexdigest()


def config_bytes(cfg):
    """config.json of a synthetic checkpoint: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("ascii")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def write_synthetic_checkpoint(set_dir, spec, seed, pool=None):
    """config.json + model.safetensors into set_dir (tensors drawn on `pool` when given).
    Returns [(name, file, sha256)]."""
    if spec.config.get("torch_dtype") != CONFIG_DTYPE[spec.dtype]:
        raise RuntimeError("%s: torch_dtype %r for a %s set" % (spec.name,
                                                                spec.config.get("torch_dtype"),
                                                                spec.dtype))
    cfg_data = config_bytes(spec.config)
    with open(os.path.join(set_dir, "config.json"), "wb") as f:
        f.write(cfg_data)
    entries = [(n, s, lambda n=n, s=s, i=i: draw_tensor(seed, n, s, i, dtype=spec.dtype))
               for n, s, i in init_specs(spec.family, spec.config)]
    digest = write_safetensors(os.path.join(set_dir, "model.safetensors"), entries, pool,
                               spec.dtype)
    return [("config", "config.json", hashlib.sha256(cfg_data).hexdigest()),
            ("model", "model.safetensors", digest)]


def checkpoint_files(src):
    """The files of a real checkpoint directory that a set carries: config.json and either
    model.safetensors or model.safetensors.index.json plus every shard it names."""
    if not os.path.isfile(os.path.join(src, "config.json")):
        raise SystemExit("%s: no config.json" % src)
    files = ["config.json"]
    if os.path.isfile(os.path.join(src, "model.safetensors")):
        files.append("model.safetensors")
    elif os.path.isfile(os.path.join(src, "model.safetensors.index.json")):
        with open(os.path.join(src, "model.safetensors.index.json")) as f:
            index = json.load(f)
        shards = sorted(set(index["weight_map"].values()))
        for s in shards:
            if os.path.basename(s) != s or not os.path.isfile(os.path.join(src, s)):
                raise SystemExit("%s: shard %r missing or not a plain file name" % (src, s))
        files += ["model.safetensors.index.json"] + shards
    else:
        raise SystemExit("%s: no model.safetensors or model.safetensors.index.json (only "
                         "safetensors checkpoints are accepted)" % src)
    return files


def place_checkpoint(set_dir, src):
    """Hard-link (same filesystem) or copy the checkpoint files into set_dir; never a symlink, so
    the set is self-contained and its checksums describe its own files.
    Returns [(name, file, sha256)]."""
    out = []
    for fname in checkpoint_files(src):
        dst = os.path.join(set_dir, fname)
        try:
            os.link(os.path.realpath(os.path.join(src, fname)), dst)
        except OSError:
            shutil.copyfile(os.path.join(src, fname), dst)
        name = fname[:-len(".json")] if fname.endswith(".json") else fname[:-len(".safetensors")]
        out.append((name, fname, sha256_file(dst)))
    return out


# ---------------------------------------------------------------------------------------------
# Taps

LAYER_TAPS = ["attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn", "attn_out", "resid_attn",
              "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_out", "resid_ffn"]
ABSENT = {"qwen2": set(), "phi3": set(), "llama": set(), "gpt2": {"q_rope", "k_rope", "ffn_gate"}}


def tap_names(family, n_layers):
    """Canonical tap names of one pass, in file order."""
    names = ["embed"]
    for i in range(n_layers):
        names += ["layers.%d.%s" % (i, t) for t in LAYER_TAPS if t not in ABSENT[family]]
    return names + ["final_norm", "logits"]


def tap_shape(name, d, T):
    tap = name.rsplit(".", 1)[-1]
    if tap in ("q", "q_rope"):
        return (T, d.nH, d.D)
    if tap in ("k", "v", "k_rope"):
        return (T, d.nKV, d.D)
    if tap == "attn":
        return (T, d.nH * d.D)
    if tap in ("ffn_gate", "ffn_up", "ffn_act"):
        return (T, d.I)
    if tap == "logits":
        return (T, d.V)
    return (T, d.H)


class TapCapture:
    """What the reference's Recorder and the calibration's Rounder share: taps copied into
    `self.taps` while a pass is active (begin/end), each once, checked against the tap table."""

    label = ""  # prefixed to error messages

    def __init__(self, model, family, d):
        self.model, self.family, self.d = model, family, d
        self.prefix = None
        self.taps = {}
        self.layer = None      # index of the attention module running now (for the RoPE wrapper)
        self.rope_calls = 0
        self.handles = []
        # the thread whose pass is captured: in a lockstep pair (run_lockstep) the other thread
        # runs the same modules, whose hooks must then leave everything alone
        self.owner = threading.get_ident()

    def mine(self):
        return threading.get_ident() == self.owner

    def begin(self, prefix):
        self.prefix = prefix
        self.rope_calls = 0

    def end(self, T):
        """Close the pass and check it captured every tap once, with the right shape."""
        want = tap_names(self.family, self.d.L)
        got = [k[len(self.prefix) + 1:] for k in self.taps if k.startswith(self.prefix + ".")]
        if sorted(got) != sorted(want):
            raise RuntimeError("%s%s: taps missing %s, unexpected %s" % (
                self.label, self.prefix, sorted(set(want) - set(got)), sorted(set(got) - set(want))))
        for name in want:
            t = self.taps[self.prefix + "." + name]
            if tuple(t.shape) != tap_shape(name, self.d, T) or t.dtype != F32:
                raise RuntimeError("%s%s.%s: shape %s dtype %s, want %s f32" % (
                    self.label, self.prefix, name, tuple(t.shape), t.dtype, tap_shape(name, self.d, T)))
        if self.family != "gpt2" and self.rope_calls != self.d.L:
            raise RuntimeError("%s%s: apply_rotary_pos_emb ran %d times for %d layers: the RoPE "
                               "capture is not seeing what attention uses"
                               % (self.label, self.prefix, self.rope_calls, self.d.L))
        self.prefix = None

    def put(self, name, t):
        if self.prefix is None or not self.mine():
            return
        key = self.prefix + "." + name
        if key in self.taps:
            raise RuntimeError("%stap %s captured twice" % (self.label, key))
        assert t.shape[0] == 1, (key, t.shape)  # batch 1
        self.taps[key] = t[0].detach().to(F32).contiguous().clone()

    @contextmanager
    def rope_taps(self, modeling, transform):
        """Within the block, this thread's modeling.apply_rotary_pos_emb (looked up by the
        attention forward at call time; wrapped per thread by thread_rope) returns transformers'
        own q and k, passed through transform when given, and records them as q_rope / k_rope of
        the layer whose attention module is running."""
        if self.family == "gpt2":
            yield
            return

        def make(original):
            def wrapped(q, k, cos, sin, *args, **kwargs):
                q_embed, k_embed = original(q, k, cos, sin, *args, **kwargs)
                if transform is not None:
                    q_embed, k_embed = transform(q_embed), transform(k_embed)
                if self.prefix is not None:
                    self.rope_calls += 1
                    p = "layers.%d." % self.layer
                    # [B, heads, T, D] -> [B, T, heads, D]
                    self.put(p + "q_rope", q_embed.transpose(1, 2))
                    self.put(p + "k_rope", k_embed.transpose(1, 2))
                return q_embed, k_embed
            return wrapped

        with thread_rope(modeling, make):
            yield


class Recorder(TapCapture):
    """Module hooks that copy the reference's taps (see TapCapture)."""

    # -- hook helpers
    def _out(self, module, name, fn=None):
        def hook(_m, _args, out):
            out = out[0] if isinstance(out, tuple) else out
            if fn is None:
                self.put(name, out)
            else:
                fn(out)
        self.handles.append(module.register_forward_hook(hook))

    def _in(self, module, name):
        def hook(_m, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            self.put(name, x)
        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def _heads(self, name, heads):
        def put(x):
            self.put(name, x.reshape(x.shape[0], x.shape[1], heads, self.d.D))
        return put

    def install(self):
        d, m = self.d, self.model
        if self.family in ("qwen2", "phi3", "llama"):
            base = m.model
            self._in(base.layers[0], "embed")
            for i, layer in enumerate(base.layers):
                p = "layers.%d." % i
                att, mlp = layer.self_attn, layer.mlp
                self._out(layer.input_layernorm, p + "attn_norm")
                if self.family in ("qwen2", "llama"):
                    self._out(att.q_proj, None, self._heads(p + "q", d.nH))
                    self._out(att.k_proj, None, self._heads(p + "k", d.nKV))
                    self._out(att.v_proj, None, self._heads(p + "v", d.nKV))
                else:
                    self._out(att.qkv_proj, None, self._split_qkv(p))
                self.handles.append(att.register_forward_pre_hook(self._enter_attn(i)))
                self._in(att.o_proj, p + "attn")
                self._out(att.o_proj, p + "attn_out")
                self._in(layer.post_attention_layernorm, p + "resid_attn")
                self._out(layer.post_attention_layernorm, p + "ffn_norm")
                if self.family in ("qwen2", "llama"):
                    self._out(mlp.gate_proj, p + "ffn_gate")
                    self._out(mlp.up_proj, p + "ffn_up")
                else:
                    self._out(mlp.gate_up_proj, None, self._split_gate_up(p))
                self._in(mlp.down_proj, p + "ffn_act")
                self._out(mlp, p + "ffn_out")
                self._out(layer, p + "resid_ffn")
            self._out(base.norm, "final_norm")
        else:
            base = m.transformer
            self._in(base.h[0], "embed")
            for i, block in enumerate(base.h):
                p = "layers.%d." % i
                self._out(block.ln_1, p + "attn_norm")
                self._out(block.attn.c_attn, None, self._split_c_attn(p))
                self._in(block.attn.c_proj, p + "attn")
                self._out(block.attn.c_proj, p + "attn_out")
                self._in(block.ln_2, p + "resid_attn")
                self._out(block.ln_2, p + "ffn_norm")
                self._out(block.mlp.c_fc, p + "ffn_up")
                self._in(block.mlp.c_proj, p + "ffn_act")
                self._out(block.mlp, p + "ffn_out")
                self._out(block, p + "resid_ffn")
            self._out(base.ln_f, "final_norm")
        self._out(m.lm_head, "logits")

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _enter_attn(self, i):
        def hook(_m, _args):
            if self.mine():
                self.layer = i
        return hook

    def _split_qkv(self, p):
        # Phi3Attention: query = qkv[..., :nH*D], key = the next nKV*D, value = the rest.
        d = self.d

        def put(qkv):
            qd, kvd = d.nH * d.D, d.nKV * d.D
            self._heads(p + "q", d.nH)(qkv[..., :qd])
            self._heads(p + "k", d.nKV)(qkv[..., qd:qd + kvd])
            self._heads(p + "v", d.nKV)(qkv[..., qd + kvd:])
        return put

    def _split_gate_up(self, p):
        # Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1) (gate first).
        def put(gu):
            gate, up = gu.chunk(2, dim=-1)
            self.put(p + "ffn_gate", gate)
            self.put(p + "ffn_up", up)
        return put

    def _split_c_attn(self, p):
        # GPT2Attention: q, k, v = c_attn(x).split(H, dim=2).
        d = self.d

        def put(qkv):
            q, k, v = qkv.split(d.H, dim=2)
            self._heads(p + "q", d.nH)(q)
            self._heads(p + "k", d.nKV)(k)
            self._heads(p + "v", d.nKV)(v)
        return put

    @contextmanager
    def rope_capture(self, modeling):
        """Record transformers' own RoPE results as q_rope / k_rope (TapCapture.rope_taps)."""
        with self.rope_taps(modeling, None):
            yield


# modeling.apply_rotary_pos_emb is a module global: while any thread wraps it, it is a dispatcher
# that hands each call to the wrapper of the calling thread, or to transformers' own function.
# Captures running at once in lockstep threads (the reference's, the calibration's) then each
# see their own thread's calls only, whatever order they are entered and left in.
_ROPE_LOCK = threading.Lock()
_ROPE = {}  # module -> (original, {thread id: wrapper})


@contextmanager
def thread_rope(modeling, make):
    """Within the block, this thread's calls of modeling.apply_rotary_pos_emb go to
    make(original)."""
    tid = threading.get_ident()
    with _ROPE_LOCK:
        if modeling not in _ROPE:
            original, handlers = modeling.apply_rotary_pos_emb, {}

            def dispatch(*args, **kwargs):
                return handlers.get(threading.get_ident(), original)(*args, **kwargs)
            _ROPE[modeling] = (original, handlers)
            modeling.apply_rotary_pos_emb = dispatch
        original, handlers = _ROPE[modeling]
        if tid in handlers:
            raise RuntimeError("apply_rotary_pos_emb is wrapped twice on one thread")
        handlers[tid] = make(original)
    try:
        yield
    finally:
        with _ROPE_LOCK:
            del handlers[tid]
            if not handlers:
                modeling.apply_rotary_pos_emb = original
                del _ROPE[modeling]


# ---------------------------------------------------------------------------------------------
# Threads
#
# Every torch op of a set runs on one thread (__main__.py: torch.set_num_threads(1)), in both
# tiers: that is what fixes the bits, since ATen splits a sum into one value by the thread count
# and MKL's threaded GEMMs (those with more than one row) block their work by it. The full tier
# is made fast by running independent pieces of work at the same time on a pool of worker threads
# (one_thread_workers), each of which also runs its torch ops on one thread: the tensors of the
# synthetic checkpoint (drawn and written), the checkpoint's tensors when transformers loads and
# upcasts them and when check_loaded_weights compares them, the fp16 rounding of the parameters,
# blocks of output features of every linear layer's GEMM (split_linears, shared by the greedy
# and the seeded reference running in lockstep: run_lockstep), the calibration's taps
# and the tap files. Each piece computes exactly what it computes alone on one thread, so the
# bytes are those of a one-thread run (qwen2.5-0.5b and gpt2-124m: identical with 1, 2, 4 and 16
# workers). The worker count is fixed per tier, never taken from the host (a host with fewer
# cores is only slower): the blocks of split_linears depend on it, and although the blocked GEMM
# is bit-identical to the unsplit one for every shape checked, that is MKL's behaviour rather
# than a documented guarantee, so the canonical full-tier bytes are those of 16 workers.
# GEN_GOLDEN_THREADS overrides the full tier's count (for experiments).
TIER_THREADS = {COMMITTED: 1, FULL: 16}


def tier_threads(tier):
    """The number of worker threads a set of `tier` is built with (1: no pool)."""
    if tier == FULL and os.environ.get("GEN_GOLDEN_THREADS"):
        return int(os.environ["GEN_GOLDEN_THREADS"])
    return TIER_THREADS[tier]


@contextmanager
def intra_op_threads(n):
    """torch.set_num_threads(n) inside the block (which also sets MKL's count on this thread and
    turns MKL's dynamic thread adjustment off), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Decode steps feed one token: every linear layer is then a GEMM with one row, which MKL runs on
# one core whatever the thread count (its one-row path is not threaded), so at full size a decode
# step streams the whole fp32 model through one core. split_linears spreads the GEMMs of the
# model's linear layers over a pool of threads instead: the output features are cut into blocks
# (boundaries at multiples of SPLIT_ALIGN, a fixed function of the shape and the block count,
# never of the host) and each block is the same op (F.linear, or Conv1D's addmm) on a slice of the
# weight, run by a pool thread whose ATen and MKL use one thread. Each output element is still
# the same single-threaded MKL computation over the whole input, in CNR mode: the blocked result
# is bit-identical to the unsplit one-thread GEMM (checked for every linear shape of the three
# families, full size and tiny, 1 to 16 rows, 2 to 16 blocks, with and without bias: MKL's
# kernels work on groups of 4 output features counted from the first one of the call, so blocks
# starting at multiples of 4 change nothing; 64 leaves margin).
# A block has at least SPLIT_MIN weights (1 MiB of fp32), so small layers are cut into fewer
# blocks (or none) and a block's work outweighs handing it to a thread.
SPLIT_ALIGN = 64
SPLIT_MIN = 1 << 18


def split_bounds(n_out, n_in, n_blocks):
    """Block boundaries [0, ..., n_out] of split_linears for a weight of n_out output and n_in
    input features."""
    n_blocks = max(1, min(n_blocks, n_out * n_in // SPLIT_MIN))
    cuts = {min(n_out, (n_out * i // n_blocks) // SPLIT_ALIGN * SPLIT_ALIGN)
            for i in range(n_blocks)}
    return sorted(cuts | {n_out})


def _worker_init():
    torch.get_num_threads()  # ATen's lazy per-thread init first, so it cannot undo the next line
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # grad mode is per thread; nothing on the pool needs autograd


@contextmanager
def one_thread_workers(n):
    """A pool of n threads whose torch ops run single-threaded (ATen and MKL), or None for n <= 1
    (a concurrent.futures.ThreadPoolExecutor; `size` is n). Work split across it computes what
    one thread computes, in the same order per result."""
    if n <= 1:
        yield None
        return
    import concurrent.futures as cf
    main_threads = torch.get_num_threads()
    pool = cf.ThreadPoolExecutor(n, thread_name_prefix="gen-golden", initializer=_worker_init)
    pool.size = n
    try:
        yield pool
    finally:
        pool.shutdown()
        # torch.set_num_threads in the pool's threads also set ATen's default for new threads
        torch.set_num_threads(main_threads)


# Work a lockstep group (Lockstep) does on one slice of a weight: every row's op on this many
# bytes of fp32 weight at a time (a multiple of SPLIT_ALIGN output features, at least one), so the
# second read of the slice comes from the core's cache instead of memory. On the 16-core GPU host
# (2 MiB of L2 a core), Phi-3-mini's layer shapes on 16 workers against the two rows' passes one
# after the other: 256-512 KiB 1.91-1.93x, 1 MiB 1.75x, 4 MiB 1.71x, whole blocks 1.49x
# (tools/gen-golden/pairbench.py; docs/PERF.md). It changes no byte of a set (every slice starts
# at a multiple of SPLIT_ALIGN): GEN_GOLDEN_PAIR_SLICE overrides it (for experiments).
PAIR_SLICE_BYTES = int(os.environ.get("GEN_GOLDEN_PAIR_SLICE", 512 << 10))


def pair_rows(n_in):
    """Output features of one paired slice of a weight with n_in input features."""
    return max(1, PAIR_SLICE_BYTES // (4 * n_in) // SPLIT_ALIGN) * SPLIT_ALIGN


def _group_linear(xs: List[torch.Tensor], w: torch.Tensor, b: Optional[torch.Tensor], lo: int, hi: int,
                  step: int) -> List[torch.Tensor]:
    """F.linear of each x in xs on the output features lo:hi of (w, b), step features at a time,
    every input on a slice before the next."""
    ys: List[List[torch.Tensor]] = []
    for _ in range(len(xs)):
        ys.append([])
    s = lo
    while s < hi:
        e = min(hi, s + step)
        ws = w[s:e]
        if b is None:
            for j in range(len(xs)):
                ys[j].append(torch.nn.functional.linear(xs[j], ws))
        else:
            bs = b[s:e]
            for j in range(len(xs)):
                ys[j].append(torch.nn.functional.linear(xs[j], ws, bs))
        s = e
    return [torch.cat(y, -1) for y in ys]


def _group_addmm(xs: List[torch.Tensor], w: torch.Tensor, b: torch.Tensor, lo: int, hi: int,
                 step: int) -> List[torch.Tensor]:
    """GPT-2 Conv1D's addmm(b, x, w) of each x in xs (2-D) on the output features (columns of
    w) lo:hi, step at a time, every input on a slice before the next."""
    ys: List[List[torch.Tensor]] = []
    for _ in range(len(xs)):
        ys.append([])
    s = lo
    while s < hi:
        e = min(hi, s + step)
        ws, bs = w[:, s:e], b[s:e]
        for j in range(len(xs)):
            ys[j].append(torch.addmm(bs, xs[j], ws))
        s = e
    return [torch.cat(y, -1) for y in ys]


_GROUP_OPS = {}


def group_op(fn):
    """fn compiled by TorchScript, whose interpreter runs the slice loop without the Python GIL
    (16 pool threads each taking the GIL for every slice's op serialise on it: measured on a
    16-core host, the lockstep references in Python were slower than the two one after the
    other). It runs with the graph executor's optimisations off: they would rewrite addmm as mm
    + add, another rounding. So the ops are the ATen ops of the Python form (the selftest checks
    the bytes); without TorchScript, fn itself."""
    if fn not in _GROUP_OPS:
        import warnings
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.jit.script is deprecated, still exact
                scripted = torch.jit.script(fn)
        except Exception:
            _GROUP_OPS[fn] = fn
        else:
            def call(*args):
                with torch.jit.optimized_execution(False):
                    return scripted(*args)
            _GROUP_OPS[fn] = call
    return _GROUP_OPS[fn]


def blocked(single, group, bounds, pool, xs, n_in):
    """For each x in xs (one, or a lockstep group), the op on blocks lo:hi of output features,
    concatenated: one pool task per block. single(x, lo, hi) is the op on one block; a group runs
    group(xs, lo, hi, step), which walks the block in slices of pair_rows(n_in) features and runs
    every input on each slice before the next, so the weight is read from memory once for all.
    Every slice starts at a multiple of SPLIT_ALIGN, so each row's result is the one the unsplit
    op gives (see SPLIT_ALIGN)."""
    if len(xs) == 1:
        parts = [pool.submit(single, xs[0], lo, hi) for lo, hi in zip(bounds, bounds[1:])]
        return [torch.cat([p.result() for p in parts], dim=-1)]
    step = pair_rows(n_in)
    parts = [pool.submit(group, list(xs), lo, hi, step) for lo, hi in zip(bounds, bounds[1:])]
    done = [p.result() for p in parts]
    return [torch.cat([d[j] for d in done], dim=-1) for j in range(len(xs))]


@contextmanager
def split_linears(model, pool, n_blocks, lockstep=None):
    """Within the block, the GEMMs of the model's nn.Linear and GPT-2 Conv1D layers run as
    n_blocks blocks of output features on `pool` (see SPLIT_ALIGN). No-op without a pool. With a
    Lockstep, the calls of its two threads are paired (run_lockstep)."""
    if pool is None or n_blocks <= 1:
        if lockstep is not None:
            raise ValueError("a lockstep pair needs the split linears of a pool")
        yield
        return
    import torch.nn.functional as F
    from transformers.pytorch_utils import Conv1D

    group_linear, group_addmm = group_op(_group_linear), group_op(_group_addmm)

    def linear(mod, orig, bounds):
        def single(x, lo, hi):
            b = mod.bias
            return F.linear(x, mod.weight[lo:hi], None if b is None else b[lo:hi])

        def group(xs, lo, hi, step):
            return group_linear(xs, mod.weight, mod.bias, lo, hi, step)

        def run(xs):
            return blocked(single, group, bounds, pool, xs, mod.in_features)

        def forward(x):
            if torch.is_grad_enabled():
                return orig(x)
            return run([x])[0] if lockstep is None else lockstep.call(mod, x, run)
        return forward

    def conv1d(mod, orig, bounds):
        # Conv1D.forward: addmm(bias, x.view(-1, nx), weight), weight [nx, nf]
        def single(x2, lo, hi):
            return torch.addmm(mod.bias[lo:hi], x2, mod.weight[:, lo:hi])

        def group(xs, lo, hi, step):
            return group_addmm(xs, mod.weight, mod.bias, lo, hi, step)

        def run(xs):
            ys = blocked(single, group, bounds, pool, [x.view(-1, x.size(-1)) for x in xs], mod.nx)
            return [y.view(x.size()[:-1] + (mod.nf,)) for x, y in zip(xs, ys)]

        def forward(x):
            if torch.is_grad_enabled():
                return orig(x)
            return run([x])[0] if lockstep is None else lockstep.call(mod, x, run)
        return forward

    patched = []
    try:
        for mod in model.modules():
            if type(mod) is torch.nn.Linear:
                bounds, make = split_bounds(mod.out_features, mod.in_features, n_blocks), linear
            elif type(mod) is Conv1D:
                bounds, make = split_bounds(mod.nf, mod.nx, n_blocks), conv1d
            else:
                continue
            if len(bounds) > 2:
                # an instance attribute: Module.__call__ still runs the hooks around it
                mod.forward = make(mod, mod.forward, bounds)
                patched.append(mod)
        # this thread's own ops on one thread too: an OpenMP team of its own would spin on the
        # cores the pool's threads need
        with intra_op_threads(1):
            yield
    finally:
        for mod in patched:
            del mod.forward


# ---------------------------------------------------------------------------------------------
# Lockstep: the references and the calibration sharing each read of the weights
#
# At full size a one-token step of the fp32 reference is bound by the host's memory bandwidth:
# its linear layers stream the whole fp32 model (15 GB for Phi-3-mini) through the cores, at
# 54-56 GB/s on a 16-core GPU host (docs/PERF.md). run_reference and run_sampled each take
# prefill + 31 such steps over the same weights, and for an fp16 checkpoint the calibration's
# run_rounded (prefill + 8 steps, teacher-forced on the greedy tokens: a TokenFeed) uses the very
# same weights too. So run_lockstep runs them at the same time, one per thread, and groups their
# split linear calls: the k-th call of each thread meets the k-th of the others (the same module:
# they run the same model, which calls its layers in the same order whatever the tokens), and one
# set of pool tasks computes the group (blocked). Nothing else is shared: each thread runs its own
# forward with its own cache, each row's GEMM is the op it is alone, the hooks of the Recorder and
# of the Rounder act on their own thread's pass only (TapCapture.owner), and RoPE is wrapped per
# thread (thread_rope). So the bytes are those of the three run one after the other (the
# selftest's lockstep builds; models --check; the full-tier sets compared on the GPU host).


class Lockstep:
    """Groups the split linear calls of `members` threads (see above): a call waits until every
    thread still in the lockstep has posted its own, then one of them computes the group.
    `groups` counts the groups by size (1: a call run alone, once the others have left)."""

    class _Call:
        def __init__(self, mod, x):
            self.mod, self.x = mod, x
            self.result = self.error = None
            self.taken = False

    def __init__(self, members=2):
        self.cond = threading.Condition()
        self.posted = []         # calls waiting for their group
        self.members = members   # threads still in the lockstep (leave() when one is done)
        self.failed = None       # the error that ended the lockstep
        self.groups = {}

    @property
    def paired(self):
        return sum(n for k, n in self.groups.items() if k > 1)

    @property
    def alone(self):
        return self.groups.get(1, 0)

    def leave(self, error=None):
        with self.cond:
            self.members -= 1
            if error is not None and self.failed is None:
                self.failed = error
            self.cond.notify_all()

    def _take(self):
        """The posted group, when it is complete (the caller holds the lock)."""
        if not self.posted or len(self.posted) < self.members:
            return None
        group, self.posted = self.posted, []
        for c in group:
            c.taken = True
        self.groups[len(group)] = self.groups.get(len(group), 0) + 1
        return group

    def call(self, mod, x, run):
        """run(xs) -> [y for each x]; returns this thread's y, computed with the other threads'
        matching calls or alone."""
        with self.cond:
            if self.failed is not None:
                raise RuntimeError("lockstep: another reference failed: %r" % (self.failed,))
            mine = self._Call(mod, x)
            self.posted.append(mine)
            group = self._take()
            while group is None and not mine.taken:
                self.cond.wait()
                if self.failed is not None and not mine.taken:
                    self.posted.remove(mine)
                    raise RuntimeError("lockstep: another reference failed: %r" % (self.failed,))
                group = self._take()
            if group is None:  # another thread computes this call's group
                while mine.result is None and mine.error is None:
                    self.cond.wait()
                if mine.error is not None:
                    raise RuntimeError("lockstep: the grouped call failed") from mine.error
                return mine.result
        try:
            for c in group:
                if c.mod is not mod or c.x.shape != x.shape:
                    raise RuntimeError("lockstep: the references are out of step (%s %s against "
                                       "%s %s)" % (type(mod).__name__, tuple(x.shape),
                                                   type(c.mod).__name__, tuple(c.x.shape)))
            ys = run([c.x for c in group])
        except BaseException as e:
            with self.cond:
                for c in group:
                    if c is not mine:
                        c.error = e
                self.cond.notify_all()
            raise
        with self.cond:
            for c, y in zip(group, ys):
                c.result = y
            self.cond.notify_all()
        return mine.result


def run_lockstep(lockstep, first, *others):
    """first() on this thread and each of others() on a new one, grouped through `lockstep`
    (whose split_linears must be active; lockstep.members == 1 + len(others)). Returns their
    results in order."""
    boxes = [{} for _ in others]

    def target(fn, box):
        try:
            _worker_init()  # this thread's torch ops on one thread too, without autograd
            box["result"] = fn()
        except BaseException as e:  # re-raised on the caller's thread
            box["error"] = e
            lockstep.leave(e)
        else:
            lockstep.leave()

    threads = [threading.Thread(target=target, args=(fn, box), name="gen-golden-lockstep-%d" % i)
               for i, (fn, box) in enumerate(zip(others, boxes))]
    for t in threads:
        t.start()
    try:
        a = first()
    except BaseException as e:
        lockstep.leave(e)
        for t in threads:
            t.join()
        raise
    lockstep.leave()
    for t in threads:
        t.join()
    for box in boxes:
        if "error" in box:
            raise box["error"]
    return (a,) + tuple(box["result"] for box in boxes)


class TokenFeed:
    """The greedy reference's tokens as it chooses them, for the calibration forward teacher-
    forced on them in the same lockstep: feed[i] waits for token i."""

    def __init__(self):
        self.cond = threading.Condition()
        self.tokens = []
        self.closed = False

    def put(self, tok):
        with self.cond:
            self.tokens.append(int(tok))
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def __getitem__(self, i):
        with self.cond:
            while len(self.tokens) <= i and not self.closed:
                self.cond.wait()
            if len(self.tokens) <= i:
                raise RuntimeError("the greedy reference ended before its token %d" % i)
            return self.tokens[i]


# ---------------------------------------------------------------------------------------------
# The reference forward


def modeling_module(family):
    import importlib
    return importlib.import_module("transformers.models.%s.modeling_%s" % (family, family))


@contextmanager
def loader_threads(n):
    """transformers 5.17 materialises (reads and upcasts) the checkpoint's tensors on a pool of
    core_model_loading.GLOBAL_WORKERS threads (min(4, cores)): n of them here instead, each with
    one intra-op thread (ATen starts a new thread with the count last set, 1 here). An upcast to
    fp32 is exact: this only changes the speed."""
    try:
        import transformers.core_model_loading as cml
    except ImportError:
        cml = None
    before = getattr(cml, "GLOBAL_WORKERS", None)
    if n <= 1 or before is None:
        yield
        return
    cml.GLOBAL_WORKERS = n
    try:
        with intra_op_threads(1):
            yield
    finally:
        cml.GLOBAL_WORKERS = before


def load_model(set_dir, family, dtype=F32, threads=1):
    """transformers' own loader on the set's checkpoint files, upcast to `dtype`, eager
    attention (`threads` loader threads: loader_threads)."""
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    with loader_threads(threads):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            set_dir, dtype=dtype, attn_implementation="eager", local_files_only=True)
    model.eval()
    if type(model).__name__ != ARCH[family]:
        raise RuntimeError("%s loaded as %s, want %s"
                           % (set_dir, type(model).__name__, ARCH[family]))
    if model.config._attn_implementation != "eager":
        raise RuntimeError("attention implementation is %s, want eager"
                           % model.config._attn_implementation)
    return model


def _upcast_equal(param, t):
    """torch.equal(param, t.to(param.dtype)), CHUNK elements at a time."""
    if param.shape != t.shape:
        return False
    return all(torch.equal(p, q.to(p.dtype)) for p, q in
               zip(param.reshape(-1).split(CHUNK), t.reshape(-1).split(CHUNK)))


def check_loaded_weights(model, set_dir, pool=None):
    """Every checkpoint tensor is in the model, upcast exactly; tied heads share the embedding.
    With a pool (one_thread_workers) the tensors are compared in parallel. Returns the set of the
    checkpoint's dtypes (torch dtypes)."""
    from safetensors import safe_open
    state = model.state_dict()
    names, dtypes = [], set()
    for fname in sorted(os.listdir(set_dir)):
        if not fname.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(set_dir, fname), framework="pt") as f:
            compared = []
            for name in f.keys():
                t = f.get_tensor(name)
                key = name if name in state else None
                if key is None:  # real GPT-2 checkpoints store h.0... without "transformer."
                    for prefix in ("transformer.", "model."):
                        if prefix + name in state:
                            key = prefix + name
                if key is None:
                    if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
                        continue  # GPT-2 causal-mask buffers of old checkpoints
                    raise RuntimeError("%s: %s is not a parameter of the model" % (fname, name))
                compared.append((name, state[key], t))
                names.append(key)
                dtypes.add(t.dtype)
            same = (map if pool is None else pool.map)(lambda c: _upcast_equal(c[1], c[2]),
                                                       compared)
            for (name, _, _), ok in zip(compared, same):
                if not ok:
                    raise RuntimeError("%s: %s differs after loading" % (fname, name))
    # ... and every model tensor came from the checkpoint (transformers would initialise a missing
    # one randomly); a tied head is the embedding's storage.
    loaded = {state[k].data_ptr() for k in names}
    missing = [k for k, v in state.items() if k not in names and v.data_ptr() not in loaded]
    if missing:
        raise RuntimeError("%s: not in the checkpoint: %s" % (set_dir, ", ".join(missing[:5])))
    return dtypes


# The reference's hyper-parameters (params.hparams), in this order: one set of names for every
# family, null where a family has no such parameter (GPT-2 has no RoPE). The RoPE tables (the last
# four, added with RoPE scaling) come after the keys that existed before them.
HPARAM_KEYS = ["hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
               "intermediate_size", "vocab_size", "max_positions", "norm_eps", "rope_theta",
               "rope_type", "rotary_dim", "partial_rotary_factor", "tied_head", "activation",
               "sliding_window", "rope_inv_freq", "rope_long_inv_freq", "rope_attention_factor",
               "rope_long_from"]


def reference_rope(model):
    """The RoPE tables of the loaded model's rotary embedding, as transformers computed them:
    (rope_type, inv_freq, long_inv_freq, attention_factor, long_from). inv_freq is the table it
    was built with (original_inv_freq: for longrope the short factors'; `inv_freq` itself is
    swapped per forward call); long_inv_freq (longrope only) is what its forward switches to
    when a pass's largest position + 1 exceeds original_max_position_embeddings, computed by the
    same ROPE_INIT_FUNCTIONS call (seq_len = original + 1); long_from is that original (the first
    position whose decode step uses the long table). Lists of the fp32 values as floats."""
    rot = model.model.rotary_emb
    rp = model.config.rope_parameters
    if rot.rope_type != rp["rope_type"]:
        raise RuntimeError("rotary embedding rope_type %r, config %r" % (rot.rope_type,
                                                                         rp["rope_type"]))
    inv = rot.original_inv_freq
    if inv.dtype != F32:
        raise RuntimeError("inv_freq is %s, want float32" % inv.dtype)
    long_inv = long_from = None
    if rot.rope_type == "longrope":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        long_from = int(rp["original_max_position_embeddings"])
        long_inv, af = ROPE_INIT_FUNCTIONS["longrope"](model.config, inv.device,
                                                       seq_len=long_from + 1)
        if af != rot.attention_scaling or long_inv.shape != inv.shape:
            raise RuntimeError("longrope's long table disagrees with the rotary embedding")
        long_inv = [float(v) for v in long_inv.tolist()]
    return (rot.rope_type, [float(v) for v in inv.tolist()], long_inv,
            float(rot.attention_scaling), long_from)


def reference_hparams(model, family):
    """The hyper-parameters as transformers itself parsed them: from the loaded model's config
    object (its defaults and key mapping applied: rope_theta -> rope_parameters, n_inner None ->
    4H) and, where the config leaves a value to the modeling code, from the modules that use it
    (head_dim, the rotary dim and tables of the rotary embedding, GPT-2's inner size). Never
    from config.json's dict: an engine that reads config.json differently from transformers must
    show up by name."""
    c = model.config
    if family == "gpt2":
        block = model.transformer.h[0]
        hp = {
            "hidden_size": c.n_embd, "num_layers": c.n_layer, "num_heads": c.n_head,
            "num_kv_heads": block.attn.num_heads, "head_dim": block.attn.head_dim,
            "intermediate_size": block.mlp.c_fc.nf, "vocab_size": c.vocab_size,
            "max_positions": c.n_positions, "norm_eps": float(c.layer_norm_epsilon),
            "rope_theta": None, "rope_type": None, "rotary_dim": None,
            "partial_rotary_factor": None, "tied_head": bool(c.tie_word_embeddings),
            "activation": c.activation_function, "sliding_window": None,
            "rope_inv_freq": None, "rope_long_inv_freq": None, "rope_attention_factor": None,
            "rope_long_from": None,
        }
        norms = [m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    else:
        rp = c.rope_parameters
        rope_type, inv, long_inv, attention_factor, long_from = reference_rope(model)
        hp = {
            "hidden_size": c.hidden_size, "num_layers": c.num_hidden_layers,
            "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
            "head_dim": model.model.layers[0].self_attn.head_dim,
            "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
            "max_positions": c.max_position_embeddings, "norm_eps": float(c.rms_norm_eps),
            "rope_theta": float(rp["rope_theta"]), "rope_type": rope_type,
            "rotary_dim": 2 * int(model.model.rotary_emb.inv_freq.shape[0]),
            "partial_rotary_factor": float(rp.get("partial_rotary_factor", 1.0)),
            "tied_head": bool(c.tie_word_embeddings), "activation": c.hidden_act,
            # LlamaConfig has no sliding_window at all: null, no window
            "sliding_window": (None if getattr(c, "sliding_window", None) is None
                               else int(c.sliding_window)),
            "rope_inv_freq": inv, "rope_long_inv_freq": long_inv,
            "rope_attention_factor": attention_factor, "rope_long_from": long_from,
        }
        norms = [m.variance_epsilon for m in model.modules() if hasattr(m, "variance_epsilon")]
    for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "intermediate_size", "vocab_size", "max_positions"):
        hp[k] = int(hp[k])
    assert list(hp) == HPARAM_KEYS, list(hp)
    # What the config says is what the modules use: every norm's eps, the tied head's storage.
    if not norms or any(e != hp["norm_eps"] for e in norms):
        raise RuntimeError("norm eps in the modules %s, config %r" % (sorted(set(norms)),
                                                                      hp["norm_eps"]))
    head, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    if (head.data_ptr() == emb.data_ptr()) != hp["tied_head"]:
        raise RuntimeError("tie_word_embeddings %s, but the LM head %s the embedding"
                           % (hp["tied_head"], "is not" if hp["tied_head"] else "is"))
    return hp


def top_k_stable(logits, k):
    """Indices of the k largest logits, ties to the lower index (numpy, exact). Only the values
    at or above the k-th largest are sorted: the same indices as sorting the whole row."""
    x = logits.numpy()
    if x.shape[0] > k and not np.isnan(x).any():
        kth = np.partition(x, x.shape[0] - k)[x.shape[0] - k]
        idx = np.flatnonzero(x >= kth)
    else:
        idx = np.arange(x.shape[0])
    order = idx[np.lexsort((idx, -x[idx].astype(np.float64)))]
    return order[:k]


def run_reference(model, family, cfg, prompt, decode_steps, n_tokens=GREEDY_TOKENS, feed=None):
    """Prefill + greedy decoding through the KV cache with taps. Returns (taps, tokens, margins,
    top5) where taps is {file name stem: f32 tensor} in canonical order. Each token is also put
    to `feed` (a TokenFeed) as it is chosen."""
    d = dims(family, cfg)
    assert 8 <= decode_steps <= n_tokens - 1
    if len(prompt) + n_tokens > d.P:
        raise RuntimeError("prompt + generation (%d) exceeds the model's %d positions"
                           % (len(prompt) + n_tokens, d.P))
    rec = Recorder(model, family, d)
    rec.install()
    tokens, margins, top5 = [], [], []
    try:
        with torch.no_grad(), rec.rope_capture(modeling_module(family)):
            rec.begin("prefill")
            out = model(input_ids=prompt.to(torch.int64)[None], use_cache=True)
            rec.end(len(prompt))
            cache = out.past_key_values
            logits = out.logits[0, -1]
            # the logits tap is the very tensor the greedy choice reads
            assert torch.equal(rec.taps["prefill.logits"][-1], logits), "prefill logits tap"
            for i in range(n_tokens):
                assert logits.dtype == F32
                order = top_k_stable(logits, 5)
                tok = int(order[0])
                tokens.append(tok)
                if feed is not None:
                    feed.put(tok)
                margins.append(float(logits[order[0]].double() - logits[order[1]].double()))
                top5.append([int(j) for j in order])
                if i == n_tokens - 1:
                    break
                # decode step i feeds tokens[i] at position len(prompt) + i
                if i < decode_steps:
                    rec.begin("decode.%d" % i)
                out = model(input_ids=torch.tensor([[tok]], dtype=torch.int64),
                            past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                logits = out.logits[0, -1]
                if i < decode_steps:
                    rec.end(1)
                    assert torch.equal(rec.taps["decode.%d.logits" % i][0], logits), "logits tap"
    finally:
        rec.remove()
    ordered = {}
    for prefix in ["prefill"] + ["decode.%d" % s for s in range(decode_steps)]:
        for name in tap_names(family, d.L):
            ordered[prefix + "." + name] = rec.taps[prefix + "." + name]
    return (ordered, torch.tensor(tokens, dtype=I32), torch.tensor(margins, dtype=F64),
            torch.tensor(top5, dtype=I32))


def run_sampled(model, prompt, seed, n_tokens=SAMPLE_TOKENS):
    """Seeded generation through the KV cache from the same prompt: token j is sampled from the
    fp32 logits that precede it (prefill row P-1 for j = 0, then the decode step that fed token
    j-1) with sampling.py at step j, row 0, and fed back. Returns (tokens, model margins), the
    margin in logit units (sampling.model_margin; +inf when nothing could change the token)."""
    tokens, margins = [], []
    with torch.no_grad():
        out = model(input_ids=prompt.to(torch.int64)[None], use_cache=True)
        for j in range(n_tokens):
            logits = out.logits[0, -1]
            assert logits.dtype == F32
            res = sampling.sample_row(logits.numpy(), SAMPLE_TEMPERATURE, SAMPLE_TOP_K,
                                      SAMPLE_TOP_P, seed, j, row=0)
            tokens.append(res.token)
            margins.append(math.inf if res.model_margin is None else res.model_margin)
            if j == n_tokens - 1:
                break
            out = model(input_ids=torch.tensor([[res.token]], dtype=torch.int64),
                        past_key_values=out.past_key_values, use_cache=True)
    return torch.tensor(tokens, dtype=I32), torch.tensor(margins, dtype=F64)


# ---------------------------------------------------------------------------------------------
# Calibration: the error an fp16 (bf16) implementation of the same forward makes
#
# A bf16 set (params.dtype "bf16") is calibrated the same way with every "fp16" below read as
# "bf16": bf16-valued weights (a BF16 checkpoint upcast exactly) and round_bf16 at the same
# points; its calibration.json says "transformers-fp32-rounded-bf16".
#
# Tap tolerances are derived per set from calibration.json (docs/golden-format.md, "Calibration"):
# the error that an independent fp16 implementation of the same forward makes against the fp32
# reference at every tap. The implementation is transformers' own model on fp16-valued weights
# (an fp16 checkpoint upcast exactly; other dtypes rounded to fp16 first, as the engine loads
# them), run in fp32 with every value the engine stores as fp16 rounded to fp16 at the point the
# engine stores it: each linear output (bias included), each norm, RoPE's q and k (so the KV cache
# holds fp16), the attention output, the activation, the block outputs and both residual adds.
# Logits stay fp32, as the engine's final GEMM writes them. Every op inside those points runs in
# fp32 from fp16 inputs (softmax, the activation's product, the norm's statistics), which is what
# an engine with fp32 accumulation does; so the error is the rounding any correct fp16 engine must
# make, propagated through this model's own depth and conditioning.
#
# Why not transformers in torch.float16: on the CPU it rounds at points the engine does not
# (attention scores, the norm's normalised x before its weight, silu(gate) before the product,
# the bias after the GEMM), through fp16 CPU GEMM code whose accumulation differs by ATen build; the
# hooks below keep the fp32 MKL path (MKL_CBWR, one thread) that the reference already uses, so the
# calibration is byte-reproducible on every host exactly as the reference is.
#
# The residual adds are not modules, so they cannot be hooked directly: the output hook of the
# attention block's last projection returns fp16(x + attn_out) - x, so the layer's own
# `residual + hidden_states` yields the rounded sum (exactly, wherever that difference is an fp32
# value, and the next norm's input is pinned to the rounded sum regardless), and the layer's
# output hook replaces the second add by fp16(resid_attn + ffn_out) computed from the rounded
# values, after checking that the layer computed the same sum.

CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 1
CALIBRATION_IMPLEMENTATION = "transformers-fp32-rounded-fp16"
# calibration.json's "implementation" by the set's dtype (fp16 sets keep the name they always had)
CALIBRATION_IMPLEMENTATIONS = {"f16": CALIBRATION_IMPLEMENTATION,
                               "bf16": "transformers-fp32-rounded-bf16"}
# calibration.json keys of each tap, in order; the logits add the last two.
CALIBRATION_KEYS = ["nmse", "one_minus_cos", "max_err_rms"]
CALIBRATION_LOGIT_KEYS = ["max_abs", "kl"]
# A calibration is the error of a correct implementation: an nmse this large at any tap means the
# rounded forward computes something else (a hook on the wrong module, a transformers change), and
# limits derived from it would pass bugs. fp16 drift of a real model stays orders below it (bf16's,
# ~8x the amplitude and so ~64x the nmse, still two orders).
CALIBRATION_MAX_NMSE = 1e-2


def round_f16(t):
    """t rounded to the nearest fp16 value (ties to even; beyond 65504 to inf), in t's dtype."""
    return t.to(F16).to(t.dtype)


def round_bf16(t):
    """t rounded to the nearest bf16 value (ties to even; fp32's range), in t's dtype."""
    return t.to(BF16).to(t.dtype)


ROUNDING = {"f16": round_f16, "bf16": round_bf16}


class Rounder(TapCapture):
    """Forward hooks that make the reference model the calibration's fp16 (dtype "bf16": bf16)
    implementation (see the section comment) and record the rounded taps under the reference's
    names and shapes."""

    label = "calibration "

    def __init__(self, model, family, d, rounding=None, dtype="f16"):
        super().__init__(model, family, d)
        # The selftest passes an identity to prove the hooks change nothing but the rounding.
        self.round = ROUNDING[dtype] if rounding is None else rounding
        self.x = self.s = self.m = None  # layer input, resid_attn and ffn_out of the running layer

    def _heads(self, name, heads, x):
        self.put(name, x.reshape(x.shape[0], x.shape[1], heads, self.d.D))

    # -- hooks
    def _round_out(self, module, record):
        """Round the module's output; record(rounded) stores it."""
        def hook(_m, _args, out):
            if not self.mine():  # another lockstep thread's pass
                return None
            r = self.round(out[0] if isinstance(out, tuple) else out)
            record(r)
            return (r,) + tuple(out[1:]) if isinstance(out, tuple) else r
        self.handles.append(module.register_forward_hook(hook))

    def _round_in(self, module, name):
        """Round the module's (first, positional) input and record it."""
        def hook(_m, args):
            if not self.mine():  # another lockstep thread's pass
                return None
            x = self.round(args[0])
            self.put(name, x)
            return (x,) + tuple(args[1:])
        self.handles.append(module.register_forward_pre_hook(hook))

    def _enter(self, layer, i):
        """The layer's input: the rounded residual stream (GPT-2's wte + wpe is rounded here)."""
        def hook(_m, args, kwargs):
            if not self.mine():  # another lockstep thread's pass
                return None
            if args:
                x = self.round(args[0])
                args = (x,) + tuple(args[1:])
            else:
                x = self.round(kwargs["hidden_states"])
                kwargs = dict(kwargs, hidden_states=x)
            self.layer, self.x = i, x
            if i == 0:
                self.put("embed", x)
            return args, kwargs
        self.handles.append(layer.register_forward_pre_hook(hook, with_kwargs=True))

    def _attn_residual(self, proj, p):
        """The attention block's last projection: its rounded output is attn_out; return
        fp16(x + attn_out) - x so that the layer's residual add yields resid_attn rounded."""
        def hook(_m, _args, out):
            if not self.mine():  # another lockstep thread's pass
                return None
            a = self.round(out)
            self.s = self.round(self.x + a)
            self.put(p + "attn_out", a)
            self.put(p + "resid_attn", self.s)
            return self.s - self.x
        self.handles.append(proj.register_forward_hook(hook))

    def _pin_in(self, norm):
        """The second norm reads resid_attn exactly (the layer's add may miss it by an fp32 ulp
        where fp16(x + a) - x is not an fp32 value)."""
        def hook(_m, args):
            if not self.mine():  # another lockstep thread's pass
                return None
            if not torch.allclose(args[0], self.s, rtol=1e-6, atol=1e-7):
                raise RuntimeError("calibration: the layer's residual add is not the rounded sum")
            return (self.s,) + tuple(args[1:])
        self.handles.append(norm.register_forward_pre_hook(hook))

    def _layer_out(self, layer, p):
        def hook(_m, _args, out):
            if not self.mine():  # another lockstep thread's pass
                return None
            own = out[0] if isinstance(out, tuple) else out
            want = self.s + self.m
            if not torch.allclose(own, want, rtol=1e-5, atol=1e-6):
                raise RuntimeError("calibration %s: the layer's output is not resid_attn + ffn_out"
                                   % p)
            r = self.round(want)
            self.put(p + "resid_ffn", r)
            return (r,) + tuple(out[1:]) if isinstance(out, tuple) else r
        self.handles.append(layer.register_forward_hook(hook))

    def _set_m(self, name):
        def record(r):
            self.m = r
            self.put(name, r)
        return record

    def install(self):
        d, m = self.d, self.model
        put = self.put
        if self.family in ("qwen2", "phi3", "llama"):
            base = m.model
            for i, layer in enumerate(base.layers):
                p = "layers.%d." % i
                att, mlp = layer.self_attn, layer.mlp
                self._enter(layer, i)
                self._round_out(layer.input_layernorm, lambda r, p=p: put(p + "attn_norm", r))
                if self.family in ("qwen2", "llama"):
                    self._round_out(att.q_proj, lambda r, p=p: self._heads(p + "q", d.nH, r))
                    self._round_out(att.k_proj, lambda r, p=p: self._heads(p + "k", d.nKV, r))
                    self._round_out(att.v_proj, lambda r, p=p: self._heads(p + "v", d.nKV, r))
                else:
                    qd, kvd = d.nH * d.D, d.nKV * d.D

                    def qkv(r, p=p, qd=qd, kvd=kvd):
                        self._heads(p + "q", d.nH, r[..., :qd])
                        self._heads(p + "k", d.nKV, r[..., qd:qd + kvd])
                        self._heads(p + "v", d.nKV, r[..., qd + kvd:])
                    self._round_out(att.qkv_proj, qkv)
                self._round_in(att.o_proj, p + "attn")
                self._attn_residual(att.o_proj, p)
                self._pin_in(layer.post_attention_layernorm)
                self._round_out(layer.post_attention_layernorm, lambda r, p=p: put(p + "ffn_norm", r))
                if self.family in ("qwen2", "llama"):
                    self._round_out(mlp.gate_proj, lambda r, p=p: put(p + "ffn_gate", r))
                    self._round_out(mlp.up_proj, lambda r, p=p: put(p + "ffn_up", r))
                else:
                    def gate_up(r, p=p):
                        gate, up = r.chunk(2, dim=-1)
                        put(p + "ffn_gate", gate)
                        put(p + "ffn_up", up)
                    self._round_out(mlp.gate_up_proj, gate_up)
                self._round_in(mlp.down_proj, p + "ffn_act")
                self._round_out(mlp, self._set_m(p + "ffn_out"))
                self._layer_out(layer, p)
            self._round_out(base.norm, lambda r: put("final_norm", r))
        else:
            base = m.transformer
            for i, block in enumerate(base.h):
                p = "layers.%d." % i
                self._enter(block, i)
                self._round_out(block.ln_1, lambda r, p=p: put(p + "attn_norm", r))

                def c_attn(r, p=p):
                    q, k, v = r.split(d.H, dim=2)
                    self._heads(p + "q", d.nH, q)
                    self._heads(p + "k", d.nKV, k)
                    self._heads(p + "v", d.nKV, v)
                self._round_out(block.attn.c_attn, c_attn)
                self._round_in(block.attn.c_proj, p + "attn")
                self._attn_residual(block.attn.c_proj, p)
                self._pin_in(block.ln_2)
                self._round_out(block.ln_2, lambda r, p=p: put(p + "ffn_norm", r))
                self._round_out(block.mlp.c_fc, lambda r, p=p: put(p + "ffn_up", r))
                self._round_in(block.mlp.c_proj, p + "ffn_act")
                self._round_out(block.mlp, self._set_m(p + "ffn_out"))
                self._layer_out(block, p)
            self._round_out(base.ln_f, lambda r: put("final_norm", r))

        def logits(_m, _args, out):  # fp32, as the engine's final GEMM writes them
            if not self.mine():  # another lockstep thread's pass
                return None
            put("logits", out)
        self.handles.append(m.lm_head.register_forward_hook(logits))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    @contextmanager
    def rope_rounding(self, modeling):
        """RoPE's outputs rounded (and recorded): the KV cache then holds fp16 (bf16) keys."""
        with self.rope_taps(modeling, self.round):
            yield


def run_rounded(model, family, cfg, prompt, tokens, decode_steps, rounding=None, pool=None,
                weights_stored=False, dtype="f16"):
    """The calibration forward: prefill and decode steps 0..decode_steps-1 teacher-forced on the
    reference's greedy tokens (as the engine's tap comparison runs), with its own KV cache, every
    stored value rounded to `dtype` ("f16" or "bf16", the set's). Rounds the model's parameters
    to that type in place first (on the pool's threads when given): call it after every reference
    run. weights_stored says every parameter already is a value of that type (a checkpoint of
    it, upcast exactly: check_loaded_weights), so the rounding, a no-op on them, is skipped (a
    pass over the 15 GB of Phi-3-mini's fp32 weights). `rounding` replaces round_f16 /
    round_bf16 (the selftest's identity run). Returns {tap file stem: f32 tensor}."""
    d = dims(family, cfg)
    rnd = Rounder(model, family, d, rounding, dtype)
    low = TORCH_DTYPE[dtype]

    @torch.no_grad()
    def round_in_place(prm):
        if rounding is None and prm.is_contiguous():  # the rounding by chunks (-> f32 is exact)
            for c in prm.view(-1).split(CHUNK):
                c.copy_(c.to(low))
        else:
            prm.copy_(rnd.round(prm))
    if rounding is not None or not weights_stored:
        for _ in (map if pool is None else pool.map)(round_in_place, list(model.parameters())):
            pass
    rnd.install()
    try:
        with torch.no_grad(), rnd.rope_rounding(modeling_module(family)):
            rnd.begin("prefill")
            out = model(input_ids=prompt.to(torch.int64)[None], use_cache=True)
            rnd.end(len(prompt))
            cache = out.past_key_values
            for s in range(decode_steps):
                rnd.begin("decode.%d" % s)
                out = model(input_ids=torch.tensor([[int(tokens[s])]], dtype=torch.int64),
                            past_key_values=cache, use_cache=True)
                rnd.end(1)
                cache = out.past_key_values
    finally:
        rnd.remove()
    return rnd.taps


def tap_error(got, want, logits):
    """The calibration record of one tap: the metrics of engine/compare (Compare) of `got`
    against `want`, in float64 (torch, ATEN_CPU_CAPABILITY=default: the same bits on every host).
    Keys: CALIBRATION_KEYS, plus CALIBRATION_LOGIT_KEYS for logits."""
    g, w = got.to(F64), want.to(F64)
    if not (torch.isfinite(g).all() and torch.isfinite(w).all()):
        raise RuntimeError("non-finite values: the fp16 forward overflows (or the reference does)")
    e = g - w
    err_sq, ref_sq = float((e * e).sum()), float((w * w).sum())
    nmse = 0.0 if err_sq == 0 else (math.inf if ref_sq == 0 else err_sq / ref_sq)
    gg, ww, dot = float((g * g).sum()), ref_sq, float((g * w).sum())
    if err_sq == 0:
        cos = 1.0  # not dot / (|g| |w|), whose last bit can leave 1 - cos = 2e-16 for equal vectors
    elif gg == 0 or ww == 0:
        cos = 0.0
    else:
        cos = dot / (math.sqrt(gg) * math.sqrt(ww))
    n = w.shape[-1]
    ew, rw = e.reshape(-1, n).abs(), w.reshape(-1, n)
    rms = (rw * rw).mean(dim=1, keepdim=True).sqrt()
    if bool(((rms == 0) & (ew > 0)).any()):
        raise RuntimeError("an error in a row whose reference is all zeros")
    rel = torch.where(rms > 0, ew / torch.where(rms > 0, rms, torch.ones_like(rms)), torch.zeros_like(ew))
    rec = {"nmse": nmse, "one_minus_cos": max(0.0, 1.0 - cos), "max_err_rms": float(rel.max())}
    if logits:
        lw = torch.log_softmax(rw, dim=1)
        lg = torch.log_softmax(g.reshape(-1, n), dim=1)
        kl = (lw.exp() * (lw - lg)).sum(dim=1).clamp(min=0)
        rec["max_abs"] = float(ew.max())
        rec["kl"] = float(kl.mean())
    return rec


def sig3_up(v):
    """v rounded up to 3 significant digits, as a JSON number ("1.23e-06", or "0"): a fixed
    precision keeps regeneration byte-stable, and rounding up never understates an error."""
    if v == 0:
        return "0"
    if not (v > 0 and math.isfinite(v)):
        raise ValueError("calibration value %r" % v)
    dv = decimal.Decimal(v)  # the exact binary value
    exp = dv.adjusted() - 2
    digits = int(dv.scaleb(-exp).to_integral_value(rounding=decimal.ROUND_CEILING))
    if digits == 1000:
        digits, exp = 100, exp + 1
    return "%d.%02de%+03d" % (digits // 100, digits % 100, exp + 2)


def _tap_record(name, got, want):
    try:
        return tap_error(got, want, name.endswith(".logits"))
    except RuntimeError as e:
        raise RuntimeError("calibration of %s: %s" % (name, e)) from None


# Taps of at least this many values are calibrated on the pool (calibration_bytes).
CALIBRATION_POOL_MIN = 1 << 15


def calibration_bytes(ref_taps, cal_taps, pool=None, dtype="f16"):
    """calibration.json of a set of `dtype` ("f16" or "bf16": its "implementation",
    CALIBRATION_IMPLEMENTATIONS): one line per tap, in the manifest's tap order. tap_error's
    float64 sums depend on the thread count (ATen splits a sum into one value by it), so every
    record is computed on one thread: on this one, or in parallel on a pool from
    one_thread_workers. The bytes are the same either way."""
    names = list(ref_taps)
    if pool is None:
        with intra_op_threads(1):
            recs = [_tap_record(n, cal_taps[n], ref_taps[n]) for n in names]
    else:
        # The big taps (prefill's) on the pool; the many small ones (a decode step's single row)
        # on this thread meanwhile: thousands of tiny records spread over the pool's threads
        # spend their time queueing for the GIL (4 s for Phi-3-mini's 4357 taps).
        futures = {n: pool.submit(_tap_record, n, cal_taps[n], ref_taps[n]) for n in names
                   if ref_taps[n].numel() >= CALIBRATION_POOL_MIN}
        small = {n: _tap_record(n, cal_taps[n], ref_taps[n]) for n in names if n not in futures}
        recs = [futures[n].result() if n in futures else small[n] for n in names]
    lines = []
    for name, rec in zip(names, recs):
        logits = name.endswith(".logits")
        if rec["nmse"] > CALIBRATION_MAX_NMSE:
            raise RuntimeError("calibration of %s: nmse %.3g > %g: the %s forward does not "
                               "compute what the reference does" % (name, rec["nmse"],
                                                                     CALIBRATION_MAX_NMSE, dtype))
        keys = CALIBRATION_KEYS + (CALIBRATION_LOGIT_KEYS if logits else [])
        fields = ", ".join('"%s": %s' % (k, sig3_up(rec[k])) for k in keys)
        lines.append('    {"tap": %s, %s}' % (json.dumps(name), fields))
    text = '{\n  "version": %d,\n  "implementation": %s,\n  "taps": [\n%s\n  ]\n}\n' % (
        CALIBRATION_VERSION, json.dumps(CALIBRATION_IMPLEMENTATIONS[dtype]), ",\n".join(lines))
    return text.encode("ascii")


# ---------------------------------------------------------------------------------------------
# Writing a set


# Where build_set reports the seconds each phase of a set took, one line a phase
# ("<set>: run_reference 41.2s"); None (the default, e.g. in the selftest) reports nothing.
# __main__.py's models command sets it to stderr, so stdout stays one line a set.
PHASE_STREAM = None


class PhaseTimer:
    """`with phase("name"):` times a block and reports it to PHASE_STREAM."""

    def __init__(self, name):
        self.name = name

    @contextmanager
    def __call__(self, what):
        t0 = time.perf_counter()
        yield
        if PHASE_STREAM is not None:
            print("%s: %s %.1fs" % (self.name, what, time.perf_counter() - t0),
                  file=PHASE_STREAM, flush=True)


def build_set(set_dir, **kwargs):
    """Write one model set into set_dir (removed first; removed again if the build fails, so no
    half-written set is left behind). Returns (files, bytes)."""
    try:
        # the tier's worker threads (see "Threads"); torch itself on one thread throughout
        with intra_op_threads(1), one_thread_workers(tier_threads(kwargs["tier"])) as pool:
            return _build_set(set_dir, pool=pool, **kwargs)
    except BaseException:
        if os.path.isdir(set_dir) and not os.path.exists(os.path.join(set_dir, "manifest.json")):
            shutil.rmtree(set_dir, ignore_errors=True)
        raise


def set_dtype(stored, spec=None):
    """A set's dtype (params.dtype) from the dtypes its checkpoint stores (check_loaded_weights):
    a synthetic set's is its spec's, which its checkpoint must store exactly; a real checkpoint
    whose floating tensors are all BF16 is a bf16 set (run, rounded and calibrated in bf16, as it
    was trained and shipped), any other (F16, F32, mixed) an fp16 set as before: its values
    rounded to fp16 where they are not fp16 already."""
    if spec is not None:
        if stored != {TORCH_DTYPE[spec.dtype]}:
            raise RuntimeError("%s: the checkpoint stores %s, want %s only"
                               % (spec.name, sorted(map(str, stored)), spec.dtype))
        return spec.dtype
    floating = {t for t in stored if t.is_floating_point}
    return "bf16" if floating == {BF16} else "f16"


def _build_set(set_dir, *, name, family, tier, seed, source, decode_steps, margin_epsilon,
               spec=None, checkpoint=None, pool=None, ahead=None):
    if checkpoint is not None:
        src, dst = os.path.realpath(checkpoint), os.path.realpath(set_dir)
        if src == dst or src.startswith(dst + os.sep) or dst.startswith(src + os.sep):
            raise SystemExit("--checkpoint %s overlaps the set directory %s (which is deleted "
                             "first): give another --name or --out" % (checkpoint, set_dir))
    if ahead is None:
        if os.path.lexists(set_dir):
            shutil.rmtree(set_dir)
        os.makedirs(set_dir)
    phase = PhaseTimer(name)
    threads = 1 if pool is None else pool.size
    with phase("checkpoint" if ahead is None else "checkpoint (the forked writer's rest)"):
        if ahead is not None:
            ckpt = ahead()
        elif source == SYNTHETIC:
            ckpt = write_synthetic_checkpoint(set_dir, spec, seed, pool)
        else:
            ckpt = place_checkpoint(set_dir, checkpoint)
    with open(os.path.join(set_dir, "config.json"), "rb") as f:
        cfg = json.loads(f.read())
    mt = cfg.get("model_type")
    if FAMILY_OF_MODEL_TYPE.get(mt) != family:
        raise SystemExit("%s: model_type %r is not family %s" % (set_dir, mt, family))
    d = dims(family, cfg)
    prompt = prompt_ids(d.V)
    with phase("load_model"):
        model = load_model(set_dir, family, threads=threads)
    with phase("check_loaded_weights"):
        stored = check_loaded_weights(model, set_dir, pool)
        hparams = reference_hparams(model, family)
    dtype = set_dtype(stored, spec)
    weights_stored = stored == {TORCH_DTYPE[dtype]}
    if source == CHECKPOINT and dtype == "bf16":
        margin_epsilon = CHECKPOINT_EPSILON_BF16
    s_seed = sample_seed(name)

    feed = TokenFeed()  # the greedy tokens as they are chosen, for a calibration in lockstep

    def greedy():
        try:
            return run_reference(model, family, cfg, prompt, decode_steps, feed=feed)
        finally:
            feed.close()

    def seeded():
        return run_sampled(model, prompt, s_seed)

    def rounded():
        return run_rounded(model, family, cfg, prompt, feed, decode_steps, pool=pool,
                           weights_stored=True, dtype=dtype)

    # With a pool the references run in lockstep (run_lockstep), one after the other without.
    # The calibration forward joins them where the weights are its own already (a checkpoint of
    # the set's dtype: no rounding in place), teacher-forced on the greedy tokens as they come.
    jobs = [greedy, seeded] + ([rounded] if weights_stored else [])
    lockstep = Lockstep(len(jobs)) if pool is not None and threads > 1 else None
    cal_taps = None
    with split_linears(model, pool, threads, lockstep):
        if lockstep is not None:
            with phase("run_reference + run_sampled%s (lockstep)"
                       % (" + run_rounded" if len(jobs) == 3 else "")):
                results = run_lockstep(lockstep, *jobs)
            (taps, tokens, margins, top5), (s_tokens, s_margins) = results[:2]
            if len(jobs) == 3:
                cal_taps = results[2]
        else:
            with phase("run_reference"):
                taps, tokens, margins, top5 = greedy()
            with phase("run_sampled"):
                s_tokens, s_margins = seeded()
    if lockstep is not None and PHASE_STREAM is not None:
        print("%s: lockstep groups of %s linear calls" % (name, ", ".join(
            "%d: %d" % (k, n) for k, n in sorted(lockstep.groups.items(), reverse=True))),
            file=PHASE_STREAM, flush=True)
    if cal_taps is None:
        with split_linears(model, pool, threads):
            # Last: the calibration rounds the model's weights to fp16 (bf16) in place.
            with phase("run_rounded"):
                cal_taps = run_rounded(model, family, cfg, prompt, tokens, decode_steps,
                                       pool=pool, weights_stored=weights_stored, dtype=dtype)
    del model
    with phase("calibration"):
        cal = calibration_bytes(taps, cal_taps, pool, dtype)
        with open(os.path.join(set_dir, CALIBRATION_FILE), "wb") as f:
            f.write(cal)

    params = {
        "family": family,
        "source": source,
        "dtype": dtype,
        "prompt_ids": [int(t) for t in prompt],
        "decode_steps": decode_steps,
        "greedy_tokens": GREEDY_TOKENS,
        "margin_epsilon": margin_epsilon,
        "sample": {"temperature": SAMPLE_TEMPERATURE, "top_k": SAMPLE_TOP_K,
                   "top_p": SAMPLE_TOP_P, "seed": s_seed, "tokens": SAMPLE_TOKENS},
        "hparams": hparams,
    }
    tensors = [("prompt_ids", prompt, "input")]
    tensors += [(k, v, "expected") for k, v in taps.items()]
    tensors += [("greedy_tokens", tokens, "expected"),
                ("greedy_top2_margin", margins.to(F32), "expected"),
                ("greedy_top5", top5, "expected"),
                ("sample_tokens", s_tokens, "expected"),
                ("sample_margin", s_margins.to(F32), "expected")]
    calibration = ("calibration", CALIBRATION_FILE, hashlib.sha256(cal).hexdigest())
    with phase("write_taps"):
        return manifest.write_model_set(set_dir, model=name, case=CASE, tier=tier, seed=seed,
                                        params=params, checkpoint=ckpt, tensors=tensors,
                                        calibration=calibration, pool=pool)


def build_synthetic(spec, out_root, ahead=None):
    """Build spec's set under out_root; `ahead` is start_checkpoint's waiter for this set."""
    seed = set_seed(spec.name)
    return build_set(os.path.join(out_root, "models", spec.name), name=spec.name,
                     family=spec.family, tier=spec.tier, seed=seed, source=SYNTHETIC,
                     decode_steps=spec.decode_steps, margin_epsilon=spec.margin_epsilon,
                     spec=spec, ahead=ahead)


def _threads_now():
    """Threads of this process as the OS counts them (torch's own included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def start_checkpoint(spec, out_root):
    """Start writing spec's synthetic checkpoint (its set directory emptied first, the tier's
    worker threads) in a forked child process, so that this process can import transformers
    meanwhile: on hosts that run Python without writing bytecode the imports take ~14 s, the
    Phi-3-mini checkpoint ~18 s (docs/PERF.md). The child computes exactly what
    write_synthetic_checkpoint computes here. Returns a function that waits for the child and
    returns that result (build_synthetic's `ahead`), or None where a fork is not safe: only a
    process with a single thread is forked (call it before anything starts a thread)."""
    if not hasattr(os, "fork") or threading.active_count() != 1 or _threads_now() != 1:
        return None
    import multiprocessing as mp
    import traceback
    set_dir = os.path.join(out_root, "models", spec.name)
    ctx = mp.get_context("fork")
    rx, tx = ctx.Pipe(duplex=False)

    def child():
        try:
            if os.path.lexists(set_dir):
                shutil.rmtree(set_dir)
            os.makedirs(set_dir)
            with intra_op_threads(1), one_thread_workers(tier_threads(spec.tier)) as pool:
                tx.send(("ok", write_synthetic_checkpoint(set_dir, spec, set_seed(spec.name),
                                                          pool)))
        except BaseException:
            tx.send(("error", traceback.format_exc()))

    proc = ctx.Process(target=child, name="gen-golden-checkpoint")
    proc.start()
    tx.close()

    def wait():
        try:
            status, value = rx.recv()
        except EOFError:
            status, value = "error", "it ended without a result"
        finally:
            rx.close()
            proc.join()
        if status != "ok":
            raise RuntimeError("%s: writing the checkpoint in a forked process failed (exit code "
                               "%s):\n%s" % (set_dir, proc.exitcode, value))
        return value
    return wait


def build_checkpoint(src, name, tier, out_root):
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    family = FAMILY_OF_MODEL_TYPE.get(cfg.get("model_type"))
    if family is None:
        raise SystemExit("%s: model_type %r is not one of %s"
                         % (src, cfg.get("model_type"), sorted(FAMILY_OF_MODEL_TYPE)))
    return build_set(os.path.join(out_root, "models", name), name=name, family=family, tier=tier,
                     seed=set_seed(name), source=CHECKPOINT,
                     decode_steps=CHECKPOINT_DECODE_STEPS,
                     margin_epsilon=CHECKPOINT_EPSILON, checkpoint=src)


def stale_model_dirs(models_dir, keep, tier):
    """Model directories a regeneration of `tier` deletes: not in `keep`, and either without a
    readable manifest or a synthetic set of the same tier. Checkpoint sets and sets of the other
    tier are left alone."""
    if not os.path.isdir(models_dir):
        return []
    stale = []
    for name in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, name)
        if name in keep or not os.path.isdir(path):
            continue
        m = manifest.read_manifest(path)
        if m is None or (m.get("tier") == tier and m.get("kind") == "model"
                         and (m.get("params") or {}).get("source") == SYNTHETIC):
            stale.append(name)
    return stale
