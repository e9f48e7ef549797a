#!/usr/bin/env python3
"""touchstone's Liger-Kernel external adapter: Liger's Triton kernels (RMSNorm, fused add +
RMSNorm, LayerNorm, RoPE, SwiGLU, GeGLU, softmax) on CUDA, over the protocol of docs/external-backends.md. It needs a GPU, torch,
triton and the liger_kernel package (a small wheel with no other dependency).

Each op maps a golden case onto Liger's own entry point as a model patched by Liger calls it:
RMSNorm in its "llama" casting mode (transformers' LlamaRMSNorm: the inverse rms in fp32, the
normalised row rounded to the storage type, then times the weight), RoPE with transformers' cos
and sin (computed in fp32 from the case's frequencies and attention factor, then cast to the
storage type, as LlamaRotaryEmbedding returns them). TOUCHSTONE_LIGER_RMSNORM_MODE picks another
casting mode (gemma: everything in fp32, one rounding), TOUCHSTONE_LIGER_ROPE_TABLES=f32 keeps the
cos and sin tables in fp32. Cases Liger has no form for are unsupported, saying why (GeGLU's
exact GELU, an fp32 RMSNorm weight, LongRoPE's position switch).
"""

import importlib.metadata
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from protocol import Unsupported, serve  # noqa: E402
from torchio import TorchIO  # noqa: E402

from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # noqa: E402
from liger_kernel.ops.geglu import LigerGELUMulFunction  # noqa: E402
from liger_kernel.ops.layer_norm import LigerLayerNormFunction  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.rope import LigerRopeFunction  # noqa: E402
from liger_kernel.ops.softmax import LigerSoftmaxFunction  # noqa: E402
from liger_kernel.ops.swiglu import LigerSiLUMulFunction  # noqa: E402

DEVICE = "cuda"
RMSNORM_MODE = os.environ.get("TOUCHSTONE_LIGER_RMSNORM_MODE", "llama")
ROPE_TABLES = os.environ.get("TOUCHSTONE_LIGER_ROPE_TABLES", "storage")
IO = TorchIO(DEVICE)
get, put = IO.get, IO.put


def rmsnorm(p, i, o):
    x, w = get(i["x"]), get(i["weight"])
    if w.dtype != x.dtype:
        raise Unsupported("an fp32 weight (Gemma's 1 + w): Liger takes the checkpoint's w and an offset instead")
    put(o["out"], LigerRMSNormFunction.apply(x, w, p["eps"], 0.0, RMSNORM_MODE, False))


def rmsnorm_residual(p, i, o):
    """LigerFusedAddRMSNormFunction: the sum x + residual and its RMSNorm in one kernel, in the
    casting mode of rmsnorm."""
    x, r, w = get(i["x"]), get(i["residual"]), get(i["weight"])
    if w.dtype != x.dtype:
        raise Unsupported("an fp32 weight (Gemma's 1 + w): Liger takes the checkpoint's w and an offset instead")
    y, s = LigerFusedAddRMSNormFunction.apply(x, r, w, p["eps"], 0.0, RMSNORM_MODE, False)
    put(o["sum"], s)
    put(o["out"], y)


def softmax(p, i, o):
    """Liger's softmax over the logits upcast to fp32, as an engine samples from them: its kernel
    writes the input's dtype, and the op's output is fp32 (a 16-bit output fails by up to 2.9e4x nmse). Rows wider than one Triton block
    (65536: a vocabulary such as Qwen's 151936) are Liger's refusal, unsupported here."""
    x = get(i["x"])
    if x.shape[-1] > 65536:
        raise Unsupported("softmax over %d columns: Liger's kernel refuses rows wider than its 65536-wide Triton block"
                          % x.shape[-1])
    put(o["out"], LigerSoftmaxFunction.apply(x.float()))  # the upcast is part of the op: timed


def layernorm(p, i, o):
    put(o["out"], LigerLayerNormFunction.apply(get(i["x"]), get(i["gamma"]), get(i["beta"]), p["eps"]))


def swiglu(p, i, o):
    put(o["out"], LigerSiLUMulFunction.apply(get(i["gate"]), get(i["up"])))


def geglu(p, i, o):
    if p["gelu"] != "tanh":
        raise Unsupported("GeGLU with the exact GELU: Liger's GeGLU is the tanh form only")
    put(o["out"], LigerGELUMulFunction.apply(get(i["gate"]), get(i["up"])))


def rope(p, i, o):
    """transformers' cos and sin for the case's positions (inv_freq in fp32, divided by the case's
    divisors, times attention_factor, cast to the storage type), then Liger's RoPE kernel."""
    if "long_divisor" in i:
        raise Unsupported("LongRoPE's switch at long_from: transformers builds one cos/sin table a call")
    q, k = get(i["q"]), get(i["k"])
    cos, sin = IO.memo(("rope-tables", i["positions"]["path"]), lambda: tables(p, i, q.dtype))
    # Liger's logical layout is transformers': [batch, heads, seq, head_dim], the tokens as one sequence
    q4, k4 = q.transpose(0, 1)[None], k.transpose(0, 1)[None]
    qo, ko = LigerRopeFunction.apply(q4, k4, cos[None], sin[None], None, 1)
    put(o["q_out"], qo[0].transpose(0, 1))
    put(o["k_out"], ko[0].transpose(0, 1))


def tables(p, i, dtype):
    """The cos and sin of the case's positions, as a model computes them once for all layers."""
    r = p["rope_dim"]
    pos = get(i["positions"]).float()
    inv = 1.0 / (p["freq_base"] ** (torch.arange(0, r, 2, device=DEVICE, dtype=torch.float32) / r))
    if "freq_divisor" in i:
        inv = inv / get(i["freq_divisor"]).float()
    freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    a = p.get("attention_factor", 1.0)
    cos, sin = emb.cos() * a, emb.sin() * a
    if ROPE_TABLES == "storage":
        cos, sin = cos.to(dtype), sin.to(dtype)
    return cos, sin


OPS = {f.__name__: f for f in (rmsnorm, rmsnorm_residual, layernorm, swiglu, geglu, rope, softmax)}


if __name__ == "__main__":
    version = importlib.metadata.version("liger-kernel")
    serve("liger-kernel", "%s-torch-%s" % (version, torch.__version__), OPS, ["f16", "bf16"], IO.runner(OPS),
          timer=IO)
