"""Kernel references: one small function per op (OPS); the cases are in cases.py.

Every op function takes a Draw (the case's random source) plus the case's keyword arguments and
returns (params, inputs, expected):
  params   -- exactly the manifest params docs/golden-format.md lists for the op, in its order;
  inputs   -- {name: tensor} in file order; f16 or bf16 (or f32 / i32 / f8e4m3) values the
              kernel receives;
  expected -- {name: float64 tensor}, computed from the inputs upcast to fp64 with no rounding
              to the 16-bit storage type in between, except where the op's contract rounds (the
              writer casts to f32 at the very end); an exact op's outputs (quant_fp8, and
              the fused quantisers' out and scales, moe_router's int32 ids) are given in their
              stored dtype instead and written as they are.

Every op but gemm_fp8 takes `dtype`, the 16-bit storage type of its case: "f16" (the default)
or "bf16" (softmax, logit_softcap, set_rows and quant_fp8 also "f32"); gemm_fp8's inputs are f8e4m3 and f32
and its `out_dtype` param names its output. Inputs are drawn in fp64 and rounded to fp32, then
to that type (to_f16, to_bf16); each intermediate rounding of the op's contract (the stored sum
of the residual norms, the normalised row of rmsnorm_gemm / layernorm_gemm, the activation of
swiglu_gemm / gpt_ffn) rounds to it too. dtype is no manifest param: the input files' dtype says
it. bf16 cases are named "bf16-..." (checked below).
"""

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import int4
from common.fp8 import FP8_BLOCK, QUANT_AMAX_FLOOR, quant_groups, quant_weight_blocks
from common.int4 import quant_int4
from common.dtypes import E4M3_MAX, F32, F64, F8E4M3, I32, TORCH_DTYPE, storage, to_e4m3
from common.rope_scaling import published_rope, rope_inv_freq
from kernels.inputs import (gelu_inputs, gemma_norm_weight, linear_weight, norm_weight, normal,
                            outlier_channels)

# What attention_decode caches hold at and beyond cache_lens[b]; exact in fp16, 9984 in bf16
# (the nearest bf16 value, which those cases store).
POISON = 1e4


def d(t):
    return t.to(F64)


# ---------------------------------------------------------------------------------------------
# One reference per op (docs/golden-format.md, "Ops")


def residual_add(r, *, shape, inplace, dist=normal(), dtype="f16"):
    cast = storage(dtype)
    x, residual = cast(dist(r, shape)), cast(dist(r, shape))
    return {"inplace": inplace}, {"x": x, "residual": residual}, {"out": d(x) + d(residual)}


def rmsnorm(r, *, T, H, eps, dist=normal(), w32=False, dtype="f16"):
    """w32: the weight in fp32, Gemma's 1 + w (gemma_norm_weight); the reference is the same norm,
    the weight used exactly (Gemma3RMSNorm's x.float() * rsqrt(mean(x^2) + eps) * (1 + w), rounded
    once to the storage type by the kernel)."""
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    weight = gemma_norm_weight(r, H, cast) if w32 else norm_weight(r, H, cast)
    out = F.rms_norm(d(x), (H,), d(weight), eps)
    return {"eps": eps}, {"x": x, "weight": weight}, {"out": out}


def layernorm(r, *, T, H, eps, dist=normal(), dtype="f16"):
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    gamma, beta = norm_weight(r, H, cast), cast(0.1 * r.randn((H,)))
    out = F.layer_norm(d(x), (H,), d(gamma), d(beta), eps)
    return {"eps": eps}, {"x": x, "gamma": gamma, "beta": beta}, {"out": out}


def layernorm_residual(r, *, T, H, eps, dist=normal(), dtype="f16"):
    cast = storage(dtype)
    x, residual = cast(dist(r, (T, H))), cast(dist(r, (T, H)))
    gamma, beta = norm_weight(r, H, cast), cast(0.1 * r.randn((H,)))
    s = d(x) + d(residual)
    # The fused kernel stores the sum in fp16 (bf16) and normalises that stored value, exactly
    # like the unfused residual_add -> layernorm pair; the contract therefore rounds the sum once
    # here.
    out = F.layer_norm(d(cast(s)), (H,), d(gamma), d(beta), eps)
    inputs = {"x": x, "residual": residual, "gamma": gamma, "beta": beta}
    return {"eps": eps}, inputs, {"sum": s, "out": out}


def rmsnorm_residual(r, *, T, H, eps, inplace, dist=normal(), w32=False, dtype="f16"):
    """w32: the weight in fp32, Gemma's 1 + w, as rmsnorm's."""
    cast = storage(dtype)
    x, residual = cast(dist(r, (T, H))), cast(dist(r, (T, H)))
    weight = gemma_norm_weight(r, H, cast) if w32 else norm_weight(r, H, cast)
    s = d(x) + d(residual)
    # As layernorm_residual: the kernel stores the sum in fp16 (bf16) (one rounding of the fp32
    # add, which to_f16 / to_bf16 reproduce: the fp64 sum of two fp16 or two bf16 values is exact,
    # so its rounding to fp32 is the kernel's fp32 add) and normalises that stored value, exactly
    # like the unfused residual_add -> rmsnorm pair.
    out = F.rms_norm(d(cast(s)), (H,), d(weight), eps)
    inputs = {"x": x, "residual": residual, "weight": weight}
    return {"eps": eps, "inplace": inplace}, inputs, {"sum": s, "out": out}


def rope_angles(positions, base, rope_dim, freq_divisor=None, long_divisor=None, long_from=None):
    """theta [T, rope_dim/2] in fp64: pos * base^(-2i/rope_dim) / div_i, div the token's divisor
    table: long_divisor for a token at a position >= long_from, else freq_divisor (no division
    without one). The divisors are the fp32 inputs of the op, used exactly."""
    inv = rope_inv_freq(base, rope_dim)[None, :]                            # [1, half]
    if freq_divisor is not None:
        div = d(freq_divisor)[None, :].expand(len(positions), -1)
        if long_divisor is not None:
            use_long = (positions.to(torch.int64) >= long_from)[:, None]
            div = torch.where(use_long, d(long_divisor)[None, :], div)
        inv = inv / div                                                     # [T, half]
    return d(positions)[:, None] * inv


def rope_ref(x, theta, rope_dim, attention_factor=None):
    """NeoX / HF rotate_half RoPE in fp64 on x [T, heads, D] at angles theta [T, rope_dim/2]:
    dim i pairs with i + rope_dim/2 (i < rope_dim/2); the rotated dims are multiplied by
    attention_factor (scaled RoPE), dims >= rope_dim pass through unchanged (partial rotary)."""
    half = rope_dim // 2
    cos, sin = torch.cos(theta)[:, None, :], torch.sin(theta)[:, None, :]   # [T, 1, half]
    x1, x2, rest = x[..., :half], x[..., half:rope_dim], x[..., rope_dim:]
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    if attention_factor is not None:
        rotated = rotated * attention_factor
    return torch.cat((rotated, rest), dim=-1)


def rope_hf(x, theta, rope_dim, attention_factor=1.0):
    """The transformers formulation (cos and sin times attention_scaling, then q * cos +
    rotate_half(q) * sin on the rotary dims), for the generation-time self-check only."""
    emb = torch.cat((theta, theta), dim=-1)
    cos = (emb.cos() * attention_factor)[:, None, :]
    sin = (emb.sin() * attention_factor)[:, None, :]
    xr = x[..., :rope_dim]
    x1, x2 = xr[..., : rope_dim // 2], xr[..., rope_dim // 2:]
    rotate_half = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * cos + rotate_half * sin, x[..., rope_dim:]), dim=-1)


def f32(x):
    """The fp32 value of a float (round to nearest even), as a Python float."""
    return float(torch.tensor(x, dtype=F64).to(F32))


def rope(r, *, nH, nKV, D, positions, base=None, rope_dim=None, dist=normal(), scaling=None,
         long_from=None, dtype="f16"):
    """scaling: a PUBLISHED_ROPE name (common/configs.py) whose tables the case uses, with its own
    base; long_from (longrope only) defaults to the config's original_max_position_embeddings."""
    cast = storage(dtype)
    rope_dim = D if rope_dim is None else rope_dim
    T = len(positions)
    q, k = cast(dist(r, (T, nH, D))), cast(dist(r, (T, nKV, D)))
    pos = torch.tensor(positions, dtype=I32)
    inputs = {"q": q, "k": k, "positions": pos}
    if scaling is None:
        assert long_from is None
        params = {"freq_base": float(base), "rope_dim": rope_dim, "head_dim": D}
        theta, af = rope_angles(pos, base, rope_dim), None
    else:
        _, sc = published_rope(scaling)
        assert base is None and rope_dim == D == sc.dim, (scaling, base, rope_dim, D, sc.dim)
        params = {"freq_base": sc.base, "rope_dim": rope_dim, "head_dim": D,
                  "attention_factor": f32(sc.attention_factor)}
        inputs["freq_divisor"] = torch.tensor(sc.freq_divisor, dtype=F64).to(F32)
        if sc.long_divisor is not None:
            long_from = sc.long_from if long_from is None else long_from
            params["long_from"] = int(long_from)
            inputs["long_divisor"] = torch.tensor(sc.long_divisor, dtype=F64).to(F32)
        else:
            assert long_from is None, scaling
        theta = rope_angles(pos, sc.base, rope_dim, inputs["freq_divisor"],
                            inputs.get("long_divisor"), params.get("long_from"))
        af = params["attention_factor"]
    q_out, k_out = rope_ref(d(q), theta, rope_dim, af), rope_ref(d(k), theta, rope_dim, af)
    for x, out in ((q, q_out), (k, k_out)):
        err = (out - rope_hf(d(x), theta, rope_dim, 1.0 if af is None else af)).abs().max().item()
        assert err < 1e-6, "rope reference disagrees with the HF formula (%g)" % err
    return params, inputs, {"q_out": q_out, "k_out": k_out}


# The fraction of a capped case's scaled scores that must lie beyond 0.5 * cap (where tanh has
# bent them by more than 7%): a case whose scores all sit in tanh's linear range would pass a
# kernel that ignores the cap.
CAP_BITES = 0.10


def check_cap_bites(q, k, scale, softcap):
    """Asserts that at least CAP_BITES of the scaled scores of q [B, heads, Sq, D] and k [B,
    kv heads, Sk, D] (fp64, any masking ignored) lie beyond +-0.5 * softcap."""
    group = q.shape[1] // k.shape[1]
    s = (q @ k.repeat_interleave(group, dim=1).transpose(-1, -2)) * scale
    beyond = (s.abs() > 0.5 * softcap).double().mean().item()
    assert beyond >= CAP_BITES, "softcap %g: only %.3f of the scores beyond half the cap" % (softcap, beyond)


def softcap_scores(s, softcap):
    """Gemma 2's attention logit soft-capping of scaled scores s, exactly as transformers'
    eager_attention_forward (models/gemma2/modeling_gemma2.py): the scaled scores divided by
    softcap, tanh, multiplied back; before the mask is added. softcap 0: none."""
    if not softcap:
        return s
    s = s / softcap
    s = torch.tanh(s)
    return s * softcap


def eager_capped(q, k, v, *, causal, scale, softcap, visible=None):
    """transformers' eager_attention_forward with attn_logit_softcapping on [B, heads, S, D]
    fp64 tensors (k, v with fewer heads: repeat_kv): scores q k^T * scaling, soft-capped, the
    causal (or `visible`) mask added as -inf, softmax, times v."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = softcap_scores((q @ k.transpose(-1, -2)) * scale, softcap)
    sq, sk = s.shape[-2], s.shape[-1]
    if visible is None and causal:
        visible = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None]
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa(q, k, v, *, causal, scale, visible=None, softcap=0.0):
    """torch SDPA on [B, heads, S, D] fp64 tensors. The math backend is pinned so the reduction
    order does not depend on which fused CPU kernel torch would pick. visible: a boolean mask
    [Sq, Sk] (True where the query sees the key) with causal False, for a causal diagonal other
    than is_causal's top-left one (query i sees keys 0..i). softcap > 0: SDPA has no soft-cap,
    so Gemma 2's eager attention (eager_capped) instead."""
    if softcap:
        return eager_capped(q, k, v, causal=causal, scale=scale, softcap=softcap, visible=visible)
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, is_causal=causal,
                                              scale=scale, enable_gqa=True)


def decode_sdpa(q, k, v, scale, window=0, softcap=0.0):
    """One sequence's decode attention in fp64: its new token's q [nH, D] over its cache k, v
    [n, nKV, D] (the first n positions, contiguous) -> [nH, D]; a sliding window (window > 0)
    keeps the last `window` positions (transformers: key > position - window)."""
    if window > 0:
        k, v = k[-window:], v[-window:]
    return sdpa(d(q)[None, :, None, :], d(k).transpose(0, 1)[None], d(v).transpose(0, 1)[None],
                causal=False, scale=scale, softcap=softcap)[0, :, 0, :]


def window_mask(pos, n, window):
    """[len(pos), n] boolean: query at position pos[i] sees key j <= pos[i] (and, with a sliding
    window, j > pos[i] - window: transformers' sliding_window)."""
    j, p = torch.arange(n)[None, :], pos[:, None]
    visible = j <= p
    return visible & (j > p - window) if window > 0 else visible


def offset_causal_sdpa(q, k, v, scale, window=0, softcap=0.0):
    """One sequence's prefill over its whole cache in fp64: its m new tokens' q [m, nH, D] over
    k, v [n, nKV, D] (the first n positions, contiguous, the new tokens' the last m): query i is
    at position n - m + i and sees positions 0 .. n - m + i (the last `window` of them with a
    sliding window) -> [m, nH, D]."""
    m, n = q.shape[0], k.shape[0]
    visible = window_mask(n - m + torch.arange(m), n, window)
    return sdpa(d(q).transpose(0, 1)[None], d(k).transpose(0, 1)[None], d(v).transpose(0, 1)[None],
                causal=False, scale=scale, visible=visible, softcap=softcap)[0].transpose(0, 1)


def attention_prefill(r, *, B, S, nH, nKV, D, qk=normal(), causal=True, scale=None, vdist=normal(),
                      window=0, softcap=0.0, dtype="f16"):
    """Causal (or full) GQA attention over whole sequences; window > 0 (causal only) is a
    sliding window, stored as params.window."""
    assert window == 0 or causal, "a sliding window needs causal attention"
    cast = storage(dtype)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k = cast(qk(r, (B, S, nH, D))), cast(qk(r, (B, S, nKV, D)))
    v = cast(vdist(r, (B, S, nKV, D)))
    # Files use [B, S, heads, D]; SDPA wants [B, heads, S, D].
    if window > 0:
        out = sdpa(d(q).transpose(1, 2), d(k).transpose(1, 2), d(v).transpose(1, 2),
                   causal=False, scale=scale, visible=window_mask(torch.arange(S), S, window),
                   softcap=softcap).transpose(1, 2)
    else:
        out = sdpa(d(q).transpose(1, 2), d(k).transpose(1, 2), d(v).transpose(1, 2),
                   causal=causal, scale=scale, softcap=softcap).transpose(1, 2)
    params = {"n_heads": nH, "n_kv_heads": nKV, "head_dim": D, "causal": causal, "scale": scale}
    if window > 0:
        params["window"] = window
    if softcap:
        check_cap_bites(d(q).transpose(1, 2), d(k).transpose(1, 2), scale, softcap)
        params["softcap"] = softcap
    return params, {"q": q, "k": k, "v": v}, {"out": out}


def attention_scores_softmax(r, *, B, Sq, Sk, nH, nKV, D, causal=True, scale=None, qk=normal(),
                             softcap=0.0, dtype="f16"):
    """softmax(scale q k^T + causal mask) per head in fp64, the queries the last Sq positions."""
    cast = storage(dtype)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k = cast(qk(r, (B, Sq, nH, D))), cast(qk(r, (B, Sk, nKV, D)))
    qh = d(q).transpose(1, 2)                                          # [B, nH, Sq, D]
    kh = d(k).transpose(1, 2).repeat_interleave(nH // nKV, dim=1)      # [B, nH, Sk, D]
    s = softcap_scores((qh @ kh.transpose(-1, -2)) * scale, softcap)
    if causal:
        hidden = torch.arange(Sk)[None, :] > (Sk - Sq + torch.arange(Sq)[:, None])
        s = s.masked_fill(hidden, float("-inf"))
    params = {"n_heads": nH, "n_kv_heads": nKV, "head_dim": D, "causal": causal, "scale": scale}
    if softcap:
        check_cap_bites(qh, kh, scale, softcap)
        params["softcap"] = softcap
    return params, {"q": q, "k": k}, {"probs": torch.softmax(s, dim=-1)}


def attention_decode(r, *, nH, nKV, D, L, cache_lens, scale=None, vdist=normal(), qk=normal(),
                     window=0, softcap=0.0, dtype="f16"):
    cast = storage(dtype)
    B = len(cache_lens)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q = cast(qk(r, (B, nH, D)))
    k_cache, v_cache = cast(qk(r, (B, L, nKV, D))), cast(vdist(r, (B, L, nKV, D)))
    for b, n in enumerate(cache_lens):
        assert 1 <= n <= L
        # a kernel that reads past cache_lens[b] gets visibly wrong (bf16 stores 9984)
        k_cache[b, n:] = POISON
        v_cache[b, n:] = POISON
    out = torch.empty((B, nH, D), dtype=F64)
    for b, n in enumerate(cache_lens):
        out[b] = decode_sdpa(q[b], k_cache[b, :n], v_cache[b, :n], scale, window, softcap)
    params = {"n_heads": nH, "n_kv_heads": nKV, "head_dim": D, "scale": scale}
    if window > 0:
        params["window"] = window
    if softcap:
        check_cap_bites(d(q)[:, :, None, :], d(k_cache[:, :min(cache_lens)]).transpose(1, 2), scale, softcap)
        params["softcap"] = softcap
    inputs = {"q": q, "k_cache": k_cache, "v_cache": v_cache,
              "cache_lens": torch.tensor(cache_lens, dtype=I32)}
    return params, inputs, {"out": out}


def paged_pool(r, *, q_rows, nH, nKV, D, block_size, lens, prefix_lens, max_blocks, spare, shared,
               qk, vdist, cast, kv_cast=None):
    """The paged pool of the paged attention ops (vLLM's layout), before any slot is poisoned:
    k_cache, v_cache [num_blocks, block_size, nKV, D] are one pool of pages for the whole batch,
    and sequence b's position p lives in page block_table[b, p // block_size] at slot p %
    block_size, for p < lens[b]. The pages go to the sequences in a shuffled order and `spare`
    pages more than they use stay unused, so that a table read one entry off, or not at all,
    reads other keys or the poison its caller puts in every slot no sequence holds (spare pages,
    a last page's slots at and past lens[b]); a row's entries after its sequence's last page are
    -1. shared=(a, b, n), a < b: sequences a and b share their first n pages, full pages inside
    both prefixes (n * block_size <= prefix_lens of both; prefix caching: the same page ids, so
    the same keys and values). max_blocks (the table's width) defaults to the longest
    sequence's page count. Draws q [q_rows, nH, D] (rounded by cast), the pool's keys and values
    (by kv_cast, default cast: the FP8 ops keep them float32 to quantise them), then the order.
    Returns (q, k_cache, v_cache, block_table, held), held [num_blocks, block_size] True at the
    slots some sequence holds."""
    B = len(lens)
    assert block_size in [2 ** i for i in range(9)], block_size   # 1 .. 256
    pages = [-(-n // block_size) for n in lens]
    max_blocks = max(pages) if max_blocks is None else max_blocks
    assert all(1 <= n <= max_blocks * block_size for n in lens), (lens, max_blocks)
    assert spare >= 1, spare
    sa, sb, n_shared = (0, 0, 0) if shared is None else shared
    assert shared is None or (sa < sb and n_shared >= 1 and min(prefix_lens[sa], prefix_lens[sb])
                              >= n_shared * block_size), shared
    num_blocks = sum(pages) - n_shared + spare
    kv_cast = cast if kv_cast is None else kv_cast
    q = cast(qk(r, (q_rows, nH, D)))
    shape = (num_blocks, block_size, nKV, D)
    k_cache, v_cache = kv_cast(qk(r, shape)), kv_cast(vdist(r, shape))
    order = r.rand((num_blocks,)).argsort().tolist()
    if order[0] == 0:  # sequence 0 never starts where a kernel that ignores the table reads
        order[:2] = order[1], order[0]
    order = iter(order)
    table = torch.full((B, max_blocks), -1, dtype=I32)
    held = torch.zeros((num_blocks, block_size), dtype=torch.bool)
    for b, n in enumerate(lens):
        for i in range(pages[b]):
            table[b, i] = table[sa, i] if b == sb and i < n_shared else next(order)
            held[table[b, i], :n - i * block_size] = True
    return q, k_cache, v_cache, table, held


def paged_kv(r, **pool):
    """paged_pool's 16-bit pool of attention_decode_paged and attention_prefill_paged, every slot
    no sequence holds poison. Returns (q, k_cache, v_cache, block_table)."""
    q, k_cache, v_cache, table, held = paged_pool(r, **pool)
    # a kernel that reads a slot no sequence holds gets visibly wrong (bf16 stores 9984)
    k_cache[~held] = POISON
    v_cache[~held] = POISON
    return q, k_cache, v_cache, table


def paged_gather(k_cache, v_cache, table, b, n):
    """Sequence b's first n positions gathered from the pool through its row of the table:
    contiguous k, v [n, nKV, D]."""
    p = torch.arange(n)
    page, slot = table[b, p // k_cache.shape[1]].long(), p % k_cache.shape[1]
    return k_cache[page, slot], v_cache[page, slot]


def paged_decode_ref(q, k_cache, v_cache, table, cache_lens, scale, window, softcap):
    """The paged decode ops' params and expected out [B, nH, D]: the new token of sequence b
    attends to its first cache_lens[b] positions gathered through its row of the table, over
    the pool's values k_cache, v_cache (16-bit, or an FP8 pool's dequantised fp64 values)."""
    B, nH, D = q.shape
    out = torch.empty((B, nH, D), dtype=F64)
    for b, n in enumerate(cache_lens):
        out[b] = decode_sdpa(q[b], *paged_gather(k_cache, v_cache, table, b, n), scale, window,
                             softcap)
    params = {"n_heads": nH, "n_kv_heads": k_cache.shape[2], "head_dim": D, "scale": scale}
    if window > 0:
        params["window"] = window
    if softcap:
        kg = paged_gather(k_cache, v_cache, table, 0, cache_lens[0])[0]
        check_cap_bites(d(q[:1])[:, :, None, :], d(kg).transpose(0, 1)[None], scale, softcap)
        params["softcap"] = softcap
    return params, out


def attention_decode_paged(r, *, nH, nKV, D, block_size, cache_lens, max_blocks=None, spare=2,
                           shared=None, scale=None, vdist=normal(), qk=normal(), window=0,
                           softcap=0.0, dtype="f16"):
    """attention_decode over a paged KV cache (paged_kv's pool, lens = cache_lens, the shared
    pages full in both sequences): the new token of sequence b attends to its first
    cache_lens[b] positions gathered through its row of the table. Draws q [B, nH, D], the
    pool's keys and values (as attention_decode draws its caches), then the order."""
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k_cache, v_cache, table = paged_kv(
        r, q_rows=len(cache_lens), nH=nH, nKV=nKV, D=D, block_size=block_size, lens=cache_lens,
        prefix_lens=cache_lens, max_blocks=max_blocks, spare=spare, shared=shared, qk=qk,
        vdist=vdist, cast=storage(dtype))
    params, out = paged_decode_ref(q, k_cache, v_cache, table, cache_lens, scale, window, softcap)
    inputs = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_table": table,
              "cache_lens": torch.tensor(cache_lens, dtype=I32)}
    return params, inputs, {"out": out}


def prefill_layout(seqs):
    """kv_lens and q_starts of a paged prefill's seqs [(prefix, new), ...]: each sequence's whole
    length, and where its new tokens' rows start in q (the last entry total_q)."""
    assert seqs and all(prefix >= 0 and new >= 1 for prefix, new in seqs), seqs
    starts = [0]
    for _, new in seqs:
        starts.append(starts[-1] + new)
    return [prefix + new for prefix, new in seqs], starts


def paged_prefill_ref(q, k_cache, v_cache, table, starts, kv_lens, scale, window, softcap):
    """The paged prefill ops' params and expected out [total_q, nH, D]: query i of sequence b is
    at position kv_len - q_len + i and attends causally to positions 0 .. kv_len - q_len + i
    (offset_causal_sdpa) gathered through its row of the table, over the pool's values (16-bit,
    or an FP8 pool's dequantised fp64 values)."""
    nH, D = q.shape[1:]
    out = torch.empty((starts[-1], nH, D), dtype=F64)
    for b, n in enumerate(kv_lens):
        rows = slice(starts[b], starts[b + 1])
        out[rows] = offset_causal_sdpa(q[rows], *paged_gather(k_cache, v_cache, table, b, n),
                                       scale, window, softcap)
    params = {"n_heads": nH, "n_kv_heads": k_cache.shape[2], "head_dim": D, "scale": scale}
    if window > 0:
        params["window"] = window
    if softcap:
        kg = paged_gather(k_cache, v_cache, table, 0, kv_lens[0])[0]
        rows = slice(starts[0], starts[1])
        check_cap_bites(d(q[rows]).transpose(0, 1)[None], d(kg).transpose(0, 1)[None], scale, softcap)
        params["softcap"] = softcap
    return params, out


def attention_prefill_paged(r, *, nH, nKV, D, block_size, seqs, max_blocks=None, spare=2,
                            shared=None, scale=None, vdist=normal(), qk=normal(), window=0,
                            softcap=0.0, dtype="f16"):
    """Prefill of new tokens against a cached prefix through a paged KV cache (chunked prefill,
    prefix caching; FlashInfer's batch prefill with a paged cache): seqs [(prefix, new), ...],
    one a sequence, new >= 1. q [total_q, nH, D] holds every sequence's new queries in sequence
    order, sequence b's the rows q_starts[b] .. q_starts[b+1]-1; the pool (paged_kv, lens =
    kv_lens = prefix + new) holds each sequence's prefix and its new tokens' keys and values,
    already appended; shared pages lie inside both sequences' prefixes. Query i of sequence b
    is at position kv_len - q_len + i and attends causally to positions 0 .. kv_len - q_len + i
    (paged_prefill_ref). Draws q, the pool's keys and values, then the order."""
    kv_lens, starts = prefill_layout(seqs)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k_cache, v_cache, table = paged_kv(
        r, q_rows=starts[-1], nH=nH, nKV=nKV, D=D, block_size=block_size, lens=kv_lens,
        prefix_lens=[prefix for prefix, _ in seqs], max_blocks=max_blocks, spare=spare,
        shared=shared, qk=qk, vdist=vdist, cast=storage(dtype))
    params, out = paged_prefill_ref(q, k_cache, v_cache, table, starts, kv_lens, scale, window,
                                    softcap)
    inputs = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_table": table,
              "q_starts": torch.tensor(starts, dtype=I32),
              "kv_lens": torch.tensor(kv_lens, dtype=I32)}
    return params, inputs, {"out": out}


# ---------------------------------------------------------------------------------------------
# FP8 KV cache (vLLM's and FlashInfer's kv_cache_dtype "fp8"): keys and values stored as E4M3
# codes of value / scale, one float32 scale for the tensor or one a KV head, by quant_fp8's
# static quantisation (docs/quantization.md). The scales are calibrated from the data the way
# engines calibrate them (amax / 448 over the cache, per tensor or per head) times `headroom`:
# below 1 some values saturate at +-448, as a calibration on other data would leave them.


def kv_scales(x, scale_heads, headroom):
    """float32 [scale_heads] = amax / 448 * headroom of x [..., heads, D] per head (or overall)."""
    a = x.to(F64).abs()
    amax = a.amax() if scale_heads == 1 else a.transpose(0, -2).reshape(a.shape[-2], -1).amax(1)
    return (amax.reshape(-1) / E4M3_MAX * headroom).clamp(min=1e-6).to(F32)


def kv_quant(x, scales):
    """E4M3 codes of x [..., heads, D] (float32) / its head's scale (float32 [1] or [heads])."""
    per = scales if scales.numel() > 1 else scales.expand(x.shape[-2])
    return to_e4m3(x.to(F32) / per[:, None])


def set_rows_fp8(r, *, R, heads, D, rows, scale_heads, headroom=1.0, dist=normal(), dtype="f16"):
    """The KV-cache append into an FP8 cache: dst [R, heads, D] (an earlier cache's codes) with
    src [T, heads, D] (f16, bf16 or f32) written at the distinct rows as e4m3(src / scale[head]),
    the division in float32. The scales come from src (kv_scales)."""
    T = len(rows)
    assert len(set(rows)) == T and 0 <= min(rows) and max(rows) < R, rows
    cast = (lambda t: t.to(F32)) if dtype == "f32" else storage(dtype)
    dst = to_e4m3((2.0 * r.randn((R, heads, D))).to(F32))
    src = cast(dist(r, (T, heads, D)))
    scale = kv_scales(src, scale_heads, headroom)
    idx = torch.tensor(rows, dtype=I32)
    out = dst.view(torch.uint8).clone()
    out[idx.long()] = kv_quant(src, scale).view(torch.uint8)
    return {}, {"dst": dst, "src": src, "rows": idx, "scale": scale}, {"out": out.view(F8E4M3)}


# The code every slot a kernel must not read holds in an FP8 cache: +448 times the scale, the
# largest value, so that a kernel that reads one is visibly wrong.
KV_FP8_POISON = 0x7E


def kv_quant_held(k, v, held, scale_heads, headroom):
    """An FP8 cache of float32 keys and values k, v [..., nKV, D], held [...] True at the
    positions a kernel reads: per tensor or per KV head scales calibrated over those positions
    alone (kv_scales), the codes kv_quant writes there and KV_FP8_POISON everywhere else.
    Returns (k codes, v codes, k_scale, v_scale)."""
    ks, vs = kv_scales(k[held], scale_heads, headroom), kv_scales(v[held], scale_heads, headroom)
    kc, vc = kv_quant(k, ks).view(torch.uint8), kv_quant(v, vs).view(torch.uint8)
    kc[~held], vc[~held] = KV_FP8_POISON, KV_FP8_POISON
    return kc.view(F8E4M3), vc.view(F8E4M3), ks, vs


def kv_dequant(codes, scales):
    """The fp64 values an FP8 cache's codes [..., nKV, D] stand for: code * the scale of its KV
    head (scales float32 [1] or [nKV])."""
    nKV = codes.shape[-2]
    return codes.to(F64) * (scales if scales.numel() > 1 else scales.expand(nKV)).to(F64)[:, None]


def attention_decode_fp8(r, *, nH, nKV, D, L, cache_lens, scale_heads, headroom=1.0, scale=None,
                         vdist=normal(), qk=normal(), softcap=0.0, dtype="f16"):
    """attention_decode over an FP8 cache: K and V drawn as attention_decode draws them, quantised
    per tensor or per KV head (kv_quant_held over the visible positions), positions past
    cache_lens[b] set to the largest code (448 times the scale: a kernel that reads them gets
    visibly wrong); the expected output is fp64 attention over code * scale."""
    cast = storage(dtype)
    B = len(cache_lens)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q = cast(qk(r, (B, nH, D)))
    k, v = qk(r, (B, L, nKV, D)).to(F32), vdist(r, (B, L, nKV, D)).to(F32)
    visible = torch.zeros((B, L), dtype=torch.bool)
    for b, n in enumerate(cache_lens):
        assert 1 <= n <= L
        visible[b, :n] = True
    kc, vc, ks, vs = kv_quant_held(k, v, visible, scale_heads, headroom)
    kd, vd = kv_dequant(kc, ks), kv_dequant(vc, vs)
    out = torch.empty((B, nH, D), dtype=F64)
    for b, n in enumerate(cache_lens):
        out[b] = decode_sdpa(q[b], kd[b, :n], vd[b, :n], scale, 0, softcap)
    params = {"n_heads": nH, "n_kv_heads": nKV, "head_dim": D, "scale": scale}
    if softcap:
        check_cap_bites(d(q)[:, :, None, :], kd[:, :min(cache_lens)].transpose(1, 2), scale, softcap)
        params["softcap"] = softcap
    inputs = {"q": q, "k_cache": kc, "v_cache": vc, "cache_lens": torch.tensor(cache_lens, dtype=I32),
              "k_scale": ks, "v_scale": vs}
    return params, inputs, {"out": out}


def paged_fp8_pool(r, *, scale_heads, headroom, dtype, **pool):
    """paged_pool drawn as the 16-bit paged ops draw it (q, the pool's keys and values, the page
    order), K and V kept float32 and quantised as attention_decode_fp8 quantises its caches
    (kv_quant_held over the slots some sequence holds), every other slot KV_FP8_POISON.
    Returns (q, k codes, v codes, block_table, k_scale, v_scale)."""
    q, k, v, table, held = paged_pool(r, cast=storage(dtype), kv_cast=lambda t: t.to(F32), **pool)
    kc, vc, ks, vs = kv_quant_held(k, v, held, scale_heads, headroom)
    return q, kc, vc, table, ks, vs


def attention_decode_paged_fp8(r, *, nH, nKV, D, block_size, cache_lens, scale_heads,
                               headroom=1.0, max_blocks=None, spare=2, shared=None, scale=None,
                               vdist=normal(), qk=normal(), window=0, softcap=0.0, dtype="f16"):
    """attention_decode_paged over an FP8 paged pool (vLLM's paged cache with kv_cache_dtype
    "fp8"): the pool of attention_decode_paged, quantised per tensor or per KV head
    (paged_fp8_pool); the expected output is attention_decode_paged's over code * scale, in
    fp64, as attention_decode_fp8's."""
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, kc, vc, table, ks, vs = paged_fp8_pool(
        r, q_rows=len(cache_lens), nH=nH, nKV=nKV, D=D, block_size=block_size, lens=cache_lens,
        prefix_lens=cache_lens, max_blocks=max_blocks, spare=spare, shared=shared, qk=qk,
        vdist=vdist, scale_heads=scale_heads, headroom=headroom, dtype=dtype)
    params, out = paged_decode_ref(q, kv_dequant(kc, ks), kv_dequant(vc, vs), table, cache_lens,
                                   scale, window, softcap)
    inputs = {"q": q, "k_cache": kc, "v_cache": vc, "block_table": table,
              "cache_lens": torch.tensor(cache_lens, dtype=I32), "k_scale": ks, "v_scale": vs}
    return params, inputs, {"out": out}


def attention_prefill_paged_fp8(r, *, nH, nKV, D, block_size, seqs, scale_heads, headroom=1.0,
                                max_blocks=None, spare=2, shared=None, scale=None, vdist=normal(),
                                qk=normal(), window=0, softcap=0.0, dtype="f16"):
    """attention_prefill_paged over an FP8 paged pool: its seqs, pool and table, the pool
    quantised as attention_decode_paged_fp8's (paged_fp8_pool); the expected output is
    attention_prefill_paged's over code * scale, in fp64."""
    kv_lens, starts = prefill_layout(seqs)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, kc, vc, table, ks, vs = paged_fp8_pool(
        r, q_rows=starts[-1], nH=nH, nKV=nKV, D=D, block_size=block_size, lens=kv_lens,
        prefix_lens=[prefix for prefix, _ in seqs], max_blocks=max_blocks, spare=spare,
        shared=shared, qk=qk, vdist=vdist, scale_heads=scale_heads, headroom=headroom,
        dtype=dtype)
    params, out = paged_prefill_ref(q, kv_dequant(kc, ks), kv_dequant(vc, vs), table, starts,
                                    kv_lens, scale, window, softcap)
    inputs = {"q": q, "k_cache": kc, "v_cache": vc, "block_table": table,
              "q_starts": torch.tensor(starts, dtype=I32),
              "kv_lens": torch.tensor(kv_lens, dtype=I32), "k_scale": ks, "v_scale": vs}
    return params, inputs, {"out": out}


def swiglu(r, *, T, ffn, gate=normal(), up_std=1.0, dtype="f16"):
    """up_std scales up (1 for every fp16 case: the same draws times 1.0)."""
    cast = storage(dtype)
    g, up = cast(gate(r, (T, ffn))), cast(up_std * r.randn((T, ffn)))
    return {}, {"gate": g, "up": up}, {"out": F.silu(d(g)) * d(up)}


def geglu(r, *, T, ffn, gelu, gate=gelu_inputs(), up=normal(), dtype="f16"):
    """Gemma's MLP activation, act_fn(gate_proj(x)) * up_proj(x) with gelu_pytorch_tanh (gelu
    "tanh"), or the exact GELU of other GeGLU models ("erf"), in fp64 from the 16-bit gate and up:
    the kernel rounds once. gelu_inputs puts a quarter of the gates in [-4, -1], where the two
    GELUs differ by more than 1%."""
    cast = storage(dtype)
    g, u = cast(gate(r, (T, ffn))), cast(up(r, (T, ffn)))
    out = F.gelu(d(g), approximate="tanh" if gelu == "tanh" else "none") * d(u)
    return {"gelu": gelu}, {"gate": g, "up": u}, {"out": out}


def gemm_swiglu(r, *, T, H, ffn, dist=normal(), dtype="f16"):
    """silu(x Wg^T) * (x Wu^T) over the stacked weight [Wg; Wu] (Phi-3's gate_up_proj)."""
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    w = torch.cat([linear_weight(r, ffn, H, cast), linear_weight(r, ffn, H, cast)])
    acc = d(x) @ d(w).T
    return {}, {"x": x, "w_gate_up": w}, {"out": F.silu(acc[:, :ffn]) * acc[:, ffn:]}


def _norm_gemm(r, T, H, N, bias, residual, eps, dist, draw_norm, norm, cast):
    """A pre-norm and the projection after it: norm(s, vectors) of x (or of the stored sum x +
    residual, itself an output), rounded to the storage type (cast: to_f16 or to_bf16) as the norm
    op stores it, then x' W^T (+ bias) in fp64. draw_norm(r) draws the norm's vectors ({name:
    [H]} of the storage type) after x and residual and before W, in that order."""
    x = cast(dist(r, (T, H)))
    inputs, outs = {"x": x}, {}
    s = d(x)
    if residual:
        res = cast(dist(r, (T, H)))
        inputs["residual"] = res
        s = d(cast(d(x) + d(res)))
        outs["sum"] = d(x) + d(res)
    vecs = draw_norm(r)
    w = linear_weight(r, N, H, cast)
    inputs.update(vecs, w=w)
    h = d(cast(norm(s, {k: d(v) for k, v in vecs.items()})))
    out = h @ d(w).T
    if bias:
        inputs["bias"] = cast(r.randn((N,)))
        out = out + d(inputs["bias"])
    outs["out"] = out
    return {"eps": eps, "has_bias": bias, "has_residual": residual}, inputs, outs


def rmsnorm_gemm(r, *, T, H, N, bias, residual, eps=1e-6, dist=normal(), dtype="f16"):
    """The RMSNorm families' pre-norm and the projection after it (_norm_gemm)."""
    cast = storage(dtype)
    return _norm_gemm(r, T, H, N, bias, residual, eps, dist,
                      lambda r: {"weight": norm_weight(r, H, cast)},
                      lambda s, v: F.rms_norm(s, (H,), v["weight"], eps), cast)


def layernorm_gemm(r, *, T, H, N, bias, residual, eps=1e-5, dist=normal(), dtype="f16"):
    """A LayerNorm family's pre-norm and the projection after it (GPT-2's ln_1 and c_attn;
    _norm_gemm)."""
    cast = storage(dtype)
    return _norm_gemm(r, T, H, N, bias, residual, eps, dist,
                      lambda r: {"gamma": norm_weight(r, H, cast),
                                 "beta": cast(0.1 * r.randn((H,)))},
                      lambda s, v: F.layer_norm(s, (H,), v["gamma"], v["beta"], eps), cast)


def swiglu_gemm(r, *, T, ffn, N, bias=False, gate=normal(2.0), dtype="f16"):
    """(silu(gate) * up) rounded to fp16 (bf16) as swiglu stores it, then a W^T (+ bias) in fp64:
    a SwiGLU FFN's activation and its down projection."""
    cast = storage(dtype)
    g, up = cast(gate(r, (T, ffn))), cast(normal()(r, (T, ffn)))
    w = linear_weight(r, N, ffn, cast)
    inputs = {"gate": g, "up": up, "w": w}
    out = d(cast(F.silu(d(g)) * d(up))) @ d(w).T
    if bias:
        inputs["bias"] = cast(r.randn((N,)))
        out = out + d(inputs["bias"])
    return {"has_bias": bias}, inputs, {"out": out}


# gpt_ffn's contract for the activation it rounds once (docs/golden-format.md, "Allowances"): the
# pre-activation x W1^T + b1 accumulated in fp32, within PRE_ACCURACY_ULPS 2^-24 sqrt(H) (|pre| +
# ||x * w1_j||_2) of the exact one (a 6-sigma bound of a round-to-nearest walk over H products is
# sqrt(6H) 2^-24 ||x * w1_j||; 8 sqrt(H) also covers the truncating fp32 adds of tensor cores'
# 16-product blocks, about H/16 of them), and the GELU in fp32 within GELU_REL_ACCURACY of the exact
# one (cuda/kernels/gelu.cu: 1.2e-5 over every fp16 input). GELU_MAX_SLOPE bounds |GELU'| of both
# forms (1.129 at x = sqrt(2)).
PRE_ACCURACY_ULPS = 8.0
GELU_REL_ACCURACY = 1.2e-5
GELU_MAX_SLOPE = 1.13


def rounded_activation_allowance(exact, pre_err, cast, w):
    """The per-output allowance [T, N] of activations exact = gelu(pre) [T, F] (fp64, before their
    one rounding by `cast`) that a kernel may round to a neighbouring value, then multiplies by
    w [N, F]: where the contract's error of an activation (GELU_MAX_SLOPE pre_err, the
    pre-activation's, plus GELU_REL_ACCURACY of it) reaches a rounding boundary, it may land on
    either side, and each output of its row may move by that difference times |w|. Elsewhere
    nothing: a kernel that rounds differently where the contract leaves no doubt still fails."""
    err = GELU_MAX_SLOPE * pre_err + GELU_REL_ACCURACY * exact.abs()
    rounded = d(cast(exact))
    flip = torch.maximum((d(cast(exact - err)) - rounded).abs(), (d(cast(exact + err)) - rounded).abs())
    return flip @ w.abs().T


def gpt_ffn(r, *, T, H, ffn, gelu, bias=True, dist=normal(), b1=(0.0, 1.0), b2_std=1.0,
            dtype="f16"):
    """GPT-2's MLP: gelu(x W1^T + b1) rounded to fp16 (bf16) once, then a W2^T + b2, in fp64. b1
    is drawn as (mean, std); a mean of -3 with small x puts every pre-activation in the negative
    tail, where erf and tanh GELU differ by ~10% (4e-4 absolute). out_allowance is what a kernel
    within the contract may add where an activation may round the other way
    (rounded_activation_allowance)."""
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    w1, w2 = linear_weight(r, ffn, H, cast), linear_weight(r, H, ffn, cast)
    inputs = {"x": x, "w1": w1, "w2": w2}
    pre = d(x) @ d(w1).T
    if bias:
        inputs["b1"] = cast(b1[0] + b1[1] * r.randn((ffn,)))
        inputs["b2"] = cast(b2_std * r.randn((H,)))
        pre = pre + d(inputs["b1"])
    exact = F.gelu(pre, approximate="tanh" if gelu == "tanh" else "none")
    act = d(cast(exact))
    out = act @ d(w2).T
    if bias:
        out = out + d(inputs["b2"])
    pre_err = 2.0**-24 * PRE_ACCURACY_ULPS * math.sqrt(H) * (
        pre.abs() + ((d(x) ** 2) @ (d(w1) ** 2).T).sqrt())
    allowance = rounded_activation_allowance(exact, pre_err, cast, d(w2))
    return {"gelu": gelu, "has_bias": bias}, inputs, {"out": out, "out_allowance": allowance}


def swiglu_ffn(r, *, T, H, ffn, dist=normal(), dtype="f16"):
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    w_gate, w_up = linear_weight(r, ffn, H, cast), linear_weight(r, ffn, H, cast)
    w_down = linear_weight(r, H, ffn, cast)
    act = F.silu(d(x) @ d(w_gate).T) * (d(x) @ d(w_up).T)
    inputs = {"x": x, "w_gate": w_gate, "w_up": w_up, "w_down": w_down}
    return {}, inputs, {"out": act @ d(w_down).T}


def gelu(r, *, T, H, dist=gelu_inputs(), inplace=False, dtype="f16"):
    """inplace: the kernel writes out over x (the activation of an FFN in its own buffer)."""
    x = storage(dtype)(dist(r, (T, H)))
    return {"inplace": inplace}, {"x": x}, {"out": F.gelu(d(x))}


def gelu_tanh(r, *, T, H, dist=gelu_inputs(), inplace=False, dtype="f16"):
    x = storage(dtype)(dist(r, (T, H)))
    return {"inplace": inplace}, {"x": x}, {"out": F.gelu(d(x), approximate="tanh")}


def gelu_scale(r, *, T, H, gelu, scale, dist=gelu_inputs(), inplace=False, dtype="f16"):
    """GELU (erf or tanh) times scale, in fp64 with no rounding between the two: the kernel keeps
    the GELU in fp32 through the product. scale is taken as the float32 the kernel receives (the
    params store that value), so a scale not exact in fp32 is no error of the kernel's."""
    s = float(torch.tensor(scale, dtype=F32))
    x = storage(dtype)(dist(r, (T, H)))
    out = F.gelu(d(x), approximate="tanh" if gelu == "tanh" else "none") * s
    return {"gelu": gelu, "scale": s, "inplace": inplace}, {"x": x}, {"out": out}


def pos_embedding(r, *, H, P, positions, dtype="f16"):
    cast = storage(dtype)
    T = len(positions)
    x, table = cast(r.randn((T, H))), cast(r.randn((P, H)))
    pos = torch.tensor(positions, dtype=I32)
    assert 0 <= min(positions) and max(positions) < P
    out = d(x) + d(table)[pos.long()]
    return {}, {"x": x, "table": table, "positions": pos}, {"out": out}


def embedding(r, *, V, H, T, scale=None, dist=None, dtype="f16"):
    """scale: Gemma's embed_scale (sqrt(hidden)), which Gemma3TextScaledWordEmbedding keeps in
    fp32 and multiplies in the storage type, embed(ids) * embed_scale.to(dtype): the params hold
    that rounded value, and the expected out is the product rounded once to the storage type (two
    16-bit values multiply exactly in fp32), inf where it passes the type's range, as torch gives
    it: an exact op, stored as f32 (EXACT_OPS in cases.py). No scale: the bit-exact gather."""
    ids = r.randint(0, V, (T,))
    if T > 1:  # always touch the first and the last row of the table
        ids[0], ids[-1] = V - 1, 0
    cast = storage(dtype)
    table = cast(r.randn((V, H)) if dist is None else dist(r, (V, H)))
    if scale is None:
        return {}, {"ids": ids, "table": table}, {"out": d(table)[ids.long()]}
    s = torch.tensor(scale, dtype=F64).to(F32).to(table.dtype)      # embed_scale.to(dtype)
    out = table[ids.long()] * s                                      # transformers' product
    once = (d(table)[ids.long()] * d(s)).to(F32).to(table.dtype)     # exact, then one rounding
    assert torch.equal(out.view(torch.int16), once.view(torch.int16)), "the product rounds twice"
    return {"scale": float(s)}, {"ids": ids, "table": table}, {"out": out.to(F32)}


def set_rows(r, *, R, row, rows, dtype="f16"):
    """The KV-cache append: dst [R, *row] with src [T, *row] written at the distinct rows."""
    T = len(rows)
    assert len(set(rows)) == T and 0 <= min(rows) and max(rows) < R, rows
    cast = (lambda t: t.to(F32)) if dtype == "f32" else storage(dtype)
    dst, src = cast(r.randn((R,) + tuple(row))), cast(r.randn((T,) + tuple(row)))
    idx = torch.tensor(rows, dtype=I32)
    out = d(dst).clone()
    out.index_copy_(0, idx.long(), d(src))
    return {}, {"dst": dst, "src": src, "rows": idx}, {"out": out}


def gemm(r, *, M, N, K, has_bias, out_dtype, dist=normal(), dtype="f16"):
    """out_dtype: the kernel's output, the input's 16-bit type or f32 (f16 in: f16 or f32; bf16
    in: bf16 or f32)."""
    if out_dtype not in (dtype, "f32"):
        raise ValueError("gemm: %s in, %s out" % (dtype, out_dtype))
    cast = storage(dtype)
    x, w = cast(dist(r, (M, K))), linear_weight(r, N, K, cast)
    out = d(x) @ d(w).T
    inputs = {"x": x, "w": w}
    if has_bias:
        inputs["bias"] = cast(r.randn((N,)))
        out = out + d(inputs["bias"])
    return {"has_bias": has_bias, "out_dtype": out_dtype}, inputs, {"out": out}


def softmax(r, *, T, N, dtype, dist=normal(std=2.0), mask=None):
    x = dist(r, (T, N))
    x = x.to(F32) if dtype == "f32" else storage(dtype)(x)
    if mask is not None:
        m = mask(r, (T, N))
        assert not m.all(dim=-1).any(), "a softmax row must keep at least one finite value"
        x[m] = -math.inf
    if not torch.isfinite(x).any(dim=-1).all():
        raise ValueError("softmax row without a finite value")
    return {}, {"x": x}, {"out": torch.softmax(d(x), dim=-1)}


def logit_softcap(r, *, T, V, softcap, dtype, dist=normal(), inplace=False, infs=()):
    """Gemma 2's final logit soft-capping as transformers' Gemma2ForCausalLM writes it, `logits =
    logits / cap; logits = torch.tanh(logits); logits = logits * cap`, in fp64 on the logits the
    kernel receives: f32 (the engine's, the lm-head gemm's fp32 output) or the 16-bit storage type
    (dtype). softcap is taken as the float32 the kernel receives (the params store that value).
    infs: (row, col, sign) logits set to sign * inf after the rounding (fp16 logits past 65504):
    tanh(±inf) = ±1, so their out is ±cap."""
    cap = float(torch.tensor(softcap, dtype=F32))
    x = dist(r, (T, V))
    x = x.to(F32) if dtype == "f32" else storage(dtype)(x)
    for row, col, sign in infs:
        x[row, col] = sign * math.inf
    out = d(x) / cap
    out = torch.tanh(out)
    out = out * cap
    return {"softcap": cap, "inplace": inplace}, {"x": x}, {"out": out}


# ---------------------------------------------------------------------------------------------
# FP8 quantisation (docs/quantization.md). The arithmetic is exact (a maximum, two correctly
# rounded float32 divisions, one conversion), so the expected outputs are what a kernel must
# write, bit for bit: the f8e4m3 bytes and the float32 scales, not fp64 references.

def reciprocal_traps(r, s, count):
    """Up to `count` float32 values v, random signs, for which e4m3(v / s) != e4m3(v * (1 / s)):
    quotients within a few ulps of a midpoint between two f8e4m3 neighbours, where the product
    with the reciprocal (rounded twice) lands on the other side. A kernel that multiplies by
    1 / s fails on them; random float32 draws rarely hit one (16-bit inputs more often: their
    quotient may be a tie exactly). s: a float32 scalar tensor. None found
    (some scales have none): an empty tensor."""
    pos = torch.arange(0x7F, dtype=torch.int32).to(torch.uint8).view(F8E4M3).to(F32)
    mid = (pos[1:] + pos[:-1]) / 2                       # codes 0..0x7E are increasing
    near = (mid * s).view(torch.int32)
    cands = torch.cat([(near + k).view(F32) for k in range(-4, 5)])
    differs = to_e4m3(cands / s).view(torch.uint8) != to_e4m3(cands * (1 / s)).view(torch.uint8)
    found = torch.unique(cands[differs])
    if found.numel() == 0:
        return found
    pick = found[r.randint(0, found.numel(), (count,)).long()]
    return torch.where(r.rand((count,)) < 0.5, -pick, pick)


def plant_reciprocal_traps(r, x, G, per_group):
    """x (float32 [T, H]) with per_group reciprocal_traps of each group's scale written at random
    places of the group other than its largest |x|: the traps stay below the amax (|v / s| <
    448), so every scale is unchanged (checked)."""
    T, H = x.shape
    x = x.clone()
    _, scales = quant_groups(x, G)
    for t in range(T):
        for g in range(H // G):
            traps = reciprocal_traps(r, scales[t, g], per_group)
            group = x[t, g * G:(g + 1) * G]
            top = int(group.abs().argmax())
            cols = [int(c) for c in r.rand((G,)).argsort() if int(c) != top][:traps.numel()]
            group[cols] = traps
    assert torch.equal(quant_groups(x, G)[1], scales), "a trap moved a scale"
    return x


def quant_fp8(r, *, T, H, mode, group_size=None, scale=None, dist=normal(), traps=0,
              dtype="f16"):
    """FP8 E4M3 activation quantisation of x [T, H] (f16, bf16 or f32; f32 keeps inf and NaN):
    dynamic, a float32 scale per group of group_size elements of a row (G = H: per token;
    quant_groups), or static, q = e4m3(x / scale) with the given scale (its float32, an input
    tensor [1] as a checkpoint's activation scale is). Static cases have no group_size.
    traps (f32 only): reciprocal_traps planted, that many per group (dynamic) or in the whole
    tensor (static)."""
    x = dist(r, (T, H))
    x = x.to(F32) if dtype == "f32" else storage(dtype)(x)
    if traps and dtype != "f32":
        raise ValueError("quant_fp8: traps need f32 inputs (a 16-bit x would round them)")
    if mode == "dynamic":
        if scale is not None or not (isinstance(group_size, int) and group_size > 0 and
                                     H % group_size == 0):
            raise ValueError("quant_fp8 dynamic: group_size %r of %d, scale %r"
                             % (group_size, H, scale))
        if traps:
            x = plant_reciprocal_traps(r, x, group_size, traps)
        q, scales = quant_groups(x, group_size)
        return {"mode": mode, "group_size": group_size}, {"x": x}, {"out": q, "scales": scales}
    if mode != "static" or group_size is not None or scale is None or not scale > 0:
        raise ValueError("quant_fp8 %s: group_size %r, scale %r" % (mode, group_size, scale))
    s = torch.tensor([scale], dtype=F64).to(F32)
    if traps:
        x = x.clone()
        v = reciprocal_traps(r, s[0], traps)
        x.view(-1)[r.rand((T * H,)).argsort()[:v.numel()]] = v
    return {"mode": mode}, {"x": x, "scale": s}, {"out": to_e4m3(x.to(F32) / s)}


# ---------------------------------------------------------------------------------------------
# FP8 GEMM (w8a8): f8e4m3 activations and weights with float32 scales, as serving engines run an
# FP8 checkpoint. The inputs are made the way a checkpoint and an engine make them: the weight
# quantised once, statically (quant_weight_blocks), the activations dynamically by quant_fp8's
# spec (quant_groups). The expected output is the exact product of the dequantised operands, in
# float64; the kernel's fp32 accumulation and its rounding to out_dtype are the tolerance's.

def dequant_f64(q, scales, block_n, block_k):
    """float(q) * s in float64 for q f8e4m3 [R, C] and scales [ceil(R / block_n), C / block_k]
    (each element times the scale of the block holding it): exact, a 4-bit significand times a
    float32 fits a float64."""
    R, C = q.shape
    s = d(scales).repeat_interleave(block_n, dim=0)[:R].repeat_interleave(block_k, dim=1)
    return d(q.to(F32)) * s


def gemm_fp8(r, *, M, N, K, scales, out_dtype, dist=normal(), wdist=None):
    """The FP8 GEMM of a w8a8 serving engine: out [M, N] = (x * x_scales) (w * w_scales)^T with
    x f8e4m3 [M, K], w f8e4m3 [N, K] and float32 scales, in float64 (no bias); the kernel
    accumulates in fp32 and writes out_dtype ("f16" or "bf16", a param: no 16-bit input tells
    it, and no case is named bf16-). scales:
      "block"   -- x_scales [M, K/128] (1x128 activation groups), w_scales [ceil(N/128), K/128]
                   (128x128 weight blocks, the last row-block partial when N % 128 != 0);
                   K % 128 == 0;
      "channel" -- x_scales [M, 1] (per token), w_scales [N, 1] (per output channel).
    Draws, in this order: activations X [M, K] from dist (float64, rounded to float32), then a
    weight W [N, K] from wdist (default: linear_weight's N(0, 1/K), rounded to float32). x and
    x_scales are quant_fp8's dynamic quantisation of X (quant_groups, groups of 128 or G = K), w
    and w_scales quant_weight_blocks of W (128 x 128 or 1 x K)."""
    if scales not in ("block", "channel") or out_dtype not in ("f16", "bf16"):
        raise ValueError("gemm_fp8: scales %r, out_dtype %r" % (scales, out_dtype))
    if scales == "block" and K % FP8_BLOCK:
        raise ValueError("gemm_fp8 block: K = %d is no multiple of %d" % (K, FP8_BLOCK))
    X = dist(r, (M, K)).to(F32)
    W = (wdist(r, (N, K)) if wdist is not None else
         linear_weight(r, N, K, lambda t: t.to(F32))).to(F32)
    if not (torch.isfinite(X).all() and torch.isfinite(W).all()):
        raise ValueError("gemm_fp8: a non-finite activation or weight")
    G, (bn, bk) = (FP8_BLOCK, (FP8_BLOCK, FP8_BLOCK)) if scales == "block" else (K, (1, K))
    x, x_scales = quant_groups(X, G)
    w, w_scales = quant_weight_blocks(W, bn, bk)
    if scales == "channel":  # the per-channel weight scale is quant_fp8's per-token one of W
        wq, ws = quant_groups(W, K)
        assert torch.equal(wq.view(torch.uint8), w.view(torch.uint8)) and torch.equal(ws, w_scales)
    out = dequant_f64(x, x_scales, 1, G) @ dequant_f64(w, w_scales, bn, bk).T
    params = {"scales": scales, "out_dtype": out_dtype}
    return params, {"x": x, "x_scales": x_scales, "w": w, "w_scales": w_scales}, {"out": out}


# ---------------------------------------------------------------------------------------------
# Fused FP8 activation quantisers (docs/quantization.md, "Fused quantisers"): the op before an
# FP8 GEMM and quant_fp8 in one kernel, defined as their unfused composition. The intermediate y
# is rounded to the storage type T exactly as the unfused op stores it (rmsnorm's or swiglu's out,
# the fp64 reference rounded through fp32 as every 16-bit output of the contract), then
# quantised by quant_fp8's spec (quant_groups, or e4m3(y / scale) with a static scale): out and
# scales are quant_fp8's exact function of that T-rounded y. A kernel computes y in fp32 in its
# own order, so its y may round to the other neighbour in T where the exact y lies within its
# fp32 error of a rounding boundary; the tolerance (golden/tolerances.yaml) allows what that can
# move, the selftest measures it on these cases.


def _quantise(y, mode, group_size, scale):
    """quant_fp8 of the T-rounded y [T, H]: (params, extra inputs, {out, scales}) for a dynamic
    quantisation in groups of group_size or a static one with the float32 of scale."""
    T, H = y.shape
    if mode == "dynamic":
        if scale is not None or not (isinstance(group_size, int) and group_size > 0 and
                                     H % group_size == 0):
            raise ValueError("dynamic: group_size %r of %d, scale %r" % (group_size, H, scale))
        q, scales = quant_groups(y, group_size)
        return {"mode": mode, "group_size": group_size}, {}, {"out": q, "scales": scales}
    if mode != "static" or group_size is not None or scale is None or not scale > 0:
        raise ValueError("%s: group_size %r, scale %r" % (mode, group_size, scale))
    s = torch.tensor([scale], dtype=F64).to(F32)
    return {"mode": mode}, {"scale": s}, {"out": to_e4m3(y.to(F32) / s)}


def rmsnorm_quant_fp8(r, *, T, H, eps, mode, group_size=None, scale=None, residual=False,
                      inplace=False, dist=normal(), rdist=normal(), dtype="f16"):
    """RMSNorm, then FP8 quantisation of the normalised row: the pre-norm step of an FP8 model
    (vLLM's rms_norm_dynamic_per_token_quant, rms_norm_per_block_quant). s = x, or with a
    residual s = T(x + residual), itself the output sum (fp64, as rmsnorm_residual's); y =
    T(rms_norm(s, weight, eps)) as rmsnorm stores it; out, scales = quant_fp8(y). Draws x (dist),
    residual (rdist), then the weight: rmsnorm_residual's order. inplace (with a residual): the
    runner writes sum over residual, as a decode step updates its residual stream."""
    cast = storage(dtype)
    if inplace and not residual:
        raise ValueError("rmsnorm_quant_fp8: inplace needs a residual")
    x = cast(dist(r, (T, H)))
    inputs, sums = {"x": x}, {}
    s = d(x)
    if residual:
        res = cast(rdist(r, (T, H)))
        inputs["residual"] = res
        sums["sum"] = d(x) + d(res)
        s = d(cast(sums["sum"]))
    weight = norm_weight(r, H, cast)
    inputs["weight"] = weight
    y = cast(F.rms_norm(s, (H,), d(weight), eps))
    qp, qin, outs = _quantise(y, mode, group_size, scale)
    params = dict({"eps": eps}, **qp)
    params.update(has_residual=residual, inplace=inplace)
    inputs.update(qin)
    outs.update(sums)
    return params, inputs, outs


def swiglu_quant_fp8(r, *, T, ffn, mode, group_size=None, scale=None, gate=normal(2.0),
                     up=normal(), dtype="f16"):
    """SwiGLU, then FP8 quantisation of the activation: the input of an FP8 down projection
    (vLLM's silu_and_mul_quant). y = T(silu(gate) * up) as swiglu stores it; out, scales =
    quant_fp8(y). Draws gate, then up."""
    cast = storage(dtype)
    g, u = cast(gate(r, (T, ffn))), cast(up(r, (T, ffn)))
    y = cast(F.silu(d(g)) * d(u))
    qp, qin, outs = _quantise(y, mode, group_size, scale)
    return qp, dict({"gate": g, "up": u}, **qin), outs



# ---------------------------------------------------------------------------------------------
# 4-bit weights (docs/quantization.md, "4-bit weights"): a Linear quantised per group of inputs
# and output column as AWQ and GPTQ checkpoints store it, and the product with 16-bit activations.


def gemm_w4a16(r, *, M, N, K, format, group_size, act_order=False, sym=False, dist=normal(),
               dtype="f16"):
    """out [M, N] = x @ W^T, W^T [K, N] the 4-bit weight dequantised to the storage type T,
    (q - z) * s rounded once (int4.dequant), the product in float64. format "awq": qweight
    [K, N/8], qzeros [K/G, N/8] (AWQ_PACK_ORDER), scales [K/G, N] in T; "gptq": qweight [K/8,
    N], qzeros [K/G, N/8] storing z - 1 (so asymmetric zero points are 1..15), scales, g_idx [K]
    (k // G, or with act_order the groups of a permutation's order: GPTQ's desc_act). Draws x
    (dist), W [N, K] (linear_weight), then act_order's permutation."""
    if format not in ("awq", "gptq") or K % group_size or N % 8 or K % 8:
        raise ValueError("gemm_w4a16: %s, G %d, N %d, K %d" % (format, group_size, N, K))
    if format == "awq" and (act_order or sym):
        raise ValueError("gemm_w4a16: AWQ has no act-order and stores zero points")
    cast = storage(dtype)
    x = cast(dist(r, (M, K)))
    W = linear_weight(r, N, K, lambda t: t.to(F32)).to(F64)
    ng = K // group_size
    groups = torch.arange(K) // group_size
    if act_order:
        order = r.randn((K,)).argsort()  # the order GPTQ quantises the inputs in
        groups = torch.empty(K, dtype=torch.int64)
        groups[order] = torch.arange(K) // group_size
    q, z, s = quant_int4(W.T, groups, ng, sym, zmin=1 if format == "gptq" else 0)
    scales = cast(s)
    wt = int4.dequant(q, z, scales, groups, TORCH_DTYPE[dtype])
    out = d(x) @ d(wt)
    params = {"format": format, "group_size": group_size, "act_order": act_order}
    if format == "awq":
        inputs = {"x": x, "qweight": int4.pack_awq(q), "qzeros": int4.pack_awq(z), "scales": scales}
    else:
        inputs = {"x": x, "qweight": int4.pack_gptq_weight(q), "qzeros": int4.pack_gptq_zeros(z),
                  "scales": scales, "g_idx": groups.to(I32)}
    return params, inputs, {"out": out}



# ---------------------------------------------------------------------------------------------
# Mixture of experts, as transformers 5 runs it (modeling_mixtral: MixtralTopKRouter and
# MixtralExperts; modeling_qwen3_moe: Qwen3MoeTopKRouter with norm_topk_prob): the router's
# softmax and top-k over the gate linear's logits, then the SwiGLU experts each token was routed
# to, weighted by the router and summed.


def check_tie_rule(p, ids):
    """ids [T, k] must be the k largest of p [T, E] per row, highest first, equal values to the
    lower index: along a row the values do not increase and equal neighbours have increasing
    ids, and every expert left out is below the k-th value, or equal to it with a higher index.
    Raises AssertionError naming the first row that breaks the rule."""
    T, E = p.shape
    ids = ids.long()
    v = p.gather(1, ids)
    bad = (v[:, 1:] > v[:, :-1]) | ((v[:, 1:] == v[:, :-1]) & (ids[:, 1:] <= ids[:, :-1]))
    left_out = torch.ones((T, E), dtype=torch.bool).scatter_(1, ids, False)
    col = torch.arange(E)[None, :]
    last_v, last_i = v[:, -1:], ids[:, -1:]
    beats = left_out & ((p > last_v) | ((p == last_v) & (col < last_i)))
    rows = (bad.any(-1) | beats.any(-1)).nonzero().flatten().tolist()
    assert not rows, "moe router: ids of row %d break the tie rule (lower index first): %s" % (
        rows[0], ids[rows[0]].tolist())


def route(logits, top_k, renormalize):
    """The router on logits [T, E] (16-bit, as the gate linear stores them): p = softmax of the
    fp32-upcast logits, in float64; the top_k largest of each row, highest first, equal values
    (equal logits) to the lower expert index; with renormalize, divided by their sum (Mixtral,
    Qwen3-MoE's norm_topk_prob). Returns (weights float64 [T, k], ids int32 [T, k]).

    The ids are a stable descending sort's, not torch.topk's: torch 2.11's CPU topk leaves the
    order of equal values, and which of them it keeps at the k-th place, unspecified (four equal
    values at experts 1, 2, 4, 6 come out as 1, 6, 4, 2), while the contract, and the Go and CUDA
    kernels, take the lower index first. Checked here on every case: the ids obey that rule
    (check_tie_rule), torch.topk gives the same values and the same ids wherever a value is not
    tied in its row, and the same experts are the top_k of the logits themselves (no p underflows
    to a tie that the logits do not have), so a kernel may select on the logits."""
    T, E = logits.shape
    assert 1 <= top_k <= E, (top_k, E)
    p = torch.softmax(d(logits.to(F32)), dim=-1)
    assert (p > 0).all(), "moe router: a probability underflows float64"
    order = torch.sort(p, dim=-1, descending=True, stable=True)
    weights, ids = order.values[:, :top_k], order.indices[:, :top_k]
    check_tie_rule(p, ids)
    by_logit = torch.sort(d(logits.to(F32)), dim=-1, descending=True, stable=True).indices
    assert torch.equal(by_logit[:, :top_k], ids), "moe router: p orders the experts otherwise"
    tv, ti = torch.topk(p, top_k, dim=-1)
    assert torch.equal(tv, weights), "moe router: torch.topk's values differ"
    untied = (p[:, None, :] == weights[:, :, None]).sum(-1) == 1   # [T, k]
    assert torch.equal(ti[untied], ids[untied]), "moe router: torch.topk picks another expert"
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights, ids.to(I32)


def moe_router(r, *, T, E, top_k, renormalize, dist=normal(2.0), dtype="f16"):
    """The MoE router after the gate linear: logits [T, E] drawn from dist in the storage type;
    weights (float64, written f32) and ids (int32, exact) of route()."""
    logits = storage(dtype)(dist(r, (T, E)))
    weights, ids = route(logits, top_k, renormalize)
    return ({"top_k": top_k, "renormalize": renormalize}, {"logits": logits},
            {"weights": weights, "ids": ids})


def moe_experts(x, ids, weights, gate_up, down):
    """out [T, H] = sum_j weights[t, j] down[e] (silu(gate_e x_t) * (up_e x_t)), e = ids[t, j],
    in float64 with no intermediate rounding: x [T, H], ids int [T, k], weights [T, k] (used as
    they are stored), gate_up [E, 2F, H] (each expert's F gate rows, then its F up rows, as
    MixtralExperts.gate_up_proj and its .chunk(2, dim=-1)), down [E, H, F]. One float64 matmul
    per expert over the tokens routed to it (MixtralExperts' loop), not one per token: the full
    tier's Mixtral-8x7B experts are 2.8 GB."""
    T, H = x.shape
    ffn = gate_up.shape[1] // 2
    xd, wd, ids = d(x), d(weights), ids.long()
    out = torch.zeros((T, H), dtype=F64)
    for e in torch.unique(ids).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        h = xd[tok] @ d(gate_up[e]).T                                 # [n, 2F]
        act = F.silu(h[:, :ffn]) * h[:, ffn:]
        out.index_add_(0, tok, (act @ d(down[e]).T) * wd[tok, slot, None])
    return out


def moe_ffn(r, *, T, E, top_k, H, ffn, renormalize=True, logits=normal(2.0), dist=normal(),
            dtype="f16"):
    """The expert block after the router (moe_experts): x [T, H] from dist; ids and weights from
    route() of router logits [T, E] drawn from `logits` in the storage type (renormalised for
    the Mixtral and Qwen3 shapes), the weights stored as float32; then each expert's gate, up
    (linear_weight [F, H], stacked into gate_up[e]) and down (linear_weight [H, F]) in expert
    order. The experts are filled in place: drawn one [F, H] block at a time, the full tier's
    Mixtral-8x7B never holds more than one block in float64."""
    cast = storage(dtype)
    x = cast(dist(r, (T, H)))
    w64, ids = route(cast(logits(r, (T, E))), top_k, renormalize)
    weights = w64.to(F32)
    gate_up = torch.empty((E, 2 * ffn, H), dtype=x.dtype)
    down = torch.empty((E, H, ffn), dtype=x.dtype)
    for e in range(E):
        gate_up[e, :ffn] = linear_weight(r, ffn, H, cast)
        gate_up[e, ffn:] = linear_weight(r, ffn, H, cast)
        down[e] = linear_weight(r, H, ffn, cast)
    inputs = {"x": x, "ids": ids, "weights": weights, "gate_up": gate_up, "down": down}
    return {}, inputs, {"out": moe_experts(x, ids, weights, gate_up, down)}


def shared_gate_columns(H):
    """The columns of moe_shared_add's x that carry outlier channels: two in the dot's first 16-byte
    vector (1 and 6), one in the middle (H / 2 + 5) and the last (H - 1), the last vector's and the
    scalar tail's last element (fewer where H is that small)."""
    return sorted({1 % H, 6 % H, (H // 2 + 5) % H, H - 1})


def moe_shared_add(r, *, T, H, span, inplace=False, cancel=(), dtype="f16"):
    """Qwen2-MoE's gated shared expert as transformers' Qwen2MoeSparseMoeBlock adds it
    (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): `routed + F.sigmoid(shared_expert_gate(x)) *
    shared_expert(x)`, out [T, H] = routed + sigmoid(x . gate) * shared, one gate value a token,
    in fp64 from the stored inputs with no rounding in between (the kernel rounds out once).

    x [T, H] is the block's input (the post-attention RMSNorm's output): N(0, 1) with outlier
    channels of |x| ~ 20 at shared_gate_columns(H), as the hidden states of real LLMs have them;
    gate [1, H] (shared_expert_gate.weight) is linear_weight's N(0, 1/H), each outlier column's
    weight at least 1/sqrt(H) in magnitude (a kernel that drops one of those terms of the dot moves
    the logit visibly), the whole vector scaled so that the largest |x . gate| over the case's rows
    is `span` (T = 1: the one logit's magnitude, its sign the draw's): logits spread over
    [-span, span], both the sigmoid's linear part and its saturation; shared (the shared expert's
    SwiGLU output) and routed (the experts' weighted sum) N(0, 1), one scale. cancel: rows in which
    a random half of the elements have routed = -sigmoid(x . gate) * shared rounded to the storage
    type, so that out there is that rounding's residue, a few units of the storage type's last
    place below the terms (cancellation in the one sum). inplace: the kernel writes out over routed.
    """
    cast = storage(dtype)
    x = cast(outlier_channels(shared_gate_columns(H), 20.0)(r, (T, H)))
    g = r.randn((1, H)) / math.sqrt(H)
    cols = shared_gate_columns(H)
    floor = 1.0 / math.sqrt(H)
    g[0, cols] = torch.where(g[0, cols] < 0, -1.0, 1.0).to(F64) * torch.clamp(g[0, cols].abs(), min=floor)
    z0 = d(x) @ g.T
    gate = cast(g * (span / float(z0.abs().max())))
    shared = cast(r.randn((T, H)))
    routed = r.randn((T, H))
    z = (d(x) @ d(gate).T)[:, 0]
    s = torch.sigmoid(z)
    for t in cancel:
        half = r.rand((H,)) < 0.5
        routed[t, half] = -s[t] * d(shared[t, half])
    routed = cast(routed)
    if T >= 8 and span >= 3:
        # the sigmoid's saturation and its linear part, in rows of the case itself
        assert z.abs().max() > 3 and z.abs().min() < 0.5, ("moe_shared_add: logits", z)
    out = d(routed) + s[:, None] * d(shared)
    return ({"inplace": inplace}, {"routed": routed, "shared": shared, "x": x, "gate": gate},
            {"out": out})


OPS = {f.__name__: f for f in (
    residual_add, rmsnorm, layernorm, layernorm_residual, rmsnorm_residual, rope,
    attention_prefill, attention_decode, attention_scores_softmax, swiglu, geglu, swiglu_ffn, gemm_swiglu, rmsnorm_gemm, layernorm_gemm, swiglu_gemm, gpt_ffn, gelu, gelu_tanh, gelu_scale,
    pos_embedding, embedding, set_rows, gemm, softmax, logit_softcap, quant_fp8, gemm_fp8, rmsnorm_quant_fp8,
    swiglu_quant_fp8, gemm_w4a16, set_rows_fp8, attention_decode_fp8, attention_decode_paged,
    attention_prefill_paged, attention_decode_paged_fp8, attention_prefill_paged_fp8, moe_router,
    moe_ffn, moe_shared_add)}
