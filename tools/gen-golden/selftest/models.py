"""`python3 tools/gen-golden selftest`, model part: check model sets the way the Go side will read
them, against code that shares nothing with the capture.

For each committed tiny model a set is built into a temporary directory (twice: the two builds
must be byte-identical), then read back from its files only:
  - format: manifest keys and params, checkpoint entries (role "checkpoint", no dtype/shape),
    sha256 of every file, .npy headers, dtypes and shapes, no unlisted file; params.quantization
    exactly for a set whose config.json has a quantization_config, naming its format
    (check_quantization);
  - hparams (transformers' parsed hyper-parameters) agree with config.json read by the contract's
    keys and defaults, the RoPE tables with rope_scaling.rope_scaling's formulas within 1e-5;
  - checkpoint: the safetensors header is the fixed layout the writer promises (metadata
    {"format": "pt"} only, sorted names, contiguous offsets, F16, or BF16 for a bf16 set), the
    safetensors library reads back exactly the drawn weights, and transformers' config class
    sees the distinguishing features (GQA 7:1 / 4:1, fused projections, head_dim, tied heads, no
    biases, eps, theta, the RoPE type; LongRoPE's switch among the stored decode steps; Mixtral's,
    Qwen3-MoE's and Qwen2-MoE's experts and top k, their routers and experts under the published
    names, block_sparse_moe's and mlp's, Qwen2-MoE's shared expert and its gate); a
    quantized set's file is safetensors' own layout (check_safetensors), every projection in the
    format's tensors, exactly what models/quantize.py makes of the seeded draw;
  - an independent float64 numpy forward (prefill, then decode through its own KV cache) from
    config.json + model.safetensors reproduces every tap within fp32 noise (a quantized set's
    projections dequantised from the format's tensors by the formats' descriptions, an FP8 set's
    inputs quantised as the reference's: Linears; a mixture of experts' block from the published
    per-expert tensors (w1 / w3 / w2, gate_proj / up_proj / down_proj) and the contract's
    routing: route, moe_block; Qwen2-MoE's shared expert added through its sigmoid gate);
  - q_rope / k_rope are the RoPE of q / k at the right positions (fp64 rotate_half formula with
    config.json's scaled tables and attention factor; LongRoPE: the table of each pass, both
    tables appearing in a synthetic set), and this check does fail for unrotated,
    off-by-one-position and GPT-J-paired rotations, and for scaled sets for the unscaled table,
    no attention factor and the other LongRoPE table;
  - neighbouring taps chain: resid_attn = previous residual + attn_out, resid_ffn = resid_attn +
    ffn_out, ffn_act = act(gate) * up (or gelu_new(up)), final_norm and logits from the last
    resid_ffn and the weights; a mixture of experts' router_logits from ffn_norm and its ffn_out
    from the experts the stored router_logits choose (Qwen2-MoE: moe_out from them, shared_out
    from the shared expert's taps, ffn_out = moe_out + sigmoid(gate) shared_out);
  - a mixture of experts' routing (check_router): the prompt's tokens reach at least 3 experts a
    layer, none of them every token, and every stored token's choice is decisive against the
    calibrated router error (with top 4 of 8, two of every token's places varying); Qwen2-MoE's
    shared-expert gate (check_shared_gate) is both nearly closed and nearly open on the prompt
    and spread in every layer, and transformers' own fp16 sparse block (check_fp16_block) stays
    within the calibrated ffn_out limits;
  - each decode step's logits equal the last row of a cache-free transformers forward over the
    same sequence (LongRoPE: its rotary embedding picking the table per position, as the cached
    passes did: cached_rope); greedy tokens, margins and top-5 lists follow from the logits taps,
    and transformers' generate() produces the same 32 tokens (with GenerationMixin's
    prepare_inputs_for_generation: Phi-3's own recomputes the cache at the LongRoPE switch,
    which is reported, not checked);
  - the margin epsilon is at least twice the top-2-margin drift of an fp16 run of the same model
    (a bf16 set: of a bf16 run; a quantized set: its reference modules' parameters in that type);
  - seeded generation: token 0 and its margin follow exactly from prefill.logits, every sampled
    token from a cache-free forward over the sampled sequence (sampling.py), and the fp16 (bf16)
    run,
    teacher-forced on the sampled tokens, samples the reference token at every step whose margin
    reaches the epsilon (so sample_margin is honest);
  - calibration.json is what the rounded fp16 forward (a bf16 set: bf16) makes of the set's own
    stored taps (rebuilt from the checkpoint and compared byte for byte), its hooks change nothing
    but the rounding (an identity rounding reproduces the reference taps), its taps are fp16
    (bf16) values and its residual adds the rounded sums of the rounded taps before them
    (Qwen2-MoE's ffn_out one rounding of the fp32 moe_out + sigmoid(gate) shared_out); an FP8
    set's says so (implementation suffix "-fp8-activations"), no other's;
  - params.dtype: a synthetic set's checkpoint stores that type only (a quantized set: besides
    its format's tensors), its config.json says so (torch_dtype) and its name ends in -bf16
    exactly when it is bf16; a real checkpoint's is bf16 exactly when all its floating tensors
    (a quantized checkpoint's projections aside) are BF16 (model_build.set_dtype).
The full tier's worker threads are checked on the tiny sets too: built again with a pool, every
linear layer split into 64-feature slices and the greedy and seeded references in lockstep
(lockstep.Lockstep, also checked alone for pairing, leaving and failing), they are byte-identical.
`selftest --set DIR` runs the read-back checks on existing set directories instead (for example a
full-size set, or a --layers smoke set).
"""

import hashlib
import json
import math
import os
import re
import struct
import tempfile
import time

from contextlib import contextmanager

import numpy as np
import torch

import sampling
from common import configs, dtypes, rope_scaling
from models import build as model_build
from models import calibration, checkpoint, generation, lockstep, quantize, reference, threads
from models import taps as model_taps
from selftest.int4 import AWQ_REVERSE_ORDER

NPY_MAGIC = b"\x93NUMPY\x01\x00"
NP_DTYPE = {"f16": "<f2", "f32": "<f4", "i32": "<i4"}
PARAM_KEYS = ["family", "source", "dtype", "prompt_ids", "decode_steps", "greedy_tokens",
              "margin_epsilon", "sample", "hparams"]
SAMPLE_KEYS = ["temperature", "top_k", "top_p", "seed", "tokens"]
# fp32 reference vs float64 numpy: relative to the tap's largest magnitude.
TAP_RTOL = 2e-4
# The bound on an FP8 set's cached against cache-free decode logits (check_greedy).
FP8_CACHE_FREE_REL = 0.05
ROPE_RTOL = 5e-5
# An FP8 set's numpy forward: the largest fraction of quantised projection inputs whose
# quantisation from the forward's own float64 activations may differ from that of the stored
# input taps (Linears: roundings decided by float32 noise). Measured (2026-11-27): none of 49152
# on the committed FP8 sets, 1.8e-5 and 2.6e-5 at Llama-3.2-1B's widths (2 layers); the forward's
# own inputs off by a relative 1e-4 (planted) differ at 1.4-1.6% on the committed sets, 1e-5 at
# 2e-5 to 1.2e-4. The bound sits 40x above the noise and sees a systematic error of about
# TAP_RTOL's size, which the input taps' own comparison (relative to the tap's largest value)
# would pass.
FP8_FLIP_MAX = 1e-3


class Fail(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# ---------------------------------------------------------------------------------------------
# Reading a set


class Set:
    def __init__(self, d):
        self.dir = d
        with open(os.path.join(d, "manifest.json"), "rb") as f:
            self.raw = f.read()
        self.m = json.loads(self.raw)
        self.p = self.m["params"]
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = json.load(f)
        self.family = self.p["family"]
        self.dims = configs.dims(self.family, self.cfg)
        self.files = {e["name"]: e for e in self.m["files"]}
        self._arrays = {}
        # a quantized set's format as config.json gives it (models/quantize.py; what the engine
        # reads): (format, group), or None for a set of 16-bit projections
        qc = self.cfg.get("quantization_config")
        self.quant = None
        if qc is not None:
            try:
                self.quant = quantize.format_of(qc)
            except SystemExit as e:  # a format the reference does not implement
                raise Fail(str(e))
        # FP8 activations: a discontinuous forward (the checks that compare two forwards bound it)
        self.fp8 = self.quant is not None and self.quant[0].startswith("fp8")

    def a(self, name):
        if name not in self._arrays:
            arr = np.load(os.path.join(self.dir, self.files[name]["file"]), allow_pickle=False)
            self._arrays[name] = arr
        return self._arrays[name]

    def weights(self):
        """The checkpoint's tensors, read on access as float64 (nothing is held, so full-size
        sets need no more than one tensor's float64 copy at a time), under the names synthetic
        sets use: real GPT-2 checkpoints drop the "transformer." prefix and may carry mask
        buffers, which are skipped."""
        return Weights(self.dir, self.family)


class Weights:
    def __init__(self, d, family):
        from safetensors import safe_open
        self.where = {}
        for fname in sorted(os.listdir(d)):
            if not fname.endswith(".safetensors"):
                continue
            path = os.path.join(d, fname)
            with safe_open(path, framework="pt") as f:
                for k in f.keys():
                    name = k
                    if family == "gpt2":
                        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
                            continue
                        if not k.startswith("transformer.") and k != "lm_head.weight":
                            name = "transformer." + k
                    self.where[name] = (path, k)

    def __contains__(self, name):
        return name in self.where

    def __getitem__(self, name):
        return self.raw(name).to(torch.float64).numpy()

    def raw(self, name):
        """The tensor as stored (a quantized projection's codes, words and scales)."""
        from safetensors import safe_open
        path, k = self.where[name]
        with safe_open(path, framework="pt") as f:
            return f.get_tensor(k)

    def get(self, name, default=None):
        return self[name] if name in self else default


def check_format(s):
    m = s.m
    check(s.raw.endswith(b"\n"), "manifest must end with a newline")
    check(list(m) == ["format_version", "generator", "kind", "model", "case", "tier", "seed",
                      "params", "files"], "manifest keys %s" % list(m))
    check(m["format_version"] == 1 and m["kind"] == "model" and m["case"] == generation.CASE,
          "format_version/kind/case")
    check(0 <= m["seed"] < 2**32, "seed")
    check(list(m["generator"]) == ["name", "version", "torch", "transformers", "device"],
          "generator keys %s" % list(m["generator"]))
    p = s.p
    # params.quantization, last, exactly for a set whose config.json has a quantization_config
    want_keys = PARAM_KEYS + (["peak"] if p.get("source") == "synthetic" else []) + (
        ["quantization"] if s.quant is not None else [])
    check(list(p) == want_keys, "params keys %s, want %s" % (list(p), want_keys))
    check(p["family"] in ("qwen2", "phi3", "llama", "gpt2", "qwen3", "mixtral", "qwen3_moe",
                          "qwen2_moe", "gemma3", "gemma2")
          and p["source"] in ("synthetic", "checkpoint"),
          "family/source")
    check(p["dtype"] in configs.DTYPES, "dtype %r" % (p["dtype"],))
    if s.quant is not None:
        check_quantization(s)
    entries = safetensors_entries(s.dir)
    st = {e["dtype"] for e in entries.values()}
    # the dtypes of the 16-bit tensors: a quantized checkpoint's projections excepted (their
    # codes, words and scales are the format's: QUANT_TENSORS)
    qnames = quant_names(entries, s.quant[0]) if s.quant is not None else set()
    dense = {e["dtype"] for k, e in entries.items() if k not in qnames}
    if p["source"] == "synthetic":
        want_st = {checkpoint.ST_NAME[p["dtype"]]}
        check(dense == want_st, "a %s set's checkpoint stores %s" % (p["dtype"], sorted(dense)))
        if s.quant is not None:
            # the storage dtype and the format's, each tensor's checked by check_safetensors
            want_st |= format_dtypes(s.quant[0], p["dtype"])
        check(st == want_st, "a %s set's checkpoint stores %s, want %s"
              % (p["dtype"] if s.quant is None else "%s %s" % (p["dtype"], s.quant[0]),
                 sorted(st), sorted(want_st)))
        check(s.cfg.get("torch_dtype") == configs.CONFIG_DTYPE[p["dtype"]],
              "config.json torch_dtype %r for a %s set" % (s.cfg.get("torch_dtype"), p["dtype"]))
        check(re.sub(r"-l\d+$", "", m["model"]).endswith("-bf16") == (p["dtype"] == "bf16"),
              "a synthetic set is named -bf16 exactly when it is bf16")
        check_peak(s)
    else:
        # (models/build.py set_dtype: from the tensors transformers' loader compares, which for a
        # quantized checkpoint are its 16-bit ones)
        floating = {d for d in dense if d in ("F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2")}
        check(p["dtype"] == ("bf16" if floating == {"BF16"} else "f16"),
              "a checkpoint of %s is dtype %s" % (sorted(dense), p["dtype"]))
    check(p["decode_steps"] >= 8 and p["greedy_tokens"] == 32, "decode_steps/greedy_tokens")
    check(len(p["prompt_ids"]) == generation.PROMPT_LEN, "prompt length")
    check(0 < p["margin_epsilon"] < 4, "margin_epsilon")
    sp = p["sample"]
    check(list(sp) == SAMPLE_KEYS, "sample keys %s" % list(sp))
    check(sp["temperature"] == generation.SAMPLE_TEMPERATURE
          and sp["top_k"] == generation.SAMPLE_TOP_K and sp["top_p"] == generation.SAMPLE_TOP_P
          and sp["tokens"] == generation.SAMPLE_TOKENS,
          "sample config")
    check(float(np.float32(sp["temperature"])) == sp["temperature"]
          and float(np.float32(sp["top_p"])) == sp["top_p"], "sample floats are fp32 values")
    check(sp["seed"] == generation.sample_seed(m["model"]), "sample seed is the seed of the name")

    listed = [e["file"] for e in m["files"]]
    check(len(set(listed)) == len(listed), "file listed twice")
    check(set(os.listdir(s.dir)) == set(listed) | {"manifest.json"}, "unlisted or missing files")
    ckpt = [e for e in m["files"] if e["role"] == "checkpoint"]
    check([e["file"] for e in m["files"][:len(ckpt)]] == [e["file"] for e in ckpt],
          "checkpoint files come first")
    check({"config.json"} <= {e["file"] for e in ckpt}, "config.json is a checkpoint file")
    check(m["files"][-1] == {"name": "calibration", "file": calibration.CALIBRATION_FILE,
                             "role": "calibration", "sha256": m["files"][-1].get("sha256")},
          "calibration.json is listed last, role calibration, no dtype/shape")
    for e in m["files"]:
        with open(os.path.join(s.dir, e["file"]), "rb") as f:
            data = f.read()
        check(hashlib.sha256(data).hexdigest() == e["sha256"], "%s: sha256" % e["file"])
        if e["role"] in ("checkpoint", "calibration"):
            check(set(e) == {"name", "file", "role", "sha256"},
                  "%s: %s entry keys" % (e["file"], e["role"]))
            continue
        check(e["role"] in ("input", "expected") and e["file"] == e["name"] + ".npy",
              "%s: role/name" % e["file"])
        check(data.startswith(NPY_MAGIC), "%s: .npy format 1.0" % e["file"])
        arr = s.a(e["name"])
        check(arr.dtype.str == NP_DTYPE[e["dtype"]] and list(arr.shape) == e["shape"]
              and arr.flags.c_contiguous, "%s: dtype/shape" % e["file"])

    # the expected tensor list, in order
    d = s.dims
    P, N = generation.PROMPT_LEN, p["decode_steps"]
    want = [("prompt_ids", "i32", [P], "input")]
    for prefix, T in [("prefill", P)] + [("decode.%d" % i, 1) for i in range(N)]:
        for t in model_taps.tap_names(s.family, d.L):
            want.append(("%s.%s" % (prefix, t), "f32", list(model_taps.tap_shape(t, d, T)),
                         "expected"))
    want += [("greedy_tokens", "i32", [32], "expected"),
             ("greedy_top2_margin", "f32", [32], "expected"),
             ("greedy_top5", "i32", [32, 5], "expected"),
             ("sample_tokens", "i32", [32], "expected"),
             ("sample_margin", "f32", [32], "expected")]
    got = [(e["name"], e["dtype"], e["shape"], e["role"]) for e in m["files"][len(ckpt):-1]]
    if got != want:
        first = next((g, w) for g, w in zip(got + [None] * len(want), want + [None] * len(got))
                     if g != w)
        raise Fail("tensor list differs from the contract: got %s, want %s" % first)
    check(s.a("prompt_ids").tolist() == p["prompt_ids"], "prompt_ids.npy vs params")
    check(p["prompt_ids"] == generation.prompt_ids(d.V).tolist(), "prompt is the fixed draw")


def check_hparams(s):
    """params.hparams (what transformers parsed) against config.json read by the contract's own
    table of keys and defaults (docs/golden-format.md, "The checkpoint"): two routes to the same
    numbers, so a generator recording something other than the config's meaning fails here."""
    cfg, d, hp = s.cfg, s.dims, s.p["hparams"]
    keys = reference.hparam_keys(s.family)
    check(list(hp) == keys, "hparams keys %s, want %s" % (list(hp), keys))
    want = {"hidden_size": d.H, "num_layers": d.L, "num_heads": d.nH, "num_kv_heads": d.nKV,
            "head_dim": d.D, "intermediate_size": d.I, "vocab_size": d.V, "max_positions": d.P,
            "norm_eps": d.eps, "tied_head": d.tied}
    tables = ["rope_inv_freq", "rope_long_inv_freq", "rope_attention_factor", "rope_long_from"]
    if s.family == "gpt2":
        want.update(rope_theta=None, rope_type=None, rotary_dim=None, partial_rotary_factor=None,
                    activation=cfg.get("activation_function", "gelu_new"), sliding_window=None,
                    **{k: None for k in tables})
    elif s.family in configs.GEMMA_FAMILIES:
        check_gemma_hparams(s, want, tables)
    else:
        sc = rope_scaling.rope_scaling(cfg)
        partial = cfg.get("partial_rotary_factor", 1.0)
        window = cfg.get("sliding_window")  # Llama: no such key, no window; Mixtral's null
        if s.family in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe") and not cfg.get(
                "use_sliding_window", False):
            window = None  # Qwen2 applies its window only with use_sliding_window
        want.update(rope_theta=configs.rope_theta(cfg), rope_type=sc.rope_type,
                    rotary_dim=int(d.D * partial), partial_rotary_factor=float(partial),
                    activation=cfg.get("hidden_act", "silu"), sliding_window=window)
        # The tables: transformers' fp32 values against the contract's fp64 formula with fp32
        # divisors (rope_scaling.rope_scaling), relative 1e-5; the attention factor as fp32.
        for key, div in (("rope_inv_freq", sc.freq_divisor),
                         ("rope_long_inv_freq", sc.long_divisor)):
            got = hp[key]
            if key == "rope_long_inv_freq" and div is None:
                check(got is None, "hparams.%s = %r, want null" % (key, got))
                continue
            check(isinstance(got, list) and len(got) == sc.dim // 2
                  and all(type(v) is float and float(np.float32(v)) == v for v in got),
                  "hparams.%s: a list of %d fp32 values" % (key, sc.dim // 2))
            at = sc.long_from if key == "rope_long_inv_freq" else 0  # a position of that table
            want_inv = inv_freq(sc, np.array([at]))[0]
            rel = float(np.abs(np.array(got) / want_inv - 1).max())
            check(rel <= rope_scaling.INV_FREQ_RTOL, "hparams.%s off config.json's tables by %.3g"
                  % (key, rel))
        af = hp["rope_attention_factor"]
        check(type(af) is float and np.float32(af) == np.float32(sc.attention_factor),
              "hparams.rope_attention_factor = %r, config.json gives %r"
              % (af, sc.attention_factor))
        check(hp["rope_long_from"] == sc.long_from, "hparams.rope_long_from = %r, want %r"
              % (hp["rope_long_from"], sc.long_from))
    if s.family in configs.MOE_FAMILIES:
        # Mixtral's router always renormalises its top k (there is no key for it); Qwen3-MoE's
        # experts are num_experts (or, absent, num_local_experts, transformers 5's name for it),
        # Qwen2-MoE's num_experts (default 60), renormalised where norm_topk_prob (default
        # false), of width moe_intermediate_size (dims: d.I, the intermediate_size above)
        want.update(num_experts=(cfg["num_local_experts"] if s.family == "mixtral"
                                 else configs.moe_experts(s.family, cfg)),
                    num_experts_per_tok=cfg["num_experts_per_tok"],
                    norm_topk_prob=renormalises(s.family, cfg))
    if s.family in configs.SHARED_EXPERT_FAMILIES:
        # Qwen2-MoE's shared expert: shared_expert_intermediate_size (Qwen2MoeConfig's 5632)
        want["shared_expert_intermediate_size"] = cfg.get("shared_expert_intermediate_size", 5632)
    for k in keys:
        if k in tables and s.family != "gpt2":
            continue  # checked above
        check(hp[k] == want[k] and type(hp[k]) is type(want[k]),
              "hparams.%s = %r, config.json says %r" % (k, hp[k], want[k]))


def gemma_layer_types(cfg):
    """Gemma's layer types from config.json: layer_types, else (Gemma 3) every
    sliding_window_pattern-th layer (default 6) global and the rest sliding
    (Gemma3TextConfig.__post_init__), or (Gemma 2) every other layer, the even ones sliding
    (Gemma2Config.__post_init__)."""
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    n = 2 if cfg["model_type"] == "gemma2" else cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % n else "full_attention"
            for i in range(cfg["num_hidden_layers"])]


def check_gemma_hparams(s, want, tables):
    """Gemma's hparams against config.json: the global layers' RoPE (rope_theta and
    rope_scaling) in the shared keys, Gemma 3's sliding layers' (rope_local_base_freq, unscaled)
    in rope_local_*, query_pre_attn_scalar, the embedding scale sqrt(hidden_size), the layer
    types, and Gemma 2's soft caps (Gemma2Config's defaults 50 and 30 where the key is absent)."""
    cfg, d, hp = s.cfg, s.dims, s.p["hparams"]
    sc = rope_scaling.rope_scaling(cfg)
    if s.family == "gemma2":
        cap = lambda key, default: None if cfg.get(key, default) is None else float(cfg.get(key, default))
        want.update(rope_theta=configs.rope_theta(cfg), rope_type=sc.rope_type, rotary_dim=sc.dim,
                    partial_rotary_factor=1.0,
                    activation=cfg.get("hidden_activation", "gelu_pytorch_tanh"),
                    sliding_window=cfg.get("sliding_window", 4096), rope_long_inv_freq=None,
                    rope_attention_factor=1.0, rope_long_from=None,
                    query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
                    embed_scale=float(cfg["hidden_size"] ** 0.5),
                    layer_types=gemma_layer_types(cfg),
                    attn_logit_softcapping=cap("attn_logit_softcapping", 50.0),
                    final_logit_softcapping=cap("final_logit_softcapping", 30.0))
        got = hp["rope_inv_freq"]
        check(isinstance(got, list) and len(got) == sc.dim // 2
              and all(type(v) is float and float(np.float32(v)) == v for v in got),
              "hparams.rope_inv_freq: a list of %d fp32 values" % (sc.dim // 2))
        rel = float(np.abs(np.array(got) / inv_freq(sc, np.array([0]))[0] - 1).max())
        check(rel <= rope_scaling.INV_FREQ_RTOL, "hparams.rope_inv_freq off config.json's tables "
              "by %.3g" % rel)
        for k in ("rope_long_inv_freq", "rope_attention_factor", "rope_long_from"):
            check(hp[k] == want[k], "hparams.%s = %r, want %r" % (k, hp[k], want[k]))
        return
    check(cfg.get("attn_logit_softcapping") is None and cfg.get("final_logit_softcapping") is None,
          "a Gemma 3 set with soft-capping")
    local = rope_scaling.RopeScaling("default", float(cfg.get("rope_local_base_freq", 10000.0)),
                                     sc.dim, None, None, 1.0, None)
    want.update(rope_theta=configs.rope_theta(cfg), rope_type=sc.rope_type, rotary_dim=sc.dim,
                partial_rotary_factor=1.0,
                activation=cfg.get("hidden_activation", "gelu_pytorch_tanh"),
                sliding_window=cfg.get("sliding_window"), rope_long_inv_freq=None,
                rope_attention_factor=1.0, rope_long_from=None, rope_local_theta=local.base,
                query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
                embed_scale=float(cfg["hidden_size"] ** 0.5),
                layer_types=gemma_layer_types(cfg))
    for key, rs in (("rope_inv_freq", sc), ("rope_local_inv_freq", local)):
        got = hp[key]
        check(isinstance(got, list) and len(got) == rs.dim // 2
              and all(type(v) is float and float(np.float32(v)) == v for v in got),
              "hparams.%s: a list of %d fp32 values" % (key, rs.dim // 2))
        rel = float(np.abs(np.array(got) / inv_freq(rs, np.array([0]))[0] - 1).max())
        check(rel <= rope_scaling.INV_FREQ_RTOL, "hparams.%s off config.json's tables by %.3g"
              % (key, rel))
    for k in ("rope_long_inv_freq", "rope_attention_factor", "rope_long_from"):
        check(hp[k] == want[k], "hparams.%s = %r, want %r" % (k, hp[k], want[k]))
    tables.append("rope_local_inv_freq")


def safetensors_entries(d):
    """{tensor name: header entry} of the safetensors files of a set directory (their headers)."""
    out = {}
    for fname in sorted(os.listdir(d)):
        if fname.endswith(".safetensors"):
            with open(os.path.join(d, fname), "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                h = json.loads(f.read(n))
            out.update({k: v for k, v in h.items() if k != "__metadata__"})
    return out


def safetensors_dtypes(d):
    """The dtypes the safetensors files of a set directory store (from their headers)."""
    return {e["dtype"] for e in safetensors_entries(d).values()}


# ---------------------------------------------------------------------------------------------
# Quantized sets (models/quantize.py; docs/quantization.md, "Quantized model sets"): the formats'
# tensors as the published formats describe them, read here without the code that wrote them

# A quantized projection's tensors in each format: suffix -> safetensors dtype (None: the set's
# storage dtype, F16 or BF16).
QUANT_TENSORS = {
    "fp8-block": {".weight": "F8_E4M3", ".weight_scale_inv": "F32"},
    "fp8-channel": {".weight": "F8_E4M3", ".weight_scale": None},
    "awq": {".qweight": "I32", ".qzeros": "I32", ".scales": None},
    "gptq": {".qweight": "I32", ".qzeros": "I32", ".scales": None, ".g_idx": "I32"},
}
QUANT_KEYS = ["format", "group_size", "reference", "cross_check"]
# safetensors element sizes of the dtypes a set may store
ST_ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1}
assert set(QUANT_TENSORS) == set(quantize.FORMATS) and all(
    quantize.MARKER[f] in QUANT_TENSORS[f] for f in quantize.FORMATS)


def format_dtypes(fmt, dtype):
    """The safetensors dtypes of a format's tensors in a set of storage dtype `dtype`."""
    return {d or checkpoint.ST_NAME[dtype] for d in QUANT_TENSORS[fmt].values()}


# The projections with a bias in Qwen2 (q, k, v).
QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


def quant_projections(names, fmt):
    """The projections (tensor names without the suffix) stored in format fmt: those with the
    format's marker tensor (quantize.MARKER, as the reference's loader and the engine find them)."""
    m = quantize.MARKER[fmt]
    return {k[:-len(m)] for k in names if k.endswith(m)}


def quant_names(names, fmt):
    """The names of the tensors of the projections stored in format fmt."""
    return {p + x for p in quant_projections(names, fmt) for x in QUANT_TENSORS[fmt]
            if p + x in names}


def projection_shapes(d):
    """{LINEARS name: (N, K)}: each decoder projection's out and in features."""
    q, kv = d.nH * d.D, d.nKV * d.D
    return {"self_attn.q_proj": (q, d.H), "self_attn.k_proj": (kv, d.H),
            "self_attn.v_proj": (kv, d.H), "self_attn.o_proj": (d.H, q),
            "mlp.gate_proj": (d.I, d.H), "mlp.up_proj": (d.I, d.H), "mlp.down_proj": (d.H, d.I)}


def quant_shapes(fmt, group, N, K, cfg):
    """{suffix: shape} of a projection W [N, K] stored in format fmt (docs/quantization.md):
    fine-grained FP8's scales one per block of config.json's weight_block_size (the last row
    block partial), compressed-tensors' one per output channel; AWQ's words [K, N/8] along n,
    GPTQ's [K/8, N] along k, zero points and scales per group of inputs (-1: one group)."""
    if fmt == "fp8-block":
        bn, bk = cfg["quantization_config"]["weight_block_size"]
        return {".weight": [N, K], ".weight_scale_inv": [-(-N // bn), K // bk]}
    if fmt == "fp8-channel":
        return {".weight": [N, K], ".weight_scale": [N, 1]}
    ng = 1 if group == -1 else K // group
    shapes = {".qzeros": [ng, N // 8], ".scales": [ng, N]}
    if fmt == "awq":
        return dict(shapes, **{".qweight": [K, N // 8]})
    return dict(shapes, **{".qweight": [K // 8, N], ".g_idx": [K]})


def check_quantization(s):
    """params.quantization of a set whose config.json has a quantization_config: its keys in
    order; the format and group config.json gives (quantize.format_of: what the engine reads);
    the reference forward quantize.REFERENCE; the libraries that cross-checked the format's
    tensors, a non-empty list of names (a set of a real checkpoint: that its tensors are read as
    written). A synthetic set's quantization_config is the one models/quantize.py writes for its
    format and group (so the hub's readers see the published layout), of a Llama or Qwen2 model
    (whose projections quantize.LINEARS names); the 4-bit groups divide every projection's
    inputs."""
    q, (fmt, group) = s.p["quantization"], s.quant
    check(isinstance(q, dict) and list(q) == QUANT_KEYS, "params.quantization keys %s, want %s"
          % (list(q) if isinstance(q, dict) else q, QUANT_KEYS))
    check(q["format"] in quantize.FORMATS and q["format"] == fmt,
          "params.quantization.format %r, config.json's quantization_config is %s"
          % (q["format"], fmt))
    int4 = fmt in ("awq", "gptq")
    check(q["group_size"] == (group if int4 else None) and
          (not int4 or (type(group) is int and (group == -1 or group > 0))),
          "params.quantization.group_size %r, config.json's %r (%s)" % (q["group_size"], group,
                                                                       fmt))
    check(q["reference"] == quantize.REFERENCE, "params.quantization.reference %r, want %r"
          % (q["reference"], quantize.REFERENCE))
    cc = q["cross_check"]
    check(isinstance(cc, list) and cc and all(isinstance(c, str) and c for c in cc)
          and len(set(cc)) == len(cc),
          "params.quantization.cross_check %r: a non-empty list of names" % (cc,))
    check(s.family in ("llama", "qwen2"), "a quantized %s set" % s.family)
    if int4 and group != -1:
        widths = {K for _, K in projection_shapes(s.dims).values()}
        check(all(K % group == 0 for K in widths), "group_size %d does not divide the "
              "projections' inputs %s" % (group, sorted(widths)))
    if s.p["source"] == "synthetic":
        want = quantize.quantization_config(fmt, group)
        check(s.cfg["quantization_config"] == want, "config.json's quantization_config %s, "
              "models/quantize.py writes %s" % (json.dumps(s.cfg["quantization_config"],
                                                           sort_keys=True),
                                                json.dumps(want, sort_keys=True)))


def check_safetensors(s, spec=None):
    """Header layout; with a spec, the values are exactly the seeded draws, and a quantized set's
    projections exactly what models/quantize.py makes of the draws.

    A 16-bit set's file is models/checkpoint.py's fixed layout (names sorted, one dtype, the
    header bytes its safetensors_header's). A quantized set's is rewritten by safetensors'
    save_file (quantize_checkpoint), whose layout is the library's: the tensors' data ordered by
    decreasing element size, then by name (it aligns the wider types first; no two of a set's
    dtypes share a size: check_format), the header listing them in that order, compact JSON
    padded with spaces to a multiple of 8. Either way: metadata {"format": "pt"} only, offsets
    contiguous from 0, nothing after the last tensor; a quantized set's every decoder projection
    in its format, each with exactly the format's tensors, dtypes and shapes."""
    path = os.path.join(s.dir, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = f.read(n)
        size = os.fstat(f.fileno()).st_size
    check(n % 8 == 0, "header length not a multiple of 8")
    h = json.loads(head)
    check(list(h)[0] == "__metadata__" and h["__metadata__"] == {"format": "pt"},
          "metadata must be {'format': 'pt'} only")
    names = list(h)[1:]
    st = checkpoint.ST_NAME[s.p["dtype"]]
    want_dtype = {k: st for k in names}
    if s.quant is not None:
        fmt, group = s.quant
        projections = {"model.layers.%d.%s" % (i, sub) for i in range(s.dims.L)
                       for sub in quantize.LINEARS}
        found = quant_projections(names, fmt)
        check(found == projections, "projections stored in %s: %s, want every decoder layer's "
              "%s" % (fmt, sorted(found)[:4], ", ".join(quantize.LINEARS)))
        shapes = projection_shapes(s.dims)
        for proj in sorted(projections):
            sub = proj.split(".", 3)[3]
            have = sorted(k[len(proj):] for k in names if k.startswith(proj + "."))
            # Qwen2's q/k/v biases stay 16-bit tensors beside the format's (storage dtype, [N])
            want = sorted(QUANT_TENSORS[fmt]) + (
                [".bias"] if s.family == "qwen2" and sub in QKV else [])
            check(have == sorted(want), "%s: tensors %s, want %s's %s" % (proj, have, fmt, want))
            if ".bias" in want:
                check(h[proj + ".bias"]["shape"] == [shapes[sub][0]], "%s.bias: shape %s"
                      % (proj, h[proj + ".bias"]["shape"]))
            for sfx, shape in quant_shapes(fmt, group, *shapes[sub], s.cfg).items():
                want_dtype[proj + sfx] = QUANT_TENSORS[fmt][sfx] or st
                check(h[proj + sfx]["shape"] == shape, "%s%s: shape %s, want %s"
                      % (proj, sfx, h[proj + sfx]["shape"], shape))
        order = sorted(names, key=lambda k: (-ST_ITEMSIZE[want_dtype[k]], k))
        check(names == order, "tensors not in safetensors' order (element size, then name)")
    else:
        check(names == sorted(names), "tensors not in sorted order")
    off, canon = 0, {"__metadata__": {"format": "pt"}}
    for k in names:
        e = h[k]
        check(e["dtype"] == want_dtype[k], "%s: dtype %s, want %s" % (k, e["dtype"], want_dtype[k]))
        nbytes = ST_ITEMSIZE[e["dtype"]] * int(np.prod(e["shape"], dtype=np.int64))
        check(e["data_offsets"] == [off, off + nbytes], "%s: offsets not contiguous" % k)
        canon[k] = {"dtype": want_dtype[k], "shape": e["shape"],
                    "data_offsets": [off, off + nbytes]}
        off += nbytes
    check(8 + n + off == size, "file size does not match the header")
    if s.quant is None:
        check(head == checkpoint.safetensors_header(
            [(k, st, h[k]["shape"]) for k in names])[8:], "header bytes are not canonical")
    else:
        text = json.dumps(canon, separators=(",", ":")).encode("ascii")
        check(head == text + b" " * (-len(text) % 8), "header bytes are not canonical")
    if spec is None:
        return
    from safetensors.torch import load_file
    loaded = load_file(path)
    specs = checkpoint.init_specs(spec.family, spec.config, checkpoint.final_norm_gain(spec.tier))
    quantized = set()
    if s.quant is not None:
        check((spec.quant, spec.quant_group if spec.quant in ("awq", "gptq") else None)
              == (fmt, group), "the set is %s %s, its spec %s %s" % (fmt, group, spec.quant,
                                                                     spec.quant_group))
        quantized = {name for name, _, _ in specs if name.endswith(".weight")
                     and name[:-len(".weight")] in projections}
    want_names = {name for name, _, _ in specs if name not in quantized}
    want_names |= {name[:-len(".weight")] + x for name in quantized for x in QUANT_TENSORS[fmt]}
    check(sorted(loaded) == sorted(want_names), "tensor names")
    seed = generation.set_seed(spec.name)
    pk = s.p["peak"]
    for name, shape, init in specs:
        want = checkpoint.draw_tensor_whole(seed, name, shape, init, spec.dtype)
        if name in quantized:
            # the format's tensors of the seeded draw (the projections are never peaked), byte
            # for byte
            proj = name[:-len(".weight")]
            stored, _ = quantize.QUANTISERS[fmt](proj, want, None, spec.quant_group)
            check(sorted(stored) == sorted(QUANT_TENSORS[fmt]), "%s: %s's tensors %s"
                  % (proj, fmt, sorted(stored)))
            for sfx, t in stored.items():
                got = loaded[proj + sfx]
                check(got.dtype == t.dtype and got.shape == t.shape and torch.equal(
                      got.contiguous().reshape(-1).view(torch.uint8),
                      t.contiguous().reshape(-1).view(torch.uint8)),
                      "%s%s: not the %s quantisation of the seeded draw" % (proj, sfx, fmt))
            continue
        got = loaded[name]
        check(got.dtype == want.dtype and got.shape == want.shape, "%s: dtype/shape" % name)
        if name == pk["tensor"]:
            # the peaked rows (models/peak.py) differ from the draw, every other row is the draw
            differ = sorted(int(r) for r in (got != want).any(dim=1).nonzero().flatten())
            check(differ == pk["rows"], "%s: rows %s differ from the seeded draw, params.peak "
                  "lists %s" % (name, differ, pk["rows"]))
            continue
        check(torch.equal(got, want), "%s: values are not the seeded draw" % name)


def check_peak(s):
    """params.peak of a synthetic set (models/peak.py): the output projection's tensor, its
    changed rows, and the promise kept: every greedy and seeded step is decisive."""
    from models import peak
    pk, d = s.p["peak"], s.dims
    check(list(pk) == ["tensor", "rows", "target", "accept", "rounds", "smallest_margin"],
          "peak keys %s" % list(pk))
    check(pk["tensor"] == peak.head_tensor(s.p["family"], d.tied), "peak tensor %r" % pk["tensor"])
    check(pk["rows"] == sorted(set(pk["rows"])) and all(0 <= r < d.V for r in pk["rows"]),
          "peak rows: ascending, distinct, within the vocabulary")
    check(pk["target"] in peak.PEAK_TARGETS and pk["accept"] == peak.PEAK_ACCEPT,
          "peak target/accept")
    eps = s.p["margin_epsilon"]
    for key in ("greedy_top2_margin", "sample_margin"):
        m = s.a(key)
        check(np.all(m >= eps), "%s: steps %s are below the margin epsilon %g: the peaked "
              "checkpoint does not decide every step" % (key, np.flatnonzero(m < eps).tolist(),
                                                         eps))


def check_scores_reach_cap(s, c, d):
    """The attention cap bends the scores it is there for: a share of every layer's causal
    prefill scores lies past half the cap (an engine that drops the cap then fails at attn)."""
    cap, scale = c.attn_logit_softcapping, c.query_pre_attn_scalar ** -0.5
    for i in range(d.L):
        q = s.a("prefill.layers.%d.q_rope" % i).astype(np.float64)
        k = np.repeat(s.a("prefill.layers.%d.k_rope" % i).astype(np.float64), d.nH // d.nKV, axis=1)
        raw = np.einsum("thd,uhd->htu", q, k) * scale
        seen = np.tril(np.ones(raw.shape[1:], bool))
        share = float((np.abs(raw[:, seen]) > cap / 2).mean())
        check(share >= 0.05, "layer %d: %.1f%% of the prefill scores past half the attention "
              "cap %g (want >= 5%%)" % (i, 100 * share, cap))


def routed_expert_shapes(family, d):
    """The published per-expert layout of a Qwen-MoE checkpoint with its untied head: lm_head, and
    in every layer the router mlp.gate [E, H] and each expert's gate_proj, up_proj [I, H] and
    down_proj [H, I] under mlp.experts.{e}, nothing stacked (transformers' in-memory gate_up_proj
    / down_proj): {tensor name: shape}."""
    want = {"lm_head.weight": [d.V, d.H]}
    for i in range(d.L):
        router, experts = moe_names(family, i)
        want[router] = [d.E, d.H]
        for e in range(d.E):
            for n, shape in zip(experts(e), ([d.I, d.H], [d.I, d.H], [d.H, d.I])):
                want[n] = shape
    return want


def check_config(s, spec):
    """transformers' config class reads the features each tiny variant exists for."""
    import transformers
    transformers.logging.set_verbosity_error()  # Phi-3's LongRoPE config draws a warning
    c = transformers.AutoConfig.from_pretrained(s.dir, local_files_only=True)
    d = s.dims
    if spec.family == "qwen2":
        check(type(c).__name__ == "Qwen2Config", "config class")
        # 7:1 (Qwen2.5's); a quantized set's 8:1 (configs.QWEN2_QTINY: 16 heads, a hidden size
        # of 256 that FP8's 128-column blocks divide)
        ratio = 8 if s.quant is not None else 7
        check(c.num_attention_heads // c.num_key_value_heads == ratio and c.num_key_value_heads >= 2,
              "GQA %d:1 with >= 2 kv heads" % ratio)
        check(c.tie_word_embeddings and c.rms_norm_eps == 1e-6
              and c.rope_parameters["rope_theta"] == 1e6, "tied / eps / theta")
        if spec.name == "qwen2-swa-tiny":
            check(c.sliding_window == 7 and c.layer_types == ["full_attention", "sliding_attention"]
                  and generation.PROMPT_LEN > 2 * c.sliding_window,
                  "a window of 7 on layer 1 only, well inside the prompt")
        else:
            check(c.sliding_window is None and set(c.layer_types) == {"full_attention"},
                  "no sliding window")
        w = s.weights()
        check("lm_head.weight" not in w and "model.layers.0.self_attn.q_proj.bias" in w,
              "tied head not stored; q/k/v bias stored")
    elif spec.family == "phi3":
        check(type(c).__name__ == "Phi3Config", "config class")
        D = c.hidden_size // c.num_attention_heads
        check(D & (D - 1) != 0 and D % 8 == 0 and (D // 2) % 8 == 0,
              "head_dim %d: no power of two, multiple of 8, rope_dim/2 multiple of 8" % D)
        check(c.num_key_value_heads == c.num_attention_heads and not c.tie_word_embeddings,
              "MHA, untied")
        check(c.rms_norm_eps == 1e-5 and c.rope_parameters["partial_rotary_factor"] == 1.0,
              "eps / full rotary")
        w = s.weights()
        check("model.layers.0.self_attn.qkv_proj.weight" in w
              and "model.layers.0.mlp.gate_up_proj.weight" in w, "fused projections")
        check(c.sliding_window > generation.PROMPT_LEN + generation.GREEDY_TOKENS,
              "window inactive")
    elif spec.family == "qwen3":
        check(type(c).__name__ == "Qwen3Config", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 2 and c.num_key_value_heads >= 2,
              "GQA 2:1 with >= 2 kv heads")
        check(c.head_dim == d.D == 64 and c.num_attention_heads * c.head_dim == 2 * c.hidden_size,
              "explicit head_dim: q twice the residual width")
        check(c.tie_word_embeddings and c.rms_norm_eps == 1e-6 and not c.attention_bias
              and c.rope_parameters["rope_theta"] == 1e6 and c.sliding_window is None,
              "tied / eps / no biases / theta / no window")
        w = s.weights()
        check("lm_head.weight" not in w and "model.layers.0.self_attn.q_norm.weight" in w
              and w["model.layers.0.self_attn.k_norm.weight"].shape == (d.D,)
              and not any(k.endswith(".bias") for k in w.where),
              "tied head not stored; q/k norms of head_dim; no biases")
    elif spec.family == "mixtral":
        check(type(c).__name__ == "MixtralConfig", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 4 and c.num_key_value_heads >= 2,
              "GQA 4:1 with >= 2 kv heads")
        check("head_dim" not in s.cfg and c.hidden_size // c.num_attention_heads == d.D
              and d.D % 8 == 0 and (d.D // 2) % 8 == 0, "implicit head_dim, multiples of 8")
        check(c.num_local_experts == d.E == 4 and c.num_experts_per_tok == d.K == 2
              and c.router_jitter_noise == 0.0 and d.I % 8 == 0 and d.H % 8 == 0,
              "4 experts, top 2, no jitter; widths multiples of 8 (moe_ffn's)")
        check(not c.tie_word_embeddings and c.rms_norm_eps == 1e-5
              and c.rope_parameters["rope_theta"] == 1e6 and c.sliding_window is None,
              "untied / eps / theta / no window")
        # the published layout: the router and every expert's w1, w3 [I, H] and w2 [H, I] under
        # block_sparse_moe, nothing under mlp (transformers' in-memory names), no biases
        entries = safetensors_entries(s.dir)
        want = {"lm_head.weight": [d.V, d.H]}
        for i in range(d.L):
            b = "model.layers.%d.block_sparse_moe." % i
            want[b + "gate.weight"] = [d.E, d.H]
            for e in range(d.E):
                for x, shape in (("w1", [d.I, d.H]), ("w3", [d.I, d.H]), ("w2", [d.H, d.I])):
                    want["%sexperts.%d.%s.weight" % (b, e, x)] = shape
        got = {k: e["shape"] for k, e in entries.items()
               if ".block_sparse_moe." in k or k == "lm_head.weight"}
        check(got == want, "Mixtral's tensors %s, want %s" % (sorted(got)[:6], sorted(want)[:6]))
        check(not any(".mlp." in k or k.endswith(".bias") for k in entries),
              "no mlp.* tensors (transformers' in-memory names), no biases")
    elif spec.family == "qwen3_moe":
        check(type(c).__name__ == "Qwen3MoeConfig", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 2 and c.num_key_value_heads >= 2,
              "GQA 2:1 with >= 2 kv heads")
        check("head_dim" in s.cfg and c.head_dim == s.cfg["head_dim"] == d.D
              and d.D % 8 == 0 and (d.D // 2) % 8 == 0, "explicit head_dim, multiples of 8")
        # the published keys: num_experts (transformers 5 reads it as num_local_experts and would
        # write that), norm_topk_prob true, every layer sparse; the experts' width is
        # moe_intermediate_size, and intermediate_size (a dense MLP's, which no layer has)
        # differs from it, so reading the wrong one fails on the checkpoint's shapes
        check("num_experts" in s.cfg and "num_local_experts" not in s.cfg
              and c.num_experts == d.E == 8 and c.num_experts_per_tok == d.K == 2
              and s.cfg["norm_topk_prob"] is True and c.norm_topk_prob is True
              and s.cfg["decoder_sparse_step"] == c.decoder_sparse_step == 1
              and s.cfg["mlp_only_layers"] == c.mlp_only_layers == [],
              "8 experts (num_experts), top 2 renormalised (norm_topk_prob), every layer sparse")
        check(c.moe_intermediate_size == d.I and c.intermediate_size != d.I
              and d.I % 8 == 0 and d.H % 8 == 0,
              "experts of moe_intermediate_size, not intermediate_size; multiples of 8 (moe_ffn's)")
        check(not c.tie_word_embeddings and c.rms_norm_eps == 1e-6 and not c.attention_bias
              and c.rope_parameters["rope_theta"] == 1e6 and c.sliding_window is None,
              "untied / eps / no biases / theta / no window")
        # the published layout: the router mlp.gate and every expert's gate_proj, up_proj [I, H]
        # and down_proj [H, I] under mlp.experts.{e}, nothing stacked (transformers' in-memory
        # gate_up_proj / down_proj), q_norm and k_norm of head_dim, no biases
        entries = safetensors_entries(s.dir)
        want = routed_expert_shapes(s.family, d)
        for i in range(d.L):
            for n in ("q_norm", "k_norm"):
                want["model.layers.%d.self_attn.%s.weight" % (i, n)] = [d.D]
        got = {k: e["shape"] for k, e in entries.items()
               if ".mlp." in k or "_norm." in k and ".self_attn." in k or k == "lm_head.weight"}
        check(got == want, "Qwen3-MoE's tensors %s, want %s" % (
            sorted(set(got) ^ set(want))[:6] or sorted(k for k in got if got[k] != want[k])[:6],
            len(want)))
        check(not any(k.endswith(".bias") or k.endswith("_proj") for k in entries),
              "no biases, no stacked experts")
    elif spec.family == "qwen2_moe":
        check(type(c).__name__ == "Qwen2MoeConfig", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 4 and c.num_key_value_heads >= 2,
              "GQA 4:1 with >= 2 kv heads (GQA as Qwen2-57B-A14B's; Qwen1.5-MoE-A2.7B's is MHA)")
        check("head_dim" not in s.cfg and c.hidden_size // c.num_attention_heads == d.D
              and d.D % 8 == 0 and (d.D // 2) % 8 == 0, "implicit head_dim, multiples of 8")
        # the published keys: num_experts (Qwen2MoeConfig reads and writes that name only), top 4
        # not renormalised (norm_topk_prob false, as Qwen1.5-MoE-A2.7B's and Qwen2-57B-A14B's),
        # every layer sparse (decoder_sparse_step 1, mlp_only_layers absent: []); three widths,
        # all different, so reading one for another fails on the checkpoint's shapes: the routed
        # experts' moe_intermediate_size, the shared expert's shared_expert_intermediate_size
        # (4x, Qwen1.5-MoE-A2.7B's ratio), and intermediate_size, a dense MLP's that no layer has
        check("num_experts" in s.cfg and "num_local_experts" not in s.cfg
              and c.num_experts == d.E == 8 and c.num_experts_per_tok == d.K == 4
              and s.cfg["norm_topk_prob"] is False and c.norm_topk_prob is False
              and s.cfg["decoder_sparse_step"] == c.decoder_sparse_step == 1
              and s.cfg.get("mlp_only_layers", []) == c.mlp_only_layers == [],
              "8 experts (num_experts), top 4 not renormalised (norm_topk_prob false), every "
              "layer sparse")
        check(c.moe_intermediate_size == d.I and c.shared_expert_intermediate_size == d.S == 4 * d.I
              and len({c.intermediate_size, d.I, d.S}) == 3 and d.I % 8 == 0 and d.S % 8 == 0
              and d.H % 8 == 0,
              "experts of moe_intermediate_size, a shared expert 4x as wide, intermediate_size "
              "neither; multiples of 8 (moe_ffn's)")
        check(not c.tie_word_embeddings and c.rms_norm_eps == 1e-6 and c.qkv_bias
              and "qkv_bias" not in s.cfg and c.rope_parameters["rope_theta"] == 1e6
              and not c.use_sliding_window and not c.sliding_window
              and set(c.layer_types) == {"full_attention"},
              "untied / eps / q/k/v biases (qkv_bias's default) / theta / no window")
        # the published layout: the router mlp.gate, every expert's gate_proj, up_proj [I, H]
        # and down_proj [H, I] under mlp.experts.{e} (nothing stacked), the shared expert's
        # gate_proj, up_proj [S, H] and down_proj [H, S], its gate [1, H], q/k/v biases
        entries = safetensors_entries(s.dir)
        want = routed_expert_shapes(s.family, d)
        for i in range(d.L):
            se = "model.layers.%d.mlp.shared_expert." % i
            want.update({se + "gate_proj.weight": [d.S, d.H], se + "up_proj.weight": [d.S, d.H],
                         se + "down_proj.weight": [d.H, d.S], qwen2_moe_gate_name(i): [1, d.H]})
            for n, rows in (("q", d.nH * d.D), ("k", d.nKV * d.D), ("v", d.nKV * d.D)):
                want["model.layers.%d.self_attn.%s_proj.bias" % (i, n)] = [rows]
        got = {k: e["shape"] for k, e in entries.items()
               if ".mlp." in k or k.endswith(".bias") or k == "lm_head.weight"}
        check(got == want, "Qwen2-MoE's tensors %s, want %s" % (
            sorted(set(got) ^ set(want))[:6] or sorted(k for k in got if got[k] != want[k])[:6],
            len(want)))
        check(not any(k.endswith("_proj") or "norm" in k and ".self_attn." in k for k in entries),
              "no stacked experts, no q/k norms")
    elif s.cfg.get("model_type") == "mistral":
        check(type(c).__name__ == "MistralConfig", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 4 and c.num_key_value_heads >= 2,
              "GQA 4:1 with >= 2 kv heads")
        check("head_dim" not in s.cfg and c.hidden_size // c.num_attention_heads == d.D
              and d.D % 8 == 0 and (d.D // 2) % 8 == 0, "implicit head_dim, multiples of 8")
        check(c.sliding_window == 5 and generation.PROMPT_LEN > 2 * c.sliding_window,
              "a window of 5 on every layer, well inside the prompt")
        check(not c.tie_word_embeddings and c.rms_norm_eps == 1e-5
              and c.rope_parameters["rope_theta"] == 1e4, "untied / eps / theta")
        w = s.weights()
        check("lm_head.weight" in w and not any(k.endswith(".bias") for k in w.where),
              "untied head stored; no biases")
    elif spec.family in configs.GEMMA_FAMILIES:
        w = s.weights()
        if spec.family == "gemma3":
            check(type(c).__name__ == "Gemma3TextConfig", "config class")
            check(c.num_attention_heads // c.num_key_value_heads == 4
                  and c.num_key_value_heads == 1, "GQA 4:1 with one kv head (Gemma-3-1B's)")
            check(c.rope_parameters["full_attention"]["rope_type"] == "linear"
                  and c.rope_parameters["sliding_attention"]["rope_type"] == "default"
                  and c.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
                  and c.rope_parameters["full_attention"]["rope_theta"] == 1e6,
                  "linear scaling on the global layer only; local base 1e4, global 1e6")
            check(c.attn_logit_softcapping is None and c.final_logit_softcapping is None,
                  "no soft-capping")
            check(w["model.layers.0.self_attn.k_norm.weight"].shape == (d.D,), "q/k norms of head_dim")
        else:
            check(type(c).__name__ == "Gemma2Config", "config class")
            check(c.num_attention_heads // c.num_key_value_heads == 2
                  and c.num_key_value_heads == 2, "GQA 2:1 (Gemma-2-2B's 8:4)")
            check(c.attn_logit_softcapping == configs.GEMMA2_TINY_ATTN_CAP
                  and c.final_logit_softcapping == 30.0,
                  "the tiny attention cap and Gemma 2's logit cap 30")
            check(not any("q_norm" in k or "k_norm" in k for k in w.where), "no q/k norms")
            check_scores_reach_cap(s, c, d)
        # both tiny configs: an explicit head_dim (q twice the residual width), the scores'
        # scalar not head_dim, layer 0 sliding and layer 1 global, a tied GeGLU model
        check(c.head_dim == d.D == 64 and c.num_attention_heads * c.head_dim == 2 * c.hidden_size
              and c.query_pre_attn_scalar != c.head_dim,
              "explicit head_dim: q twice the residual width; query_pre_attn_scalar not head_dim")
        check(c.layer_types == ["sliding_attention", "full_attention"]
              and generation.PROMPT_LEN > 2 * c.sliding_window,
              "layer 0 sliding with a window well inside the prompt, layer 1 global")
        check(c.tie_word_embeddings and c.hidden_activation == "gelu_pytorch_tanh"
              and "lm_head.weight" not in w
              and "model.layers.0.post_feedforward_layernorm.weight" in w
              and not any(k.endswith(".bias") for k in w.where),
              "tied head not stored; GeGLU tanh; four norms a layer; no biases")
    elif spec.family == "llama":
        check(type(c).__name__ == "LlamaConfig", "config class")
        check(c.num_attention_heads // c.num_key_value_heads == 4 and c.num_key_value_heads >= 2,
              "GQA 4:1 with >= 2 kv heads")
        check("head_dim" in s.cfg and c.head_dim == s.cfg["head_dim"] == d.D
              and d.D % 8 == 0 and (d.D // 2) % 8 == 0, "explicit head_dim, multiples of 8")
        check(c.tie_word_embeddings and c.rms_norm_eps == 1e-5 and not c.attention_bias
              and not c.mlp_bias and c.rope_parameters["rope_theta"] == 5e5,
              "tied / eps / biases / theta")
        w = s.weights()
        # a quantized set's projection is there in its format (its marker tensor)
        q_proj = "model.layers.0.self_attn.q_proj" + (
            ".weight" if s.quant is None else quantize.MARKER[s.quant[0]])
        check("lm_head.weight" not in w and q_proj in w
              and not any(k.endswith(".bias") for k in w.where), "tied head not stored; no biases")
    else:
        check(type(c).__name__ == "GPT2Config", "config class")
        check(c.activation_function == "gelu_new" and c.tie_word_embeddings
              and c.layer_norm_epsilon == 1e-5 and not c.scale_attn_by_inverse_layer_idx
              and not c.reorder_and_upcast_attn and c.scale_attn_weights, "gpt2 flags")
        w = s.weights()
        check(w["transformer.h.0.attn.c_attn.weight"].shape == (d.H, 3 * d.H),
              "Conv1D weight stored [in, out]")
        check(w["transformer.wpe.weight"].shape == (d.P, d.H), "learned positions")
    # a quantized set's quantization_config as transformers' config class keeps it (the
    # reference's loader reads it there: quantize.load_quantized) names the set's format
    qc = getattr(c, "quantization_config", None)
    if qc is not None and not isinstance(qc, dict):
        qc = qc.to_dict()
    check((qc is None) == (spec.quant is None), "transformers reads quantization_config %r for a "
          "set of format %s" % (qc, spec.quant))
    if qc is not None:
        check(quantize.format_of(qc) == s.quant, "transformers' quantization_config is %s, "
              "config.json's %s" % (quantize.format_of(qc), s.quant))
    if spec.family != "gpt2":
        sc = rope_scaling.rope_scaling(s.cfg)
        # Gemma 3 keeps one dict a layer type; rope_scaling is its global layers'
        rp = c.rope_parameters["full_attention"] if spec.family == "gemma3" else c.rope_parameters
        check(rp["rope_type"] == sc.rope_type, "rope_type %s, config.json %s"
              % (rp["rope_type"], sc.rope_type))
        if sc.rope_type == "longrope":
            # the switch to the long factors happens inside the stored decode steps
            P, N = generation.PROMPT_LEN, spec.decode_steps
            check(P < sc.long_from <= P + N - 1, "long_from %d is not among the stored decode "
                  "positions %d..%d" % (sc.long_from, P, P + N - 1))


# ---------------------------------------------------------------------------------------------
# An independent float64 forward (numpy only)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def inv_freq(sc, pos, table=None):
    """[T, dim/2] fp64 inverse frequencies of the tokens at positions pos under sc (a
    rope_scaling.RopeScaling read from config.json): base^(-2i/dim) / div_i, div the fp32 divisor
    table the token uses (long_divisor at positions >= long_from, else freq_divisor; none for
    default RoPE). table ("short" or "long") forces one table for every token."""
    inv = sc.base ** (-np.arange(0, sc.dim, 2, dtype=np.float64) / sc.dim)
    out = np.tile(inv, (len(pos), 1))
    if sc.freq_divisor is None:
        return out
    short = np.array(sc.freq_divisor, dtype=np.float32).astype(np.float64)
    div = np.tile(short, (len(pos), 1))
    if sc.long_divisor is not None:
        long = np.array(sc.long_divisor, dtype=np.float32).astype(np.float64)
        use = (pos >= sc.long_from) if table is None else np.full(len(pos), table == "long")
        div[use] = long
    return out / div


def rope(x, pos, inv, factor=1.0):
    """rotate_half RoPE on x [T, heads, D] with inverse frequencies inv [T, D/2] (inv_freq): dim
    i pairs with i + D/2 at angle pos * inv_i; the result times the attention factor."""
    D = x.shape[-1]
    half = D // 2
    ang = pos.astype(np.float64)[:, None] * inv
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return factor * np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_gptj(x, pos, inv, factor=1.0):
    """The interleaved (GPT-J) pairing: a wrong variant the rope check must reject."""
    ang = pos.astype(np.float64)[:, None] * inv
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return factor * out


def layer_window(family, cfg, i):
    """Layer i's sliding window by the contract's reading of config.json (0: none): Phi-3's
    sliding_window on every layer; Qwen2's with use_sliding_window only, on the layers its
    layer_types call sliding_attention, by default those from max_window_layers (28) on; none
    for Llama and GPT-2; Mistral's (model_type mistral, the llama family) and Mixtral's on every
    layer (null: none, as Mixtral publishes it); Qwen3-MoE's with use_sliding_window only, on every
    layer (Qwen3MoeAttention: no layer_types, max_window_layers unread); Qwen2-MoE's with
    use_sliding_window only, on the layers its layer_types call sliding_attention (the generator
    refuses a windowed Qwen2-MoE config without them: configs.qwen2_moe_window_layers)."""
    w = cfg.get("sliding_window")
    if family in configs.GEMMA_FAMILIES:  # the layers gemma_layer_types calls sliding
        return (w or 0) if gemma_layer_types(cfg)[i] == "sliding_attention" else 0
    if family in ("phi3", "mixtral") or cfg.get("model_type") == "mistral":
        return w or 0
    if family == "qwen3_moe":  # every layer, with use_sliding_window (no layer_types)
        return (w or 0) if cfg.get("use_sliding_window", False) else 0
    if family == "qwen2_moe":
        if not cfg.get("use_sliding_window", False) or not w:
            return 0
        return w if cfg["layer_types"][i] == "sliding_attention" else 0
    if family not in ("qwen2", "qwen3") or not cfg.get("use_sliding_window", False) or not w:
        return 0
    types = cfg.get("layer_types")
    if types is not None:
        return w if types[i] == "sliding_attention" else 0
    return w if i >= cfg.get("max_window_layers", 28) else 0


def attention(q, K, V, pos, scale, window=0, softcap=None):
    """q [T, nH, D] at absolute positions pos; K/V [S, nKV, D] hold positions 0..S-1; a query
    at p sees keys 0..p, with a sliding window only those above p - window; softcap (Gemma 2):
    the scaled scores become softcap tanh(s / softcap) before the mask."""
    T, nH, D = q.shape
    nKV = K.shape[1]
    out = np.empty((T, nH, D))
    keypos = np.arange(K.shape[0])
    seen = keypos[None, :] <= pos[:, None]
    if window > 0:
        seen &= keypos[None, :] > pos[:, None] - window
    for h in range(nH):
        kv = h // (nH // nKV)
        sc = q[:, h, :] @ K[:, kv, :].T * scale
        if softcap is not None:
            sc = softcap * np.tanh(sc / softcap)
        sc = np.where(seen, sc, -np.inf)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        out[:, h, :] = (sc / sc.sum(-1, keepdims=True)) @ V[:, kv, :]
    return out.reshape(T, nH * D)


# f8e4m3 (docs/quantization.md): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0
# subnormal (m * 2^-9); 0x7F and 0xFF NaN; largest finite 448. Every code's value, by code.
def _e4m3_values():
    c = np.arange(256)
    e, m = (c >> 3) & 15, c & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where(c & 0x80, -mag, mag)
    v[(c & 0x7F) == 0x7F] = np.nan
    return v


E4M3_VALUES = _e4m3_values()


def round_e4m3(v):
    """The f8e4m3 values (float64) nearest to v, ties to the even code, saturated at +-448."""
    pos = E4M3_VALUES[:0x7F]                                # codes 0..126, increasing
    a = np.minimum(np.abs(np.asarray(v, dtype=np.float64)), 448.0)
    hi = np.searchsorted(pos, a)                            # first value >= a
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - pos[lo], pos[hi] - a
    code = np.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    return np.copysign(pos[code], v)


def round_storage(x, dtype):
    """x as float32 (the reference's activations and dequantised products), rounded to the
    nearest value of the set's 16-bit dtype, ties to even; float64. numpy has no bfloat16: its
    rounding is the top 16 bits of the float32, rounded to nearest even."""
    x32 = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return x32.astype(np.float16).astype(np.float64)
    u = x32.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def fp8_activation(x, G, dtype):
    """What an FP8 projection multiplies for its input x [T, K] (quantize.FP8Linear, by the spec of
    docs/quantization.md's quant_fp8): x as float32 rounded to the storage dtype, then per token
    in groups of G inputs s = max(amax, 1e-10) / 448 and e4m3(x / s), both float32 divisions
    (correctly rounded in numpy as in torch), dequantised: e4m3 * s, float64."""
    T, K = x.shape
    xs = round_storage(x, dtype).astype(np.float32).reshape(T, K // G, G)
    amax = np.maximum(np.abs(xs).max(-1, keepdims=True), np.float32(1e-10))
    s = amax / np.float32(448.0)
    return (round_e4m3(xs / s) * s.astype(np.float64)).reshape(T, K)


def _nibbles(words):
    """int32 words [...] -> their 8 unsigned 4-bit codes [..., 8], nibble j = bits 4j..4j+3."""
    u = words.astype(np.int64) & 0xFFFFFFFF
    return (u[..., None] >> (4 * np.arange(8))) & 0xF


def dequant_projection(w, name, fmt, group, dtype, cfg):
    """W [N, K] (float64) of a projection stored in format fmt, from its stored tensors by the
    formats' own descriptions (docs/quantization.md, common/int4.py's docstring; selftest/int4.py
    checks that module against the same): FP8 codes times their block's or channel's scale
    (exact in float64); 4-bit (q - z[g(k)]) * s[g(k)], exact, rounded once to the storage dtype
    (the reference's nn.Linear holds that weight) -- AWQ's 8 codes a word along n in AutoAWQ's
    order (column i of a word its nibble AWQ_REVERSE_ORDER[i]), GPTQ's along k in plain order
    with zero points stored as z - 1 and each input's group in g_idx."""
    t = lambda sfx: w.raw(name + sfx)  # noqa: E731
    if fmt in ("fp8-block", "fp8-channel"):
        q = E4M3_VALUES[t(".weight").view(torch.uint8).numpy().astype(np.int64)]
        if fmt == "fp8-channel":
            return q * t(".weight_scale").to(torch.float64).numpy()
        bn, bk = cfg["quantization_config"]["weight_block_size"]
        s = t(".weight_scale_inv").to(torch.float64).numpy()
        return q * np.repeat(np.repeat(s, bn, 0)[:q.shape[0]], bk, 1)
    scales = t(".scales").to(torch.float64).numpy()
    if fmt == "awq":
        q = _nibbles(t(".qweight").numpy())[..., list(AWQ_REVERSE_ORDER)]
        q = q.reshape(q.shape[0], -1)                           # [K, N]
        z = _nibbles(t(".qzeros").numpy())[..., list(AWQ_REVERSE_ORDER)]
        z = z.reshape(z.shape[0], -1)
        K = q.shape[0]
        g = np.arange(K) // (K if group == -1 else group)
    else:
        q = _nibbles(t(".qweight").numpy())                     # [K/8, N, 8]
        q = q.transpose(0, 2, 1).reshape(-1, q.shape[1])        # row 8r + j: nibble j of row r
        z = _nibbles(t(".qzeros").numpy()).reshape(scales.shape[0], -1) + 1
        g = t(".g_idx").numpy().astype(np.int64)
    wt = (q - z[g]).astype(np.float64) * scales[g]              # W.T [K, N], exact
    return round_storage(wt, dtype).T


class Linears:
    """The projections of the numpy forward: x @ W.T with W the stored 16-bit weight, or for a
    projection stored in a quantized format its weight dequantised here (dequant_projection) and,
    in an FP8 format, x quantised first as the reference's FP8Linear does (fp8_activation: in
    1x128 groups for fine-grained FP8, per token for compressed-tensors FP8-dynamic).

    The quantisation is a step function, and its steps are coarse: a storage-dtype rounding that
    goes the other way (bf16: one step is 2^-8 of the value) moves x / s across an e4m3 midpoint
    or, at a group's largest |x|, moves the scale of all of its inputs; one e4m3 step is 6-12% of
    a value. The numpy forward's float64 input differs from the reference's float32 one by the
    float32 noise (~5e-7 of the tap), which decides the rounding of any input that close to a
    midpoint: of the committed FP8 sets' 30720 distinct projection inputs, 9 and 12 lie within
    1e-6 (1e-5: 103 and 108) of a bf16 rounding midpoint. Whether the two forwards quantise alike
    is luck, and where they do not, an output moves by up to a code's worth, far beyond TAP_RTOL:
    measured (2026-11-27) on llama3.2-1b-fp8dyn-bf16 and -fp8-bf16 cut to 2 layers (`models
    --tier full --layers 2`), 18 and 26 of 983040 quantised inputs differ and the taps then
    differ from this forward's by up to 3.1e-2 (the committed sets: none differ, 4.5e-7).
    So where the pass's stored input tap is given (`given`, the reference's float32 input, which
    this forward's own value is compared with at TAP_RTOL as a tap), that tap is quantised: the
    operand the reference multiplied, to the bit, by this spec (the 2-layer sets' taps then agree
    to 1.3e-6). The quantisation of the forward's own input is counted against it (`flips`:
    elements whose quantised value differs) and bounded by FP8_FLIP_MAX."""

    def __init__(self, s, w):
        self.s, self.w = s, w
        self.fmt, self.group = s.quant if s.quant is not None else (None, None)
        self.cache = {}
        self.given = None  # tap name -> the pass's stored tap (float32)
        self.flips = self.quantised = 0

    def weight(self, name):
        if self.fmt is None or name + quantize.MARKER[self.fmt] not in self.w:
            return self.w[name + ".weight"]
        if name in self.cache:
            return self.cache[name]
        W = dequant_projection(self.w, name, self.fmt, self.group, self.s.p["dtype"], self.s.cfg)
        if self.s.dims.H <= 1024:  # a tiny set's few are kept; a full-size set's dequantised anew
            self.cache[name] = W  # (float64 copies of every projection would not fit)
        return W

    def fp8_group(self, name, K):
        if self.fmt == "fp8-block" and name + ".weight_scale_inv" in self.w:
            return self.s.cfg["quantization_config"]["weight_block_size"][1]
        if self.fmt == "fp8-channel" and name + ".weight_scale" in self.w:
            return K
        return None

    def __call__(self, x, name, tap=None):
        """x [T, K] through projection `name`; tap: the name of its input's tap in the pass."""
        W = self.weight(name)
        G = self.fp8_group(name, W.shape[1])
        if G is not None:
            own = fp8_activation(x, G, self.s.p["dtype"])
            x = own
            if self.given is not None and tap is not None:
                x = fp8_activation(self.given(tap).reshape(x.shape).astype(np.float64), G,
                                   self.s.p["dtype"])
                self.flips += int((own != x).sum())
                self.quantised += x.size
        return x @ W.T


def route(logits, k, renormalise=True):
    """A token's experts and their weights by the contract (docs/golden-format.md's moe_router,
    Mixtral's and Qwen3-MoE's routers): p = softmax(logits) in float64, the k largest p (equal
    ones: the lower expert first), their p renormalised to sum to 1 where `renormalise`
    (renormalises), else as they are. logits [T, E] -> ids [T, k], weights [T, k]."""
    x = np.asarray(logits, dtype=np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    E = x.shape[1]
    ids = np.stack([np.lexsort((np.arange(E), -row))[:k] for row in p])
    wts = np.take_along_axis(p, ids, 1)
    return ids, (wts / wts.sum(-1, keepdims=True) if renormalise else wts)


def renormalises(family, cfg):
    """Whether a mixture of experts' router renormalises its top k's weights, by the contract's
    reading of config.json: Mixtral's always (no key), Qwen3-MoE's and Qwen2-MoE's with
    norm_topk_prob (default false, Qwen3MoeConfig's and Qwen2MoeConfig's)."""
    if family == "mixtral":
        return True
    return bool(cfg.get("norm_topk_prob", False))


def moe_names(family, i):
    """Layer i's published mixture-of-experts tensor names: (the router's, expert e -> the names
    of its gate, up and down). Mixtral: block_sparse_moe.gate, experts.{e}.w1 / w3 / w2;
    Qwen3-MoE and Qwen2-MoE: mlp.gate, experts.{e}.gate_proj / up_proj / down_proj."""
    if family == "mixtral":
        b, parts = "model.layers.%d.block_sparse_moe." % i, ("w1", "w3", "w2")
    else:
        b, parts = "model.layers.%d.mlp." % i, ("gate_proj", "up_proj", "down_proj")
    return b + "gate.weight", lambda e: tuple("%sexperts.%d.%s.weight" % (b, e, n) for n in parts)


def moe_block(f, ids, wts, w, experts, d):
    """A sparse block on f [T, H] from the published tensors (experts: moe_names' function of
    an expert, its gate, up and down names): sum over a token's experts e of weight *
    down_e (silu(gate_e f) * up_e f)."""
    out = np.zeros((f.shape[0], d.H))
    for e in np.unique(ids):
        w1, w3, w2 = (w[n] for n in experts(int(e)))
        rows, slot = np.nonzero(ids == e)
        y = (silu(f[rows] @ w1.T) * (f[rows] @ w3.T)) @ w2.T
        out[rows] += wts[rows, slot][:, None] * y
    return out


def qwen2_moe_gate_name(i):
    """Layer i's shared-expert gate, Qwen2-MoE's mlp.shared_expert_gate [1, H]."""
    return "model.layers.%d.mlp.shared_expert_gate.weight" % i


def shared_gate(f, w, i):
    """Qwen2-MoE's shared-expert gate of layer i on f [T, H]: sigmoid(f . w_gate), [T, 1]."""
    return 1.0 / (1.0 + np.exp(-(f @ w[qwen2_moe_gate_name(i)].T)))


def qkv_bias(family, cfg):
    """Whether q, k and v have biases by the contract's reading of config.json: Qwen2's always,
    Qwen2-MoE's with qkv_bias (default true, Qwen2MoeConfig's); no other family's."""
    return family == "qwen2" or (family == "qwen2_moe" and cfg.get("qkv_bias", True))


def layer_rope(cfg, family, i):
    """Layer i's RoPE by the contract's reading of config.json: rope_scaling.rope_scaling for
    every layer, but Gemma 3's sliding layers, whose base is rope_local_base_freq (default 1e4),
    unscaled (rope_scaling applies to its global layers only). Gemma 2 has one RoPE."""
    sc = rope_scaling.rope_scaling(cfg)
    if family == "gemma3" and gemma_layer_types(cfg)[i] == "sliding_attention":
        return rope_scaling.RopeScaling("default", float(cfg.get("rope_local_base_freq", 1e4)),
                                        sc.dim, None, None, 1.0, None)
    return sc


def np_pass_gemma(cfg, d, w, ids, pos, cache, lin):
    """np_pass of Gemma 3 (and Gemma 2: no q_norm / k_norm, one RoPE, the scores and the logits
    soft-capped at attn_logit_softcapping and final_logit_softcapping, Gemma2Config's 50 and 30
    where absent) by the contract's reading of config.json: the embedding times
    sqrt(hidden_size); every norm x / rms(x) * (1 + w), four a layer and q_norm / k_norm over each
    head; the global layers' RoPE from rope_theta and rope_scaling, the sliding ones' from
    rope_local_base_freq unscaled, with their window; scores scaled by query_pre_attn_scalar^-0.5;
    the block outputs normed before each residual add; GeGLU with the tanh GELU; the tied head."""
    def norm(x, name):
        return rms_norm(x, 1.0 + w[name], d.eps)
    taps = {}
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids] * math.sqrt(d.H)
    taps["embed"] = x
    family = "gemma2" if cfg["model_type"] == "gemma2" else "gemma3"
    attn_cap = final_cap = None
    if family == "gemma2":
        attn_cap = cfg.get("attn_logit_softcapping", 50.0)
        final_cap = cfg.get("final_logit_softcapping", 30.0)
    scale = float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5
    for i in range(d.L):
        p, b = "layers.%d." % i, "model.layers.%d." % i
        h = norm(x, b + "input_layernorm.weight")
        q, k, v = (lin(h, b + "self_attn.%s_proj" % n, p + "attn_norm") for n in "qkv")
        q, k, v = q.reshape(T, d.nH, d.D), k.reshape(T, d.nKV, d.D), v.reshape(T, d.nKV, d.D)
        taps[p + "attn_norm"], taps[p + "q"], taps[p + "k"], taps[p + "v"] = h, q, k, v
        if family == "gemma3":
            q, k = norm(q, b + "self_attn.q_norm.weight"), norm(k, b + "self_attn.k_norm.weight")
            taps[p + "q_norm"], taps[p + "k_norm"] = q, k
        sc = layer_rope(cfg, family, i)
        inv = inv_freq(sc, pos)
        q, k = rope(q, pos, inv, sc.attention_factor), rope(k, pos, inv, sc.attention_factor)
        taps[p + "q_rope"], taps[p + "k_rope"] = q, k
        cache[i][0] = np.concatenate([cache[i][0], k]) if cache[i][0] is not None else k
        cache[i][1] = np.concatenate([cache[i][1], v]) if cache[i][1] is not None else v
        a = attention(q, cache[i][0], cache[i][1], pos, scale, layer_window(family, cfg, i),
                      attn_cap)
        taps[p + "attn"] = a
        ao = lin(a, b + "self_attn.o_proj", p + "attn")
        pa = norm(ao, b + "post_attention_layernorm.weight")
        r = x + pa
        taps[p + "attn_out"], taps[p + "attn_post_norm"], taps[p + "resid_attn"] = ao, pa, r
        f = norm(r, b + "pre_feedforward_layernorm.weight")
        gate = lin(f, b + "mlp.gate_proj", p + "ffn_norm")
        up = lin(f, b + "mlp.up_proj", p + "ffn_norm")
        act = gelu_new(gate) * up
        fo = lin(act, b + "mlp.down_proj", p + "ffn_act")
        pf = norm(fo, b + "post_feedforward_layernorm.weight")
        x = r + pf
        taps.update({p + "ffn_norm": f, p + "ffn_gate": gate, p + "ffn_up": up,
                     p + "ffn_act": act, p + "ffn_out": fo, p + "ffn_post_norm": pf,
                     p + "resid_ffn": x})
    fn = norm(x, "model.norm.weight")
    taps["final_norm"] = fn
    taps["logits"] = fn @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    if final_cap is not None:
        taps["logits"] = final_cap * np.tanh(taps["logits"] / final_cap)
    return taps


def np_pass(family, cfg, d, w, ids, pos, cache, lin=None):
    """One forward pass of T tokens; cache: per layer [K, V] (grown here). Returns the taps.
    lin(x, name): the projection `name` (without ".weight") of x, Linears for a quantized set;
    by default x @ W.T of the stored weight."""
    if lin is None:
        lin = lambda x, name, tap=None: x @ w[name + ".weight"].T  # noqa: E731
    if family in configs.GEMMA_FAMILIES:
        return np_pass_gemma(cfg, d, w, ids, pos, cache, lin)
    taps = {}
    T = len(ids)
    if family == "gpt2":
        x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][pos]
    else:
        x = w["model.embed_tokens.weight"][ids]
    taps["embed"] = x
    for i in range(d.L):
        p = "layers.%d." % i
        if family == "gpt2":
            b = "transformer.h.%d." % i
            h = layer_norm(x, w[b + "ln_1.weight"], w[b + "ln_1.bias"], d.eps)
            qkv = h @ w[b + "attn.c_attn.weight"] + w[b + "attn.c_attn.bias"]
            q, k, v = qkv[:, :d.H], qkv[:, d.H:2 * d.H], qkv[:, 2 * d.H:]
        else:
            b = "model.layers.%d." % i
            h = rms_norm(x, w[b + "input_layernorm.weight"], d.eps)
            if qkv_bias(family, cfg):
                q, k, v = (lin(h, b + "self_attn.%s_proj" % n, p + "attn_norm")
                           + w[b + "self_attn.%s_proj.bias" % n] for n in "qkv")
            elif family in ("llama", "qwen3", "mixtral", "qwen3_moe", "qwen2_moe"):  # no biases
                q, k, v = (lin(h, b + "self_attn.%s_proj" % n, p + "attn_norm") for n in "qkv")
            else:
                qkv = lin(h, b + "self_attn.qkv_proj", p + "attn_norm")
                qd, kvd = d.nH * d.D, d.nKV * d.D
                q, k, v = qkv[:, :qd], qkv[:, qd:qd + kvd], qkv[:, qd + kvd:]
        q = q.reshape(T, d.nH, d.D)
        k = k.reshape(T, d.nKV, d.D)
        v = v.reshape(T, d.nKV, d.D)
        taps[p + "attn_norm"], taps[p + "q"], taps[p + "k"], taps[p + "v"] = h, q, k, v
        if family in configs.QK_NORM_FAMILIES:  # RMSNorm over each head (head_dim), before RoPE
            q = rms_norm(q, w[b + "self_attn.q_norm.weight"], d.eps)
            k = rms_norm(k, w[b + "self_attn.k_norm.weight"], d.eps)
            taps[p + "q_norm"], taps[p + "k_norm"] = q, k
        if family != "gpt2":
            sc = rope_scaling.rope_scaling(cfg)
            inv = inv_freq(sc, pos)
            q, k = rope(q, pos, inv, sc.attention_factor), rope(k, pos, inv, sc.attention_factor)
            taps[p + "q_rope"], taps[p + "k_rope"] = q, k
        cache[i][0] = np.concatenate([cache[i][0], k]) if cache[i][0] is not None else k
        cache[i][1] = np.concatenate([cache[i][1], v]) if cache[i][1] is not None else v
        a = attention(q, cache[i][0], cache[i][1], pos, 1.0 / math.sqrt(d.D),
                      layer_window(family, cfg, i))
        taps[p + "attn"] = a
        if family == "gpt2":
            ao = a @ w[b + "attn.c_proj.weight"] + w[b + "attn.c_proj.bias"]
        else:
            ao = lin(a, b + "self_attn.o_proj", p + "attn")
        taps[p + "attn_out"] = ao
        r = x + ao
        taps[p + "resid_attn"] = r
        if family in configs.MOE_FAMILIES:
            f = rms_norm(r, w[b + "post_attention_layernorm.weight"], d.eps)
            router, experts = moe_names(family, i)
            rl = f @ w[router].T
            taps[p + "ffn_norm"], taps[p + "router_logits"] = f, rl
            ids, wts = route(rl, d.K, renormalises(family, cfg))
            fo = moe_block(f, ids, wts, w, experts, d)
            if family in configs.SHARED_EXPERT_FAMILIES:
                # the routed sum, then the shared expert (a dense SwiGLU MLP) through its gate
                se = b + "mlp.shared_expert."
                gate = lin(f, se + "gate_proj", p + "ffn_norm")
                up = lin(f, se + "up_proj", p + "ffn_norm")
                act = silu(gate) * up
                so = lin(act, se + "down_proj", p + "ffn_act")
                taps.update({p + "moe_out": fo, p + "ffn_gate": gate, p + "ffn_up": up,
                             p + "ffn_act": act, p + "shared_out": so})
                fo = fo + shared_gate(f, w, i) * so
            taps[p + "ffn_out"] = fo
            x = r + fo
            taps[p + "resid_ffn"] = x
            continue
        if family == "gpt2":
            f = layer_norm(r, w[b + "ln_2.weight"], w[b + "ln_2.bias"], d.eps)
            up = f @ w[b + "mlp.c_fc.weight"] + w[b + "mlp.c_fc.bias"]
            act = gelu_new(up)
            fo = act @ w[b + "mlp.c_proj.weight"] + w[b + "mlp.c_proj.bias"]
        else:
            f = rms_norm(r, w[b + "post_attention_layernorm.weight"], d.eps)
            if family in ("qwen2", "llama", "qwen3"):
                gate = lin(f, b + "mlp.gate_proj", p + "ffn_norm")
                up = lin(f, b + "mlp.up_proj", p + "ffn_norm")
            else:
                gu = lin(f, b + "mlp.gate_up_proj", p + "ffn_norm")
                gate, up = gu[:, :d.I], gu[:, d.I:]
            taps[p + "ffn_gate"] = gate
            act = silu(gate) * up
            fo = lin(act, b + "mlp.down_proj", p + "ffn_act")
        taps[p + "ffn_norm"], taps[p + "ffn_up"], taps[p + "ffn_act"] = f, up, act
        taps[p + "ffn_out"] = fo
        x = r + fo
        taps[p + "resid_ffn"] = x
    if family == "gpt2":
        fn = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], d.eps)
        head = w.get("lm_head.weight", w["transformer.wte.weight"])
    else:
        fn = rms_norm(x, w["model.norm.weight"], d.eps)
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    taps["final_norm"] = fn
    taps["logits"] = fn @ head.T
    return taps


def close(got, want, rtol):
    """max |got - want| relative to the largest |want| (at least 1)."""
    err = float(np.abs(got.astype(np.float64) - want).max())
    return err / max(1.0, float(np.abs(want).max()))


def check_numpy_forward(s):
    """Every tap within TAP_RTOL of the float64 numpy forward (np_pass) from config.json and the
    checkpoint, decode steps through its own KV cache; a quantized set's projections from the
    stored format's tensors (Linears), an FP8 set's activation quantisation of each projection's
    stored input tap, with this forward's own quantisation differing from it in at most
    FP8_FLIP_MAX of the quantised inputs. Returns (worst relative error, (flips, quantised
    inputs) of an FP8 set or None)."""
    d, p = s.dims, s.p
    w = s.weights()
    lin = Linears(s, w)
    cache = [[None, None] for _ in range(d.L)]
    prompt = np.array(p["prompt_ids"])
    tokens = s.a("greedy_tokens")
    worst = 0.0
    passes = [("prefill", prompt, np.arange(len(prompt)))]
    passes += [("decode.%d" % i, tokens[i:i + 1], np.array([len(prompt) + i]))
               for i in range(p["decode_steps"])]
    for prefix, ids, pos in passes:
        lin.given = lambda t: s.a(prefix + "." + t)  # noqa: E731 (this pass's stored taps)
        taps = np_pass(s.family, s.cfg, d, w, ids, pos, cache, lin)
        check(sorted(taps) == sorted(model_taps.tap_names(s.family, d.L)), "numpy tap list")
        for t, want in taps.items():
            rel = close(s.a(prefix + "." + t), want, TAP_RTOL)
            check(rel <= TAP_RTOL, "%s.%s differs from the numpy forward (relative %.3g)"
                  % (prefix, t, rel))
            worst = max(worst, rel)
    fp8 = None
    if lin.quantised:
        fp8 = (lin.flips, lin.quantised)
        check(lin.flips <= FP8_FLIP_MAX * lin.quantised, "the numpy forward's own FP8 activation "
              "quantisation differs from the stored input taps' at %d of %d inputs (more than "
              "%g): more than float32 noise apart" % (lin.flips, lin.quantised, FP8_FLIP_MAX))
    check(s.quant is None or not s.quant[0].startswith("fp8") or lin.quantised,
          "an FP8 set's numpy forward quantised no projection input")
    # the comparison is sharp enough to see a tap taken one layer off, or a stale decode step
    if d.L > 1:
        lin.given = None
        t0 = np_pass(s.family, s.cfg, d, w, prompt, np.arange(len(prompt)),
                     [[None, None] for _ in range(d.L)], lin)
        check(close(s.a("prefill.layers.1.attn_norm"), t0["layers.0.attn_norm"], 0)
              > 100 * TAP_RTOL, "a tap from the wrong layer would pass")
    check(close(s.a("decode.1.logits"), s.a("decode.0.logits").astype(np.float64), 0)
          > 100 * TAP_RTOL, "a stale decode step would pass")
    return worst, fp8


def check_rope(s):
    """q_rope / k_rope = rotate_half RoPE of q / k at the pass's positions, with the scaled tables
    and attention factor config.json gives (rope_scaling.rope_scaling; LongRoPE: the long table for
    the tokens at positions >= original_max_position_embeddings, which is what transformers'
    per-call switch gives a prefill of P <= original tokens and decode steps after it). Wrong
    variants must fail: no rotation, a position off by one, GPT-J pairing, and for scaled sets
    the unscaled table, no attention factor, and (LongRoPE) the other table in every pass: where
    the switch falls among the stored decode steps (phi3.5-tiny: check_config), the taps show it.
    Returns (worst relative error, {pass: table used})."""
    if s.family == "gpt2":
        return 0.0, {}
    sc = rope_scaling.rope_scaling(s.cfg)
    plain = sc._replace(freq_divisor=None, long_divisor=None, attention_factor=1.0)
    af = sc.attention_factor
    P, worst, used = generation.PROMPT_LEN, 0.0, {}
    unscaled_gap = 0.0
    passes = [("prefill", np.arange(P))]
    passes += [("decode.%d" % i, np.array([P + i])) for i in range(s.p["decode_steps"])]
    for prefix, pos in passes:
        if sc.long_divisor is not None:
            n_long = int((pos >= sc.long_from).sum())
            check(n_long in (0, len(pos)), "%s: a pass mixing the tables (the prefill is longer "
                  "than the original context?)" % prefix)
            used[prefix] = "long" if n_long else "short"
        for i in range(s.dims.L):
            # Gemma 3: the layer type's table; the other type's must fail
            lsc = layer_rope(s.cfg, s.family, i)
            inv = inv_freq(lsc, pos)
            other_type = [lt for lt in (layer_rope(s.cfg, s.family, j) for j in range(s.dims.L))
                          if lt.base != lsc.base or lt.freq_divisor != lsc.freq_divisor]
            for x in ("q", "k"):
                # Qwen3 and Gemma 3 rotate their per-head normed q and k (q_norm / k_norm taps)
                src = x + "_norm" if (s.family in configs.QK_NORM_FAMILIES
                                      or s.family == "gemma3") else x
                base = s.a("%s.layers.%d.%s" % (prefix, i, src)).astype(np.float64)
                got = s.a("%s.layers.%d.%s_rope" % (prefix, i, x))
                rel = close(got, rope(base, pos, inv, af), ROPE_RTOL)
                check(rel <= ROPE_RTOL, "%s.layers.%d.%s_rope is not RoPE(%s) at positions %s "
                      "(relative %.3g)" % (prefix, i, x, x, pos.tolist(), rel))
                worst = max(worst, rel)
                # and the check has teeth
                wrongs = [(base, "unrotated"),
                          (rope(base, pos + 1, inv_freq(sc, pos + 1), af), "pos+1"),
                          (rope_gptj(base, pos, inv, af), "GPT-J pairing")]
                if af != 1.0:
                    wrongs.append((rope(base, pos, inv), "no attention factor"))
                if other_type:
                    wrongs.append((rope(base, pos, inv_freq(other_type[0], pos), af),
                                   "other layer type's"))
                if sc.long_divisor is not None:
                    other = "short" if used[prefix] == "long" else "long"
                    wrongs.append((rope(base, pos, inv_freq(sc, pos, other), af),
                                   "%s-table" % other))
                for wrong, what in wrongs:
                    if what == "unrotated" and pos.max() == 0:
                        continue
                    check(close(got, wrong, 0) > 20 * ROPE_RTOL,
                          "%s.layers.%d.%s_rope: a %s rotation would pass" % (prefix, i, x, what))
                if lsc.freq_divisor is not None:
                    unscaled = rope(base, pos, inv_freq(plain, pos), af)
                    unscaled_gap = max(unscaled_gap, close(got, unscaled, 0))
    # The scaled tables themselves (apart from the factor) are visible at these positions: at
    # least in the later passes, where angles of the divided frequencies have grown.
    check(sc.freq_divisor is None or unscaled_gap > 20 * ROPE_RTOL,
          "the unscaled table would pass every pass (largest gap %.3g)" % unscaled_gap)
    return worst, used


def check_chain(s):
    """Neighbouring taps agree with each other (catches a hook on the wrong module)."""
    d = s.dims
    w = s.weights()
    worst = 0.0
    for prefix in ["prefill"] + ["decode.%d" % i for i in range(s.p["decode_steps"])]:
        t = lambda n: s.a(prefix + "." + n).astype(np.float64)  # noqa: E731
        prev = t("embed")
        for i in range(d.L):
            p = "layers.%d." % i
            pairs = [(t(p + "resid_attn"), prev + t(p + "attn_out")),
                     (t(p + "resid_ffn"), t(p + "resid_attn") + t(p + "ffn_out"))]
            if s.family in configs.GEMMA_FAMILIES:
                # the residual adds take the post-norms of the block outputs
                b = "model.layers.%d." % i

                def gnorm(x, name, b=b):
                    return rms_norm(x, 1.0 + w[b + name + ".weight"], d.eps)
                pairs = [(t(p + "attn_post_norm"), gnorm(t(p + "attn_out"), "post_attention_layernorm")),
                         (t(p + "resid_attn"), prev + t(p + "attn_post_norm")),
                         (t(p + "ffn_norm"), gnorm(t(p + "resid_attn"), "pre_feedforward_layernorm")),
                         (t(p + "ffn_act"), gelu_new(t(p + "ffn_gate")) * t(p + "ffn_up")),
                         (t(p + "ffn_post_norm"), gnorm(t(p + "ffn_out"), "post_feedforward_layernorm")),
                         (t(p + "resid_ffn"), t(p + "resid_attn") + t(p + "ffn_post_norm"))]
            elif s.family in configs.MOE_FAMILIES:
                # the router reads ffn_norm; the block's output is the experts the stored
                # router_logits choose, applied to ffn_norm
                router, experts = moe_names(s.family, i)
                rl = t(p + "router_logits")
                ids, wts = route(rl, d.K, renormalises(s.family, s.cfg))
                routed = moe_block(t(p + "ffn_norm"), ids, wts, w, experts, d)
                pairs.append((rl, t(p + "ffn_norm") @ w[router].T))
                if s.family in configs.SHARED_EXPERT_FAMILIES:
                    # the routed sum; the shared expert's gate and up from ffn_norm, its
                    # activation, its output, and the block's: moe_out + sigmoid(gate) shared_out
                    se = "model.layers.%d.mlp.shared_expert." % i
                    f = t(p + "ffn_norm")
                    pairs += [(t(p + "moe_out"), routed),
                              (t(p + "ffn_gate"), f @ w[se + "gate_proj.weight"].T),
                              (t(p + "ffn_up"), f @ w[se + "up_proj.weight"].T),
                              (t(p + "ffn_act"), silu(t(p + "ffn_gate")) * t(p + "ffn_up")),
                              (t(p + "shared_out"),
                               t(p + "ffn_act") @ w[se + "down_proj.weight"].T),
                              (t(p + "ffn_out"), t(p + "moe_out")
                               + shared_gate(f, w, i) * t(p + "shared_out"))]
                else:
                    pairs.append((t(p + "ffn_out"), routed))
            elif s.family == "gpt2":
                pairs.append((t(p + "ffn_act"), gelu_new(t(p + "ffn_up"))))
            else:
                pairs.append((t(p + "ffn_act"), silu(t(p + "ffn_gate")) * t(p + "ffn_up")))
            for got, want in pairs:
                rel = close(got, want, TAP_RTOL)
                check(rel <= TAP_RTOL,
                      "%s.%s: taps do not chain (relative %.3g)" % (prefix, p, rel))
                worst = max(worst, rel)
            prev = t(p + "resid_ffn")
        # resid_ffn of the last layer -> final_norm -> logits
        if s.family == "gpt2":
            fn = layer_norm(prev, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], d.eps)
            head = w.get("lm_head.weight", w["transformer.wte.weight"])
        else:
            gain = w["model.norm.weight"] + (1.0 if s.family in configs.GEMMA_FAMILIES else 0.0)
            fn = rms_norm(prev, gain, d.eps)
            head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        logits = t("final_norm") @ head.T
        if s.family == "gemma2" and s.cfg.get("final_logit_softcapping", 30.0) is not None:
            cap = s.cfg.get("final_logit_softcapping", 30.0)  # Gemma 2's final soft cap
            logits = cap * np.tanh(logits / cap)
        for got, want, what in ((t("final_norm"), fn, "final_norm"),
                                (t("logits"), logits, "logits")):
            rel = close(got, want, TAP_RTOL)
            check(rel <= TAP_RTOL, "%s.%s from the last resid_ffn (relative %.3g)"
                  % (prefix, what, rel))
            worst = max(worst, rel)
    return worst


# golden/tolerances.yaml's tap_calibration factor: a backend may make this many times the
# calibrated error in amplitude.
CALIBRATION_FACTOR = 4
# A mixture of experts' prompt tokens reach at least this many experts in every layer (all of them
# where a layer has fewer).
MIN_EXPERTS_USED = 3
# ... and at least this many of each token's k places are filled by experts that some token of the
# prompt does not choose (all k where k is smaller): with top 1 or 2 no expert may take every
# token; with Qwen1.5-MoE's top 4 of 8 a prompt's correlated tokens put one or two experts in
# every token's top half, and what shows the router at work is that the rest vary.
MIN_VARYING_PLACES = 2


def check_router(s):
    """A mixture of experts' routing, from the stored taps and calibration.json: the prompt's
    tokens spread over at least MIN_EXPERTS_USED experts in every layer, and no more than
    k - MIN_VARYING_PLACES of them (none for top 1 and 2) are in every token's top k (a router
    that sends everything one way tests little of the block); and every
    stored token's choice is decisive: the gap between its k-th and next router logit is more than
    twice CALIBRATION_FACTOR times the calibrated router_logits error of its row (max_err_rms times
    the row's rms), so that no correct engine, whose logits err by up to that, picks another expert
    (its ffn_out would then differ by a whole expert's output, far beyond any limit). Returns
    (the prompt's token counts per layer and expert, the smallest gap in those units). A set of a
    real checkpoint is what it is: its routing is reported, not held to these."""
    d = s.dims
    with open(os.path.join(s.dir, calibration.CALIBRATION_FILE)) as f:
        cal = {e["tap"]: e for e in json.load(f)["taps"]}

    def require(cond, msg):
        if s.p["source"] == "synthetic":
            check(cond, msg)
        elif not cond:
            print("warning: %s: %s (a real checkpoint)" % (s.dir, msg))
    counts = []
    for i in range(d.L):
        ids, _ = route(s.a("prefill.layers.%d.router_logits" % i), d.K)
        n = np.bincount(ids.reshape(-1), minlength=d.E)
        counts.append(n.tolist())
        every = int((n == len(ids)).sum())
        require(int((n > 0).sum()) >= min(MIN_EXPERTS_USED, d.E)
                and every <= max(0, d.K - MIN_VARYING_PLACES),
                "layer %d: the prompt's tokens reach the experts %s times: %d take every token "
                "(want at most %d), or fewer than %d are used"
                % (i, n.tolist(), every, max(0, d.K - MIN_VARYING_PLACES), MIN_EXPERTS_USED))
    worst = math.inf
    if d.K < d.E:
        for prefix in ["prefill"] + ["decode.%d" % j for j in range(s.p["decode_steps"])]:
            for i in range(d.L):
                name = "%s.layers.%d.router_logits" % (prefix, i)
                rl = s.a(name).astype(np.float64)
                top = -np.sort(-rl, axis=1)
                gap = top[:, d.K - 1] - top[:, d.K]
                err = np.maximum(cal[name]["max_err_rms"] * np.sqrt((rl * rl).mean(1)), 1e-30)
                ratios = gap / err
                ratio = float(ratios.min())
                require(ratio > 2 * CALIBRATION_FACTOR,
                        "%s: a token's %d-th and %d-th router logits are %.3g apart, %.3g times "
                        "its calibrated error: a correct engine may choose another expert"
                        % (name, d.K, d.K + 1, float(gap[np.argmin(ratios)]), ratio))
                worst = min(worst, ratio)
    return counts, worst


# Qwen2-MoE's shared-expert gate on the committed prompt (models/checkpoint.py: SHARED_GATE_GAIN):
# some token's sigmoid below the first and some token's above the second, over the layers, so an
# engine that drops the sigmoid, the gate or the shared expert misses by a whole shared expert at
# some token and one that uses a constant gate is wrong at both ends; and in every layer the
# prompt's gates at least SHARED_GATE_SPREAD apart, so each layer's gate varies by token (a
# prompt's tokens share a component of the stream, which shifts a layer's gates together: the
# drawn logits, N(0, 2^2) over every stored pass, spread by std 0.8-2.2 within a layer's prompt
# around offsets of up to +-2.9, measured over 36 draws of the tiny config's widths).
SHARED_GATE_SPAN = (0.2, 0.8)
SHARED_GATE_SPREAD = 0.5


def check_shared_gate(s):
    """Qwen2-MoE's shared-expert gate sigmoid(ffn_norm . shared_expert_gate) over the prompt's
    tokens (prefill): below and above SHARED_GATE_SPAN over the layers, at least
    SHARED_GATE_SPREAD apart in each. Returns [(min, max)] a layer. A set of a real checkpoint is
    what it is: reported, not held to it."""
    w = s.weights()
    lo, hi = SHARED_GATE_SPAN
    out = []
    for i in range(s.dims.L):
        g = shared_gate(s.a("prefill.layers.%d.ffn_norm" % i).astype(np.float64), w, i)[:, 0]
        out.append((float(g.min()), float(g.max())))
    msgs = ["layer %d: the prompt's shared-expert gates lie in [%.3f, %.3f], less than %g apart"
            % (i, a, b, SHARED_GATE_SPREAD) for i, (a, b) in enumerate(out)
            if b - a < SHARED_GATE_SPREAD]
    if not (min(a for a, _ in out) < lo and max(b for _, b in out) > hi):
        msgs.append("the prompt's shared-expert gates lie in %s, want some below %g and some "
                    "above %g" % (out, lo, hi))
    for msg in msgs:
        if s.p["source"] == "synthetic":
            raise Fail(msg)
        print("warning: %s: %s (a real checkpoint)" % (s.dir, msg))
    return out


def check_fp16_block(s):
    """Qwen2-MoE: transformers' own sparse block in the set's 16-bit type (its experts' loop in
    fp16, and the shared expert's gate logit, its sigmoid, the product and the sum each rounded to
    fp16, where the engine's moe_shared_add keeps them fp32 and rounds once: what the calibration
    models) on every stored pass's ffn_norm against the stored ffn_out: within the limits an engine
    derives from calibration.json (CALIBRATION_FACTOR times the calibrated max_err_rms in
    amplitude, its square times the nmse), so the tolerance covers transformers' own roundings of
    the block too. Returns the largest fraction of the allowance used (amplitude units)."""
    low = dtypes.TORCH_DTYPE[s.p["dtype"]]
    with open(os.path.join(s.dir, calibration.CALIBRATION_FILE)) as f:
        cal = {e["tap"]: e for e in json.load(f)["taps"]}
    model = reference.load_model(s.dir, s.family, dtype=low)
    worst, where = 0.0, None
    with torch.no_grad():
        for prefix in ["prefill"] + ["decode.%d" % j for j in range(s.p["decode_steps"])]:
            for i in range(s.dims.L):
                name = "%s.layers.%d.ffn_out" % (prefix, i)
                f = torch.from_numpy(s.a("%s.layers.%d.ffn_norm" % (prefix, i))).to(low)[None]
                got = model.model.layers[i].mlp(f)[0].float()
                rec = calibration.tap_error(got, torch.from_numpy(s.a(name)), False)
                c = cal[name]
                used = max(rec["max_err_rms"] / (CALIBRATION_FACTOR * c["max_err_rms"]),
                           math.sqrt(rec["nmse"] / (CALIBRATION_FACTOR ** 2 * c["nmse"])))
                if used > worst:
                    worst, where = used, name
    del model
    check(worst <= 1.0, "%s: transformers' %s sparse block errs by %.3g of the calibrated "
          "allowance: the tolerance does not cover its roundings" % (where, s.p["dtype"], worst))
    return worst, where


@contextmanager
def cached_rope(model):
    """Within the block, a cache-free forward over a whole sequence rotates each token as the
    cached passes did. For LongRoPE transformers picks one table per forward call (the long one
    when the call's largest position + 1 exceeds original_max_position_embeddings), so in the
    reference's prefill (P <= original) and decode steps the token at position p was rotated with
    the long table exactly when p >= original, and its key stays so in the cache; a cache-free
    call over the same sequence would rotate every token with the long table. The rotary
    embedding's forward is replaced by the same fp32 arithmetic (pos * inv_freq, cos and sin times
    attention_scaling) with the table picked per position. Other RoPE types: nothing changes."""
    rot = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rot is None or rot.rope_type != "longrope":
        yield
        return
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    original = model.config.rope_parameters["original_max_position_embeddings"]
    short = rot.original_inv_freq.float()
    long = ROPE_INIT_FUNCTIONS["longrope"](model.config, short.device,
                                          seq_len=original + 1)[0].float()

    def forward(x, position_ids):
        pos = position_ids[:, None, :].float()
        fs = (short[None, :, None].expand(pos.shape[0], -1, 1) @ pos).transpose(1, 2)
        fl = (long[None, :, None].expand(pos.shape[0], -1, 1) @ pos).transpose(1, 2)
        freqs = torch.where((position_ids >= original)[:, :, None], fl, fs)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * rot.attention_scaling, emb.sin() * rot.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
    rot.forward = forward  # an instance attribute: Module.__call__ calls it
    try:
        yield
    finally:
        del rot.forward


def check_greedy(s):
    """Tokens, margins and top-5 follow from the logits taps; decode logits equal a cache-free
    re-run; transformers' generate() agrees."""
    p = s.p
    prompt = np.array(p["prompt_ids"])
    tokens, margins, top5 = s.a("greedy_tokens"), s.a("greedy_top2_margin"), s.a("greedy_top5")
    N = p["decode_steps"]
    rows = [s.a("prefill.logits")[-1]] + [s.a("decode.%d.logits" % i)[0] for i in range(N)]
    for i, row in enumerate(rows):
        order = np.lexsort((np.arange(row.shape[0]), -row.astype(np.float64)))
        check(tokens[i] == order[0], "greedy token %d is not the argmax of its logits" % i)
        check(top5[i].tolist() == order[:5].tolist(), "top5 %d" % i)
        want = np.float32(float(row[order[0]]) - float(row[order[1]]))
        check(margins[i] == want, "margin %d" % i)
    check(all(top5[i, 0] == tokens[i] for i in range(32)), "top5[:, 0] == tokens")
    check(np.all(margins >= 0), "negative margin")
    if p["source"] == "synthetic":
        check(len(set(tokens.tolist())) >= 4, "greedy decoding collapsed to %d distinct tokens"
              % len(set(tokens.tolist())))

    model = reference.load_model(s.dir, s.family)
    worst = 0.0
    with torch.no_grad():
        with cached_rope(model):
            seqs = [np.concatenate([prompt, tokens[:i + 1]])[None] for i in range(N)]
            cache_free = [model(input_ids=torch.tensor(seq, dtype=torch.int64), use_cache=False)
                          .logits[0, -1].double().numpy() for seq in seqs]
        # An FP8 set's forward is discontinuous: the cache-free forward's other GEMM shapes round
        # a few inputs of its FP8 projections to other e4m3 codes (docs/quantization.md), so its
        # logits differ from the cached ones by that, not by fp32 rounding: measured 0.0077
        # (llama3-tiny-fp8-bf16) and 0.013-0.024 (Llama-3.2-1B widths, 2 layers), 2026-11-27.
        bound = FP8_CACHE_FREE_REL if s.fp8 else 1e-4
        for i in range(N):
            want = cache_free[i]
            rel = close(s.a("decode.%d.logits" % i)[0], want, TAP_RTOL)
            check(rel <= bound, "decode.%d.logits differs from a cache-free forward of the same "
                  "sequence (relative %.3g)" % (i, rel))
            worst = max(worst, rel)
        gen = generate(model, prompt)
        check(gen == tokens.tolist(), "transformers generate() gives other tokens")
        if (is_longrope(model) and own_prepare(model) and len(prompt) + len(gen) - 1
                > model.config.rope_parameters["original_max_position_embeddings"]):
            # Phi-3's own generate() drops the cache at the first step whose sequence exceeds the
            # original context and recomputes it with the long table (every key re-rotated): not
            # what a cached forward, the reference, computes. Shown, not checked.
            own = generate(model, prompt, plain=False)
            same = next((j for j, (a, b) in enumerate(zip(own, gen)) if a != b), len(gen))
            print("note: %s: Phi-3's own generate() (the cache recomputed with the long table at "
                  "the switch) agrees with the cached reference for its first %d of 32 tokens"
                  % (s.m["model"], same))
    return worst


def is_longrope(model):
    rot = getattr(getattr(model, "model", None), "rotary_emb", None)
    return rot is not None and rot.rope_type == "longrope"


def own_prepare(model):
    """Whether the model class overrides generate()'s prepare_inputs_for_generation."""
    from transformers.generation.utils import GenerationMixin
    return (type(model).prepare_inputs_for_generation
            is not GenerationMixin.prepare_inputs_for_generation)


def generate(model, prompt, plain=True):
    """transformers' generate(), greedy, 32 tokens. plain: with GenerationMixin's own
    prepare_inputs_for_generation, i.e. a cached forward per step, where a model overrides it
    (Phi-3 does, to recompute the cache with the LongRoPE long table at the switch)."""
    from transformers.generation.utils import GenerationMixin
    if plain:
        model.prepare_inputs_for_generation = \
            GenerationMixin.prepare_inputs_for_generation.__get__(model)
    try:
        gen = model.generate(torch.tensor(prompt[None], dtype=torch.int64), do_sample=False,
                             max_new_tokens=32, min_new_tokens=32, num_beams=1,
                             pad_token_id=0, eos_token_id=None)
    finally:
        if plain:
            del model.prepare_inputs_for_generation
    return gen[0, len(prompt):].tolist()


def sample_config(s):
    sp = s.p["sample"]
    return sp["temperature"], sp["top_k"], sp["top_p"], sp["seed"]


def check_sampled(s):
    """Seeded generation: token 0 and its margin follow exactly from the stored prefill logits;
    every token follows from a cache-free transformers forward over the prompt and the sampled
    tokens (whose logits differ from the cached run's in the last bits only, so tokens agree
    wherever the margin is not tiny). Returns the largest margin difference."""
    T, k, p, seed = sample_config(s)
    tokens, margins = s.a("sample_tokens"), s.a("sample_margin")
    check(np.all(margins >= 0), "negative sample margin")
    check(np.all((tokens >= 0) & (tokens < s.dims.V)), "sample token out of the vocabulary")
    r0 = sampling.sample_row(s.a("prefill.logits")[-1], T, k, p, seed, 0, row=0)
    want0 = np.float32(np.inf if r0.model_margin is None else r0.model_margin)
    check(tokens[0] == r0.token and margins[0] == want0,
          "sample token 0 / margin do not follow from prefill.logits")
    prompt = np.array(s.p["prompt_ids"])
    seq = np.concatenate([prompt, tokens[:-1]])
    model = reference.load_model(s.dir, s.family)
    with torch.no_grad(), cached_rope(model):
        logits = model(input_ids=torch.tensor(seq[None], dtype=torch.int64),
                       use_cache=False).logits[0, len(prompt) - 1:]
    del model
    worst = 0.0
    for j in range(generation.SAMPLE_TOKENS):
        r = sampling.sample_row(logits[j].numpy(), T, k, p, seed, j, row=0)
        mm = np.inf if r.model_margin is None else r.model_margin
        if margins[j] > 1e-3:
            check(r.token == tokens[j], "sample token %d differs from a cache-free forward (margin "
                  "%.4g)" % (j, margins[j]))
            if np.isfinite(mm):
                worst = max(worst, abs(mm - float(margins[j])))
    # FP8 sets: the same discontinuity moves a margin by up to a few logits (2.33 measured on
    # llama3-tiny-fp8dyn-bf16), which the set's margin epsilon must exceed: half of it here.
    bound = s.p["margin_epsilon"] / 2 if s.fp8 else 1e-3
    check(worst < bound, "sample margins differ from a cache-free forward by %.3g" % worst)
    return worst


def fp16_logits(s, tokens):
    """fp16 (a bf16 set: bf16) and fp32 logits of the same model, teacher-forced on `tokens` (the
    predictions for tokens[0..31]): [32, V] each, as float32 arrays."""
    prompt = np.array(s.p["prompt_ids"])
    seq = torch.tensor(np.concatenate([prompt, tokens[:-1]])[None], dtype=torch.int64)
    low = dtypes.TORCH_DTYPE[s.p["dtype"]]
    out = {}
    for dt in (low, torch.float32):
        model = reference.load_model(s.dir, s.family, dtype=dt)
        if s.quant is not None and dt != torch.float32:
            # A quantized set's reference (quantize.load_quantized) is built in float32 whatever
            # dtype is asked for, which would make this run the fp32 one and its drift 0: every
            # parameter is cast here instead, as from_pretrained's dtype casts a 16-bit set's
            # (RoPE's inverse frequencies, buffers, stay float32 in both). The 4-bit modules'
            # weights are storage-dtype values already; an FP8 module's dequantised weight and
            # (FP8Linear.input_transform) its dequantised input are rounded to it: a run more
            # lossy than an FP8 GEMM with float32 accumulation, as this run is meant to be.
            # Measured (2026-11-27): drift 0.090 (awq) and 0.057 (gptq), epsilon 0.35; 3.75
            # (fp8-block) and 5.16 (fp8-channel), epsilon 2: an FP8 model's activation codes flip
            # under a 16-bit run's rounding (docs/quantization.md), and the float32 reference's
            # margins move by more than the epsilon allows. (An FP8 GEMM computed exactly within
            # an otherwise bf16 run: 3.48 and 3.81; the calibration forward: 2.43 and 2.48.)
            with torch.no_grad():
                for prm in model.parameters():
                    prm.data = prm.data.to(dt)
        check({prm.dtype for prm in model.parameters()} == {dt},
              "the %s run's parameters are %s" % (dt, {prm.dtype for prm in model.parameters()}))
        with torch.no_grad(), cached_rope(model):
            out[dt] = model(input_ids=seq).logits[0, len(prompt) - 1:].float().numpy()
        del model
    return out[low], out[torch.float32]


def fp16_drift(s):
    """Largest change of the reference's top-2 margin when the same model runs in fp16 (weights
    and activations; a bf16 set: in bf16), teacher-forced on the reference tokens; and,
    teacher-forced on the sampled tokens, whether the fp16 (bf16) model samples the reference
    token at every step whose sample margin reaches the epsilon (the margin is honest). Returns
    (drift, comparable steps, fp16 / bf16 agreeing at all steps)."""
    tokens, top5 = s.a("greedy_tokens"), s.a("greedy_top5")
    if s.fp8:
        return fp8_drift(s)
    l16, l32 = (x.astype(np.float64) for x in fp16_logits(s, tokens))
    i = np.arange(32)
    m16 = l16[i, top5[:, 0]] - l16[i, top5[:, 1]]
    m32 = l32[i, top5[:, 0]] - l32[i, top5[:, 1]]
    drift = float(np.abs(m16 - m32).max())
    msg = "%s drift of the top-2 margin %.4f is more than half the margin epsilon %g" % (
        s.p["dtype"], drift, s.p["margin_epsilon"])
    if s.p["source"] == "synthetic":
        check(drift * 2 <= s.p["margin_epsilon"], msg)
    elif drift * 2 > s.p["margin_epsilon"]:
        print("warning: %s: %s (a real checkpoint: the epsilon is a default)" % (s.dir, msg))

    T, k, p, seed = sample_config(s)
    tokens, margins = s.a("sample_tokens"), s.a("sample_margin")
    l16, _ = fp16_logits(s, tokens)
    eps = s.p["margin_epsilon"]
    agree = 0
    for j in range(generation.SAMPLE_TOKENS):
        t16 = sampling.sample_row(l16[j], T, k, p, seed, j, row=0).token
        agree += int(t16 == tokens[j])
        if margins[j] >= eps and t16 != tokens[j]:
            msg = ("sample step %d: the %s model samples %d, the reference %d, although the "
                   "margin %.4f reaches the epsilon %g" % (j, s.p["dtype"], t16, tokens[j],
                                                           margins[j], eps))
            if s.p["source"] == "synthetic":
                raise Fail(msg)
            print("warning: %s: %s (a real checkpoint: the epsilon is a default)" % (s.dir, msg))
    return drift, int((margins >= eps).sum()), agree


def fp8_drift(s):
    """fp16_drift for a set whose projections quantise their inputs to FP8. Such a forward is
    discontinuous (docs/quantization.md, "Quantized model sets"): a 16-bit run everywhere (bf16
    logits, the FP8 weights' dequantised values rounded) moves margins by 3.75 and 5.16 logits on
    the committed sets, and so does it scale with the logits: peaking the output rows higher for
    a larger epsilon raises the drift with them (epsilon 8: 15). What a correct engine does is the
    calibration forward (the FP8 GEMM exact, activations rounded where the engine stores them,
    fp32 logits): its drift over the stored steps (prefill and 8 decode steps, teacher-forced) must
    stay below every stored greedy margin, each of which the peaked checkpoint holds at twice the
    epsilon or more, so no step the token check decides can flip under a correct engine.
    Measured 2.43 and 2.48 against smallest margins 4.13 and 4.75 (2026-11-27). The seeded
    tokens' agreement is not re-derived here (the 16-bit run's drift exceeds the epsilon)."""
    tokens, top5 = s.a("greedy_tokens"), s.a("greedy_top5")
    prompt = np.array(s.p["prompt_ids"])
    model = reference.load_model(s.dir, s.family)
    r = calibration.run_rounded(model, s.family, s.cfg, torch.tensor(prompt, dtype=torch.int32),
                                torch.tensor(tokens), s.p["decode_steps"], dtype=s.p["dtype"],
                                weights_stored=True)
    del model
    steps = 1 + s.p["decode_steps"]
    cal = np.concatenate([r["prefill.logits"].double().numpy()[-1:]] +
                         [r["decode.%d.logits" % j].double().numpy() for j in range(steps - 1)])
    ref = np.concatenate([s.a("prefill.logits")[-1:]] +
                         [s.a("decode.%d.logits" % j) for j in range(steps - 1)]).astype(np.float64)
    i = np.arange(steps)
    margin = lambda l: l[i, top5[:steps, 0]] - l[i, top5[:steps, 1]]
    drift = float(np.abs(margin(cal) - margin(ref)).max())
    smallest = float(s.a("greedy_top2_margin").min())
    check(drift < smallest, "FP8 drift of the top-2 margin %.4f reaches the smallest stored margin "
          "%.4f: a correct engine could flip a decided step" % (drift, smallest))
    margins = s.a("sample_margin")
    return drift, int((margins >= s.p["margin_epsilon"]).sum()), None


def ordered_bits(t, dtype):
    """A 16-bit tensor's values as integers in the order of the values (sign-magnitude bits made
    monotonic: +0 and -0 both 0), so that a difference counts the 16-bit steps between them."""
    bits = t.to(dtypes.TORCH_DTYPE[dtype]).view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


# The calibration's Qwen2-MoE ffn_out against one rounding of the block's float64 sum: at least
# this share of its values equal (the rest one 16-bit step off, where float32's and float64's sums
# round apart near a midpoint, or off by float32's error where the two terms cancel). Rounding the
# gate's logit, its sigmoid and the product each (transformers' fp16 block) leaves 29% of the
# committed set's values a step or more off.
SHARED_ADD_EXACT = 0.99


def check_shared_add(s, rounded, f16):
    """Qwen2-MoE's calibration ffn_out is the engine's moe_shared_add: one rounding of
    moe_out + sigmoid(ffn_norm . w_gate) * shared_out computed from the rounded taps (fp32 in the
    calibration, float64 here): every value within one 16-bit step of it (or, where the two
    terms cancel, within float32's error of their sizes), at least SHARED_ADD_EXACT of them
    equal. Returns the share equal."""
    w = s.weights()
    dtype = s.p["dtype"]
    same = total = 0
    for prefix in ["prefill"] + ["decode.%d" % j for j in range(s.p["decode_steps"])]:
        t = lambda n: rounded[prefix + "." + n].double()  # noqa: E731
        for i in range(s.dims.L):
            p = "layers.%d." % i
            g = torch.from_numpy(shared_gate(t(p + "ffn_norm").numpy(), w, i))
            gated = g * t(p + "shared_out")
            want = t(p + "moe_out") + gated
            got = t(p + "ffn_out")
            steps = (ordered_bits(got, dtype) - ordered_bits(want, dtype)).abs()
            fp32 = (got - want).abs() <= 2.0 ** -21 * (t(p + "moe_out").abs() + gated.abs())
            bad = (steps > 1) & ~fp32
            check(not bool(bad.any()), "%s.%sffn_out is %d %s steps from one rounding of "
                  "moe_out + sigmoid(gate) shared_out" % (prefix, p, int(steps[bad].max())
                                                          if bad.any() else 0, dtype))
            same += int((steps == 0).sum())
            total += steps.numel()
    check(same >= SHARED_ADD_EXACT * total, "the calibration's ffn_out equals one rounding of "
          "moe_out + sigmoid(gate) shared_out at %d of %d values only" % (same, total))
    return same / total


CAL_NUMBER = re.compile(r"^(0|[1-9]\.\d\de[+-]\d\d)$")


def check_calibration(s):
    """calibration.json: its layout (one tap a line, in tap order, numbers at 3 significant
    digits), and that it is what the rounded forward makes of this set's own stored files: a
    fresh model from the set's checkpoint, teacher-forced on its greedy tokens, against its
    stored taps. The hooks are shown to change nothing but the rounding (an identity rounding
    reproduces the stored reference taps), every rounded tap but the logits to be fp16 values,
    and both residual adds to be the rounded sums of the rounded taps before them. A bf16 set's
    calibration rounds to bf16 (and says so) and is checked to be bf16-valued. An FP8 set's
    (params.quantization.format fp8-*: its activations quantised at every projection) says that
    too, by the implementation suffix calibration.CALIBRATION_FP8_SUFFIX, exactly then: the
    engine allows such a calibration its larger nmse bound (CALIBRATION_MAX_NMSE_FP8). Returns
    the largest calibrated nmse and its tap."""
    with open(os.path.join(s.dir, calibration.CALIBRATION_FILE), "rb") as f:
        raw = f.read()
    cal = json.loads(raw)
    fp8 = s.quant is not None and s.p["quantization"]["format"].startswith("fp8")
    implementation = calibration.CALIBRATION_IMPLEMENTATIONS[s.p["dtype"]] + (
        calibration.CALIBRATION_FP8_SUFFIX if fp8 else "")
    check(list(cal) == ["version", "implementation", "taps"] and cal["version"] == 1
          and cal["implementation"] == implementation,
          "calibration header: implementation %r, want %r" % (cal.get("implementation"),
                                                              implementation))
    taps = [e["name"] for e in s.m["files"] if e["name"].startswith(("prefill.", "decode."))]
    check([t["tap"] for t in cal["taps"]] == taps, "calibration lists the set's taps in order")
    lines = raw.decode("ascii").splitlines()[4:-2]
    check(len(lines) == len(taps), "one calibration entry a line")
    for line, t in zip(lines, cal["taps"]):
        keys = calibration.CALIBRATION_KEYS + (calibration.CALIBRATION_LOGIT_KEYS
                                               if t["tap"].endswith(".logits") else [])
        check(list(t) == ["tap"] + keys, "%s: calibration keys %s" % (t["tap"], list(t)))
        for k in keys:
            text = re.search(r'"%s": ([^,}]*)' % k, line).group(1)
            check(CAL_NUMBER.match(text) is not None, "%s.%s = %s: not 3 significant digits"
                  % (t["tap"], k, text))

    prompt = torch.tensor(s.p["prompt_ids"], dtype=torch.int32)
    tokens = torch.tensor(s.a("greedy_tokens"))
    N = s.p["decode_steps"]
    ref = {n: torch.from_numpy(s.a(n)) for n in taps}

    dtype = s.p["dtype"]
    model = reference.load_model(s.dir, s.family)
    same = calibration.run_rounded(model, s.family, s.cfg, prompt, tokens, N, rounding=lambda t: t,
                                   dtype=dtype)
    for n in taps:
        rel = close(same[n].numpy(), ref[n].numpy().astype(np.float64), TAP_RTOL)
        check(rel <= 1e-5, "%s: the calibration forward without rounding is not the reference "
              "(relative %.3g): a hook changes more than the rounding" % (n, rel))
    del model, same

    model = reference.load_model(s.dir, s.family)
    # As the build runs it (models/build.py): with weights_stored where the checkpoint's 16-bit
    # tensors are all of the set's dtype. For a 16-bit set the rounding in place is a no-op then
    # either way; a quantized set's reference modules hold the dequantised weights (an FP8 one
    # the exact products of codes and float32 or 16-bit scales, which an FP8 GEMM multiplies as
    # they are), and those are not rounded.
    stored = None
    if s.quant is not None:
        entries = safetensors_entries(s.dir)
        qnames = quant_names(entries, s.quant[0])
        stored = {e["dtype"] for k, e in entries.items() if k not in qnames}
    rounded = calibration.run_rounded(model, s.family, s.cfg, prompt, tokens, N, dtype=dtype,
                                      weights_stored=stored == {checkpoint.ST_NAME[dtype]})
    del model
    check(calibration.calibration_bytes(ref, rounded, dtype=dtype, fp8_activations=fp8) == raw,
          "calibration.json is not what the rounded forward makes of the stored taps")
    # the rounding of the set's dtype: bf16 taps are checked by bit arithmetic too (the top 16
    # bits of each fp32 value, nothing below them: an fp16 rounding keeps 11 significant bits),
    # and fp16 taps must not all be bf16 values (which a bf16 rounding would give)
    f16 = calibration.ROUNDING[dtype]
    finer = 0
    for n, t in rounded.items():
        if not n.endswith(".logits"):
            check(torch.equal(f16(t), t), "%s: the calibration tap is not %s-valued" % (n, dtype))
            if dtype == "bf16":
                check(not (t.contiguous().view(torch.int32) & 0xFFFF).any(),
                      "%s: the calibration tap has bits below bf16's" % n)
            else:
                finer += int((calibration.round_bf16(t) != t).sum())
    check(dtype == "bf16" or finer > 0, "the fp16 calibration taps are all bf16 values")
    for prefix in ["prefill"] + ["decode.%d" % i for i in range(N)]:
        t = lambda n: rounded[prefix + "." + n]  # noqa: E731
        prev = t("embed")
        for i in range(s.dims.L):
            p = "layers.%d." % i
            # Gemma 3 adds the post-norms of the block outputs
            ao, fo = (("attn_post_norm", "ffn_post_norm") if s.family in configs.GEMMA_FAMILIES
                      else ("attn_out", "ffn_out"))
            check(torch.equal(t(p + "resid_attn"), f16(prev + t(p + ao))),
                  "%s.%sresid_attn is not %s(x + %s)" % (prefix, p, dtype, ao))
            check(torch.equal(t(p + "resid_ffn"), f16(t(p + "resid_attn") + t(p + fo))),
                  "%s.%sresid_ffn is not %s(resid_attn + %s)" % (prefix, p, dtype, fo))
            prev = t(p + "resid_ffn")
    if s.family in configs.SHARED_EXPERT_FAMILIES:
        check_shared_add(s, rounded, f16)
    worst = max(cal["taps"], key=lambda e: e["nmse"])
    return worst["nmse"], worst["tap"]


def check_set(d, spec=None):
    s = Set(d)
    check_format(s)
    check_hparams(s)
    if s.p["source"] == "synthetic":
        check_safetensors(s, spec)
    if spec is not None:
        check_config(s, spec)
    res = {
        "numpy": check_numpy_forward(s),
        "rope": check_rope(s),
        "chain": check_chain(s),
        "decode": check_greedy(s),
        "sampled": check_sampled(s),
        "fp16": fp16_drift(s),
        "calibration": check_calibration(s),
    }
    router = ""
    if s.family in configs.MOE_FAMILIES:
        counts, gap = check_router(s)
        router = "; router: prompt tokens per expert %s, smallest decision gap %.3g x the " \
                 "calibrated error" % (" | ".join("L%d %s" % (i, c) for i, c in enumerate(counts)),
                                       gap)
    if s.family in configs.SHARED_EXPERT_FAMILIES:
        gates = check_shared_gate(s)
        used, where = check_fp16_block(s)
        router += ("; shared gate over the prompt %s; transformers' %s block at %.3g of the "
                   "calibrated ffn_out allowance (%s)"
                   % (" | ".join("L%d %.3f..%.3f" % (i, a, b) for i, (a, b) in enumerate(gates)),
                      s.p["dtype"], used, where))
    mg = s.a("greedy_top2_margin")
    drift, comparable, agree = res["fp16"]
    numpy_err, fp8 = res["numpy"]
    if s.quant is not None:
        # which format, and for FP8 how often the numpy forward's own activation quantisation
        # differed from the reference's (Linears)
        q = " [%s%s]" % (s.quant[0], "" if fp8 is None else
                         ", own fp8 inputs differ %d/%d" % fp8)
    else:
        q = ""
    rope_err, tables = res["rope"]
    switch = ""
    if tables:
        long = [k for k, v in tables.items() if v == "long"]
        switch = " (longrope: short %s, long %s)" % (
            ", ".join(k for k, v in tables.items() if v == "short"), ", ".join(long) or "nowhere")
    print("%-14s taps vs numpy fp64 %.1e%s, rope %.1e%s, chain %.1e, decode vs no-cache %.1e; "
          "margins min %.3f median %.3f (%d < eps %g); %s margin drift %.4f; sampled: "
          "margins vs no-cache %.1e, %d/32 steps >= eps, %s samples the same token at %s/32; "
          "calibration: worst nmse %.3g at %s%s"
          % (s.m["model"], numpy_err, q, rope_err, switch, res["chain"], res["decode"],
             float(mg.min()), float(np.median(mg)), int((mg < s.p["margin_epsilon"]).sum()),
             s.p["margin_epsilon"], s.p["dtype"], drift, res["sampled"], comparable,
             s.p["dtype"], "n/a (FP8: fp8_drift)" if agree is None else agree,
             res["calibration"][0], res["calibration"][1], router), flush=True)


def check_chunked_draw():
    """draw_tensor's chunks give draw_tensor_whole's bytes: sizes below, at and around a
    multiple of 16 and of the chunk, a last chunk that would hold fewer than 16 values, and each
    init kind (the norm init adds 1.0 after scaling)."""
    chunk = 64
    sizes = [1, 5, 15, 16, 17, 31, 48, chunk - 1, chunk, chunk + 1, chunk + 15, chunk + 16,
             chunk + 17, 2 * chunk - 3, 3 * chunk, 3 * chunk + 9, 5 * chunk + 33, 1000]
    inits = [checkpoint.Init("normal", 0.02), checkpoint.Init("bias", 0.5),
             checkpoint.Init("norm", 0.1), checkpoint.Init("norm", 0.3, 3.0)]
    for n in sizes:
        for init in inits:
            for c in (chunk, 16, checkpoint.DRAW_CHUNK):
                for dtype in configs.DTYPES:
                    got = checkpoint.draw_tensor(7, "w%d" % n, (n,), init, chunk=c, dtype=dtype)
                    want = checkpoint.draw_tensor_whole(7, "w%d" % n, (n,), init, dtype)
                    check(got.dtype == want.dtype == dtypes.TORCH_DTYPE[dtype]
                          and torch.equal(got.view(torch.int16), want.view(torch.int16)),
                          "chunked %s draw of %d values (%s, chunk %d) differs from the whole "
                          "draw" % (dtype, n, init.kind, c))
    # a bf16 draw is the fp16 one's float64 values rounded to bf16 instead (the same draws)
    w16 = checkpoint.draw_tensor_whole(7, "m", (37, 29), inits[0]).float()
    wbf = checkpoint.draw_tensor_whole(7, "m", (37, 29), inits[0], "bf16").float()
    check(not torch.equal(w16, wbf) and (w16 - wbf).abs().max() <= 2 ** -8 * w16.abs().max(),
          "the bf16 draw is not the fp16 draw's values in bf16")
    got = checkpoint.draw_tensor(7, "m", (37, 29), inits[0], chunk=chunk)
    check(torch.equal(got, checkpoint.draw_tensor_whole(7, "m", (37, 29), inits[0])), "2-D draw")
    try:
        checkpoint.draw_tensor(7, "w", (100,), inits[0], chunk=40)
        check(False, "a chunk that is not a multiple of 16 must be refused")
    except ValueError:
        pass
    print("models: chunked checkpoint draws equal whole draws (%d sizes, 3 inits, 3 chunks, "
          "fp16 and bf16)" % len(sizes))


def check_lockstep_pairing():
    """lockstep.Lockstep on its own: two threads' matching calls are computed together, a thread
    left alone computes on its own, and calls out of step or a failed partner raise in both
    threads instead of hanging."""
    import threading

    def run(xs):
        return [x * 2 for x in xs]

    def pair(calls_a, calls_b, fail_b=False):
        ls, out = lockstep.Lockstep(), {}

        def worker(key, calls, fail):
            try:
                out[key] = [ls.call(m, x, run) for m, x in calls]
                if fail:
                    raise ValueError("planted")
            except BaseException as e:
                out[key] = e
                ls.leave(e)
            else:
                ls.leave()
        ta = threading.Thread(target=worker, args=("a", calls_a, False))
        tb = threading.Thread(target=worker, args=("b", calls_b, fail_b))
        ta.start()
        tb.start()
        ta.join(10)
        tb.join(10)
        check(not ta.is_alive() and not tb.is_alive(), "lockstep threads hang")
        return ls, out

    m1, m2 = object(), object()
    xa, xb = torch.arange(4.0), torch.arange(4.0) + 10
    ls, out = pair([(m1, xa), (m2, xa)], [(m1, xb), (m2, xb)])
    check(ls.paired == 2 and ls.alone == 0, "lockstep paired %d, alone %d" % (ls.paired, ls.alone))
    check(all(torch.equal(y, xa * 2) for y in out["a"]) and
          all(torch.equal(y, xb * 2) for y in out["b"]), "lockstep results swapped")
    ls, out = pair([(m1, xa)] * 3, [(m1, xb)])
    check(ls.paired == 1 and ls.alone == 2 and len(out["a"]) == 3, "a thread left alone")
    ls, out = pair([(m1, xa), (m1, xa)], [(m2, xb), (m2, xb)])
    check(isinstance(out["a"], RuntimeError) and isinstance(out["b"], RuntimeError),
          "calls out of step must raise in both threads: %r" % (out,))
    ls, out = pair([(m1, xa)] * 3, [(m1, xb)], fail_b=True)
    check(isinstance(out["a"], RuntimeError), "a failed partner must raise: %r" % (out["a"],))
    # three threads, one leaving after its first call: a group of 3, then groups of 2
    ls, out = lockstep.Lockstep(3), {}
    calls = {"a": [(m1, xa), (m2, xa)], "b": [(m1, xb), (m2, xb)], "c": [(m1, xa + 5)]}

    def worker3(key):
        try:
            out[key] = [ls.call(m, x, run) for m, x in calls[key]]
        finally:
            ls.leave()
    ts = [threading.Thread(target=worker3, args=(k,)) for k in calls]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    check(not any(t.is_alive() for t in ts), "three-thread lockstep hangs")
    check(ls.groups == {3: 1, 2: 1} and torch.equal(out["c"][0], (xa + 5) * 2) and
          torch.equal(out["b"][1], xb * 2), "three-thread groups: %s" % ls.groups)
    print("models: lockstep pairs calls, runs alone after its partner leaves, raises out of step")


def check_group_ops():
    """The paired slice ops (TorchScript where available) give, row by row, the bytes of the op
    one block and one input at a time: F.linear with and without bias, Conv1D's addmm; one and
    16 rows; blocks and slices of 64 features, a last slice shorter."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(5)
    lin, mm = threads.group_op(threads._group_linear), threads.group_op(threads._group_addmm)
    for rows in (1, 16):
        for n_out, n_in in ((448, 96), (200, 160)):
            w = torch.randn(n_out, n_in, generator=g)
            b = torch.randn(n_out, generator=g)
            xa, xb = torch.randn(1, rows, n_in, generator=g), torch.randn(1, rows, n_in, generator=g)
            for bias in (None, b):
                for step in (64, 128):
                    for xs in ([xa, xb], [xa, xb, xa + 1]):
                        ys = lin(xs, w, bias, 64, n_out, step)
                        want = [F.linear(x, w[64:], None if bias is None else b[64:]) for x in xs]
                        check(all(torch.equal(y, v) for y, v in zip(ys, want)),
                              "grouped linear (%d inputs, %d rows, %dx%d, step %d, bias %s) "
                              "differs" % (len(xs), rows, n_out, n_in, step, bias is not None))
            wt, x2s = w.t().contiguous(), [xa[0], xb[0], xa[0] - 1]
            ys = mm(x2s, wt, b, 64, n_out, 64)
            check(all(torch.equal(y, torch.addmm(b[64:], x, wt[:, 64:])) for y, x in zip(ys, x2s)),
                  "grouped addmm (%d rows, %dx%d) differs" % (rows, n_in, n_out))
    print("models: grouped slice ops give the unsplit ops' bytes (%s)"
          % ("TorchScript" if lin is not threads._group_linear else "Python"))


def check_lockstep_build(tmp, specs, want):
    """The committed sets built with a pool of 4, every linear layer split and walked in 64-row
    slices, the greedy and seeded references in lockstep: the same bytes as the one-thread build
    (`want`, their digests), with every split call paired."""
    saved = threads.TIER_THREADS[configs.COMMITTED], threads.SPLIT_MIN, threads.PAIR_SLICE_BYTES
    made = []
    real = lockstep.Lockstep

    class Counted(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)
    threads.TIER_THREADS[configs.COMMITTED] = 4
    threads.SPLIT_MIN = 1 << 10
    threads.PAIR_SLICE_BYTES = 1  # one SPLIT_ALIGN slice at a time
    lockstep.Lockstep = Counted
    try:
        for spec in specs:
            model_build.build_synthetic(spec, os.path.join(tmp, "lockstep", "models", spec.name))
    finally:
        threads.TIER_THREADS[configs.COMMITTED], threads.SPLIT_MIN, threads.PAIR_SLICE_BYTES = saved
        lockstep.Lockstep = real
    got = digests(os.path.join(tmp, "lockstep"))
    check(got == want, "lockstep builds differ from the one-thread builds: %s" % sorted(
        k for k in set(got) | set(want) if got.get(k) != want.get(k))[:5])
    # A mixture of experts' calibration runs after the references (it routes as the reference
    # did: models/build.py), so its lockstep groups the two references alone.
    width = [2 if configs.dims(sp.family, sp.config).E else 3 for sp in specs]
    check(len(made) == len(specs) and all(m.groups.get(w, 0) > 0 and m.alone == 0
                                          for m, w in zip(made, width)),
          "lockstep did not group every call, the calibration's too (but a mixture of "
          "experts'): %s" % [m.groups for m in made])
    print("models: lockstep builds (pool of 4, split linears, 64-row slices, the references and "
          "the calibration grouped) are byte-identical to one-thread builds (groups %s)"
          % "; ".join(str(m.groups) for m in made))


def digests(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def run(set_dirs=None):
    t0 = time.time()
    # The seed derivation is part of the golden data: changing it changes every set.
    assert generation.set_seed("qwen2-tiny") == 264523364, generation.set_seed("qwen2-tiny")
    if set_dirs:
        for d in set_dirs:
            check_set(d)
        print("selftest models OK: %d set(s), %.1fs" % (len(set_dirs), time.time() - t0))
        return 0
    check_chunked_draw()
    specs = configs.models_for(configs.COMMITTED)
    check({m.family for m in specs} == {"qwen2", "phi3", "llama", "gpt2", "qwen3", "mixtral",
                                        "qwen3_moe", "qwen2_moe", "gemma3", "gemma2"},
          "a tiny model of every family")
    check({rope_scaling.rope_scaling(m.config).rope_type for m in specs if m.family != "gpt2"}
          == {"default", "llama3", "yarn", "longrope", "linear"},
          "a tiny model of every RoPE type (linear: gemma3-tiny's global layer)")
    check({m.dtype for m in specs} == set(configs.DTYPES), "a tiny model of every dtype")
    with tempfile.TemporaryDirectory(prefix="gen-golden-selftest-") as tmp:
        for rep in ("a", "b"):
            for spec in specs:
                model_build.build_synthetic(spec, os.path.join(tmp, rep, "models", spec.name))
        da, db = digests(os.path.join(tmp, "a")), digests(os.path.join(tmp, "b"))
        check(da == db, "two builds differ: %s" % sorted(
            k for k in set(da) | set(db) if da.get(k) != db.get(k))[:5])
        print("models: two builds of the committed sets are byte-identical (%d files)" % len(da))
        check_lockstep_pairing()
        check_group_ops()
        check_lockstep_build(tmp, specs, da)
        for spec in specs:
            check_set(os.path.join(tmp, "a", "models", spec.name), spec)
    print("selftest models OK: %d committed sets, %.1fs" % (len(specs), time.time() - t0))
    return 0
