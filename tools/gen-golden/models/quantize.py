"""Quantized model sets (docs/quantization.md, "Quantized checkpoints"): a synthetic checkpoint's
linear layers stored in a format the hub publishes, and the reference forward of that checkpoint.

The set's dense checkpoint is drawn, peaked and loaded as for any set; then every projection of
every decoder layer (q, k, v, o, gate, up, down; the embedding and the LM head stay 16-bit, as the
published checkpoints keep them) is quantized from its stored 16-bit values into the format's
tensors, model.safetensors is rewritten with them in place of the 16-bit weights and config.json
gains the format's quantization_config. The reference forward is transformers' model with each
of those nn.Linear modules computing the format's arithmetic on the dequantised weight:

  fp8-block    transformers' fine-grained FP8 (quant_method "fp8", weight_block_size [128, 128]):
               weight f8e4m3 [N, K] and weight_scale_inv f32 [ceil(N/128), K/128], from
               quant_weight_blocks (scale amax / 448 per 128x128 block, DeepSeek-V3's weight
               quantiser). The input is quantised per token in 1x128 groups by quant_fp8's spec
               (quant_groups) and the product is F.linear of the dequantised operands in fp32:
               what FP8Linear's kernels compute, with the fp32 accumulation exact here.
  fp8-channel  compressed-tensors FP8-dynamic (format "float-quantized"): weight f8e4m3 [N, K],
               weight_scale [N, 1] in the storage dtype, quantised as compressed-tensors does
               (scale = amax / 448 and w / scale both in the storage dtype); the input per token.
  awq          AutoAWQ's GEMM packing, 4 bits with zero points in groups of `group` inputs
               (common/int4.py); the input as it is, the weight dequantised and rounded once to
               the storage dtype (int4.dequant).
  gptq         the GPTQ packing, symmetric, act-order (desc_act): g_idx from a seeded
               permutation of the inputs; otherwise as awq.

transformers 5.17 runs none of these formats on a CPU without packages the GPU host lacks (its
FP8 kernels come from the hub; AWQ and GPTQ need gptqmodel), so the forward is this torch
reference of the dequantised arithmetic. Each format's tensors are cross-checked against the
library that defines it, on the same tensors, where that library is importable: transformers'
own FP8 dequantiser (Fp8Dequantize) for fp8-block, compressed-tensors' quantiser and
dequantiser for fp8-channel (the codes and scales byte for byte). The set's params.quantization
records which check ran."""

import hashlib
import json
import os

import torch
import torch.nn.functional as F

from common import int4
from common.dtypes import E4M3_MAX, F32, F64, F8E4M3, I32, TORCH_DTYPE, to_e4m3
from common.seeds import Draw, case_seed
from common.fp8 import FP8_BLOCK, quant_groups, quant_weight_blocks
from common.quantconfig import MARKER, quant_format

FORMATS = ("fp8-block", "fp8-channel", "awq", "gptq")
# The decoder layers' projections, as transformers' Llama and Qwen2 name them.
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
REFERENCE = "torch-dequantised"


def quantization_config(fmt, group):
    """config.json's quantization_config of a format, as the hub's checkpoints write it."""
    if fmt == "fp8-block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    if fmt == "fp8-channel":
        def args(strategy, dynamic):
            return {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy,
                    "dynamic": dynamic, "group_size": None, "block_structure": None,
                    "actorder": None, "observer": None if dynamic else "minmax",
                    "observer_kwargs": {}}
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed", "ignore": ["lm_head"],
                "kv_cache_scheme": None, "global_compression_ratio": None,
                "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": None,
                                              "weights": args("channel", False),
                                              "input_activations": args("token", True)}}}
    if fmt == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemm",
                "zero_point": True}
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": True,
                "sym": True, "checkpoint_format": "gptq", "static_groups": False,
                "true_sequential": True, "damp_percent": 0.01}
    raise ValueError("quantization format %r: want one of %s" % (fmt, ", ".join(FORMATS)))


class FP8Linear(torch.nn.Linear):
    """The reference of an FP8 linear with dynamic activations: x rounded to the storage dtype
    (what an FP8 linear receives: transformers' FP8Linear a bf16 tensor, an engine the
    activation it stored), quantised per token in groups of `group` inputs (quant_groups:
    quant_fp8's spec), then F.linear of the dequantised x and the dequantised weight (float32).
    A subclass, so split_linears leaves it whole."""

    def __init__(self, weight, group, storage, bias=None):
        super().__init__(weight.shape[1], weight.shape[0], bias=bias is not None)
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            self.bias = torch.nn.Parameter(bias, requires_grad=False)
        self.group = group
        self.storage = storage

    def input_transform(self, x):
        """x as the GEMM reads it: rounded to the storage dtype, quantised, dequantised (f32).
        models/threads.py's split_linears splits the GEMM after it."""
        K, G = self.in_features, self.group
        rows = x.reshape(-1, K).to(self.storage).to(F32)
        q, s = quant_groups(rows, G)
        xdq = (q.to(F32).view(-1, K // G, G) * s.unsqueeze(-1)).view(-1, K)
        return xdq.to(x.dtype).view(x.shape)

    def forward(self, x):
        return F.linear(self.input_transform(x), self.weight, self.bias)


def _fp8_block(name, W, dtype, group, bias=None):
    """fine-grained FP8 tensors of W [N, K] (the stored 16-bit values)."""
    q, s = quant_weight_blocks(W.to(F32), FP8_BLOCK, FP8_BLOCK)
    N, K = W.shape
    wdq = q.to(F32) * s.repeat_interleave(FP8_BLOCK, 0)[:N].repeat_interleave(FP8_BLOCK, 1)
    return {".weight": q, ".weight_scale_inv": s}, FP8Linear(wdq, FP8_BLOCK, W.dtype, bias)


def _fp8_channel(name, W, dtype, group, bias=None):
    """compressed-tensors FP8-dynamic tensors of W [N, K], in the storage dtype as its
    quantiser computes them: scale = amax / 448 (0 replaced by the dtype's eps), q = e4m3 of the
    dtype-rounded w / scale."""
    t = W.dtype
    amax = W.abs().amax(1, keepdim=True)
    scale = amax / torch.tensor(E4M3_MAX, dtype=t)
    scale = torch.where(scale == 0, torch.tensor(torch.finfo(t).eps, dtype=t), scale)
    q = to_e4m3((W / scale).to(F32))
    wdq = q.to(F32) * scale.to(F32)
    return {".weight": q, ".weight_scale": scale}, FP8Linear(wdq, W.shape[1], W.dtype, bias)


def _int4_linear(wdq_t, bias=None):
    """A plain nn.Linear holding the dequantised weight (W^T [K, N] given, in the storage dtype)
    and the projection's bias, if it has one."""
    K, N = wdq_t.shape
    mod = torch.nn.Linear(K, N, bias=bias is not None)
    mod.weight = torch.nn.Parameter(wdq_t.T.to(F32).contiguous(), requires_grad=False)
    if bias is not None:
        mod.bias = torch.nn.Parameter(bias, requires_grad=False)
    return mod


def _awq(name, W, dtype, group, bias=None):
    N, K = W.shape
    groups = torch.arange(K) // group
    q, z, s = int4_codes(W, groups, K // group, sym=False, zmin=0)
    scales = s.to(W.dtype)
    qweight, qzeros = int4.pack_awq(q), int4.pack_awq(z)
    wdq = int4.awq_dequant(qweight, qzeros, scales, group, W.dtype)
    return {".qweight": qweight, ".qzeros": qzeros, ".scales": scales}, _int4_linear(wdq, bias)


def _gptq(name, W, dtype, group, bias=None):
    N, K = W.shape
    order = Draw(case_seed("gptq-act-order", name)).randn((K,)).argsort()
    groups = torch.empty(K, dtype=torch.int64)
    groups[order] = torch.arange(K) // group  # the order GPTQ quantised the inputs in
    q, z, s = int4_codes(W, groups, K // group, sym=True, zmin=1)
    scales = s.to(W.dtype)
    g_idx = groups.to(I32)
    qweight, qzeros = int4.pack_gptq_weight(q), int4.pack_gptq_zeros(z)
    wdq = int4.gptq_dequant(qweight, qzeros, scales, g_idx, W.dtype)
    return ({".qweight": qweight, ".qzeros": qzeros, ".scales": scales, ".g_idx": g_idx},
            _int4_linear(wdq, bias))


def int4_codes(W, groups, ng, sym, zmin):
    """int4.quant_int4 of W^T (float64): AWQ's and GPTQ's quantisers."""
    return int4.quant_int4(W.T.to(F64), groups, ng, sym, zmin=zmin)


QUANTISERS = {"fp8-block": _fp8_block, "fp8-channel": _fp8_channel, "awq": _awq, "gptq": _gptq}


def cross_check(fmt, stored, W, mod):
    """The library that defines the format, on the same tensors: its dequantisation equals the
    reference module's weight (and for fp8-channel its quantiser gives the same bytes). Returns
    the check's name, or None when the library is not importable here."""
    if fmt == "fp8-block":
        from transformers.integrations.finegrained_fp8 import Fp8Dequantize
        q, s = stored[".weight"], stored[".weight_scale_inv"]
        N = q.shape[0]
        if N % s.shape[0] or (N // s.shape[0] != FP8_BLOCK and s.shape[0] != 1):
            return None  # Fp8Dequantize derives the block from the grid: partial blocks misread
        theirs = Fp8Dequantize(None)._dequantize_one(q, s, output_dtype=F32)
        if not torch.equal(theirs, mod.weight.data):
            raise RuntimeError("fp8-block: transformers' Fp8Dequantize differs from the reference")
        return "transformers Fp8Dequantize"
    if fmt == "fp8-channel":
        try:
            from compressed_tensors.quantization import QuantizationArgs
            from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
            from compressed_tensors.quantization.utils import calculate_qparams
        except ImportError:
            return None
        args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel",
                                dynamic=False)
        scale, zp = calculate_qparams(W.amin(1, keepdim=True), W.amax(1, keepdim=True), args)
        q = quantize(W, scale, zp, args, dtype=F8E4M3)
        if not (torch.equal(scale, stored[".weight_scale"]) and
                torch.equal(q.view(torch.uint8), stored[".weight"].view(torch.uint8))):
            raise RuntimeError("fp8-channel: compressed-tensors quantises differently")
        theirs = dequantize(stored[".weight"], stored[".weight_scale"].to(F32), args=args,
                            dtype=F32)
        if not torch.equal(theirs, mod.weight.data):
            raise RuntimeError("fp8-channel: compressed-tensors dequantises differently")
        return "compressed-tensors quantize and dequantize"
    return None  # gptqmodel and autoawq do not install without CUDA builds


def quantize_checkpoint(model, set_dir, fmt, group, write=True):
    """Rewrite set_dir's model.safetensors and config.json in format fmt and replace the model's
    projections by their reference modules. Returns (checkpoint [(name, file, sha256)],
    params.quantization). write False only replaces the modules (models/peak.py peaks the
    quantized model's output rows: the margins the set records are the quantized forward's)."""
    def projections():
        for i, layer in enumerate(model.model.layers):
            for sub in LINEARS:
                parent, attr = sub.split(".")
                old = getattr(getattr(layer, parent), attr)
                # a bias (Qwen2's q/k/v) stays a 16-bit tensor beside the format's, added after
                bias = None if old.bias is None else old.bias.detach().clone()

                def replace(mod, owner=getattr(layer, parent), attr=attr):
                    setattr(owner, attr, mod)
                yield "model.layers.%d.%s" % (i, sub), bias, replace
    return _rewrite(set_dir, fmt, group, projections(), write)


def quantize_stored(set_dir, layers, fmt, group):
    """set_dir's checkpoint (a model of `layers` decoder layers) rewritten in format fmt with no
    model loaded: the tensors quantize_checkpoint stores, for `gen-golden checkpoint`'s timing
    checkpoints (no references, so no peaked rows)."""
    projections = (("model.layers.%d.%s" % (i, sub), None, None)
                   for i in range(layers) for sub in LINEARS)
    return _rewrite(set_dir, fmt, group, projections, True)


def _rewrite(set_dir, fmt, group, projections, write):
    """quantize_checkpoint's work over (name, bias, replace) of each projection: its 16-bit
    weight quantised into fmt's tensors, its reference module handed to replace (when given)."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    path = os.path.join(set_dir, "model.safetensors")
    with safe_open(path, framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    checks = set()
    for name, bias, replace in projections:
        W = tensors.pop(name + ".weight")
        stored, mod = QUANTISERS[fmt](name, W, None, group, bias)
        if write:
            check = cross_check(fmt, stored, W, mod)
            checks.add(check or "none (the library is not importable here)")
        tensors.update({name + k: v.contiguous() for k, v in stored.items()})
        if replace is not None:
            replace(mod)
    if not write:
        return None, None
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_path = os.path.join(set_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = quantization_config(fmt, group)
    data = (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("ascii")
    with open(cfg_path, "wb") as f:
        f.write(data)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    ckpt = [("config", "config.json", hashlib.sha256(data).hexdigest()),
            ("model", "model.safetensors", digest)]
    params = {"format": fmt, "group_size": group if fmt in ("awq", "gptq") else None,
              "reference": REFERENCE, "cross_check": sorted(checks)}
    return ckpt, params


# ---------------------------------------------------------------------------------------------
# Loading a quantized checkpoint: the reference forward from the stored tensors


def format_of(qc):
    """common.quantconfig.quant_format, a SystemExit for a format that is not implemented."""
    try:
        return quant_format(qc)
    except ValueError as e:
        raise SystemExit(str(e))


def stored_module(fmt, group, t, storage, K):
    """The reference module of one projection from its stored tensors t (suffix -> tensor; a
    ".bias" upcast exactly)."""
    bias = t[".bias"].to(F32) if ".bias" in t else None
    if fmt == "fp8-block":
        q, s = t[".weight"], t[".weight_scale_inv"].to(F32)
        N = q.shape[0]
        wdq = q.to(F32) * s.repeat_interleave(FP8_BLOCK, 0)[:N].repeat_interleave(FP8_BLOCK, 1)
        return FP8Linear(wdq, FP8_BLOCK, storage, bias)
    if fmt == "fp8-channel":
        return FP8Linear(t[".weight"].to(F32) * t[".weight_scale"].to(F32), K, storage, bias)
    G = K if group == -1 else group
    if fmt == "awq":
        return _int4_linear(int4.awq_dequant(t[".qweight"], t[".qzeros"], t[".scales"].to(storage),
                                             G, storage), bias)
    return _int4_linear(int4.gptq_dequant(t[".qweight"], t[".qzeros"], t[".scales"].to(storage),
                                          t[".g_idx"], storage), bias)


QUANT_SUFFIXES = (".weight", ".weight_scale_inv", ".weight_scale", ".qweight", ".qzeros",
                  ".scales", ".g_idx")


def load_quantized(set_dir, family, storage):
    """transformers' model of set_dir's config (eager attention, fp32), its 16-bit tensors from
    the checkpoint upcast exactly and every projection stored in the config's format replaced by
    its reference module, built from the stored tensors (stored_module): the reference forward
    of a quantized checkpoint. storage: the 16-bit dtype its activations are stored in. Returns
    (model, names of the checkpoint's tensors the reference modules consumed)."""
    import transformers
    from safetensors import safe_open
    cfg = transformers.AutoConfig.from_pretrained(set_dir, local_files_only=True)
    fmt, group = format_of(cfg.quantization_config if isinstance(cfg.quantization_config, dict)
                           else cfg.quantization_config.to_dict())
    del cfg.quantization_config
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=F32,
                                                          attn_implementation="eager")
    model.eval()
    tensors = {}
    for fname in sorted(os.listdir(set_dir)):
        if fname.endswith(".safetensors"):
            with safe_open(os.path.join(set_dir, fname), framework="pt") as f:
                tensors.update({k: f.get_tensor(k) for k in f.keys()})
    consumed, projections = set(), set()
    for i, layer in enumerate(model.model.layers):
        for sub in LINEARS:
            name = "model.layers.%d.%s" % (i, sub)
            if name + MARKER[fmt] not in tensors:
                continue  # kept 16-bit (modules_to_not_convert, ignore)
            parent, attr = sub.split(".")
            old = getattr(getattr(layer, parent), attr)
            t = {s: tensors[name + s] for s in QUANT_SUFFIXES + (".bias",) if name + s in tensors}
            consumed.update(name + s for s in t)
            projections.update(name + s for s in (".weight", ".bias"))
            setattr(getattr(layer, parent), attr,
                    stored_module(fmt, group, t, storage, old.in_features))
    for name in tensors:
        if name.endswith(MARKER[fmt]) and name not in consumed:
            raise SystemExit("%s: stored in %s, but not a decoder projection: a quantized %s is "
                             "not implemented" % (name, fmt, name[:-len(MARKER[fmt])]))
    state = {k: v.to(F32) for k, v in tensors.items() if k not in consumed}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    missing = set(missing) - projections - tied
    if unexpected or missing:
        raise SystemExit("%s: tensors the model does not hold %s; missing from the checkpoint %s"
                         % (set_dir, sorted(unexpected)[:5], sorted(missing)[:5]))
    if model.config.tie_word_embeddings:
        model.tie_weights()
    # what check_loaded_weights skips, and params.quantization of a set built from it
    model.quantized_tensors, model.quantized_projections = consumed, projections
    model.quantization = {"format": fmt, "group_size": group if fmt in ("awq", "gptq") else None,
                          "reference": REFERENCE,
                          "cross_check": ["none (a checkpoint's stored tensors, read as written)"]}
    return model, consumed


def stored_quantization(model):
    """params.quantization of a model load_quantized built from a quantized checkpoint; None for
    any other model."""
    return getattr(model, "quantization", None)


# A projection's output tap from its input tap, per projection.
TAP_OF = {"self_attn.q_proj": ("attn_norm", "q"), "self_attn.k_proj": ("attn_norm", "k"),
          "self_attn.v_proj": ("attn_norm", "v"), "self_attn.o_proj": ("attn", "attn_out"),
          "mlp.gate_proj": ("ffn_norm", "ffn_gate"), "mlp.up_proj": ("ffn_norm", "ffn_up"),
          "mlp.down_proj": ("ffn_act", "ffn_out")}


def check_reference(set_dir, family, storage, taps):
    """The reference's projections, recomputed from the checkpoint as written (load_quantized)
    on their stored prefill input taps, give their stored output taps exactly, in the first and
    the last layer: the set's file decodes to the arithmetic its taps came from (whatever ran the
    reference: one thread, or split over a pool)."""
    model, _ = load_quantized(set_dir, family, storage)
    layers = model.model.layers
    with torch.no_grad():
        for i in sorted({0, len(layers) - 1}):
            for sub, (tin, tout) in TAP_OF.items():
                x = taps["prefill.layers.%d.%s" % (i, tin)]
                want = taps["prefill.layers.%d.%s" % (i, tout)]
                got = layers[i].get_submodule(sub)(x.reshape(x.shape[0], -1))
                if not torch.equal(got, want.reshape(got.shape)):
                    raise RuntimeError("layer %d %s: the quantized checkpoint's projection does not "
                                       "give the reference's %s tap" % (i, sub, tout))
