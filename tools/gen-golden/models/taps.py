"""Taps: their names and shapes, and the capture that the reference (Recorder) and the calibration
(calibration.Rounder) share: module hooks, and transformers' own RoPE results through a per-thread
wrapper of apply_rotary_pos_emb."""

import threading
from contextlib import contextmanager

import torch

from common.configs import GEMMA_FAMILIES, MOE_FAMILIES, QK_NORM_FAMILIES, \
    SHARED_EXPERT_FAMILIES
from common.dtypes import F32

# ---------------------------------------------------------------------------------------------
# Taps

# The MLP's taps run in the engine's order: the router, the routed experts (moe_out), then a
# shared expert's gate, up, activation and output (shared_out), then the block's output.
LAYER_TAPS = ["attn_norm", "q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope", "attn",
              "attn_out", "attn_post_norm", "resid_attn", "ffn_norm", "router_logits", "moe_out",
              "ffn_gate", "ffn_up", "ffn_act", "shared_out", "ffn_out", "ffn_post_norm",
              "resid_ffn"]
QK_NORM = {"q_norm", "k_norm"}  # Qwen3's per-head RMSNorm of q and k before RoPE
ROUTER = {"router_logits"}  # a mixture of experts' router: its gate linear's output [T, E]
DENSE_MLP = {"ffn_gate", "ffn_up", "ffn_act"}  # inside the experts of a mixture of experts
# Gemma's norms after attention (post_attention_layernorm) and after the MLP
# (post_feedforward_layernorm), each on its block's output before the residual add
POST_NORM = {"attn_post_norm", "ffn_post_norm"}
# A sparse block with a shared expert (Qwen2-MoE): the routed experts' weighted sum (mlp.experts'
# output, [T, H]) and the shared expert's output before its sigmoid gate (mlp.shared_expert's,
# [T, H]); ffn_gate, ffn_up and ffn_act are then the shared expert's, [T, S]
SHARED = {"moe_out", "shared_out"}
ABSENT = {"qwen2": QK_NORM | ROUTER | POST_NORM | SHARED,
          "phi3": QK_NORM | ROUTER | POST_NORM | SHARED,
          "llama": QK_NORM | ROUTER | POST_NORM | SHARED, "qwen3": ROUTER | POST_NORM | SHARED,
          "gpt2": {"q_rope", "k_rope", "ffn_gate"} | QK_NORM | ROUTER | POST_NORM | SHARED,
          "mixtral": QK_NORM | DENSE_MLP | POST_NORM | SHARED,
          "qwen3_moe": DENSE_MLP | POST_NORM | SHARED, "qwen2_moe": QK_NORM | POST_NORM,
          "gemma3": ROUTER | SHARED, "gemma2": QK_NORM | ROUTER | SHARED}


def tap_names(family, n_layers):
    """Canonical tap names of one pass, in file order."""
    names = ["embed"]
    for i in range(n_layers):
        names += ["layers.%d.%s" % (i, t) for t in LAYER_TAPS if t not in ABSENT[family]]
    return names + ["final_norm", "logits"]


def tap_shape(name, d, T):
    tap = name.rsplit(".", 1)[-1]
    if tap in ("q", "q_norm", "q_rope"):
        return (T, d.nH, d.D)
    if tap in ("k", "v", "k_norm", "k_rope"):
        return (T, d.nKV, d.D)
    if tap == "attn":
        return (T, d.nH * d.D)
    if tap in ("ffn_gate", "ffn_up", "ffn_act"):
        return (T, d.S if d.S else d.I)  # Qwen2-MoE's: the shared expert's width
    if tap == "router_logits":
        return (T, d.E)
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

    def _in(self, module, name, tokens=False):
        """The module's input; tokens: one that flattens the batch ([B*T, ...]; batch 1)."""
        def hook(_m, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            self.put(name, x[None] if tokens else x)
        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def _heads(self, name, heads):
        def put(x):
            self.put(name, x.reshape(x.shape[0], x.shape[1], heads, self.d.D))
        return put

    def _check_choice(self, router, name):
        """The router chose exactly the top k of its logits by value, equal values the lower
        index first (as a set: the order within the k does not change the block): the engine
        reads the reference's choice off the router_logits tap where a correct engine's own could
        differ (engine/model/routes.go), so a choice its exp or topk made otherwise (an fp32 near
        tie) would be a set no engine can be held to: refused, as an indecisive synthetic set is."""
        def hook(_m, _args, out):
            if self.prefix is None or not self.mine():
                return
            logits, ids = out[0].detach().double(), out[2].detach()
            k = ids.shape[-1]
            order = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]
            if not torch.equal(order.sort(-1).values, ids.sort(-1).values):
                rows = (order.sort(-1).values != ids.sort(-1).values).any(-1).nonzero().flatten().tolist()
                raise RuntimeError("%s%s.%s: the router chose other experts than the top %d of its "
                                   "logits at rows %s" % (self.label, self.prefix, name, k, rows))
        self.handles.append(router.register_forward_hook(hook))

    def _tokens(self, name):
        """A tap of a module that flattens the batch (MixtralTopKRouter, Qwen3MoeTopKRouter:
        [B*T, E]; Qwen2-MoE's experts and shared expert, which its sparse block runs on the
        flattened [B*T, H]; batch 1)."""
        def put(x):
            self.put(name, x[None])
        return put

    def _head_major(self, name, heads):
        """A tap of a module that runs on [B, heads, T, D] (Gemma's q_norm and k_norm, after
        the transpose), stored [B, T, heads, D]."""
        def put(x):
            assert x.shape[1] == heads and x.shape[-1] == self.d.D, (name, tuple(x.shape))
            self.put(name, x.transpose(1, 2))
        return put

    def _install_gemma(self):
        d, m = self.d, self.model
        base = m.model
        self._in(base.layers[0], "embed")
        for i, layer in enumerate(base.layers):
            p = "layers.%d." % i
            att, mlp = layer.self_attn, layer.mlp
            self._out(layer.input_layernorm, p + "attn_norm")
            self._out(att.q_proj, None, self._heads(p + "q", d.nH))
            self._out(att.k_proj, None, self._heads(p + "k", d.nKV))
            self._out(att.v_proj, None, self._heads(p + "v", d.nKV))
            if self.family == "gemma3":  # Gemma 2 has no q_norm / k_norm
                self._out(att.q_norm, None, self._head_major(p + "q_norm", d.nH))
                self._out(att.k_norm, None, self._head_major(p + "k_norm", d.nKV))
            self.handles.append(att.register_forward_pre_hook(self._enter_attn(i)))
            self._in(att.o_proj, p + "attn")
            self._out(att.o_proj, p + "attn_out")
            self._out(layer.post_attention_layernorm, p + "attn_post_norm")
            self._in(layer.pre_feedforward_layernorm, p + "resid_attn")
            self._out(layer.pre_feedforward_layernorm, p + "ffn_norm")
            self._out(mlp.gate_proj, p + "ffn_gate")
            self._out(mlp.up_proj, p + "ffn_up")
            self._in(mlp.down_proj, p + "ffn_act")
            self._out(mlp, p + "ffn_out")
            self._out(layer.post_feedforward_layernorm, p + "ffn_post_norm")
            self._out(layer, p + "resid_ffn")
        self._out(base.norm, "final_norm")
        if m.config.final_logit_softcapping is None:
            self._out(m.lm_head, "logits")
        else:  # Gemma 2: the logits the model returns, after the final soft cap
            self._out(m, None, lambda out: self.put("logits", out.logits))

    def install(self):
        d, m = self.d, self.model
        if self.family in GEMMA_FAMILIES:
            self._install_gemma()
            return
        if self.family in ("qwen2", "phi3", "llama", "qwen3") + MOE_FAMILIES:
            base = m.model
            self._in(base.layers[0], "embed")
            for i, layer in enumerate(base.layers):
                p = "layers.%d." % i
                att, mlp = layer.self_attn, layer.mlp
                self._out(layer.input_layernorm, p + "attn_norm")
                if self.family != "phi3":
                    self._out(att.q_proj, None, self._heads(p + "q", d.nH))
                    self._out(att.k_proj, None, self._heads(p + "k", d.nKV))
                    self._out(att.v_proj, None, self._heads(p + "v", d.nKV))
                    if self.family in QK_NORM_FAMILIES:  # [B, T, heads, D] before the transpose
                        self._out(att.q_norm, None, self._heads(p + "q_norm", d.nH))
                        self._out(att.k_norm, None, self._heads(p + "k_norm", d.nKV))
                else:
                    self._out(att.qkv_proj, None, self._split_qkv(p))
                self.handles.append(att.register_forward_pre_hook(self._enter_attn(i)))
                self._in(att.o_proj, p + "attn")
                self._out(att.o_proj, p + "attn_out")
                self._in(layer.post_attention_layernorm, p + "resid_attn")
                self._out(layer.post_attention_layernorm, p + "ffn_norm")
                if self.family in MOE_FAMILIES:
                    # MixtralTopKRouter, Qwen3MoeTopKRouter and Qwen2MoeTopKRouter return
                    # (router_logits, scores, indices): the gate linear's output; ffn_out is the
                    # whole sparse block's
                    # (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock: the
                    # routed sum plus the gated shared expert)
                    self._out(mlp.gate, None, self._tokens(p + "router_logits"))
                    self._check_choice(mlp.gate, p + "router_logits")
                    if self.family in SHARED_EXPERT_FAMILIES:
                        # Qwen2MoeSparseMoeBlock: the routed experts' weighted sum, the shared
                        # expert's gate, up, activation (down_proj's input) and output, ungated
                        se = mlp.shared_expert
                        self._out(mlp.experts, None, self._tokens(p + "moe_out"))
                        self._out(se.gate_proj, None, self._tokens(p + "ffn_gate"))
                        self._out(se.up_proj, None, self._tokens(p + "ffn_up"))
                        self._in(se.down_proj, p + "ffn_act", tokens=True)
                        self._out(se, None, self._tokens(p + "shared_out"))
                    self._out(mlp, p + "ffn_out")
                    self._out(layer, p + "resid_ffn")
                    continue
                if self.family in ("qwen2", "llama", "qwen3"):
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
