"""The calibration (calibration.json): the error an fp16 (bf16) implementation of the same forward
makes at every tap, from which the Go side derives each tap's limits (see below)."""

import decimal
import json
import math
from contextlib import contextmanager

import torch

from common.configs import GEMMA_FAMILIES, MOE_FAMILIES, QK_NORM_FAMILIES, \
    SHARED_EXPERT_FAMILIES, dims
from common.dtypes import BF16, F16, F64, TORCH_DTYPE
from models.reference import CHUNK, modeling_module
from models.taps import TapCapture
from models.threads import intra_op_threads

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
# A mixture of experts (Mixtral, Qwen3-MoE, Qwen2-MoE) is rounded where the engine's ops store
# values: the router's gate linear output (router_logits, which the engine's moe_router reads in
# fp16), from which the experts are chosen again (the router's own softmax, top k and, where it
# renormalises, renormalisation on the rounded logits, in fp32 like moe_router's), and inside
# moe_ffn each expert's gate and up (rounded apart), its activation and its down product, then
# the weighted sum of a token's experts in fp32 with one rounding (the block's output, ffn_out).
# transformers' expert loop has no module inside an expert to hook, so for this forward the
# experts' forward is transformers' own loop (MixtralExperts.forward; Qwen3MoeExperts.forward and
# Qwen2MoeExperts.forward are the same code) with those roundings put in; the selftest runs it
# with an identity rounding against the reference's taps.
#
# Qwen2-MoE's block adds a gated shared expert to the routed sum, and the engine stores its parts
# apart: the routed experts' weighted sum rounded once (moe_out, moe_ffn's output, the loop above
# rounding its experts' output here instead of the block's), the shared expert as a dense Qwen2
# MLP (its gate and up, its activation and its output, shared_out, each rounded), and then the
# block's output (ffn_out) in one rounding of moe_out + sigmoid(x . shared_expert_gate) *
# shared_out computed in fp32 from those rounded values and the rounded ffn_norm x (the engine's
# moe_shared_add: the gate's dot product, the sigmoid, the product and the sum all in fp32).
# transformers' own fp16 forward rounds the gate's logit, the sigmoid, the product and the sum
# each to fp16; the calibration follows the engine, and the selftest's fp16 run shows that the
# tolerance covers transformers' roundings too.
#
# Gemma 3 stores what the other families do plus its norms after attention and after the MLP
# (each rounded, and the residual add after it, as below for o_proj), and its embedding is the
# 16-bit row times sqrt(H) rounded to the storage type, one rounding of the product (the layer
# input's).
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
# A model whose activations are quantised to FP8 at every linear (models/quantize.py) is
# discontinuous: the rounding any 16-bit implementation makes moves some inputs across an e4m3
# midpoint (3 significand bits: one code is 6-12% of a value), and those flips compound with
# depth. Measured on llama3-tiny-fp8-bf16 and -fp8dyn-bf16 (2026-11-27, CPU): nmse 3e-6 at layer
# 0's q/k/v, up to 0.016 at layer 1's ffn_out (the SwiGLU activation's heavy tail puts most of a
# 128-group in e4m3's coarse low range). The guard for those sets sits 3x above that.
CALIBRATION_MAX_NMSE_FP8 = 5e-2
# ... and such a set's calibration.json says so: its implementation name gains this suffix (the
# engine allows CALIBRATION_MAX_NMSE_FP8 only then).
CALIBRATION_FP8_SUFFIX = "-fp8-activations"


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

    def __init__(self, model, family, d, rounding=None, dtype="f16", routes=None):
        super().__init__(model, family, d)
        # The reference's taps, whose router_logits choose the experts (_route); None: the
        # rounded logits choose them.
        self.routes = routes
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

    def _round_in(self, module, name, tokens=False):
        """Round the module's (first, positional) input and record it (tokens: an input that
        flattens the batch, [B*T, ...]; batch 1)."""
        def hook(_m, args):
            if not self.mine():  # another lockstep thread's pass
                return None
            x = self.round(args[0])
            self.put(name, x[None] if tokens else x)
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

    def _post_norm_residual(self, norm, p):
        """Gemma's norm after attention: its rounded output is attn_post_norm; return
        fp16(x + attn_post_norm) - x so that the layer's residual add yields resid_attn
        rounded (as _attn_residual does for the other families' o_proj)."""
        def hook(_m, _args, out):
            if not self.mine():  # another lockstep thread's pass
                return None
            a = self.round(out)
            self.s = self.round(self.x + a)
            self.put(p + "attn_post_norm", a)
            self.put(p + "resid_attn", self.s)
            return self.s - self.x
        self.handles.append(norm.register_forward_hook(hook))

    def _head_major(self, name, heads, x):
        """Gemma's q_norm / k_norm output [B, heads, T, D], recorded [B, T, heads, D]."""
        self.put(name, x.transpose(1, 2))

    def _install_gemma(self):
        """Gemma 3 and 2: every norm (the four of a layer, Gemma 3's q_norm and k_norm, the final
        one), every linear, RoPE, the attention output and the GeGLU activation rounded where the
        engine stores them; the residual adds after the post-norms."""
        d, base, put = self.d, self.model.model, self.put
        for i, layer in enumerate(base.layers):
            p = "layers.%d." % i
            att, mlp = layer.self_attn, layer.mlp
            self._enter(layer, i)
            self._round_out(layer.input_layernorm, lambda r, p=p: put(p + "attn_norm", r))
            self._round_out(att.q_proj, lambda r, p=p: self._heads(p + "q", d.nH, r))
            self._round_out(att.k_proj, lambda r, p=p: self._heads(p + "k", d.nKV, r))
            self._round_out(att.v_proj, lambda r, p=p: self._heads(p + "v", d.nKV, r))
            if self.family == "gemma3":  # Gemma 2 has no q_norm / k_norm
                self._round_out(att.q_norm, lambda r, p=p: self._head_major(p + "q_norm", d.nH, r))
                self._round_out(att.k_norm, lambda r, p=p: self._head_major(p + "k_norm", d.nKV, r))
            self._round_in(att.o_proj, p + "attn")
            self._round_out(att.o_proj, lambda r, p=p: put(p + "attn_out", r))
            self._post_norm_residual(layer.post_attention_layernorm, p)
            self._pin_in(layer.pre_feedforward_layernorm)
            self._round_out(layer.pre_feedforward_layernorm, lambda r, p=p: put(p + "ffn_norm", r))
            self._round_out(mlp.gate_proj, lambda r, p=p: put(p + "ffn_gate", r))
            self._round_out(mlp.up_proj, lambda r, p=p: put(p + "ffn_up", r))
            self._round_in(mlp.down_proj, p + "ffn_act")
            self._round_out(mlp, lambda r, p=p: put(p + "ffn_out", r))
            self._round_out(layer.post_feedforward_layernorm, self._set_m(p + "ffn_post_norm"))
            self._layer_out(layer, p)
        self._round_out(base.norm, lambda r: put("final_norm", r))

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

    def _route(self, router, p):
        """The router's logits rounded (router_logits), and its choice made again from them:
        MixtralTopKRouter.forward's (Qwen3MoeTopKRouter.forward's, Qwen2MoeTopKRouter.forward's)
        softmax, top k and renormalisation on the rounded values, the renormalisation only where
        the router does it (Mixtral's always; Qwen3-MoE's and Qwen2-MoE's with norm_topk_prob).
        Their cast of the weights to the logits' dtype is fp32 to fp32 here: nothing."""
        renormalise = bool(getattr(router, "norm_topk_prob", True))

        def hook(_m, _args, out):
            if not self.mine():  # another lockstep thread's pass
                return None
            logits = self.round(out[0])
            self.put(p + "router_logits", logits[None])  # [B*T, E], batch 1
            probs = torch.nn.functional.softmax(logits.float(), dim=-1)
            if self.routes is not None:
                # The reference's experts (the top k of its logits, which its router chose:
                # taps.py's _check_choice), weighted by this forward's own probabilities: at a
                # decisive row the same experts these logits choose, at one inside the routing
                # margin what the engine does there (engine/model/routes.go), where a choice of
                # its own could take another expert and calibrate a whole expert's difference.
                ref = self.routes[self.prefix + "." + p + "router_logits"].double()
                indices = torch.sort(ref, dim=-1, descending=True, stable=True).indices[:, :router.top_k]
                top_value = probs.gather(-1, indices)
            else:
                top_value, indices = torch.topk(probs, router.top_k, dim=-1)
            if renormalise:
                top_value /= top_value.sum(dim=-1, keepdim=True)
            return logits, top_value, indices
        self.handles.append(router.register_forward_hook(hook))

    def _experts(self, experts):
        """The experts' forward for this pass: transformers' eager loop (MixtralExperts.forward,
        the same code as Qwen3MoeExperts.forward and Qwen2MoeExperts.forward) with each expert's
        gate, up, activation and down product rounded (the weighted sum in fp32: the block's
        output is rounded as ffn_out; Qwen2-MoE's experts' output itself as moe_out). Other
        lockstep threads run the original."""
        original = experts.forward
        F = torch.nn.functional

        def forward(hidden_states, top_k_index, top_k_weights):
            if not self.mine():
                return original(hidden_states, top_k_index, top_k_weights)
            final_hidden_states = torch.zeros_like(hidden_states)
            with torch.no_grad():
                expert_mask = F.one_hot(top_k_index, num_classes=experts.num_experts)
                expert_mask = expert_mask.permute(2, 1, 0)
                expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
            for expert_idx in expert_hit:
                expert_idx = expert_idx[0]
                if expert_idx == experts.num_experts:
                    continue
                top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
                current_state = hidden_states[token_idx]
                gate, up = F.linear(current_state,
                                    experts.gate_up_proj[expert_idx]).chunk(2, dim=-1)
                gate, up = self.round(gate), self.round(up)
                current_hidden_states = self.round(experts.act_fn(gate) * up)
                current_hidden_states = self.round(
                    F.linear(current_hidden_states, experts.down_proj[expert_idx]))
                current_hidden_states = (current_hidden_states
                                         * top_k_weights[token_idx, top_k_pos, None])
                final_hidden_states.index_add_(0, token_idx,
                                               current_hidden_states.to(final_hidden_states.dtype))
            return final_hidden_states
        experts.forward = forward  # an instance attribute: Module.__call__ calls it
        self.patched.append(experts)

    def install(self):
        d, m = self.d, self.model
        put = self.put
        self.patched = []
        if self.family in GEMMA_FAMILIES:
            self._install_gemma()
        elif self.family in ("qwen2", "phi3", "llama", "qwen3") + MOE_FAMILIES:
            base = m.model
            for i, layer in enumerate(base.layers):
                p = "layers.%d." % i
                att, mlp = layer.self_attn, layer.mlp
                self._enter(layer, i)
                self._round_out(layer.input_layernorm, lambda r, p=p: put(p + "attn_norm", r))
                if self.family != "phi3":
                    self._round_out(att.q_proj, lambda r, p=p: self._heads(p + "q", d.nH, r))
                    self._round_out(att.k_proj, lambda r, p=p: self._heads(p + "k", d.nKV, r))
                    self._round_out(att.v_proj, lambda r, p=p: self._heads(p + "v", d.nKV, r))
                    if self.family in QK_NORM_FAMILIES:  # the engine stores each normed head
                        self._round_out(att.q_norm, lambda r, p=p: self._heads(p + "q_norm", d.nH, r))
                        self._round_out(att.k_norm, lambda r, p=p: self._heads(p + "k_norm", d.nKV, r))
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
                if self.family in MOE_FAMILIES:
                    self._route(mlp.gate, p)
                    self._experts(mlp.experts)
                    if self.family in SHARED_EXPERT_FAMILIES:
                        # Qwen2MoeSparseMoeBlock on the flattened [B*T, H]: the routed sum
                        # rounded (moe_out), the shared expert a dense MLP rounded as the others
                        # (shared_out its output, ungated); the gate's logit and sigmoid, the
                        # product and the sum stay fp32 up to the block's one rounding below
                        se = mlp.shared_expert
                        tok = lambda name: lambda r: put(name, r[None])  # noqa: E731
                        self._round_out(mlp.experts, tok(p + "moe_out"))
                        self._round_out(se.gate_proj, tok(p + "ffn_gate"))
                        self._round_out(se.up_proj, tok(p + "ffn_up"))
                        self._round_in(se.down_proj, p + "ffn_act", tokens=True)
                        self._round_out(se, tok(p + "shared_out"))
                    self._round_out(mlp, self._set_m(p + "ffn_out"))
                    self._layer_out(layer, p)
                    continue
                if self.family in ("qwen2", "llama", "qwen3"):
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
        if getattr(m.config, "final_logit_softcapping", None) is None:
            self.handles.append(m.lm_head.register_forward_hook(logits))
        else:  # Gemma 2: the model's output, soft-capped in fp32 as the engine's logit_softcap
            self.handles.append(m.register_forward_hook(
                lambda mod, args, out: logits(mod, args, out.logits)))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        for mod in getattr(self, "patched", []):
            del mod.forward
        self.patched = []

    @contextmanager
    def rope_rounding(self, modeling):
        """RoPE's outputs rounded (and recorded): the KV cache then holds fp16 (bf16) keys."""
        with self.rope_taps(modeling, self.round):
            yield


def run_rounded(model, family, cfg, prompt, tokens, decode_steps, rounding=None, pool=None,
                weights_stored=False, dtype="f16", routes=None):
    """The calibration forward: prefill and decode steps 0..decode_steps-1 teacher-forced on the
    reference's greedy tokens (as the engine's tap comparison runs), with its own KV cache, every
    stored value rounded to `dtype` ("f16" or "bf16", the set's). Rounds the model's parameters
    to that type in place first (on the pool's threads when given): call it after every reference
    run. weights_stored says every parameter already is a value of that type (a checkpoint of
    it, upcast exactly: check_loaded_weights), so the rounding, a no-op on them, is skipped (a
    pass over the 15 GB of Phi-3-mini's fp32 weights). `rounding` replaces round_f16 /
    round_bf16 (the selftest's identity run). routes, the reference's taps, makes a mixture of
    experts take the reference's experts at every row (Rounder._route). Returns {tap file stem:
    f32 tensor}."""
    d = dims(family, cfg)
    rnd = Rounder(model, family, d, rounding, dtype, routes)
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
    if family in GEMMA_FAMILIES:
        # transformers multiplies the embedding by embed_scale.to(weight dtype): sqrt(H) rounded
        # to fp16 (bf16) in a 16-bit model, as the engine does; fp32 in the reference's
        with torch.no_grad():
            es = model.model.embed_tokens.embed_scale
            es.copy_(rnd.round(es))
    rnd.install()
    try:
        with torch.no_grad(), rnd.rope_rounding(modeling_module(model.config.model_type)):
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


def calibration_bytes(ref_taps, cal_taps, pool=None, dtype="f16", fp8_activations=False):
    """calibration.json of a set of `dtype` ("f16" or "bf16": its "implementation",
    CALIBRATION_IMPLEMENTATIONS): one line per tap, in the manifest's tap order. tap_error's
    float64 sums depend on the thread count (ATen splits a sum into one value by it), so every
    record is computed on one thread: on this one, or in parallel on a pool from
    one_thread_workers. The bytes are the same either way."""
    names = list(ref_taps)
    max_nmse = CALIBRATION_MAX_NMSE_FP8 if fp8_activations else CALIBRATION_MAX_NMSE
    implementation = CALIBRATION_IMPLEMENTATIONS[dtype] + (
        CALIBRATION_FP8_SUFFIX if fp8_activations else "")
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
        if rec["nmse"] > max_nmse:
            raise RuntimeError("calibration of %s: nmse %.3g > %g: the %s forward does not "
                               "compute what the reference does" % (name, rec["nmse"],
                                                                     max_nmse, dtype))
        keys = CALIBRATION_KEYS + (CALIBRATION_LOGIT_KEYS if logits else [])
        fields = ", ".join('"%s": %s' % (k, sig3_up(rec[k])) for k in keys)
        lines.append('    {"tap": %s, %s}' % (json.dumps(name), fields))
    text = '{\n  "version": %d,\n  "implementation": %s,\n  "taps": [\n%s\n  ]\n}\n' % (
        CALIBRATION_VERSION, json.dumps(implementation), ",\n".join(lines))
    return text.encode("ascii")
