#!/usr/bin/env python3
"""touchstone's PyTorch external adapter: torch's own kernels for the golden ops torch has one for
(F.rms_norm, F.layer_norm, F.gelu, F.silu, F.embedding, F.linear, F.scaled_dot_product_attention,
index_copy_, torch.softmax) and transformers' way of sampling (torch.multinomial after its
top-k and top-p warpers), run in the case's storage dtype on TOUCHSTONE_TORCH_DEVICE (default
cuda when torch sees a GPU, else cpu), over the protocol of docs/external-backends.md.

Its verdicts are findings either way: a correct torch kernel that fails a tolerance is a
tolerance to fix; one that passes is evidence for the goldens. Where torch's kernel cannot
express a case (SDPA has no soft cap), the case is unsupported, saying so.
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from protocol import Unsupported, serve  # noqa: E402
from torchio import TorchIO  # noqa: E402

DEVICE = os.environ.get("TOUCHSTONE_TORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
IO = TorchIO(DEVICE)
get, put = IO.get, IO.put


def residual_add(p, i, o):
    put(o["out"], get(i["x"]) + get(i["residual"]))


def rmsnorm(p, i, o):
    x, w = get(i["x"]), get(i["weight"])
    if w.dtype != x.dtype:  # Gemma's 1 + w kept in fp32: its norm runs in fp32 (Gemma3RMSNorm)
        put(o["out"], F.rms_norm(x.float(), (x.shape[-1],), w.float(), p["eps"]))
    else:
        put(o["out"], F.rms_norm(x, (x.shape[-1],), w, p["eps"]))


def layernorm(p, i, o):
    x = get(i["x"])
    put(o["out"], F.layer_norm(x, (x.shape[-1],), get(i["gamma"]), get(i["beta"]), p["eps"]))


def gelu(p, i, o):
    put(o["out"], F.gelu(get(i["x"])))


def gelu_tanh(p, i, o):
    put(o["out"], F.gelu(get(i["x"]), approximate="tanh"))


def swiglu(p, i, o):
    put(o["out"], F.silu(get(i["gate"])) * get(i["up"]))


def geglu(p, i, o):
    approx = "tanh" if p["gelu"] == "tanh" else "none"
    put(o["out"], F.gelu(get(i["gate"]), approximate=approx) * get(i["up"]))


def softmax(p, i, o):
    put(o["out"], torch.softmax(get(i["x"]), dim=-1, dtype=torch.float32))


def embedding(p, i, o):
    table = get(i["table"])
    out = F.embedding(get(i["ids"]).long(), table)
    if "scale" in p:  # Gemma's embed_scale in the storage type, as transformers multiplies
        out = out * torch.tensor(p["scale"], dtype=table.dtype, device=table.device)
    put(o["out"], out)


def gemm(p, i, o):
    x, w = get(i["x"]), get(i["w"])
    bias = get(i["bias"]) if p.get("has_bias") else None
    if p["out_dtype"] == "f32":  # torch's 16-bit linear rounds to 16 bits: the fp32 product instead
        put(o["out"], F.linear(x.float(), w.float(), bias.float() if bias is not None else None))
    else:
        put(o["out"], F.linear(x, w, bias))


def gemm_fp8(p, i, o):
    """torch._scaled_mm: E4M3 x and w (w.t() column-major, as cuBLASLt wants), fp32 accumulation;
    per-token x scales [M, 1] with per-channel w scales [1, N] (row-wise), or 1x128 x blocks
    [M, K/128] with 128x128 w blocks [N/128, K/128] (block-wise, CUDA 12.9+ on Hopper)."""
    if not DEVICE.startswith("cuda"):
        raise Unsupported("gemm_fp8 on %s: torch._scaled_mm runs on CUDA only" % DEVICE)
    x, w = get(i["x"]), get(i["w"])
    xs, ws = get(i["x_scales"]), get(i["w_scales"])
    if x.dtype != torch.float8_e4m3fn or w.dtype != torch.float8_e4m3fn:
        raise Unsupported("gemm_fp8 with %s x and %s w: the cases' E4M3 only" % (x.dtype, w.dtype))
    m, k = x.shape
    n = w.shape[0]
    if k % 16 or n % 16:
        raise Unsupported("gemm_fp8 with K %d, N %d: torch._scaled_mm needs both multiples of 16" % (k, n))
    out_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[p["out_dtype"]]
    if p["scales"] == "channel":
        sa, sb = xs.reshape(m, 1), ws.reshape(1, n)
    else:
        # block-wise, as torch's own tests call it: the 1x128 activation scales [M, K/128]
        # outer-dim-major (M contiguous); the 128x128 weight scales [N/128, K/128] with the
        # K-block count padded to a multiple of 4 (cuBLAS's layout: torch does not check it, and
        # unpadded scales give inf or garbage), K-major, transposed with the weight
        kb = ws.shape[1]
        if kb % 4:
            ws = F.pad(ws, (0, 4 - kb % 4))
        sa, sb = xs.t().contiguous().t(), ws.t()
    try:
        out = torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
    except RuntimeError as e:
        raise Unsupported("gemm_fp8 with %s scales: torch._scaled_mm refuses them here: %s" % (p["scales"], str(e).splitlines()[0]))
    put(o["out"], out)


def no_cap(p, op):
    if p.get("softcap"):
        raise Unsupported("%s with softcap %g: F.scaled_dot_product_attention has no soft cap" % (op, p["softcap"]))


def attention_prefill(p, i, o):
    no_cap(p, "attention_prefill")
    q, k, v = (get(i[n]).transpose(1, 2) for n in ("q", "k", "v"))   # [B, heads, S, D]
    s = q.shape[2]
    mask, causal = None, p["causal"]
    if p.get("window"):
        mask = IO.memo(("window-mask", s, p["window"]), lambda: window_mask(s, p["window"]))
        causal = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=p["scale"],
                                         enable_gqa=True)
    put(o["out"], out.transpose(1, 2))


def window_mask(s, window):
    """The causal sliding-window mask, built once a model pass."""
    pos = torch.arange(s, device=DEVICE)
    return (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)


def attention_decode(p, i, o):
    no_cap(p, "attention_decode")
    q, kc, vc = get(i["q"]), get(i["k_cache"]), get(i["v_cache"])
    lens = IO.host(i["cache_lens"]).tolist()  # the host knows its sequences' lengths
    out = torch.empty_like(q)
    for b, n in enumerate(lens):
        lo = max(0, n - p["window"]) if p.get("window") else 0
        k = kc[b, lo:n].transpose(0, 1)[None]                          # [1, nKV, n, D]
        v = vc[b, lo:n].transpose(0, 1)[None]
        out[b] = F.scaled_dot_product_attention(q[b][None, :, None, :], k, v, scale=p["scale"],
                                                enable_gqa=True)[0, :, 0, :]
    put(o["out"], out)


def set_rows(p, i, o):
    out = get(i["dst"]).clone()
    out.index_copy_(0, get(i["rows"]).long(), get(i["src"]))
    put(o["out"], out)


def generator_seed(seed, step):
    """One torch generator seed per (seed, step): SplitMix64's finaliser over the pair."""
    z = (seed * 0x9E3779B97F4A7C15 + step + 0x6A09E667F3BCC909) % (1 << 64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % (1 << 64)
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % (1 << 64)
    return z ^ (z >> 31)


def sample(p, i, o):
    """transformers' generate() sampling: TemperatureLogitsWarper (logits / T),
    TopKLogitsWarper (logits below the k-th largest to -inf, its ties kept), TopPLogitsWarper
    (an ascending sort, softmax, cumsum; tokens whose cumulative mass is at most 1 - top_p
    removed, the most likely kept), softmax, then torch.multinomial with a generator seeded
    from (seed, step), the rows drawn in turn. Greedy is torch.argmax, as generate() takes it."""
    logits = get(i["logits"])
    if p["temperature"] == 0:
        put(o["tokens"], torch.argmax(logits, dim=-1))
        return
    x = logits / p["temperature"]
    if 0 < p["top_k"] < x.shape[-1]:
        kth = torch.topk(x, p["top_k"], dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if p["top_p"] < 1:
        ascending, order = torch.sort(x, descending=False)
        remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - p["top_p"]
        remove[..., -1:] = False
        x = x.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    g = torch.Generator(device=x.device)
    g.manual_seed(generator_seed(p["seed"], p["step"]))
    put(o["tokens"], torch.multinomial(x.softmax(dim=-1), 1, generator=g).squeeze(1))


OPS = {f.__name__: f for f in (residual_add, rmsnorm, layernorm, gelu, gelu_tanh, swiglu, geglu, softmax,
                               embedding, gemm, gemm_fp8, attention_prefill, attention_decode, set_rows, sample)}


if __name__ == "__main__":
    serve("torch", "%s-%s" % (torch.__version__, DEVICE), OPS, ["f16", "bf16", "f8e4m3"], IO.runner(OPS),
          timer=IO if DEVICE.startswith("cuda") else None)
