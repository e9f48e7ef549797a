"""PyTorch peer timings for `touchstone bench`.

For every case (op, params and input shapes in the layout of docs/golden-format.md) this builds
random inputs on the GPU, prepares what a PyTorch user would hold before the call, and times the
idiomatic PyTorch equivalent of the touchstone kernel with CUDA events, in the same run and on the
same GPU as the Go side's own timings.

    python3 tools/bench/torch_peer.py --cases cases.json      (or --cases - for stdin)

stdout carries exactly one JSON object; progress and warnings go to stderr.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32,
          "f8e4m3": torch.float8_e4m3fn}
FLUSH_BYTES = 256 << 20  # several times the L2 of any current GPU (H100: 50 MiB)
ROPE_MAX_POS = 8192      # rope positions are drawn in [0, 8192): the cos/sin cache rows


def log(*args):
    print("torch_peer:", *args, file=sys.stderr, flush=True)


class Inputs:
    """Random device tensors for one case's input specs, made on request by name."""

    def __init__(self, specs, device):
        self.specs, self.device = specs, device

    def shape(self, name):
        if name not in self.specs:
            raise KeyError("missing input %r" % name)
        return tuple(self.specs[name]["shape"])

    def dtype(self, name):
        self.shape(name)
        return DTYPES[self.specs[name]["dtype"]]

    def randn(self, name, std=1.0):
        # Normal values, never all zeros: the ordinary case for every op, and a mis-wired input
        # shows up as a wrong (not a silently zero) output when the dry run is checked.
        t = torch.randn(self.shape(name), dtype=torch.float32, device=self.device) * std
        return t.to(self.dtype(name))

    def weight(self, name):
        # nn.Linear-style [out, in] with std 1/sqrt(in), as tools/gen-golden draws it, so the
        # outputs stay O(1) (no fp16 inf) however large K is.
        return self.randn(name, 1.0 / math.sqrt(self.shape(name)[-1]))

    def randint(self, name, hi):
        return torch.randint(0, hi, self.shape(name), dtype=self.dtype(name), device=self.device)


# ------------------------------------------------------------------------------------------------
# One function per op: (inputs, params) -> (callable timed, description of the call for the table).
# Everything outside the returned callable is what a PyTorch user computes once, not per call.


def residual_add(t, p):
    x, r = t.randn("x"), t.randn("residual")
    if p.get("inplace"):
        # x grows by r on every call; reaching fp16 inf would take ~10^4 calls and would not
        # change what an add costs anyway.
        return (lambda: x.add_(r)), "x.add_(residual)"
    out = torch.empty_like(x)  # the kernel writes a preallocated output too
    return (lambda: torch.add(x, r, out=out)), "torch.add(x, residual, out=out)"


def rmsnorm(t, p):
    x, w = t.randn("x"), 1 + 0.1 * t.randn("weight")
    H, eps = x.shape[-1], p["eps"]
    if w.dtype == torch.float32 and x.dtype != torch.float32:
        # Gemma's fp32 weight 1 + w: transformers' Gemma3RMSNorm, eager (fp32 math, one cast)
        def gemma():
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)
        return gemma, "x.float() * rsqrt(mean(x.float()^2) + %r) * weight (f32), .to(dtype)" % eps
    return (lambda: F.rms_norm(x, (H,), w, eps)), "F.rms_norm(x, (%d,), weight, %r)" % (H, eps)


def _layernorm_args(t, p):
    return 1 + 0.1 * t.randn("gamma"), 0.1 * t.randn("beta"), p["eps"]


def layernorm(t, p):
    x = t.randn("x")
    g, b, eps = _layernorm_args(t, p)
    H = x.shape[-1]
    return (lambda: F.layer_norm(x, (H,), g, b, eps),
            "F.layer_norm(x, (%d,), gamma, beta, %r)" % (H, eps))


def layernorm_residual(t, p):
    # Unfused, as a PyTorch model does it; the kernel also writes the sum, so this returns it too.
    x, r = t.randn("x"), t.randn("residual")
    g, b, eps = _layernorm_args(t, p)
    H = x.shape[-1]

    def call():
        s = x + r
        return s, F.layer_norm(s, (H,), g, b, eps)
    return call, "s = x + residual; F.layer_norm(s, (%d,), gamma, beta, %r)" % (H, eps)


def rmsnorm_residual(t, p):
    # Unfused, as a PyTorch model does it; the kernel also writes the sum, so this returns it too.
    x, r, w = t.randn("x"), t.randn("residual"), 1 + 0.1 * t.randn("weight")
    H, eps = x.shape[-1], p["eps"]
    if p.get("inplace"):
        # residual grows by x on every call, as residual_add's in-place case: the cost is the same.
        def call_inplace():
            r.add_(x)
            return r, F.rms_norm(r, (H,), w, eps)
        return call_inplace, "residual.add_(x); F.rms_norm(residual, (%d,), weight, %r)" % (H, eps)

    def call():
        s = x + r
        return s, F.rms_norm(s, (H,), w, eps)
    return call, "s = x + residual; F.rms_norm(s, (%d,), weight, %r)" % (H, eps)


def rope(t, p):
    q, k = t.randn("q"), t.randn("k")
    pos = t.randint("positions", ROPE_MAX_POS).long()  # a torch user holds int64 position ids
    D, rd, base = q.shape[-1], int(p["rope_dim"]), float(p["freq_base"])
    # The cos/sin cache as transformers builds it: fp32 angles, cat(freqs, freqs), cast to the
    # activation dtype. Built once per model, so outside the timed region.
    inv_freq = 1.0 / base ** (torch.arange(0, rd, 2, dtype=torch.float32, device=q.device) / rd)
    freqs = torch.outer(torch.arange(ROPE_MAX_POS, dtype=torch.float32, device=q.device), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos_cache, sin_cache = emb.cos().to(q.dtype), emb.sin().to(q.dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def apply(x, cos, sin):
        if rd == D:
            return x * cos + rotate_half(x) * sin
        xr, xp = x[..., :rd], x[..., rd:]  # partial rotary (Phi, GPT-NeoX): the rest passes
        return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)

    def call():
        # The gather is per forward in transformers, so it is timed; q and k both, as the
        # kernel (and apply_rotary_pos_emb) rotates both.
        cos, sin = cos_cache[pos].unsqueeze(1), sin_cache[pos].unsqueeze(1)  # [T, 1, rd]
        return apply(q, cos, sin), apply(k, cos, sin)
    desc = "q, k -> x*cos + rotate_half(x)*sin, cos/sin = cache[positions] [T,1,%d]" % rd
    if rd < D:
        desc += ", cat with x[..., %d:]" % rd
    return call, desc


_FLEX = {}


def _softcapped(q, k, v, causal, p):
    """Gemma 2's soft-capped attention in torch: flex_attention (torch.nn.attention.flex_attention,
    compiled) with a score_mod that caps each scaled score, softcap * tanh(score / softcap), and a
    causal block mask, as transformers' flex path for Gemma 2 runs it; where flex_attention is
    unavailable (an older torch, no triton) transformers' eager attention instead: the scores,
    the cap, the mask, softmax in fp32 -- labelled as such."""
    scale, cap = float(p["scale"]), float(p["softcap"])
    gqa = q.shape[1] != k.shape[1]
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        if not q.is_cuda:
            raise RuntimeError("flex_attention is compiled for CUDA here")
        if "flex" not in _FLEX:
            _FLEX["flex"] = torch.compile(flex_attention)

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
        block_mask = None
        if causal:
            sq, sk = q.shape[2], k.shape[2]
            block_mask = create_block_mask(lambda b, h, qi, ki: ki <= qi + (sk - sq), None, None, sq, sk,
                                           device=q.device)
        flex = _FLEX["flex"]
        call = lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                            enable_gqa=gqa)
        call()  # compile now, not inside the timed runs
        return call, ("torch.compile(flex_attention)(q, k, v, score_mod=softcap %g * tanh(s / %g), "
                      "block_mask=%s, scale=%.6g, enable_gqa=%s)" % (cap, cap, "causal" if causal else None,
                                                                     scale, gqa))
    except Exception as e:  # noqa: BLE001 -- any failure means "flex_attention not here"
        log("softcap: flex_attention unavailable (%s), eager math instead" % str(e)[:120])
    rep = q.shape[1] // k.shape[1]
    ke = k.repeat_interleave(rep, dim=1) if rep > 1 else k
    ve = v.repeat_interleave(rep, dim=1) if rep > 1 else v
    sq, sk = q.shape[2], k.shape[2]
    hidden = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(sk - sq + 1) if causal else None

    def eager():
        s = torch.matmul(q, ke.transpose(-1, -2)) * scale
        s = torch.tanh(s / cap) * cap
        if hidden is not None:
            s = s.masked_fill(hidden, float("-inf"))
        return torch.matmul(s.softmax(-1, dtype=torch.float32).to(q.dtype), ve)
    return eager, ("EAGER MATH (flex_attention unavailable): q @ k^T * scale, tanh(s / %g) * %g, "
                   "causal mask, softmax(fp32) @ v" % (cap, cap))


def _sdpa(q, k, v, causal, p):
    if p.get("softcap"):
        return _softcapped(q, k, v, causal, p)
    scale = float(p["scale"])
    # enable_gqa only when heads differ, as transformers does; it can narrow the backends.
    gqa = q.shape[1] != k.shape[1]
    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                  enable_gqa=gqa)
    return call, ("F.scaled_dot_product_attention(q, k, v, is_causal=%s, scale=%.6g, "
                  "enable_gqa=%s)" % (causal, scale, gqa))


def attention_prefill(t, p):
    # [B, S, heads, D] -> [B, heads, S, D] views: what a model holds after .view().transpose(1, 2)
    # of its projections (no copy; SDPA's flash path reads this layout directly).
    q, k, v = (t.randn(n).transpose(1, 2) for n in ("q", "k", "v"))
    call, desc = _sdpa(q, k, v, bool(p["causal"]), p)
    return call, desc + " on [B, H, S, D] views"


def attention_scores_softmax(t, p):
    # The probabilities as a model that needs them computes them (transformers' eager attention):
    # q k^T per head in fp16, fp32 scaled scores, the causal mask, softmax in fp32.
    q, k = t.randn("q").transpose(1, 2), t.randn("k").transpose(1, 2)   # [B, H, S, D] views
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1) if rep > 1 else k
    sq, sk = q.shape[2], k.shape[2]
    hidden = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(sk - sq + 1)
    scale = p["scale"]

    def call():
        s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
        return s.masked_fill_(hidden, float("-inf")).softmax(-1)
    return call, "(q @ k^T).float() * scale, masked_fill_(causal, -inf).softmax(-1) on [B, H, S, D] views"


def attention_decode(t, p):
    q = t.randn("q").unsqueeze(2)  # [B, nH, 1, D]: one new token per sequence
    # A torch KV cache (transformers' DynamicCache) stores [B, nKV, L, D] contiguous.
    k, v = (t.randn(n).transpose(1, 2).contiguous() for n in ("k_cache", "v_cache"))
    # cache_lens would all be L (full caches): SDPA needs no mask, so they are only checked for.
    t.shape("cache_lens")
    L = t.shape("k_cache")[1]
    call, desc = _sdpa(q, k, v, False, p)
    return call, desc + " on q [B, nH, 1, D], k/v [B, nKV, %d, D]" % L


def attention_decode_paged(t, p):
    """Decode over a paged cache in torch: SDPA reads contiguous caches only, so the peer gathers
    each sequence's pages (index_select over the pool by its block table) into [B, nKV, L, D]
    and runs SDPA, as a torch fallback without a paged kernel must (FlashInfer and vLLM ship
    paged kernels; neither runs on the bench host). The table is pages in order, as the bench
    case draws it; every sequence's cache is full."""
    q = t.randn("q").unsqueeze(2)  # [B, nH, 1, D]
    nb, bs, nkv, d = t.shape("k_cache")
    B, W = t.shape("block_table")
    kp, vp = t.randn("k_cache"), t.randn("v_cache")
    table = torch.arange(B * W, device=q.device, dtype=torch.int64).reshape(B, W) % nb
    t.shape("cache_lens")
    scale = float(p["scale"])
    gqa = q.shape[1] != nkv

    def call():
        k = kp.index_select(0, table.reshape(-1)).view(B, W * bs, nkv, d).transpose(1, 2)
        v = vp.index_select(0, table.reshape(-1)).view(B, W * bs, nkv, d).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    return call, ("k, v = pool.index_select(0, block_table) as [B, nKV, %d, D]; "
                  "F.scaled_dot_product_attention(q, k, v, scale=%.6g, enable_gqa=%s)" % (W * bs, scale, gqa))


def _prefix_causal_mask(T, L, device, window=0):
    """[T, L] boolean: the last T of L positions are the queries, query i (position L - T + i)
    sees keys up to its own position (is_causal aligns the diagonal to the top-left when the
    queries are fewer than the keys), the last `window` of them with a sliding window."""
    rows = torch.arange(T, device=device)[:, None] + (L - T)
    keys = torch.arange(L, device=device)[None, :]
    mask = keys <= rows
    return mask & (keys > rows - window) if window > 0 else mask


def attention_prefill_paged(t, p):
    """Prefill through pages in torch: one sequence's pages gathered (index_select by its table)
    into [1, nKV, L, D], then SDPA with the causal mask offset by the prefix as a boolean mask
    (is_causal aligns the diagonal to the top-left when the queries are fewer than the keys).
    One sequence, its pages in order, as the bench case draws it."""
    T = t.shape("q")[0]
    q = t.randn("q").unsqueeze(0).transpose(1, 2)  # [1, nH, T, D]
    nb, bs, nkv, d = t.shape("k_cache")
    B, W = t.shape("block_table")
    assert B == 1, "the peer times one sequence"
    kp, vp = t.randn("k_cache"), t.randn("v_cache")
    table = torch.arange(W, device=q.device, dtype=torch.int64) % nb
    t.shape("q_starts"), t.shape("kv_lens")
    L = W * bs
    scale = float(p["scale"])
    gqa = q.shape[1] != nkv
    mask = _prefix_causal_mask(T, L, q.device, int(p.get("window", 0)))

    def call():
        k = kp.index_select(0, table).view(1, L, nkv, d).transpose(1, 2)
        v = vp.index_select(0, table).view(1, L, nkv, d).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return call, ("k, v = pool.index_select(0, block_table) as [1, nKV, %d, D]; "
                  "F.scaled_dot_product_attention(q, k, v, attn_mask=causal from the prefix, scale=%.6g, "
                  "enable_gqa=%s)" % (L, scale, gqa))


def swiglu(t, p):
    g, u = t.randn("gate"), t.randn("up")
    return (lambda: F.silu(g) * u), "F.silu(gate) * up"


def geglu(t, p):
    g, u = t.randn("gate", 2.0), t.randn("up")
    approx = "tanh" if p["gelu"] == "tanh" else "none"
    return ((lambda: F.gelu(g, approximate=approx) * u),
            "F.gelu(gate, approximate=%r) * up" % approx)


def swiglu_ffn(t, p):
    x, wg, wu, wd = t.randn("x"), t.weight("w_gate"), t.weight("w_up"), t.weight("w_down")
    return (lambda: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd),
            "F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)")


def gemm_swiglu(t, p):
    # The strongest eager form: one linear over the stacked weight (Phi-3's gate_up_proj), then
    # chunk and the activation, as transformers' Phi-3 MLP runs it.
    x, w = t.randn("x"), t.weight("w_gate_up")

    def call():
        g, u = F.linear(x, w).chunk(2, dim=-1)
        return F.silu(g) * u
    return call, "g, u = F.linear(x, w_gate_up).chunk(2, -1); F.silu(g) * u"


def rmsnorm_gemm(t, p):
    # transformers' decoder layer: the residual add, RMSNorm, then the projection (nn.Linear).
    x, r, g, w = t.randn("x"), t.randn("residual"), 1 + 0.1 * t.randn("weight"), t.weight("w")
    b = t.randn("bias") if p.get("has_bias") else None
    H, eps = x.shape[-1], p["eps"]

    def call():
        s = x + r
        return F.linear(F.rms_norm(s, (H,), g, eps), w, b)
    return call, "s = x + residual; F.linear(F.rms_norm(s, (%d,), weight, %r), w, bias)" % (H, eps)


def layernorm_gemm(t, p):
    # transformers' GPT-2 block: the residual add, ln_1 (LayerNorm), then c_attn (a Conv1D: addmm
    # over the transposed weight, the same product as F.linear on w [n, h]).
    x, r, w = t.randn("x"), t.randn("residual"), t.weight("w")
    g, beta = 1 + 0.1 * t.randn("gamma"), 0.1 * t.randn("beta")
    b = t.randn("bias") if p.get("has_bias") else None
    H, eps = x.shape[-1], p["eps"]

    def call():
        s = x + r
        return F.linear(F.layer_norm(s, (H,), g, beta, eps), w, b)
    return call, "s = x + residual; F.linear(F.layer_norm(s, (%d,), gamma, beta, %r), w, bias)" % (H, eps)


def swiglu_gemm(t, p):
    # The tail of transformers' Qwen2 MLP: down_proj(act_fn(gate) * up).
    g, u, w = t.randn("gate", 2.0), t.randn("up"), t.weight("w")
    b = t.randn("bias") if p.get("has_bias") else None
    return (lambda: F.linear(F.silu(g) * u, w, b)), "F.linear(F.silu(gate) * up, w, bias)"


def gpt_ffn(t, p):
    # GPT-2's MLP as transformers runs it (Conv1D is addmm; F.linear is the same GEMM).
    x, w1, b1, w2, b2 = t.randn("x"), t.weight("w1"), t.randn("b1"), t.weight("w2"), t.randn("b2")
    approx = "tanh" if p["gelu"] == "tanh" else "none"
    return ((lambda: F.linear(F.gelu(F.linear(x, w1, b1), approximate=approx), w2, b2)),
            "F.linear(F.gelu(F.linear(x, w1, b1), approximate=%r), w2, b2)" % approx)


def gelu(t, p):
    x = t.randn("x", 1.5)
    return (lambda: F.gelu(x)), "F.gelu(x)"


def gelu_tanh(t, p):
    x = t.randn("x", 1.5)
    return (lambda: F.gelu(x, approximate="tanh")), "F.gelu(x, approximate='tanh')"


def gelu_scale(t, p):
    # The activation and the scale as a user writes them: two elementwise kernels in eager mode.
    x, scale = t.randn("x", 1.5), float(p["scale"])
    approx = "tanh" if p["gelu"] == "tanh" else "none"
    return ((lambda: F.gelu(x, approximate=approx) * scale),
            "F.gelu(x, approximate=%r) * %r" % (approx, scale))


def pos_embedding(t, p):
    x, table = t.randn("x"), t.randn("table")
    pos = t.randint("positions", table.shape[0]).long()
    return (lambda: x + table[pos]), "x + table[positions]"


def embedding(t, p):
    table = t.randn("table")
    ids = t.randint("ids", table.shape[0]).long()  # token ids come from the tokenizer as int64
    if "scale" in p:
        # Gemma3TextScaledWordEmbedding: the scale a 0-dim tensor of the table's dtype
        scale = torch.tensor(float(p["scale"]), device=table.device).to(table.dtype)
        return (lambda: F.embedding(ids, table) * scale), "F.embedding(ids, table) * embed_scale.to(dtype)"
    return (lambda: F.embedding(ids, table)), "F.embedding(ids, table)"


def set_rows(t, p):
    # The KV-cache append as transformers' StaticCache writes it: index_copy_ along the position
    # dim, in place. Rows are distinct, as the contract requires.
    dst, src = t.randn("dst"), t.randn("src")
    rows = torch.randperm(dst.shape[0], device=dst.device)[:src.shape[0]]
    return (lambda: dst.index_copy_(0, rows, src)), "dst.index_copy_(0, rows, src)"


def _e4m3(t, name, std):
    return (t.randn(name, std).float().clamp(-448, 448)).to(torch.float8_e4m3fn)


def set_rows_fp8(t, p):
    """The FP8 KV append in eager torch, as vLLM's torch fallback and transformers' quantized
    caches write it: the per-head scale's division, the saturating cast, index_copy_ in place."""
    dst = _e4m3(t, "dst", 100.0)
    src = t.randn("src")
    scale = torch.rand(t.shape("scale"), device=src.device) * 0.002 + 0.009
    per = scale.view(1, -1, 1) if scale.numel() > 1 else scale
    rows = torch.randperm(dst.shape[0], device=dst.device)[:src.shape[0]]

    # index_copy_ has no float8 kernel on CUDA: the cache is moved as its bytes.
    dst_bytes = dst.view(torch.uint8)

    def call():
        codes = (src.float() / per).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return dst_bytes.index_copy_(0, rows, codes.view(torch.uint8))
    return call, "dst.view(uint8).index_copy_(0, rows, (src / scale[head]).clamp(+-448).to(float8_e4m3fn).view(uint8))"


def _kv_scales(t, device):
    """k_scale and v_scale of an FP8 cache whose codes are drawn with std 100 (_e4m3): keys and
    values of about 0.2 and 1, per tensor or per KV head as the case's shapes say."""
    ks = torch.rand(t.shape("k_scale"), device=device) * 0.0002 + 0.002
    vs = torch.rand(t.shape("v_scale"), device=device) * 0.002 + 0.009
    return ks, vs


def attention_decode_fp8(t, p):
    """Decode over an FP8 KV cache in torch: SDPA has no FP8 cache input, so the peer
    dequantises the cache (code * scale, to the query's dtype) and runs SDPA, as a torch
    fallback must; its cache read is the FP8 bytes plus the 16-bit copy written and read."""
    q = t.randn("q").unsqueeze(2)
    k, v = (_e4m3(t, n, 100.0).transpose(1, 2).contiguous() for n in ("k_cache", "v_cache"))
    ks, vs = _kv_scales(t, q.device)
    t.shape("cache_lens")
    kper = ks.view(1, -1, 1, 1) if ks.numel() > 1 else ks
    vper = vs.view(1, -1, 1, 1) if vs.numel() > 1 else vs
    dt = q.dtype

    def call():
        kd, vd = (k.to(dt) * kper.to(dt)), (v.to(dt) * vper.to(dt))
        return F.scaled_dot_product_attention(q, kd, vd, scale=p["scale"], enable_gqa=True)
    return call, "SDPA over the cache dequantised to %s (k.to(dt) * k_scale, v likewise) each call" % str(dt).replace("torch.", "")


def _fp8_pages(t, table, dt):
    """An FP8 paged pool as an engine without an FP8 paged kernel reads it in torch: E4M3
    k_cache, v_cache [num_blocks, block_size, nKV, D] with scales per tensor or per KV head, and
    fill(), which gathers the pages of table [B, W] (index_select of the codes' bytes, as
    set_rows_fp8's peer moves them: CUDA's indexing kernels need not take float8) and
    dequantises them (code.to(dt) * scale) into 16-bit buffers. Returns (fill, k, v): k, v [B, nKV, W * block_size, D] views of the buffers, which
    each fill() rewrites."""
    nb, bs, nkv, d = t.shape("k_cache")
    B, W = table.shape
    pages = table.reshape(-1)
    ks, vs = _kv_scales(t, table.device)
    caches = []
    for name, scale in (("k_cache", ks), ("v_cache", vs)):
        codes = _e4m3(t, name, 100.0).view(torch.uint8)
        per = (scale if scale.numel() > 1 else scale.expand(nkv)).to(dt).view(nkv, 1)
        gathered = torch.empty((B * W, bs, nkv, d), dtype=torch.uint8, device=table.device)
        values = torch.empty((B * W, bs, nkv, d), dtype=dt, device=table.device)
        caches.append((codes, per, gathered, values))

    def fill():
        for codes, per, gathered, values in caches:
            torch.index_select(codes, 0, pages, out=gathered)
            torch.mul(gathered.view(torch.float8_e4m3fn).to(dt), per, out=values)
    k, v = (values.view(B, W * bs, nkv, d).transpose(1, 2) for *_, values in caches)
    return fill, k, v


def _fp8_pages_desc(dt, L):
    return ("pages gathered (index_select of the codes by block_table) and dequantised "
            "(code.to(%s) * scale[head]) into [B, nKV, %d, D], then " % (str(dt).replace("torch.", ""), L))


def attention_decode_paged_fp8(t, p):
    """Decode over a paged FP8 cache in torch, as an engine without an FP8 paged kernel runs it:
    each call gathers every sequence's pages and dequantises them (_fp8_pages), then runs SDPA
    (a soft cap through _softcapped; a window keeps the last `window` positions). The table is
    pages in order, as the bench case draws it; every sequence's cache is full."""
    q = t.randn("q").unsqueeze(2)  # [B, nH, 1, D]
    nb, bs, _, _ = t.shape("k_cache")
    B, W = t.shape("block_table")
    t.shape("cache_lens")
    table = torch.arange(B * W, device=q.device, dtype=torch.int64).reshape(B, W) % nb
    fill, k, v = _fp8_pages(t, table, q.dtype)
    fill()  # _softcapped compiles on real values
    window = int(p.get("window", 0))
    if window > 0:
        k, v = k[:, :, -window:], v[:, :, -window:]
    attend, desc = _sdpa(q, k, v, False, p)

    def call():
        fill()
        return attend()
    return call, _fp8_pages_desc(q.dtype, W * bs) + desc


def attention_prefill_paged_fp8(t, p):
    """Prefill through a paged FP8 cache in torch: one sequence's pages gathered and dequantised
    each call (_fp8_pages), then SDPA with the causal mask offset by the prefix, as
    attention_prefill_paged's peer (a soft cap through _softcapped, whose causal mask has the
    same offset; a window with it is refused). One sequence, its pages in order."""
    T = t.shape("q")[0]
    q = t.randn("q").unsqueeze(0).transpose(1, 2)  # [1, nH, T, D]
    nb, bs, nkv, _ = t.shape("k_cache")
    B, W = t.shape("block_table")
    assert B == 1, "the peer times one sequence"
    t.shape("q_starts"), t.shape("kv_lens")
    table = (torch.arange(W, device=q.device, dtype=torch.int64) % nb).view(1, W)
    fill, k, v = _fp8_pages(t, table, q.dtype)
    fill()
    L, window = W * bs, int(p.get("window", 0))
    if p.get("softcap"):
        if window > 0:
            raise ValueError("a window with a soft cap: flex_attention's mask here is causal only")
        attend, desc = _softcapped(q, k, v, True, p)
    else:
        scale, gqa = float(p["scale"]), q.shape[1] != nkv
        mask = _prefix_causal_mask(T, L, q.device, window)
        attend = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,  # noqa: E731
                                                        enable_gqa=gqa)
        desc = ("F.scaled_dot_product_attention(q, k, v, attn_mask=causal from the prefix%s, "
                "scale=%.6g, enable_gqa=%s)" % (", window %d" % window if window else "", scale, gqa))

    def call():
        fill()
        return attend()
    return call, _fp8_pages_desc(q.dtype, L) + desc


def gemm(t, p):
    x, w = t.randn("x"), t.weight("w")
    bias = t.randn("bias") if p.get("has_bias") else None
    if p.get("out_dtype", "f16") in ("f16", "bf16"):  # the output in the inputs' dtype
        return (lambda: F.linear(x, w, bias)), "F.linear(x, w%s)" % (", bias" if bias is not None else "")
    # fp32 output: torch.mm/addmm take out_dtype=float32 for fp16 inputs on CUDA (fp32 epilogue,
    # no fp16 rounding), like the kernel. Older builds and the CPU lack it: fall back to an fp16
    # GEMM then a cast, which does round to fp16 and costs an extra pass.
    wt, f32 = w.t(), torch.float32
    if bias is not None:
        cands = [("torch.addmm(bias, x, w.t(), out_dtype=torch.float32)",
                  lambda: torch.addmm(bias, x, wt, out_dtype=f32)),
                 ("torch.mm(x, w.t(), out_dtype=torch.float32).add_(bias)",
                  lambda: torch.mm(x, wt, out_dtype=f32).add_(bias))]
    else:
        cands = [("torch.mm(x, w.t(), out_dtype=torch.float32)",
                  lambda: torch.mm(x, wt, out_dtype=f32))]
    fb = "F.linear(x, w%s).float()" % (", bias" if bias is not None else "")
    cands.append((fb + " [fp16 GEMM then cast: out_dtype unsupported here]",
                  lambda: F.linear(x, w, bias).float()))
    want = (x.shape[0], w.shape[0])
    for desc, call in cands:
        try:
            out = call()
            if out.dtype == f32 and tuple(out.shape) == want:
                return call, desc
            log("gemm: %s gave %s %s, trying the next" % (desc, out.dtype, tuple(out.shape)))
        except Exception as e:  # noqa: BLE001 -- any failure means "not supported here"
            log("gemm: %s unsupported (%s), trying the next" % (desc, str(e)[:120]))
    raise RuntimeError("no fp32-output GEMM call works")


def softmax(t, p):
    x = t.randn("x")  # f16 or f32, as the case says
    return (lambda: torch.softmax(x, dim=-1, dtype=torch.float32)), \
        "torch.softmax(x, dim=-1, dtype=torch.float32)"


def logit_softcap(t, p):
    # Gemma2ForCausalLM's final soft cap as transformers runs it, eagerly: logits / cap,
    # torch.tanh, * cap, three elementwise kernels over the fp32 logits.
    x, cap = t.randn("x", 40.0), float(p["softcap"])
    return (lambda: x.div(cap).tanh().mul(cap)), "logits.div(%g).tanh().mul(%g) (eager)" % (cap, cap)


def gemm_fp8(t, p):
    """torch._scaled_mm, the FP8 GEMM of PyTorch (cuBLASLt): per-token and per-channel scales
    (row-wise), or 1x128 / 128x128 block scales where this build has them; else the dequantised
    product in bf16 (what a PyTorch fallback does), said so in the description."""
    x = (t.randn("x", 100.0).float().clamp(-448, 448)).to(torch.float8_e4m3fn)
    w = (t.randn("w", 100.0).float().clamp(-448, 448)).to(torch.float8_e4m3fn)
    xs = (torch.rand(t.shape("x_scales"), device=x.device) * 0.002 + 0.009).float()
    ws = (torch.rand(t.shape("w_scales"), device=x.device) * 0.002 + 0.009).float()
    out_dtype = DTYPES[p.get("out_dtype", "bf16")]
    wt = w.t()
    if p["scales"] == "channel":
        cands = [("torch._scaled_mm(x, w.t(), scale_a=xs [M,1], scale_b=ws.t() [1,N], out_dtype)",
                  lambda: torch._scaled_mm(x, wt, scale_a=xs, scale_b=ws.t(), out_dtype=out_dtype))]
    else:
        # block-wise scaling: scale_a [M, K/128], scale_b [K/128, N/128] (outer dims first)
        xs_c, ws_t = xs.t().contiguous().t(), ws.t()
        cands = [("torch._scaled_mm(x, w.t(), scale_a=xs [M,K/128], scale_b=ws.t() [K/128,N/128], out_dtype)",
                  lambda: torch._scaled_mm(x, wt, scale_a=xs_c, scale_b=ws_t, out_dtype=out_dtype))]
    K = t.shape("x")[1]

    def dequant():
        if p["scales"] == "channel":
            xd, wd = x.to(out_dtype) * xs.to(out_dtype), w.to(out_dtype) * ws.to(out_dtype)
        else:
            xd = x.to(out_dtype) * xs.repeat_interleave(128, 1)[:, :K].to(out_dtype)
            wd = w.to(out_dtype) * ws.repeat_interleave(128, 0).repeat_interleave(128, 1)[:w.shape[0], :K].to(out_dtype)
        return xd @ wd.t()
    cands.append(("dequantise to %s, then x @ w.t() [no FP8 GEMM for these scales here]" % p.get("out_dtype", "bf16"), dequant))
    want = (x.shape[0], w.shape[0])
    for desc, call in cands:
        try:
            out = call()
            if tuple(out.shape) == want:
                return call, desc
            log("gemm_fp8: %s gave %s, trying the next" % (desc, tuple(out.shape)))
        except Exception as e:  # noqa: BLE001 -- any failure means "not supported here"
            log("gemm_fp8: %s unsupported (%s), trying the next" % (desc, str(e)[:120]))
    raise RuntimeError("no FP8 GEMM call works")


def gemm_w4a16(t, p):
    """torch's int4 weight-only matmul (tinygemm, torch._weight_int4pack_mm: the kernel gpt-fast
    and torchao serve 4-bit weights with, bf16 activations, groups along k, a scale and a bf16
    zero a group) where it runs here, else the 16-bit GEMM over the weight dequantised once
    (F.linear), which a 4-bit kernel must beat by reading a quarter of the bytes. The packed
    words' values do not change either's time."""
    x = t.randn("x")
    G = p["group_size"]
    if p["format"] == "awq":
        K, N = t.shape("qweight")[0], t.shape("qweight")[1] * 8
    else:
        K, N = t.shape("qweight")[0] * 8, t.shape("qweight")[1]
    q = torch.randint(0, 16, (N, K), device=x.device, dtype=torch.int32)
    s = t.randn("scales").abs() * 0.01 + 1e-3
    cands = []
    if x.is_cuda and x.dtype == torch.bfloat16:
        def tinygemm():
            packed = torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8)
            sz = torch.stack([s.to(torch.bfloat16), (s * 8).to(torch.bfloat16)], dim=-1).contiguous()
            return lambda: torch.ops.aten._weight_int4pack_mm(x, packed, G, sz)
        cands.append(("torch._weight_int4pack_mm (tinygemm, inner k tiles 8)", tinygemm))

    def dense():
        z = torch.randint(0, 16, (K // G, N), device=x.device)
        groups = torch.arange(K, device=x.device) // G
        w = ((q.t() - z[groups]).to(torch.float32) * s[groups].float()).to(x.dtype).t().contiguous()
        return lambda: F.linear(x, w)
    cands.append(("F.linear(x, w) with w [N, K] dequantised once (the %s GEMM)" % x.dtype, dense))
    works = []
    for desc, make in cands:
        try:
            call = make()
            out = call()
            if tuple(out.shape) == (x.shape[0], N):
                works.append((call, desc))
            else:
                log("gemm_w4a16: %s gave %s, trying the next" % (desc, tuple(out.shape)))
        except Exception as e:  # noqa: BLE001 -- any failure means "not supported here"
            log("gemm_w4a16: %s unsupported (%s), trying the next" % (desc, str(e)[:120]))
    if not works:
        raise RuntimeError("no int4 or dense GEMM call works")
    if len(works) == 1 or not x.is_cuda:
        return works[0]
    # The strongest peer: tinygemm is a gemv-shaped kernel, the dense GEMM wins past a few rows.
    timed = sorted(((_quick_ms(c), c, d) for c, d in works), key=lambda r: r[0])
    log("gemm_w4a16: " + ", ".join("%s %.4f ms" % (d.split(" (")[0], t) for t, _, d in timed))
    return timed[0][1], timed[0][2] + " [the faster of %d peers]" % len(works)


def quant_fp8(t, p):
    """The eager torch quantiser of docs/quantization.md: per-group amax, the floored scale, the
    division, the saturating cast (what transformers' and vLLM's torch fallbacks compute)."""
    x = t.randn("x", 3.0)
    T, H = t.shape("x")
    G = int(p["group_size"])

    def call():
        xg = x.float().view(T, H // G, G)
        s = xg.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
        return (xg / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), s
    return call, "x.view(T, H/G, G): s = abs.amax.clamp(1e-10) / 448; (x / s).clamp(+-448).to(float8_e4m3fn)"


def _quant_e4m3(y, p, scale=None):
    """quant_fp8's eager quantiser of y [T, H], dynamic in groups of p's group_size (with the
    scales) or static with scale."""
    if p["mode"] == "static":
        return (y.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    T, H = y.shape
    G = int(p["group_size"])
    yg = y.float().view(T, H // G, G)
    s = yg.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    return (yg / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), s


def _static_scale(t, p, like):
    return torch.full((1,), 0.008, dtype=torch.float32, device=like.device) \
        if p["mode"] == "static" else None


def rmsnorm_quant_fp8(t, p):
    """The unfused eager composition the fused kernel replaces (what vLLM runs without its
    rms_norm_dynamic_per_token_quant): the residual add, F.rms_norm in the storage dtype, then
    quant_fp8's eager quantiser; the sum is an output too."""
    x, w = t.randn("x"), 1 + 0.1 * t.randn("weight")
    r = t.randn("residual") if p["has_residual"] else None
    H, eps, scale = x.shape[-1], p["eps"], _static_scale(t, p, x)

    def call():
        s = x
        if r is not None:
            if p["inplace"]:  # residual grows by x on every call, as rmsnorm_residual's case
                s = r.add_(x)
            else:
                s = x + r
        return s, _quant_e4m3(F.rms_norm(s, (H,), w, eps), p, scale)
    add = "" if r is None else "s = residual.add_(x); " if p["inplace"] else "s = x + residual; "
    return call, "%sF.rms_norm(s, (%d,), weight, %r), then quant_fp8's eager quantiser (%s)" % (
        add, H, eps, p["mode"])


def swiglu_quant_fp8(t, p):
    """The unfused eager composition: swiglu's F.silu(gate) * up in the storage dtype, then
    quant_fp8's eager quantiser."""
    g, u = t.randn("gate", 2.0), t.randn("up")
    scale = _static_scale(t, p, g)
    return ((lambda: _quant_e4m3(F.silu(g) * u, p, scale)),
            "F.silu(gate) * up, then quant_fp8's eager quantiser (%s)" % p["mode"])


def _quick_ms(call):
    """A quick median of 10 timed calls after 3 untimed ones: enough to choose the strongest of
    several peers before the real timing."""
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _router_ids(t, E, seed=0):
    """Each token's k distinct experts drawn uniformly (the bench's routing), and softmax weights."""
    T, k = t.shape("ids")
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(t.device)
    w = torch.softmax(torch.randn(T, k, generator=g), -1).to(t.device)
    return ids, w


def moe_router(t, p):
    """transformers' MixtralTopKRouter after its gate linear: softmax in fp32, topk, and the
    renormalisation when asked (Qwen3-MoE's norm_topk_prob)."""
    logits = t.randn("logits", 2.0)
    k, renorm = int(p["top_k"]), bool(p["renormalize"])

    def call():
        probs = torch.softmax(logits.float(), dim=-1)
        w, ids = torch.topk(probs, k, dim=-1)
        if renorm:
            w = w / w.sum(dim=-1, keepdim=True)
        return w, ids
    return call, "softmax(logits.float()), topk(%d)%s" % (k, ", w / w.sum()" if renorm else "")


def moe_ffn(t, p):
    """The strongest of three PyTorch forms of the expert block, timed here (the faster is the
    peer, all three logged): transformers 5's MixtralExperts.forward, eager (the loop over the
    experts some token chose: a gather, the gate_up linear, silu * up, the down linear, weighted,
    index_add_; its nonzero() syncs with the host once a call, as in transformers); gpt-fast's
    ConditionalFeedForward under torch.compile where the rows are few (each token's experts'
    weights gathered by index and contracted by einsum: the compiled decode form, no host sync);
    and a grouped GEMM, torch._grouped_mm over the tokens sorted by expert (cuBLAS / CUTLASS
    grouped kernels on sm90, bf16), where this torch has it."""
    x, gate_up, down = t.randn("x"), t.weight("gate_up"), t.weight("down")
    E, F2 = gate_up.shape[0], gate_up.shape[1]
    ids, w = _router_ids(t, E)
    T, k = ids.shape
    w = w.to(x.dtype)

    def eager():
        def call():
            out = torch.zeros_like(x)
            mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            for e in hit:
                e = e[0]
                pos, tok = torch.where(mask[e])
                g, u = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
                y = F.linear(F.silu(g) * u, down[e]) * w[tok, pos, None]
                out.index_add_(0, tok, y.to(out.dtype))
            return out
        return call

    def gpt_fast():
        if T * k > 32:
            raise RuntimeError("gathers T x k experts' weights: a decode form (T x k <= 32)")

        def cff(xv, idv, wv):
            w13 = gate_up[idv]                                    # [T, k, 2F, H]
            h = torch.einsum("th,tkfh->tkf", xv, w13)
            g, u = h.chunk(2, dim=-1)
            y = torch.einsum("tkf,tkhf->tkh", F.silu(g) * u, down[idv])
            return torch.einsum("tkh,tk->th", y, wv)
        fn = torch.compile(cff, mode="max-autotune-no-cudagraphs")
        return lambda: fn(x, ids, w)

    def grouped():
        if not hasattr(torch, "_grouped_mm"):
            raise RuntimeError("torch._grouped_mm is not in this torch")
        flat = ids.reshape(-1)
        bt = gate_up.transpose(-2, -1)   # [E, H, 2F]: the grouped mm's [groups, K, N]
        bd = down.transpose(-2, -1)      # [E, F, H]

        def call():
            order = torch.argsort(flat, stable=True)
            offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
            xs = x[order // k]
            h = torch._grouped_mm(xs, bt, offs=offs)
            g, u = h.chunk(2, dim=-1)
            y = torch._grouped_mm(F.silu(g) * u, bd, offs=offs)
            out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
            out.index_add_(0, order // k, (y * w.reshape(-1)[order, None]).float())
            return out.to(x.dtype)
        return call

    cands = [("transformers' MixtralExperts loop, eager (one_hot, per expert: x[tok] @ gate_up[e].T, "
              "silu*up, @ down[e].T, * w, index_add_)", eager)]
    if x.is_cuda:
        cands += [("gpt-fast ConditionalFeedForward, torch.compile (experts' weights gathered by id, "
                   "einsum)", gpt_fast),
                  ("torch._grouped_mm over the tokens sorted by expert (argsort, bincount offsets, "
                   "two grouped GEMMs, index_add_)", grouped)]
    works, ref = [], None
    for desc, make in cands:
        try:
            call = make()
            out = call().float()
            if ref is None:
                ref = out
            elif not torch.allclose(out, ref, rtol=5e-2, atol=5e-2 * ref.abs().max().item()):
                log("moe_ffn: %s disagrees with the eager loop, dropped" % desc.split(" (")[0])
                continue
            works.append((call, desc))
        except Exception as e:  # noqa: BLE001 -- any failure means "not supported here"
            log("moe_ffn: %s unavailable (%s)" % (desc.split(" (")[0], str(e)[:160]))
    if len(works) == 1:
        return works[0]

    timed = sorted(((_quick_ms(c), c, d) for c, d in works), key=lambda r: r[0])
    log("moe_ffn %s: " % (tuple(x.shape),) + ", ".join("%s %.4f ms" % (d.split(" (")[0], ms) for ms, _, d in timed))
    return timed[0][1], timed[0][2] + " [the faster of %d peers]" % len(works)


def moe_shared_add(t, p):
    """transformers' Qwen2MoeSparseMoeBlock adding its gated shared expert, eagerly: the gate's
    linear (a [T, 1] GEMM), sigmoid, the product and the add, each a kernel of its own."""
    routed, shared, x = t.randn("routed"), t.randn("shared"), t.randn("x")
    gate = t.randn("gate", 2.0 / math.sqrt(t.shape("gate")[-1]))
    return (lambda: routed + torch.sigmoid(F.linear(x, gate)) * shared), \
        "routed + torch.sigmoid(F.linear(x, gate)) * shared (eager)"


def sample(t, p):
    """The usual PyTorch sampling step (as in Hugging Face's warpers): argmax when greedy, else
    top-k, temperature, softmax, sort, cumsum for top-p, multinomial; the token stays on the
    device, like touchstone's."""
    logits = t.randn("logits", 3.0)[0]
    temp, top_k, top_p = float(p["temperature"]), int(p["top_k"]), float(p["top_p"])
    gen = torch.Generator(device=logits.device).manual_seed(int(p["seed"]))
    if temp == 0:
        return (lambda: torch.argmax(logits)), "torch.argmax(logits)"

    def call():
        x = logits
        if top_k > 0:
            v, idx = torch.topk(x, top_k)
        else:
            v, idx = torch.sort(x, descending=True)
        probs = torch.softmax(v / temp, dim=-1)
        if top_p < 1:
            cum = torch.cumsum(probs, dim=-1)
            probs = probs.masked_fill(cum - probs >= top_p, 0)
        return idx[torch.multinomial(probs, 1, generator=gen)]
    desc = ("topk" if top_k > 0 else "sort") + ", softmax(v/T), " + \
        ("cumsum top-p mask, " if top_p < 1 else "") + "multinomial"
    return call, desc


OPS = {f.__name__: f for f in (residual_add, rmsnorm, layernorm, layernorm_residual,
                               rmsnorm_residual, rope, attention_prefill, attention_decode, attention_scores_softmax, swiglu, geglu,
                               swiglu_ffn, gemm_swiglu, rmsnorm_gemm, layernorm_gemm, swiglu_gemm, gpt_ffn, gelu, gelu_tanh, gelu_scale, pos_embedding, embedding, set_rows,
                               gemm, softmax, logit_softcap, quant_fp8, gemm_fp8, rmsnorm_quant_fp8, swiglu_quant_fp8, gemm_w4a16, sample,
                               set_rows_fp8, attention_decode_fp8, attention_decode_paged,
                               attention_prefill_paged, attention_decode_paged_fp8,
                               attention_prefill_paged_fp8, moe_router, moe_ffn, moe_shared_add)}


# ------------------------------------------------------------------------------------------------
# Timing


def time_call(call, warmup, repeats, flush, cuda):
    """Per-call milliseconds: `warmup` untimed calls, then `repeats` calls, each after an L2 flush
    that lies outside its events (so every call starts from cold caches, as in a model where
    other layers' weights evicted this one's)."""
    # At least one untimed call, even at warmup 0: the first call pays one-off costs (cuBLAS
    # handle and workspace, kernel module loading, allocator growth) that are not the op's.
    for _ in range(max(warmup, 1)):
        call()
    times = []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
        for start, end in ev:
            flush.zero_()
            start.record()
            call()
            end.record()
        # One sync at the end: the CPU enqueues ahead, so the ~0.1 ms flush before each call
        # hides most of eager PyTorch's launch overhead; what remains (a multi-kernel op whose
        # launches outlast the GPU work) is a real cost an eager PyTorch user pays.
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for start, end in ev]
    else:  # --device cpu: a dry run of the logic, wall-clock time
        for _ in range(repeats):
            flush.zero_()
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def run_case(case, device, flush, cuda):
    name, op = case.get("name", "?"), case.get("op", "?")
    res = {"name": name, "op": op}
    try:
        if op not in OPS:
            raise ValueError("unknown op %r" % op)
        repeats = int(case.get("repeats", 0))
        if repeats < 1:
            raise ValueError("repeats must be >= 1")
        for n, s in case.get("inputs", {}).items():
            if s.get("dtype") not in DTYPES:
                raise ValueError("input %r: unknown dtype %r" % (n, s.get("dtype")))
        call, desc = OPS[op](Inputs(case.get("inputs", {}), device), case.get("params", {}))
        times = time_call(call, int(case.get("warmup", 0)), repeats, flush, cuda)
        res.update(torch_call=desc, median_ms=round(statistics.median(times), 6),
                   min_ms=round(min(times), 6), max_ms=round(max(times), 6), repeats=repeats)
    except Exception as e:  # noqa: BLE001 -- one case's failure must not abort the run
        msg = str(e).strip().splitlines()
        res["error"] = type(e).__name__ + (": " + msg[0][:300] if msg else "")
        log("%s (%s): %s" % (name, op, res["error"]))
    if cuda:
        torch.cuda.empty_cache()  # the next case's shapes start from a clean allocator
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True, help="JSON list of cases, or - for stdin")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    # Anything that prints to stdout (a library's stray print) would corrupt the JSON the Go side
    # parses: send it to stderr and keep the real stdout for the result alone.
    out, sys.stdout = sys.stdout, sys.stderr

    with (sys.stdin if args.cases == "-" else open(args.cases)) as f:
        cases = json.load(f)
    if not isinstance(cases, list):
        sys.exit("torch_peer: --cases must hold a JSON list")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_peer: CUDA is not available to torch %s" % torch.__version__)
    device = torch.device(args.device)
    if cuda and device.index is None:  # "cuda" alone: the current device, named explicitly
        device = torch.device("cuda", torch.cuda.current_device())
    if cuda:
        torch.cuda.set_device(device)  # events and streams below belong to the current device
    torch.manual_seed(args.seed)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    results = []
    with torch.inference_mode():
        for i, case in enumerate(cases):
            log("[%d/%d] %s" % (i + 1, len(cases), case.get("name", "?")))
            results.append(run_case(case, device, flush, cuda))
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(device) if cuda else "cpu", "results": results}
    json.dump(doc, out, indent=1)
    out.write("\n")


if __name__ == "__main__":
    main()
