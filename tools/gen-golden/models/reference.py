"""The reference forward: transformers' model loaded from the set's checkpoint (upcast to fp32,
eager attention, CPU), the check that it holds the checkpoint's values, the hyper-parameters as
transformers parsed them, and greedy decoding (with every tap) and seeded generation through the KV
cache."""

import math
import os
import re
from contextlib import contextmanager

import numpy as np
import torch

import sampling
from common.configs import ARCH, FAMILY_OF_MODEL_TYPE, GEMMA_FAMILIES, MOE_FAMILIES, \
    SHARED_EXPERT_FAMILIES, dims
from common.dtypes import F32, F64, I32
from models.generation import GREEDY_TOKENS, SAMPLE_TEMPERATURE, SAMPLE_TOKENS, SAMPLE_TOP_K, \
    SAMPLE_TOP_P
from models.taps import Recorder, tap_names
from models.threads import intra_op_threads


# Elementwise passes over big tensors go CHUNK elements at a time: a whole-tensor temporary is
# fresh memory every time (page faults, and munmap's TLB shootdowns across all threads), which
# costs more than the arithmetic. The values are the same.
CHUNK = 1 << 20


# ---------------------------------------------------------------------------------------------
# The reference forward


def modeling_module(model_type):
    """transformers' modeling module of a config.json model_type (Mistral's has its own
    apply_rotary_pos_emb, which the RoPE taps wrap)."""
    import importlib
    package = {"gemma3_text": "gemma3"}.get(model_type, model_type)
    return importlib.import_module("transformers.models.%s.modeling_%s" % (package, package))


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
    storage = quantized_storage(set_dir)
    if storage is not None:
        # transformers runs these formats only with packages and kernels the hosts lack:
        # the reference modules of models/quantize.py, from the stored tensors
        from models.quantize import load_quantized
        model, _ = load_quantized(set_dir, family, storage)
        check_arch(set_dir, model, family)
        return model
    # A mixture of experts runs transformers' eager expert loop (MixtralExperts.forward: each
    # expert's tokens gathered, two F.linear and the activation, weighted, index_add_), not the
    # default torch._grouped_mm, whose CPU kernel is another summation
    moe = {"experts_implementation": "eager"} if family in MOE_FAMILIES else {}
    with loader_threads(threads):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            set_dir, dtype=dtype, attn_implementation="eager", local_files_only=True, **moe)
    model.eval()
    check_arch(set_dir, model, family)
    if model.config._attn_implementation != "eager":
        raise RuntimeError("attention implementation is %s, want eager"
                           % model.config._attn_implementation)
    if moe and model.config._experts_implementation != "eager":
        raise RuntimeError("experts implementation is %s, want eager"
                           % model.config._experts_implementation)
    return model


def check_arch(set_dir, model, family):
    """The loaded model is the class its model_type names, of the set's family."""
    mt = model.config.model_type
    if type(model).__name__ != ARCH.get(mt) or FAMILY_OF_MODEL_TYPE.get(mt) != family:
        raise RuntimeError("%s loaded as %s (model_type %r), want %s of family %s"
                           % (set_dir, type(model).__name__, mt, ARCH.get(mt), family))


def quantized_storage(set_dir):
    """The 16-bit dtype (torch) a quantized checkpoint's activations are stored in (its
    config's torch_dtype), or None for a checkpoint without a quantization_config."""
    import json
    with open(os.path.join(set_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("quantization_config") is None:
        return None
    dt = cfg.get("torch_dtype") or cfg.get("dtype") or "float16"
    return {"bfloat16": torch.bfloat16}.get(dt, torch.float16)


def _upcast_equal(param, t):
    """torch.equal(param, t.to(param.dtype)), CHUNK elements at a time."""
    if param.shape != t.shape:
        return False
    return all(torch.equal(p, q.to(p.dtype)) for p, q in
               zip(param.reshape(-1).split(CHUNK), t.reshape(-1).split(CHUNK)))


# Checkpoint tensors that transformers 5 loads into a part of another parameter
# (conversion_mapping.py: Mixtral's WeightRenaming of block_sparse_moe to mlp, and the
# WeightConverters that stack the experts, Mixtral's and qwen2_moe's, which qwen3_moe uses): name
# pattern -> (the parameter, which part of it). Expert e's gate (Mixtral's w1, Qwen3-MoE's and
# Qwen2-MoE's gate_proj) and up (w3, up_proj) are rows [0, I) and [I, 2I) of gate_up_proj[e]
# (Concatenate on dim 1 of the stacked [E, I, H] lists, the gate first), its down (w2, down_proj)
# is down_proj[e]. Qwen3-MoE's and Qwen2-MoE's router, model.layers.{i}.mlp.gate.weight, loads
# under its own name, as do Qwen2-MoE's shared expert (mlp.shared_expert.gate_proj / up_proj /
# down_proj, nn.Linear) and its gate (mlp.shared_expert_gate, nn.Linear [1, H]).
_PER_EXPERT = [
    (r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.gate_proj\.weight",
     lambda i, e: ("model.layers.%s.mlp.experts.gate_up_proj" % i, (int(e), "first"))),
    (r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.up_proj\.weight",
     lambda i, e: ("model.layers.%s.mlp.experts.gate_up_proj" % i, (int(e), "second"))),
    (r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.down_proj\.weight",
     lambda i, e: ("model.layers.%s.mlp.experts.down_proj" % i, (int(e), "all"))),
]
MOE_LOADED = {
    "mixtral": [
        (r"model\.layers\.(\d+)\.block_sparse_moe\.gate\.weight",
         lambda i: ("model.layers.%s.mlp.gate.weight" % i, None)),
        (r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w1\.weight",
         lambda i, e: ("model.layers.%s.mlp.experts.gate_up_proj" % i, (int(e), "first"))),
        (r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w3\.weight",
         lambda i, e: ("model.layers.%s.mlp.experts.gate_up_proj" % i, (int(e), "second"))),
        (r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight",
         lambda i, e: ("model.layers.%s.mlp.experts.down_proj" % i, (int(e), "all"))),
    ],
    "qwen3_moe": _PER_EXPERT,
    "qwen2_moe": _PER_EXPERT,
}


def loaded_part(model_type, name, state):
    """Where transformers put checkpoint tensor `name` of a model_type whose loader regroups
    tensors (MOE_LOADED): (state key, the part of that parameter holding it), or None."""
    for pattern, where in MOE_LOADED.get(model_type, ()):
        m = re.fullmatch(pattern, name)
        if m is None:
            continue
        key, part = where(*m.groups())
        if key not in state:
            return None
        p = state[key]
        if part is None:
            return key, p, part
        e, rows = part
        if not 0 <= e < p.shape[0]:
            return None
        half = p.shape[1] // 2
        view = {"first": p[e, :half], "second": p[e, half:], "all": p[e]}[rows]
        return key, view, part
    return None


def check_loaded_weights(model, set_dir, pool=None):
    """Every checkpoint tensor is in the model, upcast exactly; tied heads share the embedding; a
    tensor the loader regroups (Mixtral's router and experts, Qwen3-MoE's and Qwen2-MoE's experts:
    MOE_LOADED) is
    the part of the parameter it went to, and every part of such a parameter came from the
    checkpoint, once.
    With a pool (one_thread_workers) the tensors are compared in parallel. Returns the set of the
    checkpoint's dtypes (torch dtypes)."""
    from safetensors import safe_open
    state = model.state_dict()
    model_type = model.config.model_type
    names, dtypes = [], set()
    parts = {}  # a regrouped parameter's key -> the parts of it the checkpoint filled
    # a quantized checkpoint's projections are reference modules built from their stored
    # tensors (models/quantize.py: load_quantized), compared there, not here
    quantized = getattr(model, "quantized_tensors", set())
    projections = getattr(model, "quantized_projections", set())
    for fname in sorted(os.listdir(set_dir)):
        if not fname.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(set_dir, fname), framework="pt") as f:
            compared = []
            for name in f.keys():
                if name in quantized:
                    continue
                t = f.get_tensor(name)
                regrouped = loaded_part(model_type, name, state)
                if regrouped is not None:
                    key, view, part = regrouped
                    if part in parts.setdefault(key, set()):
                        raise RuntimeError("%s: %s fills a part of %s twice" % (fname, name, key))
                    parts[key].add(part)
                    compared.append((name, view, t))
                    dtypes.add(t.dtype)
                    continue
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
    # a regrouped parameter is whole: every expert's parts (the router: itself)
    for key, got in parts.items():
        p = state[key]
        want = {None} if key.endswith(".gate.weight") else {
            (e, r) for e in range(p.shape[0])
            for r in (("first", "second") if key.endswith("gate_up_proj") else ("all",))}
        if got != want:
            raise RuntimeError("%s: %s filled by %d of its %d parts" % (set_dir, key, len(got),
                                                                       len(want)))
        names.append(key)
    # ... and every model tensor came from the checkpoint (transformers would initialise a missing
    # one randomly); a tied head is the embedding's storage.
    loaded = {state[k].data_ptr() for k in names}
    missing = [k for k, v in state.items() if k not in names and v.data_ptr() not in loaded
               and k not in projections]
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
# ... and after them, a mixture-of-experts family's (only there, so the dense sets are unchanged):
# the experts of a layer, the experts a token, and whether the top k's softmax weights are
# renormalised to sum to 1 (Mixtral's router always does; Qwen3-MoE's where its norm_topk_prob
# says so). Their intermediate_size is each expert's width.
MOE_HPARAM_KEYS = ["num_experts", "num_experts_per_tok", "norm_topk_prob"]
# ... and after those, a family with a shared expert's (Qwen2-MoE's only): its width S, the shared
# expert's gate_proj rows (the ffn_gate, ffn_up and ffn_act taps' width).
SHARED_EXPERT_HPARAM_KEYS = ["shared_expert_intermediate_size"]


# ... and Gemma 3's (only there): the sliding layers' RoPE base and inverse frequencies (the
# HPARAM_KEYS RoPE entries are the global layers'), the attention's query_pre_attn_scalar (the
# scores are scaled by its -0.5 power), the embedding's scale (sqrt(hidden_size) as
# transformers holds it, fp32) and every layer's type (sliding_attention or full_attention).
GEMMA_HPARAM_KEYS = ["rope_local_theta", "rope_local_inv_freq", "query_pre_attn_scalar",
                     "embed_scale", "layer_types"]
# Gemma 2's: one RoPE (no local entries), and its soft caps (null for none).
GEMMA2_HPARAM_KEYS = ["query_pre_attn_scalar", "embed_scale", "layer_types",
                      "attn_logit_softcapping", "final_logit_softcapping"]


def hparam_keys(family):
    """params.hparams' keys, in order, of a set of `family`."""
    gemma = {"gemma3": GEMMA_HPARAM_KEYS, "gemma2": GEMMA2_HPARAM_KEYS}
    return (HPARAM_KEYS + (MOE_HPARAM_KEYS if family in MOE_FAMILIES else [])
            + (SHARED_EXPERT_HPARAM_KEYS if family in SHARED_EXPERT_FAMILIES else [])
            + gemma.get(family, []))


def gemma_rope(model, layer_type):
    """Gemma 3's RoPE of one layer type (Gemma3RotaryEmbedding keeps a table per type): (theta,
    rope_type, inv_freq as floats, attention_factor)."""
    rot = model.model.rotary_emb
    rp = model.config.rope_parameters[layer_type]
    if rot.rope_type[layer_type] != rp["rope_type"]:
        raise RuntimeError("%s rotary embedding rope_type %r, config %r"
                           % (layer_type, rot.rope_type[layer_type], rp["rope_type"]))
    if rp["rope_type"] not in ("default", "linear"):
        raise RuntimeError("Gemma 3 %s rope_type %r: only default and linear are implemented"
                           % (layer_type, rp["rope_type"]))
    inv = getattr(rot, "%s_original_inv_freq" % layer_type)
    if inv.dtype != F32:
        raise RuntimeError("inv_freq is %s, want float32" % inv.dtype)
    return (float(rp["rope_theta"]), rp["rope_type"], [float(v) for v in inv.tolist()],
            float(getattr(rot, "%s_attention_scaling" % layer_type)))


def gemma_hparams(model):
    """reference_hparams of Gemma 3 (see GEMMA_HPARAM_KEYS) and Gemma 2 (GEMMA2_HPARAM_KEYS)."""
    c = model.config
    gemma2 = c.model_type == "gemma2"
    if gemma2:  # one rotary embedding (Gemma2RotaryEmbedding), as the other families'
        rope_type, inv, _, factor, _ = reference_rope(model)
        theta = float(c.rope_parameters["rope_theta"])
        if rope_type != "default":
            raise RuntimeError("Gemma 2 rope_type %r: only default is implemented" % rope_type)
        local_theta = local_inv = None
    else:
        theta, rope_type, inv, factor = gemma_rope(model, "full_attention")
        local_theta, _, local_inv, _ = gemma_rope(model, "sliding_attention")
        if c.attn_logit_softcapping is not None or c.final_logit_softcapping is not None:
            raise RuntimeError("Gemma 3 soft-capping (attn %r, final %r) is not implemented"
                               % (c.attn_logit_softcapping, c.final_logit_softcapping))
    att = model.model.layers[0].self_attn
    cap = lambda v: None if v is None else float(v)
    hp = {
        "hidden_size": c.hidden_size, "num_layers": c.num_hidden_layers,
        "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
        "head_dim": att.head_dim, "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size, "max_positions": c.max_position_embeddings,
        "norm_eps": float(c.rms_norm_eps), "rope_theta": theta, "rope_type": rope_type,
        "rotary_dim": 2 * len(inv), "partial_rotary_factor": 1.0,
        "tied_head": bool(c.tie_word_embeddings), "activation": c.hidden_activation,
        "sliding_window": None if c.sliding_window is None else int(c.sliding_window),
        "rope_inv_freq": inv, "rope_long_inv_freq": None, "rope_attention_factor": factor,
        "rope_long_from": None,
        "rope_local_theta": local_theta, "rope_local_inv_freq": local_inv,
        "query_pre_attn_scalar": float(c.query_pre_attn_scalar),
        "embed_scale": float(model.model.embed_tokens.scalar_embed_scale),
        "layer_types": list(c.layer_types),
    }
    if gemma2:
        del hp["rope_local_theta"], hp["rope_local_inv_freq"]
        hp["attn_logit_softcapping"] = cap(c.attn_logit_softcapping)
        hp["final_logit_softcapping"] = cap(c.final_logit_softcapping)
        if att.attn_logit_softcapping != c.attn_logit_softcapping:
            raise RuntimeError("attention soft cap %r, config %r"
                               % (att.attn_logit_softcapping, c.attn_logit_softcapping))
    if att.scaling != c.query_pre_attn_scalar ** -0.5:
        raise RuntimeError("attention scaling %r, config query_pre_attn_scalar %r"
                           % (att.scaling, c.query_pre_attn_scalar))
    norms = [m.eps for m in model.modules() if type(m).__name__ in ("Gemma3RMSNorm", "Gemma2RMSNorm")]
    return hp, norms


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
    if family in GEMMA_FAMILIES:
        hp, norms = gemma_hparams(model)
    elif family == "gpt2":
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
            # LlamaConfig has no sliding_window at all: null, no window; Qwen2MoeConfig sets it
            # to 0 without use_sliding_window (Qwen2Config to None): no window either
            "sliding_window": (None if not getattr(c, "sliding_window", None)
                               else int(c.sliding_window)),
            "rope_inv_freq": inv, "rope_long_inv_freq": long_inv,
            "rope_attention_factor": attention_factor, "rope_long_from": long_from,
        }
        norms = [m.variance_epsilon for m in model.modules() if hasattr(m, "variance_epsilon")]
    if family in MOE_FAMILIES:
        # from the sparse block's modules: the router's top_k and expert count, the stacked
        # experts' (each its own gate_up_proj [2I, H] and down_proj [H, I], I the experts' width:
        # Mixtral's intermediate_size, Qwen3-MoE's and Qwen2-MoE's moe_intermediate_size, which
        # is then the set's intermediate_size; their own intermediate_size is a dense MLP's, and
        # no layer has one: every layer's mlp must be the sparse block)
        blocks = [layer.mlp for layer in model.model.layers]
        if not all(hasattr(b, "gate") and hasattr(b, "experts") for b in blocks):
            raise RuntimeError("layers %s have a dense MLP: only every layer sparse is implemented"
                               % [i for i, b in enumerate(blocks) if not hasattr(b, "experts")])
        width = c.intermediate_size if family == "mixtral" else c.moe_intermediate_size
        hp["intermediate_size"] = width
        router, experts = blocks[0].gate, blocks[0].experts
        # Mixtral's num_local_experts; Qwen3-MoE's num_experts (transformers' attribute_map reads
        # it as num_local_experts), Qwen2-MoE's num_experts (no mapping)
        n_experts = c.num_local_experts if family == "mixtral" else c.num_experts
        if any((b.gate.num_experts, b.gate.top_k, b.experts.num_experts,
                b.experts.intermediate_dim) != (n_experts, c.num_experts_per_tok, n_experts, width)
               for b in blocks):
            raise RuntimeError("the sparse MoE blocks disagree with the config's experts")
        # MixtralTopKRouter always renormalises (no attribute); Qwen3MoeTopKRouter and
        # Qwen2MoeTopKRouter as their norm_topk_prob says (the config's, default false)
        norm = bool(getattr(router, "norm_topk_prob", True))
        if family != "mixtral" and norm != bool(c.norm_topk_prob):
            raise RuntimeError("router norm_topk_prob %s, config %s" % (norm, c.norm_topk_prob))
        hp.update(num_experts=int(router.num_experts), num_experts_per_tok=int(router.top_k),
                  norm_topk_prob=norm)
        if experts.gate_up_proj.shape[1] != 2 * hp["intermediate_size"]:
            raise RuntimeError("experts' gate_up_proj %s" % (tuple(experts.gate_up_proj.shape),))
    if family in SHARED_EXPERT_FAMILIES:
        # Qwen2MoeSparseMoeBlock's shared expert (a Qwen2MoeMLP of width S: gate_proj, up_proj
        # [S, H], down_proj [H, S], no biases) and its gate (a Linear [1, H], no bias), every
        # layer's the config's shared_expert_intermediate_size wide
        S = int(blocks[0].shared_expert.gate_proj.out_features)
        for b in blocks:
            se, g = b.shared_expert, b.shared_expert_gate
            shapes = (tuple(se.gate_proj.weight.shape), tuple(se.up_proj.weight.shape),
                      tuple(se.down_proj.weight.shape), tuple(g.weight.shape))
            if shapes != ((S, c.hidden_size), (S, c.hidden_size), (c.hidden_size, S),
                          (1, c.hidden_size)) or any(
                    m.bias is not None for m in (se.gate_proj, se.up_proj, se.down_proj, g)):
                raise RuntimeError("shared expert and gate %s (biases %s), want width %d"
                                   % (shapes, [m.bias is not None for m in (se.gate_proj,
                                                                            se.up_proj,
                                                                            se.down_proj, g)], S))
        if S != c.shared_expert_intermediate_size:
            raise RuntimeError("shared expert of width %d, config shared_expert_intermediate_size "
                               "%d" % (S, c.shared_expert_intermediate_size))
        hp["shared_expert_intermediate_size"] = S
    for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "intermediate_size", "vocab_size", "max_positions"):
        hp[k] = int(hp[k])
    assert list(hp) == hparam_keys(family), list(hp)
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
        with torch.no_grad(), rec.rope_capture(modeling_module(model.config.model_type)):
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
