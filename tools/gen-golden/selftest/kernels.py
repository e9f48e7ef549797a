"""`python3 tools/gen-golden selftest`: check the references against independent numpy code.

Every committed case is built in memory and its expected outputs are recomputed here in numpy
float64 straight from the formulas (explicit softmax for attention, math.erf for GELU, ...), with
no torch in the loop. On top of that: properties each edge case exists for (a wrong eps must be
visibly wrong, poison must sit where the kernel must not read, ...), seed stability, and a
write / read-back round trip of the file format. bf16 cases (named bf16-...) are checked the same
way: their inputs read from the raw bits (numpy has no bfloat16) must be bf16 values, every
16-bit input of the case bf16 and of no other case, the contract's intermediate roundings done
here to bf16 by bit arithmetic, and the .npy files hold the bits as '<u2'. quant_fp8 is exact:
its committed sets, read from disk, are recomputed bit for bit by a numpy f8e4m3 codec written
from the bit layout, and broken variants of each of its steps must disagree with them. gemm_fp8's
sets on disk are recomputed from that codec and their scales in float64, their x and w checked
as quantisations (from the bytes alone, and bit for bit from the case's draws), an emulated fp32
kernel must pass the op's tolerance and broken scale indexing fail it. The FP8 paged attention
sets are the 16-bit paged ops' numpy references over the values their codes stand for, with
their poison, calibration and broken table, mask and scale reads checked. The MoE sets on disk
(moe_router, moe_ffn) are recomputed by numpy (a stable sort for the tie rule, a loop over
tokens and their experts) and cross-checked against transformers' own MixtralTopKRouter,
Qwen3MoeTopKRouter and MixtralExperts.
"""

import functools
import hashlib
import json
import math
import os
import re
import tempfile
import time

import numpy as np
import torch

from common import manifest, seeds
from kernels import cases as kernel_cases
from kernels import ops as kernel_ops
from selftest import fp8_accum
from selftest import gemma as gemma_selftest
from selftest import int4 as int4_selftest
from selftest import logit_softcap as logit_softcap_selftest
from selftest import moe_shared_add as moe_shared_selftest


def bf16_bits_to_f64(bits):
    """bf16 bits (uint16) as float64: the bits are the top half of the fp32 value."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32) \
        .astype(np.float64)


def a(t):
    """A tensor as a numpy float64 array (for inputs) or int array (for ids/positions). bf16 is
    read from its bits, not through torch's conversion; f8e4m3 as its codes (int64 bytes,
    e4m3_decode gives their values)."""
    if t.dtype == torch.bfloat16:
        return bf16_bits_to_f64(t.contiguous().view(torch.int16).numpy().view(np.uint16))
    if t.dtype == torch.float8_e4m3fn:
        return t.contiguous().view(torch.uint8).numpy().astype(np.int64)
    arr = t.numpy()
    return arr if arr.dtype.kind == "i" else arr.astype(np.float64)


def np_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def f16(x):
    """The fp16 rounding an intermediate gets where a kernel stores it: through fp32, as the
    kernels (fp32 math) and torch's fp64-to-fp16 cast both round, so a value within an fp32
    rounding of an fp16 tie goes to even, not to the side fp64 would pick."""
    return x.astype(np.float32).astype(np.float16).astype(np.float64)


def bf16(x):
    """The bf16 rounding (through fp32, as f16), by bit arithmetic on the fp32 value: round to
    nearest even at bit 16 (__float2bfloat16_rn for finite values)."""
    u = np.asarray(x, dtype=np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


ROUND = {"f16": f16, "bf16": bf16}


def np_silu(x):
    return x / (1.0 + np.exp(-x))


def np_layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_rope(x, pos, base, r, freq_divisor=None, long_divisor=None, long_from=None, factor=1.0):
    """Pair i < r/2 of each token at angle pos * base^(-2i/r) / div_i, div the token's divisor
    (long_divisor at positions >= long_from, else freq_divisor, else 1); the rotated dims times
    factor, the others copied."""
    half = r // 2
    out = x.copy()
    for i in range(half):
        div = np.ones(len(pos))
        if freq_divisor is not None:
            div[:] = freq_divisor[i]
        if long_divisor is not None:
            div[pos >= long_from] = long_divisor[i]
        theta = pos.astype(np.float64) * (base ** (-2.0 * i / r) / div)  # [T]
        c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
        x0, x1 = x[:, :, i], x[:, :, i + half]
        out[:, :, i] = (x0 * c - x1 * s) * factor
        out[:, :, i + half] = (x1 * c + x0 * s) * factor
    return out


def np_cap(s, softcap):
    """Gemma 2's attention logit soft-capping of scaled scores (before any mask): softcap *
    tanh(s / softcap); softcap 0: s."""
    return softcap * np.tanh(s / softcap) if softcap else s


def softcap_tanh_error(cap=50.0):
    """The worst absolute error of the CUDA kernels' soft cap (internal.h, softcap_score: cap -
    2 cap / (e^(2 s / cap) + 1), fp32, e^(2x) by ex2.approx with its 2^-22 relative error, the
    reciprocal by rcp.approx, 1 ulp) against fp64 cap * tanh(s / cap), emulated in numpy over s in
    [-400, 400]: each approximate SFU result is perturbed by its documented bound both ways."""
    s = np.linspace(-400.0, 400.0, 400001).astype(np.float32)
    c, inv = np.float32(cap), np.float32(1.0) / np.float32(cap)
    want = cap * np.tanh(s.astype(np.float64) / cap)
    worst = 0.0
    with np.errstate(over="ignore"):
        for de in (1 - 2.0**-22, 1.0, 1 + 2.0**-22):
            for dr in (1 - 2.0**-23, 1.0, 1 + 2.0**-23):
                arg = (s * inv * np.float32(2.88539008177792681)).astype(np.float32)
                e = (np.exp2(arg.astype(np.float64)) * de).astype(np.float32)
                r = (1.0 / (e.astype(np.float64) + 1.0) * dr).astype(np.float32)
                got = (c - np.float32(2.0) * c * r).astype(np.float32)
                worst = max(worst, float(np.abs(got.astype(np.float64) - want).max()))
    return worst


def np_attention(q, k, v, scale, causal, window=0, softcap=0.0):
    """q [Sq, nH, D], k/v [Sk, nKV, D] -> [Sq, nH, D], explicit scores and softmax; with a
    sliding window (causal) query t sees keys t - window + 1 .. t; softcap > 0 caps the scaled
    scores before the mask (np_cap)."""
    nH, nKV = q.shape[1], k.shape[1]
    out = np.empty_like(q)
    for h in range(nH):
        kv = h // (nH // nKV)
        s = np_cap(q[:, h, :] @ k[:, kv, :].T * scale, softcap)
        if causal:
            s = np.where(np.tri(*s.shape, dtype=bool), s, -np.inf)
        if window > 0:
            s = np.where(np.tri(*s.shape, k=-window, dtype=bool), -np.inf, s)
        out[:, h, :] = np_softmax(s) @ v[:, kv, :]
    return out


def np_attention_seen(q, k, v, scale, seen, window=0, softcap=0.0):
    """q [Sq, nH, D], k/v [Sk, nKV, D] -> [Sq, nH, D], query t attending to keys 0 .. seen[t]-1
    (the last `window` of them with a sliding window; explicit scores and softmax); a query that
    sees no key gets 0."""
    nH, nKV = q.shape[1], k.shape[1]
    out = np.zeros_like(q)
    j, seen = np.arange(k.shape[0])[None, :], np.asarray(seen)[:, None]
    hidden = (j >= seen) | ((j < seen - window) if window > 0 else False)
    some = ~hidden.all(-1)
    for h in range(nH):
        kv = h // (nH // nKV)
        s = np.where(hidden, -np.inf, np_cap(q[:, h, :] @ k[:, kv, :].T * scale, softcap))[some]
        out[some, h, :] = np_softmax(s) @ v[:, kv, :]
    return out


def reference(op, p, i, rnd=f16):
    """Expected outputs from numpy, given params p and numpy inputs i; rnd rounds to the case's
    16-bit storage type where the op's contract rounds (f16 or bf16)."""
    if op == "residual_add":
        return {"out": i["x"] + i["residual"]}
    if op == "rmsnorm":
        x = i["x"]
        return {"out": x / np.sqrt((x * x).mean(-1, keepdims=True) + p["eps"]) * i["weight"]}
    if op == "layernorm":
        return {"out": np_layernorm(i["x"], i["gamma"], i["beta"], p["eps"])}
    if op == "layernorm_residual":
        s = i["x"] + i["residual"]
        s16 = rnd(s)
        return {"sum": s, "out": np_layernorm(s16, i["gamma"], i["beta"], p["eps"])}
    if op == "rmsnorm_residual":
        # The kernel's arithmetic: an fp32 add of the two 16-bit inputs, rounded to their type.
        s16 = rnd((i["x"].astype(np.float32) + i["residual"].astype(np.float32)).astype(np.float64))
        out = s16 / np.sqrt((s16 * s16).mean(-1, keepdims=True) + p["eps"]) * i["weight"]
        return {"sum": i["x"] + i["residual"], "out": out}
    if op == "rope":
        args = (i["positions"], p["freq_base"], p["rope_dim"], i.get("freq_divisor"),
                i.get("long_divisor"), p.get("long_from"), p.get("attention_factor", 1.0))
        return {"q_out": np_rope(i["q"], *args), "k_out": np_rope(i["k"], *args)}
    if op == "attention_prefill":
        out = np.stack([np_attention(i["q"][b], i["k"][b], i["v"][b], p["scale"], p["causal"],
                                     p.get("window", 0), p.get("softcap", 0.0))
                        for b in range(i["q"].shape[0])])
        return {"out": out}
    if op == "attention_decode":
        out = []
        w = p.get("window", 0)
        for b, n in enumerate(i["cache_lens"]):
            lo = max(0, n - w) if w > 0 else 0
            out.append(np_attention(i["q"][b][None], i["k_cache"][b, lo:n], i["v_cache"][b, lo:n],
                                    p["scale"], False, softcap=p.get("softcap", 0.0))[0])
        return {"out": np.stack(out)}
    if op == "attention_decode_paged":
        return reference("attention_decode", p, dict(i, **paged_caches(i)))
    if op == "attention_prefill_paged":
        return {"out": np_prefill_paged(p, i, lambda i, b, n, m: paged_rows(i, b, n), None,
                                        lambda i, n, m: n - m + 1 + np.arange(m))}
    if op in PAGED_FP8:  # the 16-bit op's reference over the values the codes stand for
        k, v = fp8_values(i, (i["k_cache"], i["v_cache"]))
        return reference(PAGED_FP8[op], p, dict(i, k_cache=k, v_cache=v))
    if op == "swiglu":
        return {"out": np_silu(i["gate"]) * i["up"]}
    if op == "geglu":
        g = reference("gelu_tanh" if p["gelu"] == "tanh" else "gelu", {}, {"x": i["gate"]})["out"]
        return {"out": g * i["up"]}
    if op == "swiglu_ffn":
        x = i["x"]
        return {"out": (np_silu(x @ i["w_gate"].T) * (x @ i["w_up"].T)) @ i["w_down"].T}
    if op == "gelu":
        erf = np.vectorize(math.erf)
        return {"out": 0.5 * i["x"] * (1.0 + erf(i["x"] / math.sqrt(2.0)))}
    if op == "gelu_tanh":
        x = i["x"]
        return {"out": 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))}
    if op == "gelu_scale":
        sub = {"inplace": p["inplace"]}
        return {"out": reference("gelu_tanh" if p["gelu"] == "tanh" else "gelu", sub, i)["out"] * p["scale"]}
    if op == "gemm_swiglu":
        acc = i["x"] @ i["w_gate_up"].T
        f = acc.shape[1] // 2
        return {"out": np_silu(acc[:, :f]) * acc[:, f:]}
    if op == "rmsnorm_gemm":
        outs, s = {}, i["x"]
        if p["has_residual"]:
            outs["sum"] = i["x"] + i["residual"]
            s = rnd(outs["sum"])
        h = rnd(s / np.sqrt((s * s).mean(-1, keepdims=True) + p["eps"]) * i["weight"])
        outs["out"] = h @ i["w"].T + (i["bias"] if p["has_bias"] else 0.0)
        return outs
    if op == "layernorm_gemm":
        outs, s = {}, i["x"]
        if p["has_residual"]:
            outs["sum"] = i["x"] + i["residual"]
            s = rnd(outs["sum"])
        h = rnd(np_layernorm(s, i["gamma"], i["beta"], p["eps"]))
        outs["out"] = h @ i["w"].T + (i["bias"] if p["has_bias"] else 0.0)
        return outs
    if op == "swiglu_gemm":
        act = rnd(np_silu(i["gate"]) * i["up"])
        return {"out": act @ i["w"].T + (i["bias"] if p["has_bias"] else 0.0)}
    if op == "gpt_ffn":
        pre = i["x"] @ i["w1"].T + (i["b1"] if p["has_bias"] else 0.0)
        g = reference("gelu_tanh" if p["gelu"] == "tanh" else "gelu", {}, {"x": pre})["out"]
        act = rnd(g)
        # The allowance (kernels/ops.py, rounded_activation_allowance): the activations whose
        # contract error reaches a rounding boundary may round the other way.
        pre_err = 2.0**-24 * 8.0 * math.sqrt(i["x"].shape[1]) * (
            np.abs(pre) + np.sqrt((i["x"] ** 2) @ (i["w1"] ** 2).T))
        err = 1.13 * pre_err + 1.2e-5 * np.abs(g)
        flip = np.maximum(np.abs(rnd(g - err) - act), np.abs(rnd(g + err) - act))
        return {"out": act @ i["w2"].T + (i["b2"] if p["has_bias"] else 0.0),
                "out_allowance": flip @ np.abs(i["w2"]).T}
    if op == "attention_scores_softmax":
        q, k = i["q"], i["k"]
        B, Sq, nH, _ = q.shape
        Sk, nKV = k.shape[1], k.shape[2]
        probs = np.zeros((B, nH, Sq, Sk))
        for b in range(B):
            for h in range(nH):
                s = np_cap(q[b, :, h] @ k[b, :, h // (nH // nKV)].T * p["scale"], p.get("softcap", 0.0))
                for t in range(Sq):
                    seen = Sk - Sq + t + 1 if p["causal"] else Sk
                    probs[b, h, t, :seen] = np_softmax(s[t, :seen])
        return {"probs": probs}
    if op == "pos_embedding":
        return {"out": i["x"] + i["table"][i["positions"]]}
    if op == "embedding":
        if "scale" not in p:
            return {"out": i["table"][i["ids"]]}
        # Gemma's scaled gather: the exact product rounded once, inf past the type's range
        with np.errstate(over="ignore"):
            return {"out": rnd(i["table"][i["ids"]] * p["scale"])}
    if op == "set_rows":
        out = i["dst"].copy()
        for k, row in enumerate(i["rows"]):
            out[row] = i["src"][k]
        return {"out": out}
    if op == "gemm":
        out = i["x"] @ i["w"].T
        return {"out": out + i["bias"] if p["has_bias"] else out}
    if op == "softmax":
        return {"out": np_softmax(i["x"])}
    if op == "gemm_w4a16":
        return {"out": i["x"] @ np_w4_dequant(p, i, rnd)}
    if op in logit_softcap_selftest.OPS:
        return logit_softcap_selftest.reference(p, i)
    if op in moe_shared_selftest.OPS:
        return moe_shared_selftest.reference(p, i)
    if op == "moe_router":
        return np_moe_router(i["logits"], p["top_k"], p["renormalize"])
    if op == "moe_ffn":
        return {"out": np_moe_ffn(i["x"], i["ids"], i["weights"], i["gate_up"], i["down"])}
    raise KeyError(op)


def np_moe_router(logits, k, renormalize):
    """moe_router in numpy: the float64 softmax of each row, the k largest by a stable sort of
    the negated probabilities (equal ones keep their order: the lower expert first), then
    divided by their sum with renormalize."""
    prob = np_softmax(np.asarray(logits, dtype=np.float64))
    ids = np.argsort(-prob, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(prob, ids, -1)
    if renormalize:
        w = w / w.sum(-1, keepdims=True)
    return {"weights": w, "ids": ids}


def np_moe_ffn(x, ids, weights, gate_up, down):
    """moe_ffn in numpy, a token and one of its experts at a time: out[t] = sum_j weights[t, j]
    down[e] (silu(gate_up[e, :F] x_t) * (gate_up[e, F:] x_t)), e = ids[t, j], in float64."""
    ffn = gate_up.shape[1] // 2
    out = np.zeros(x.shape, dtype=np.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            g, u = gate_up[e, :ffn] @ x[t], gate_up[e, ffn:] @ x[t]
            out[t] += float(weights[t, j]) * (down[e] @ (np_silu(g) * u))
    return out


def np_w4_dequant(p, i, rnd):
    """W^T [K, N] of a gemm_w4a16 case by loops over the words as AutoAWQ and GPTQ describe them:
    AWQ's column c in nibble (0, 4, 1, 5, 2, 6, 3, 7)[c % 8] of word c / 8 of its row, GPTQ's row
    k in nibble k % 8 of word k / 8 of its column, GPTQ's zero points stored minus one; then
    (q - z) * s rounded to the storage type."""
    K = i["x"].shape[1]
    G = p["group_size"]
    words = i["qweight"].astype(np.int64) & 0xFFFFFFFF
    zwords = i["qzeros"].astype(np.int64) & 0xFFFFFFFF
    s = i["scales"]
    N = s.shape[1]
    nib = lambda w, j: (w >> (4 * j)) & 0xF  # noqa: E731
    cols = np.arange(N)
    if p["format"] == "awq":
        rev = np.array([0, 4, 1, 5, 2, 6, 3, 7])
        q = nib(words[:, cols // 8], rev[cols % 8])
        z = nib(zwords[:, cols // 8], rev[cols % 8])
        groups = np.arange(K) // G
    else:
        rows = np.arange(K)
        q = nib(words[rows // 8][:, cols], (rows % 8)[:, None])
        z = nib(zwords[:, cols // 8], cols % 8) + 1
        groups = i["g_idx"].astype(np.int64)
    return rnd((q - z[groups]).astype(np.float64) * s[groups])


def properties(case, p, i, dtype="f16"):
    """What each edge case is there for must actually hold in its data. A bf16 case is judged
    by its name without the "bf16-" prefix where the fp16 case it mirrors has a property, and
    by bf16_properties."""
    op = case.op
    name = case.name[len("bf16-"):] if dtype == "bf16" else case.name
    if dtype == "bf16":
        bf16_properties(case, name, p, i)
    if op == "rmsnorm" and name.startswith("small-rms"):
        x = i["x"]
        ms = (x * x).mean(-1)
        other = 1e-5 if p["eps"] == 1e-6 else 1e-6
        ratio = np.sqrt((ms + p["eps"]) / (ms + other))
        assert np.all(np.abs(ratio - 1) > 0.3), "%s: a wrong eps would pass" % name
    if op == "rmsnorm_residual" and name.startswith("small-rms"):
        s = i["x"] + i["residual"]
        ms = (s * s).mean(-1)
        other = 1e-5 if p["eps"] == 1e-6 else 1e-6
        for alt in (other, 0.0):  # a wrong eps, an ignored eps
            ratio = np.sqrt((ms + p["eps"]) / (ms + alt))
            assert np.all(np.abs(ratio - 1) > 0.1), "%s: eps %g would pass" % (name, alt)
    if op == "rmsnorm_residual" and name == "large-mag":
        s = i["x"] + i["residual"]
        assert np.mean(np.abs(s) >= 256) > 0.9 and np.abs(s).max() < 65504, name
    if op == "rmsnorm_residual" and name.endswith("_inplace"):
        assert p["inplace"], name
    if op == "rmsnorm" and name == "large-mag":
        assert np.all(np.abs(i["x"]) >= 256), "%s: x^2 must overflow fp16" % name
    if op in ("layernorm", "layernorm_gemm") and name.startswith("mean-offset"):
        assert np.all(np.abs(i["x"].mean(-1)) > 250)
    if op in ("gelu", "gelu_tanh") and not name.startswith("large-mag"):
        x = i["x"]
        assert np.mean((x >= -4) & (x <= -1)) > 0.2, "%s: too few negative-tail values" % name
    if op in ("gelu", "gelu_tanh") and name == "large-mag":
        assert np.any(i["x"] == 0) and np.abs(i["x"]).max() > 20
    if op == "gelu_scale":
        x = i["x"]
        assert p["gelu"] in ("erf", "tanh") and ("_" + p["gelu"] + "_") in name, name
        assert name.endswith("_inplace") == p["inplace"], name
        assert np.float32(p["scale"]) == p["scale"], "%s: scale must be the float32 the kernel gets" % name
        if name.startswith("large-mag"):
            assert np.any(x == 0) and np.abs(x).max() > 20, name
        elif not name.startswith("large-out"):
            assert np.mean((x >= -4) & (x <= -1)) > 0.2, "%s: too few negative-tail values" % name
    if op == "residual_add" and name == "large-mag":
        s = i["x"] + i["residual"]
        assert np.abs(i["x"]).max() > 2e4 and np.abs(s).max() < 65504
    if op == "attention_decode":
        poison = ROUND[dtype](np.float64(kernel_ops.POISON))  # 1e4; 9984 in bf16
        assert dtype == "bf16" or poison == kernel_ops.POISON
        for b, n in enumerate(i["cache_lens"]):
            for c in ("k_cache", "v_cache"):
                assert np.all(i[c][b, n:] == poison), "%s: poison missing" % name
                assert not np.any(i[c][b, :n] == poison)
    if op.startswith("attention_"):
        window_properties(op, name, p)
        softcap_properties(op, name, p)
    if op in ("attention_decode_paged", "attention_decode_paged_fp8"):
        held = paged_properties(name, p, i, dtype, fp8=op in PAGED_FP8)
    if op in ("attention_prefill_paged", "attention_prefill_paged_fp8"):
        held = prefill_paged_properties(name, p, i, dtype, fp8=op in PAGED_FP8)
    if op in PAGED_FP8:
        paged_fp8_properties(name, i, held, case.kwargs.get("headroom", 1.0))
    if op == "attention_prefill" and name.startswith("large-mag"):
        s = np.einsum("bshd,bthd->bhst", i["q"][:, :, :2], i["k"][:, :, :1]) * p["scale"]
        assert np.abs(s).max() > 11.1, "%s: scores must overflow exp in fp16" % name  # e^11 > 65504
    if op == "softmax":
        x = i["x"]
        assert np.all(np.isfinite(x).any(-1)), "%s: a row with no finite value" % name
        if name.startswith("large-mag"):
            mx = np.where(np.isfinite(x), x, np.nan)
            assert np.nanmax(mx) > 89 and np.nanmin(np.nanmax(mx, -1)) < -104
    if op == "rope":
        rope_properties(name, p, i)
    if op in ("moe_router", "moe_ffn"):
        moe_properties(op, name, p, i)
    if op == "embedding" and len(i["ids"]) > 1:
        assert 0 in i["ids"] and i["table"].shape[0] - 1 in i["ids"]
    if op in gemma_selftest.OPS:
        gemma_selftest.properties(op, name, p, i, ROUND[dtype])
    if op in logit_softcap_selftest.OPS:
        logit_softcap_selftest.properties(case.name, p, i, case.kwargs.get("dtype", "f16"))
    if op in moe_shared_selftest.OPS:
        moe_shared_selftest.properties(case.name, p, i, dtype)
    if op == "set_rows":
        rows = [int(v) for v in i["rows"]]
        assert len(set(rows)) == len(rows), "%s: rows must be distinct" % name
        assert all(0 <= v < i["dst"].shape[0] for v in rows)
        # Every written row must differ from what dst held there, or a skipped write would pass.
        assert all(np.any(i["dst"][v] != i["src"][k]) for k, v in enumerate(rows))


F16_MAX = 65504.0


def bf16_properties(case, name, p, i):
    """What the bf16 cases are there for: every one named "large-..." reaches past fp16's range
    (bf16's is fp32's) in its inputs or its output, where a kernel that went through fp16 would
    overflow; the outlier cases have their channels; gemm writes bf16 or f32."""
    op = case.op
    if name.startswith("large-"):
        ref = reference(op, p, i, bf16)
        peak = max([float(np.abs(v[np.isfinite(v)]).max()) for v in i.values()
                    if v.dtype.kind == "f"] +
                   [float(np.abs(v).max()) for v in ref.values()])
        assert peak > 1.5 * F16_MAX, "bf16-%s: nothing beyond fp16's range (%g)" % (name, peak)
    if op == "gemm":
        assert p["out_dtype"] in ("bf16", "f32"), "bf16-%s: out_dtype %s" % (name, p["out_dtype"])
    if "outliers-x20" in name:
        x = i["x"] if "x" in i else i["q"]
        col = np.abs(x.reshape(-1, x.shape[-1])).mean(0)
        assert (col > 15).sum() >= 2 and np.median(col) < 2, "bf16-%s: no outlier channels" % name


_WINDOW_NAME = re.compile(r"_w([0-9]+)(?:_cap[0-9]+)?$")


_SOFTCAP_TANH_ERROR = []


def softcap_properties(op, name, p):
    """A capped case (params.softcap) says its cap in its name (cap50) and carries Gemma 2's 50;
    the kernels' tanh formulation (softcap_tanh_error) stays within 2^-17 of the cap, far below
    the 2^-11 relative rounding of P the attention tolerances budget (measured once)."""
    cap = p.get("softcap", 0.0)
    assert ("cap%g" % cap in name) if cap else "cap" not in name.split("_")[-1], (op, name, cap)
    if cap:
        assert cap == 50.0, (op, name, cap)
        if not _SOFTCAP_TANH_ERROR:
            _SOFTCAP_TANH_ERROR.append(softcap_tanh_error(cap))
        assert _SOFTCAP_TANH_ERROR[0] <= cap * 2.0**-17, _SOFTCAP_TANH_ERROR[0]


def window_properties(op, name, p):
    """A windowed attention case (params.window, the last key but for a softcap after it, never
    0) says its window in its name (_w<N>), and only those do."""
    m = _WINDOW_NAME.search(name)
    if "window" not in p:
        assert m is None, "%s/%s: named _w<N> without params.window" % (op, name)
        return
    assert [k for k in p if k != "softcap"][-1] == "window" and p["window"] >= 1, "%s/%s: window %r" % (op, name, p["window"])
    assert m and int(m.group(1)) == p["window"], "%s/%s: window %d not in the name" % (
        op, name, p["window"])
    assert op != "attention_prefill" or p["causal"], "%s/%s: a window without causal" % (op, name)


def rope_properties(name, p, i):
    """The contract's keys (attention_factor only with freq_divisor, long_from exactly with
    long_divisor), the fp32 attention factor, full rotary where scaled; and each scaled case is
    far from what a kernel ignoring a part of the scaling computes (a case whose data an unscaled,
    unfactored or wrong-table rotation would pass tests nothing)."""
    scaled = "freq_divisor" in i
    base_keys = ["freq_base", "rope_dim", "head_dim"]
    want = base_keys + (["attention_factor"] if scaled else []) + (
        ["long_from"] if "long_divisor" in i else [])
    assert list(p) == want, "%s: params %s, want %s" % (name, list(p), want)
    if not scaled:
        return
    r, half = p["rope_dim"], p["rope_dim"] // 2
    assert r == p["head_dim"], "%s: scaled cases rotate the whole head" % name
    assert np.float32(p["attention_factor"]) == p["attention_factor"], name
    for t in ("freq_divisor", "long_divisor"):
        if t in i:
            assert i[t].shape == (half,) and np.all(i[t] >= 1.0), "%s: %s" % (name, t)
    pos, q = i["positions"], i["q"]
    got = reference("rope", p, i)["q_out"]
    scale = np.abs(got).max()
    wrong = {"unscaled": np_rope(q, pos, p["freq_base"], r),
             "without the attention factor": np_rope(q, pos, p["freq_base"], r, i["freq_divisor"],
                                                     i.get("long_divisor"), p.get("long_from"))}
    if "long_divisor" in i:
        lf = p["long_from"]
        wrong["short factors only"] = np_rope(q, pos, p["freq_base"], r, i["freq_divisor"], None,
                                              None, p["attention_factor"])
        wrong["long factors only"] = np_rope(q, pos, p["freq_base"], r, i["long_divisor"], None,
                                             None, p["attention_factor"])
        wrong["long_from off by one"] = np_rope(q, pos, p["freq_base"], r, i["freq_divisor"],
                                                i["long_divisor"], lf + 1, p["attention_factor"])
        if lf > 0:
            assert np.any(pos < lf) and np.any(pos >= lf), "%s: no switch in the batch" % name
        else:
            del wrong["long factors only"]  # every token long: that is the case
        if lf == 0 or not np.any(pos == lf):  # position 0 has angle 0 in every table
            del wrong["long_from off by one"]
    if p["attention_factor"] == 1.0:
        del wrong["without the attention factor"]
    for what, w in wrong.items():
        assert np.abs(got - w).max() > 0.05 * scale, "%s: a %s rotation would pass" % (name, what)


# ---------------------------------------------------------------------------------------------
# quant_fp8 (docs/quantization.md) in numpy, no torch: the f8e4m3 codec from its bit layout,
# the group amax, and numpy's float32 divisions (IEEE, correctly rounded like torch's CPU ones).

E4M3_NAN = 0x7F
F32_448 = 0x43E00000  # the float32 bits of 448, the largest f8e4m3 value


def e4m3_decode(codes):
    """float64 values of f8e4m3 bytes from the layout S.EEEE.MMM, bias 7: (1 + m/8) 2^(e-7),
    (m/8) 2^-6 for e = 0, NaN for S.1111.111 (docs/quantization.md, "FP8 storage types")."""
    c = np.asarray(codes, dtype=np.int64)
    e, m = (c >> 3) & 0xF, c & 0x7
    mag = np.where(e == 0, m / 8.0 * 2.0**-6, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    v = np.where(c & 0x80, -mag, mag)
    return np.where((c & 0x7F) == E4M3_NAN, np.nan, v)


def e4m3_encode(v, ties="even", saturate=True, subnormals=True, nan_sign=False):
    """f8e4m3 bytes of float32 values by integer arithmetic on their bits: |v| clamped to 448,
    its significand cut to 3 bits at its own exponent (to a multiple of 2^-9 below 2^-6, the
    subnormals), rounded to nearest with ties to the even code; NaN 0x7F. The keywords make the
    broken variants the committed sets must reject: ties "away" from zero or to "zero"
    (truncation), no saturation (torch's own conversion: a code past 0x7E is NaN), subnormals
    flushed to zero, a NaN's sign kept."""
    bits = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.int64)
    sign = (bits >> 31) << 7
    mag = bits & 0x7FFFFFFF
    nan = mag > 0x7F800000
    if saturate:
        mag = np.minimum(mag, F32_448)
    exp, frac = mag >> 23, mag & 0x7FFFFF
    normal = exp >= 121                                  # |v| >= 2^-6
    # normal: the top 3 fraction bits below an exponent rebased to bias 7, 20 bits cut; below
    # 2^-6: the significand in units of 2^-9, shifted right by 141 - exp (at most 40: all gone)
    sig = np.where(exp > 0, frac | 0x800000, frac)
    shift = np.where(normal, 20, np.minimum(141 - np.maximum(exp, 1), 40))
    code = np.where(normal, ((exp - 120) << 3) | (frac >> 20), sig >> shift)
    rest, half = sig & ((1 << shift) - 1), 1 << (shift - 1)
    if ties == "even":
        up = (rest > half) | ((rest == half) & ((code & 1) == 1))
    elif ties == "away":
        up = rest >= half
    else:
        up = np.zeros_like(rest, dtype=bool)
    code = code + up
    if not saturate:
        code = np.minimum(code, E4M3_NAN)
    if not subnormals:
        code = np.where(normal, code, 0)
    out = np.where(nan, E4M3_NAN | (sign if nan_sign else 0), code | sign)
    return out.astype(np.uint8)


def e4m3_nearest(v):
    """The definition itself, to check e4m3_encode on the conversion table: the f8e4m3 value
    nearest to the float64 |v| (clamped to 448) among the decoded finite codes, a tie to the
    even code, v's sign; NaN 0x7F."""
    v = np.asarray(v, dtype=np.float64)
    table = e4m3_decode(np.arange(0x7F))                 # 0 .. 448, increasing
    a = np.minimum(np.abs(np.nan_to_num(v)), 448.0)
    hi = np.clip(np.searchsorted(table, a), 1, 0x7E)
    lo = hi - 1
    dlo, dhi = a - table[lo], table[hi] - a
    code = np.where((dlo < dhi) | ((dlo == dhi) & (lo % 2 == 0)), lo, hi)
    code = np.where(np.signbit(v), code | 0x80, code)
    return np.where(np.isnan(v), E4M3_NAN, code).astype(np.uint8)


def group_scales(xg, floor=True, reciprocal_448=False, nan_max=True):
    """The float32 scale of each group (the last axis of xg): max(amax, 1e-10 as float32) / 448.
    The keywords make broken variants: no floor (0 / 0 for a zero group), a product with 1/448,
    an amax that skips NaN (CUDA's fmaxf)."""
    amax = np.max(np.abs(xg), axis=-1) if nan_max else np.fmax.reduce(np.abs(xg), axis=-1)
    if floor:
        amax = np.maximum(amax, np.float32(1e-10))
    if reciprocal_448:
        return amax * (np.float32(1) / np.float32(448))
    return amax / np.float32(448)


def np_quant_fp8(p, i, encode=e4m3_encode, divide=np.divide, scales=group_scales):
    """quant_fp8's outputs from params p and float32 inputs i: {"out": bytes, "scales": f32}
    (dynamic) or {"out": bytes} (static). encode, divide and scales are replaced by the broken
    variants."""
    x = np.asarray(i["x"], dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if p["mode"] == "static":
            return {"out": encode(divide(x, i["scale"].astype(np.float32)[0]))}
        T, H = x.shape
        xg = x.reshape(T, H // p["group_size"], p["group_size"])
        s = scales(xg).astype(np.float32)
        return {"out": encode(divide(xg, s[..., None])).reshape(T, H), "scales": s}


def same_bits(a, b):
    """Equal shapes and bytes, where a NaN equals any NaN (the spec fixes a NaN byte of f8e4m3,
    not the payload of a NaN scale)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == np.float32:
        both = np.isnan(a) & np.isnan(b)
        return np.array_equal(np.where(both, 0, a.view(np.uint32)),
                              np.where(both, 0, b.view(np.uint32)))
    return np.array_equal(a, b)


# Broken implementations the committed quant_fp8 sets must reject, each a realistic mistake.
QUANT_BROKEN = {
    "ties away from zero": dict(encode=functools.partial(e4m3_encode, ties="away")),
    "truncation": dict(encode=functools.partial(e4m3_encode, ties="zero")),
    "no saturation (NaN from 464 up)": dict(encode=functools.partial(e4m3_encode, saturate=False)),
    "subnormals flushed": dict(encode=functools.partial(e4m3_encode, subnormals=False)),
    "a NaN's sign kept": dict(encode=functools.partial(e4m3_encode, nan_sign=True)),
    "x * (1 / s)": dict(divide=lambda x, s: x * (np.float32(1) / s)),
    "x / s in float64, not rounded to float32": dict(
        encode=e4m3_nearest, divide=lambda x, s: x.astype(np.float64) / np.asarray(s, np.float64)),
    "s = amax * (1 / 448)": dict(scales=functools.partial(group_scales, reciprocal_448=True)),
    "no amax floor": dict(scales=functools.partial(group_scales, floor=False)),
    "an amax that skips NaN": dict(scales=functools.partial(group_scales, nan_max=False)),
}


def check_quant_fp8(where, p, i, got):
    """One quant_fp8 case (float32 inputs i, outputs got: out bytes, scales f32) against
    np_quant_fp8, bit for bit; and what the case exists for holds in its data. Returns the
    broken variants (QUANT_BROKEN) that disagree with it."""
    name = where.rsplit("/", 1)[-1]
    name = name[len("bf16-"):] if name.startswith("bf16-") else name
    want = np_quant_fp8(p, i)
    assert list(got) == list(want), "%s: outputs %s" % (where, list(got))
    for n in want:
        assert same_bits(got[n], want[n]), "%s: %s differs from numpy at %d elements" % (
            where, n, int((got[n] != want[n]).sum()))
    quant_properties(where, name, p, i, got)
    return {what for what, kw in QUANT_BROKEN.items()
            if not all(same_bits(w, got[n]) for n, w in np_quant_fp8(p, i, **kw).items())}


def quant_properties(where, name, p, i, got):
    """The params and name agree, and each edge case's data holds its edge."""
    x = i["x"]
    T, H = x.shape
    assert name.startswith(p["mode"]), "%s: mode %s" % (where, p["mode"])
    if p["mode"] == "dynamic":
        G = p["group_size"]
        assert list(p) == ["mode", "group_size"] and H % G == 0 and "scale" not in i, where
        assert ("per-token" in name) == (G == H) and ("g128" in name) == (G == 128), where
    else:
        assert list(p) == ["mode"] and i["scale"].shape == (1,), where
        tag = name.split("_")[1]                         # static_s<scale>_...
        assert tag.startswith("s") and np.float32(float(tag[1:])) == i["scale"][0] > 0, where
    if "e4m3-boundaries" in name:
        e4m3_table_properties(where, x, i["scale"])
    if "zero-row" in name:
        groups = x.reshape(T, H // p["group_size"], p["group_size"])
        zero_rows = np.all(x == 0, axis=-1)
        zero_groups = np.all(groups == 0, axis=-1) & ~zero_rows[:, None]
        assert zero_rows.any() and zero_groups.any(), "%s: no zero row or group" % where
        assert np.signbit(groups[zero_groups]).any(), "%s: the zero group holds no -0" % where
        s = got["scales"]
        assert (s.max(-1) > 10 * np.where(s > 1e-9, s, np.inf).min(-1))[~zero_rows].all(), \
            "%s: outlier channels do not set their groups apart" % where
    if "inf-nan" in name:
        b = got["out"].reshape(T, H // p["group_size"], p["group_size"])
        s = got["scales"]
        inf = np.isinf(x.reshape(b.shape)).any(-1)
        nan = np.isnan(x.reshape(b.shape)).any(-1)
        assert inf.sum() == 1 and nan.sum() == 1 and np.isinf(s[inf]).all() and \
            np.isnan(s[nan]).all(), where
        # the inf group: finite values give +0 and -0, the inf itself inf / inf = NaN
        assert set(np.unique(b[inf]).tolist()) == {0x00, 0x80, E4M3_NAN}, where
        assert np.all(b[nan] == E4M3_NAN), where
    if "reciprocal-traps" in name:
        traps = int((np_quant_fp8(p, i, **QUANT_BROKEN["x * (1 / s)"])["out"] != got["out"]).sum())
        assert traps >= 8, "%s: %d reciprocal traps" % (where, traps)


def e4m3_table_properties(where, x, scale):
    """The conversion table (scale 1) holds every boundary docs/quantization.md lists, by bits:
    each finite code's value, each midpoint of neighbours and its float32 neighbours, both NaNs,
    +-inf, 448 to 480 and past, 2^-10 and around it; and the bit encoder here agrees with the
    definition (e4m3_nearest) on every one of them."""
    assert scale[0] == 1.0, where
    have = set(x.view(np.uint32).ravel().tolist())

    def f32(v):
        return np.asarray(v, dtype=np.float32)

    finite = e4m3_decode(np.arange(256))
    finite = finite[~np.isnan(finite)]
    pos = np.unique(np.abs(finite))
    mid = f32((pos[1:] + pos[:-1]) / 2)
    assert np.array_equal(mid.astype(np.float64), (pos[1:] + pos[:-1]) / 2), "a midpoint rounds"
    need = [f32(finite), mid, np.nextafter(mid, f32(np.inf)), np.nextafter(mid, f32(0)),
            f32([448, 456, 464, 470, 480, 1e6, 3.4e38, np.inf, 2.0**-10, 2.0**-11, 2.0**-149]),
            np.nextafter(f32([448, 464, 480, 2.0**-10]), f32(np.inf)),
            np.nextafter(f32([464, 480, 2.0**-10]), f32(0))]
    for v in need:
        for signed in (v, -v):
            missing = set(signed.view(np.uint32).ravel().tolist()) - have
            assert not missing, "%s: lacks %s" % (where, sorted(missing)[:4])
    assert {0x7FC00000, 0xFFC00000} <= have, "%s: +NaN and -NaN" % where
    assert np.array_equal(e4m3_encode(x), e4m3_nearest(x.astype(np.float64))), \
        "%s: the bit encoder is not the nearest value, ties to even" % where


def read_set(case_dir):
    """A kernel set as a reader sees it: (manifest, {name: array}) with 16-bit floats and f32 as
    float32 (bf16 from its bits), f8e4m3 as its bytes, every file's sha256 and .npy descr
    checked against the manifest."""
    with open(os.path.join(case_dir, "manifest.json"), "rb") as f:
        m = json.loads(f.read())
    descr = {"f16": "<f2", "bf16": "<u2", "f32": "<f4", "i32": "<i4", "f8e4m3": "|u1"}
    arrays = {}
    for e in m["files"]:
        path = os.path.join(case_dir, e["file"])
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == e["sha256"], path
        arr = np.load(path, allow_pickle=False)
        assert arr.dtype.str == descr[e["dtype"]] and list(arr.shape) == e["shape"], path
        if e["dtype"] == "bf16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "f16":
            arr = arr.astype(np.float32)
        arrays[e["name"]] = arr
    assert set(os.listdir(case_dir)) == {e["file"] for e in m["files"]} | {"manifest.json"}
    return m, arrays


def check_e4m3_decoding():
    """All 256 codes decoded from the bit layout are torch's float8_e4m3fn values, NaN where
    torch has NaN (0x7F and 0xFF only)."""
    mine = e4m3_decode(np.arange(256))
    theirs = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn) \
        .to(torch.float64).numpy()
    assert np.array_equal(np.isnan(mine), np.isnan(theirs)), "NaN codes differ"
    assert np.flatnonzero(np.isnan(mine)).tolist() == [0x7F, 0xFF]
    assert np.array_equal(mine.view(np.uint64)[~np.isnan(mine)],
                          theirs.view(np.uint64)[~np.isnan(theirs)]), "a decoded value differs"
    assert mine[0x7E] == 448 and mine[0x01] == 2.0**-9 and mine[0x80] == 0 and \
        np.signbit(mine[0x80])


def check_quant_fp8_sets():
    """The committed quant_fp8 sets on disk (golden/kernels/quant_fp8), read as a reader does,
    exactly the committed case table, recomputed by np_quant_fp8 bit for bit; every broken
    variant of QUANT_BROKEN rejected by at least one of them."""
    check_e4m3_decoding()
    op_dir = os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden", "kernels",
                          "quant_fp8")
    names = {c.name for c in kernel_cases.cases_for(kernel_cases.COMMITTED, ["quant_fp8"])}
    assert set(os.listdir(op_dir)) == names, "golden/kernels/quant_fp8 is not the case table " \
        "(run: python3 tools/gen-golden kernels --op quant_fp8)"
    caught = {what: [] for what in QUANT_BROKEN}
    for name in sorted(names):
        m, arrays = read_set(os.path.join(op_dir, name))
        assert m["op"] == "quant_fp8" and m["case"] == name and m["tier"] == "committed", name
        roles = {e["name"]: e["role"] for e in m["files"]}
        ins = {n: v for n, v in arrays.items() if roles[n] == "input"}
        got = {n: v for n, v in arrays.items() if roles[n] == "expected"}
        for what in check_quant_fp8("quant_fp8/" + name, m["params"], ins, got):
            caught[what].append(name)
    for what, by in caught.items():
        assert by, "quant_fp8: no committed set rejects %s" % what
        print("quant_fp8 rejects %-42s in %d set(s), e.g. %s" % (what, len(by), by[0]))
    print("quant_fp8: %d committed sets on disk match numpy bit for bit; 256 codes decode as "
          "torch's" % len(names))


# ---------------------------------------------------------------------------------------------
# gemm_fp8 (docs/golden-format.md) in numpy, no torch in the arithmetic: the f8e4m3 bytes decoded
# from the bit layout (e4m3_decode), every element times the scale of its group or block, a
# float64 matmul. The stored x and w are checked as quantisations: from the bytes alone (the
# largest element of every group and block maps to 448), and bit for bit from X and W drawn
# again with the case's seed (x by quant_fp8's numpy twin, w by the same steps over 2-D blocks).

FP8_BLOCK = 128


def fp8_layout(p, K):
    """(activation group G, weight block rows, weight block columns) of a gemm_fp8 case."""
    return (FP8_BLOCK, FP8_BLOCK, FP8_BLOCK) if p["scales"] == "block" else (K, 1, K)


def fp8_scale_maps(p, i, x_block=None, w_row_block=None, w_transposed=False):
    """The scale of every element, (xs [M, K], ws [N, K]) in float64. The keywords make broken
    variants: x_block(m, g) -> the index of the x_scales element read for group g of row m
    ((m, g) when right); w_row_block(n, nb) -> the w_scales row read for weight row n (n // 128
    when right, nb = ceil(N / 128)); w_transposed: w_scales read as if stored [K/128, nb]
    (element (i, j) taken at flat index j * nb + i)."""
    xsc, wsc = i["x_scales"].astype(np.float64), i["w_scales"].astype(np.float64)
    M, K = i["x"].shape
    N = i["w"].shape[0]
    G, bn, bk = fp8_layout(p, K)
    m, g = np.arange(M)[:, None], (np.arange(K) // G)[None, :]
    xs = xsc[x_block(m, g)] if x_block is not None else xsc[m, g]
    nb = wsc.shape[0]
    rows = w_row_block(np.arange(N), nb) if w_row_block is not None else np.arange(N) // bn
    n, kb = rows[:, None], (np.arange(K) // bk)[None, :]
    ws = wsc.reshape(-1)[kb * nb + n] if w_transposed else wsc[n, kb]
    return np.broadcast_to(xs, (M, K)), np.broadcast_to(ws, (N, K))


def np_gemm_fp8(p, i, **broken):
    """(out [M, N], sum_k |terms| [M, N]) in float64 from params p and inputs i (x, w: f8e4m3
    bytes; x_scales, w_scales: float32): out = sum_k float(x[m, k]) xs(m, k) float(w[n, k])
    ws(n, k). The dequantised operands are exact in float64 (4 significant bits times a
    float32's 24); only the sums round, by at most K 2^-53 sum |terms|. broken: fp8_scale_maps'
    keywords."""
    xs, ws = fp8_scale_maps(p, i, **broken)
    xd, wd = e4m3_decode(i["x"]) * xs, e4m3_decode(i["w"]) * ws
    return xd @ wd.T, np.abs(xd) @ np.abs(wd).T


def emulated_gemm_fp8(p, i):
    """gemm_fp8 as a correct fp32 kernel computes it: per scale group of K (128, or the whole
    row with per-channel scales) the FP8 products (exact in fp32) summed in fp32 (a BLAS sgemm),
    times x scale * w scale (fp32), accumulated in fp32, rounded once to out_dtype."""
    qx, qw = e4m3_decode(i["x"]).astype(np.float32), e4m3_decode(i["w"]).astype(np.float32)
    xsc, wsc = i["x_scales"].astype(np.float32), i["w_scales"].astype(np.float32)
    M, K = qx.shape
    N = qw.shape[0]
    G, bn, _ = fp8_layout(p, K)
    acc = np.zeros((M, N), dtype=np.float32)
    for g in range(K // G):
        part = qx[:, g * G:(g + 1) * G] @ qw[:, g * G:(g + 1) * G].T
        acc += part * (xsc[:, g][:, None] * wsc[np.arange(N) // bn, g][None, :])
    return ROUND[p["out_dtype"]](acc.astype(np.float64))


def np_quant_weight_blocks(W, bn, bk):
    """quant_weight_blocks (kernels/ops.py) in numpy: quant_fp8's twin (group_scales,
    e4m3_encode of a float32 division) over blocks of bn rows by bk columns, the last row-block
    partial (padded with zero rows, which change no amax). Returns (bytes [N, K], float32
    scales [ceil(N / bn), K / bk])."""
    N, K = W.shape
    nb, kb = -(-N // bn), K // bk
    pad = np.zeros((nb * bn, K), dtype=np.float32)
    pad[:N] = W
    blocks = pad.reshape(nb, bn, kb, bk).transpose(0, 2, 1, 3).reshape(nb, kb, bn * bk)
    s = group_scales(blocks).astype(np.float32)
    q = e4m3_encode(np.divide(blocks, s[..., None]))
    return q.reshape(nb, kb, bn, bk).transpose(0, 2, 1, 3).reshape(nb * bn, K)[:N], s


def redrawn_quantisation(case):
    """x, x_scales, w, w_scales of a gemm_fp8 case from its own draws, quantised here: X [M, K]
    from the case's dist (gemm_fp8's default without one) rounded to float32, then W [N, K] from
    its wdist (without one N(0, 1/K), linear_weight's) rounded to float32; x by np_quant_fp8
    (dynamic, groups of 128 or K), w by np_quant_weight_blocks (128 x 128 or 1 x K)."""
    kw = case.kwargs
    M, N, K = kw["M"], kw["N"], kw["K"]
    r = seeds.Draw(seeds.case_seed(case.op, case.name))
    dist = kw.get("dist", kernel_ops.gemm_fp8.__kwdefaults__["dist"])
    X = dist(r, (M, K)).to(torch.float32).numpy()
    W = kw["wdist"](r, (N, K)) if kw.get("wdist") is not None else r.randn((N, K)) / math.sqrt(K)
    W = W.to(torch.float32).numpy()
    G, bn, bk = fp8_layout(kw, K)
    xq = np_quant_fp8({"mode": "dynamic", "group_size": G}, {"x": X})
    w, ws = np_quant_weight_blocks(W, bn, bk)
    return {"x": xq["out"], "x_scales": xq["scales"], "w": w, "w_scales": ws}


def tolerance_share(got, want, tol):
    """The worst metric of a tolerance entry (golden/tolerances.yaml: allclose's atol, rtol,
    atol_rms, max_mismatch; nmse; min_cosine; max_abs) as a share of its limit: > 1 fails."""
    diff = np.abs(got - want)
    shares = [0.0]
    if "atol" in tol:
        rms = np.sqrt((want ** 2).mean(-1, keepdims=True))
        limit = tol["atol"] + tol.get("atol_rms", 0.0) * rms + tol["rtol"] * np.abs(want)
        ratio = np.sort((diff / limit).ravel())[::-1]
        shares.append(float(ratio[int(tol.get("max_mismatch", 0.0) * ratio.size)]))
    if "nmse" in tol:
        shares.append(float((diff ** 2).sum() / (want ** 2).sum()) / tol["nmse"])
    if "min_cosine" in tol:
        cos = float((got * want).sum() / np.sqrt((got ** 2).sum() * (want ** 2).sum()))
        shares.append((1.0 - cos) / (1.0 - tol["min_cosine"]) if tol["min_cosine"] < 1 else
                      (0.0 if cos >= 1 else math.inf))
    if "max_abs" in tol:
        worst = float(diff.max())
        shares.append(worst / tol["max_abs"] if tol["max_abs"] > 0 else
                      (0.0 if worst == 0 else math.inf))
    return max(shares)


def yardstick(op, fallback):
    """golden/tolerances.yaml's entries of op, or of fallback while op has none: the tolerance
    the broken variants must fail. Returns (the op whose entries they are, entries)."""
    import yaml
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden",
                           "tolerances.yaml")) as f:
        kernels = yaml.safe_load(f)["kernels"]
    op = op if op in kernels else fallback
    return op, kernels[op]


def gemm_fp8_yardstick():
    """The tolerance an emulated fp32 kernel must pass and the broken variants must fail:
    golden/tolerances.yaml's gemm_fp8 entry, gemm's while it has none. Returns (op, entries)."""
    return yardstick("gemm_fp8", "gemm")


def _scale_x_ignored(p, i):
    return np_gemm_fp8(p, dict(i, x_scales=np.ones_like(i["x_scales"])))[0]


def _one_weight_scale(p, i):
    return np_gemm_fp8(p, dict(i, w_scales=np.full_like(i["w_scales"], i["w_scales"].flat[0])))[0]


# Broken implementations the committed gemm_fp8 sets must reject (fail the yardstick's tolerance
# in at least one set), each a realistic mistake: name -> (block scales only, out(p, i)). The
# block-only ones change nothing with per-channel scales.
GEMM_FP8_BROKEN = {
    "w_scales row n % ceil(N/128), not n // 128 (a wrong block)":
        (True, lambda p, i: np_gemm_fp8(p, i, w_row_block=lambda n, nb: n % nb)[0]),
    "w_scales transposed (read as [K/128, ceil(N/128)])":
        (True, lambda p, i: np_gemm_fp8(p, i, w_transposed=True)[0]),
    "x_scales ignored": (False, _scale_x_ignored),
    "weight blocks of 64 rows, not 128 (rows past the last block: its scale)":
        (True, lambda p, i: np_gemm_fp8(p, i, w_row_block=lambda n, nb: np.minimum(n // 64,
                                                                                  nb - 1))[0]),
    "x_scales per token (group 0's for the whole row)":
        (True, lambda p, i: np_gemm_fp8(p, i, x_block=lambda m, g: (m, g * 0))[0]),
    "one weight scale (w_scales[0, 0]) for every element": (False, _one_weight_scale),
}


def check_gemm_fp8(where, case, p, i, got, tol):
    """One gemm_fp8 set (inputs i: x, w as uint8 bytes, the scales float32; got: the stored
    float32 out) against np_gemm_fp8: got is the float32 of a float64 sum of the same exact
    terms, so within half a float32 ulp plus both float64 sums' error bounds (K 2^-53 sum |terms|
    each) of ours. Then its properties and its quantisations (redrawn_quantisation, bit for
    bit). Returns (worst relative difference, the emulated fp32 kernel's share of tol, {broken
    variant: its share of tol}), tol the yardstick's entry for the case's out_dtype; the
    variant's output is rounded to out_dtype as a kernel's would be."""
    name = where.rsplit("/", 1)[-1]
    want, mag = np_gemm_fp8(p, i)
    K = i["x"].shape[1]
    got = np.asarray(got, dtype=np.float32).astype(np.float64)
    assert got.shape == want.shape and np.isfinite(got).all(), where
    fp64 = 2.02 * K * 2.0**-53 * mag
    bound = 2.0**-24 * (np.abs(want) + fp64) + fp64 + 2.0**-149
    assert np.all(np.abs(got - want) <= bound), "%s: out differs from numpy by %g" % (
        where, float(np.abs(got - want).max()))
    gemm_fp8_properties(where, name, p, i)
    for n, v in redrawn_quantisation(case).items():
        assert same_bits(np.asarray(i[n]), v), "%s: %s is not the quantisation of the drawn %s" % (
            where, n, "X" if n.startswith("x") else "W")
    emulated = tolerance_share(emulated_gemm_fp8(p, i), want, tol)
    broken = {what: tolerance_share(ROUND[p["out_dtype"]](out(p, i)), want, tol)
              for what, (block_only, out) in GEMM_FP8_BROKEN.items()
              if p["scales"] == "block" or not block_only}
    worst = float((np.abs(got - want) / (np.abs(want) + 1e-30)).max())
    return worst, emulated, broken


def gemm_fp8_properties(where, name, p, i):
    """The params, shapes and name agree; every scale is positive and finite; every byte a
    finite f8e4m3 value (|v| <= 448, no NaN); every group and block holds a value of magnitude
    448 (its largest element divided by amax / 448) or is all zero; and what each edge case is
    there for holds in its data."""
    assert list(p) == ["scales", "out_dtype"] and p["scales"] in ("block", "channel") and \
        p["out_dtype"] in ("f16", "bf16"), "%s: params %s" % (where, p)
    assert name.startswith(p["scales"] + "_") and name.endswith("_out-" + p["out_dtype"]) and \
        not name.startswith("bf16-"), "%s: the name disagrees with %s" % (where, p)
    x, w, xsc, wsc = i["x"], i["w"], i["x_scales"], i["w_scales"]
    M, K = x.shape
    N = w.shape[0]
    G, bn, bk = fp8_layout(p, K)
    assert x.dtype == w.dtype == np.uint8 and xsc.dtype == wsc.dtype == np.float32, where
    assert w.shape[1] == K and K % G == 0, where
    assert xsc.shape == (M, K // G) and wsc.shape == (-(-N // bn), K // bk), "%s: scales %s %s" % (
        where, xsc.shape, wsc.shape)
    for n, s in (("x_scales", xsc), ("w_scales", wsc)):
        assert np.isfinite(s).all() and (s > 0).all(), "%s: %s not positive and finite" % (where, n)
    xv, wv = e4m3_decode(x), e4m3_decode(w)
    for n, v in (("x", xv), ("w", wv)):
        assert not np.isnan(v).any() and (np.abs(v) <= 448).all(), "%s: %s holds NaN" % (where, n)
    nb = -(-N // bn)
    wpad = np.zeros((nb * bn, K))
    wpad[:N] = np.abs(wv)
    groups = {"x": np.abs(xv).reshape(M, K // G, G),
              "w": wpad.reshape(nb, bn, K // bk, bk).transpose(0, 2, 1, 3).reshape(
                  nb, K // bk, bn * bk)}
    for n, g in groups.items():
        amax = g.max(-1)
        bad = int(((amax != 448) & (amax != 0)).sum())
        assert not bad, "%s: %d group(s) of %s without a value of magnitude 448" % (where, bad, n)
    if "partial" in name:
        assert p["scales"] == "block" and N % FP8_BLOCK != 0, "%s: no partial row-block" % where
    if "outliers" in name:
        ratio = xsc.max(-1) / xsc.min(-1)
        assert (ratio > 10).all(), "%s: groups of a row too alike (%.3g)" % (where, ratio.min())
    if "weight-blocks" in name:
        assert wsc.max() > 4 * wsc.min(), "%s: weight blocks too alike" % where
    for tok in name.replace("_", "-").split("-"):        # m4, n256, k512: the shape
        if tok[:1] in ("m", "n", "k") and tok[1:].isdigit():
            dim = {"m": M, "n": N, "k": K}[tok[0]]
            assert int(tok[1:]) == dim, "%s: %s but %s = %d" % (where, tok, tok[0].upper(), dim)


def check_gemm_fp8_sets():
    """The committed gemm_fp8 sets on disk, read as a reader does, exactly the committed case
    table, each recomputed by np_gemm_fp8 (check_gemm_fp8); an emulated fp32 kernel passes the
    yardstick's tolerance in every set, and each broken variant of GEMM_FP8_BROKEN fails it in
    at least one."""
    op_dir = os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden", "kernels",
                          "gemm_fp8")
    table = {c.name: c for c in kernel_cases.cases_for(kernel_cases.COMMITTED, ["gemm_fp8"])}
    assert os.path.isdir(op_dir) and set(os.listdir(op_dir)) == set(table), \
        "golden/kernels/gemm_fp8 is not the case table " \
        "(run: python3 tools/gen-golden kernels --op gemm_fp8)"
    yard, tols = gemm_fp8_yardstick()
    caught = {what: [] for what in GEMM_FP8_BROKEN}
    for name in sorted(table):
        m, arrays = read_set(os.path.join(op_dir, name))
        assert m["op"] == "gemm_fp8" and m["case"] == name and m["tier"] == "committed", name
        files = [(e["name"], e["role"], e["dtype"]) for e in m["files"]]
        assert files == [("x", "input", "f8e4m3"), ("x_scales", "input", "f32"),
                         ("w", "input", "f8e4m3"), ("w_scales", "input", "f32"),
                         ("out", "expected", "f32")], "%s: files %s" % (name, files)
        ins = {n: arrays[n] for n in ("x", "x_scales", "w", "w_scales")}
        p = m["params"]
        _, emulated, broken = check_gemm_fp8("gemm_fp8/" + name, table[name], p, ins,
                                             arrays["out"], tols[p["out_dtype"]])
        assert emulated <= 1, "gemm_fp8/%s: an fp32 kernel uses %.3g of %s's %s tolerance" % (
            name, emulated, yard, p["out_dtype"])
        for what, share in broken.items():
            if share > 1:
                caught[what].append((share, name))
        print("gemm_fp8 %-50s fp32 kernel %.2f of %s.%s; broken variants (below, in order) %s" % (
            name, emulated, yard, p["out_dtype"],
            " ".join("x%.3g" % broken[w] if w in broken else "-" for w in GEMM_FP8_BROKEN)))
    for what, by in caught.items():
        assert by, "gemm_fp8: no committed set rejects %s" % what
        share, name = max(by)
        print("gemm_fp8 rejects %-72s in %d set(s), up to %.3g x the tolerance (%s)"
              % (what, len(by), share, name))
    print("gemm_fp8: %d committed sets on disk match numpy (%s's tolerances the yardstick)"
          % (len(table), yard))


def storage_dtype(case, inputs):
    """The case's 16-bit storage type from its inputs, checked: bf16 exactly in the cases named
    bf16-..., every 16-bit input of a case the same type, the f32 inputs only where the op takes
    them (rope's divisors, softmax and set_rows of f32), and every bf16 input a bf16 value
    (its bits read as fp32 round to themselves; torch reads the same values)."""
    half = {n: t.dtype for n, t in inputs.items() if t.dtype in (torch.float16, torch.bfloat16)}
    kinds = set(half.values())
    assert len(kinds) <= 1, "%s/%s: mixed 16-bit inputs %s" % (case.op, case.name, half)
    bf = kinds == {torch.bfloat16}
    assert bf == case.name.startswith("bf16-"), "%s/%s: bf16 inputs %s" % (case.op, case.name, bf)
    for n, t in inputs.items():
        if t.dtype == torch.float32:
            assert (case.op, n) in (("rope", "freq_divisor"), ("rope", "long_divisor"),
                                    ("quant_fp8", "scale"), ("rmsnorm_quant_fp8", "scale"),
                                    ("swiglu_quant_fp8", "scale"), ("gemm_fp8", "x_scales"),
                                    ("gemm_fp8", "w_scales"), ("set_rows_fp8", "scale"),
                                    ("attention_decode_fp8", "k_scale"), ("attention_decode_fp8", "v_scale"),
                                    ("moe_ffn", "weights")) or \
                (case.op in PAGED_FP8 and n in ("k_scale", "v_scale")) or \
                ((case.op, n) in (("rmsnorm", "weight"), ("rmsnorm_residual", "weight")) and
                 "_w32" in case.name) or \
                (case.op in ("softmax", "set_rows", "quant_fp8", "set_rows_fp8", "logit_softcap") and not half), \
                "%s/%s: %s is f32" % (case.op, case.name, n)
        if t.dtype == torch.bfloat16:
            v = a(t)
            assert np.array_equal(bf16(v), v), "%s/%s: %s" % (case.op, case.name, n)
            assert np.array_equal(v, t.to(torch.float64).numpy()), "%s/%s: %s bits" % (
                case.op, case.name, n)
    if not kinds:
        return "f32"
    return "bf16" if bf else "f16"


def check_case(case):
    seed, params, inputs, expected = kernel_cases.build(case)
    dtype = storage_dtype(case, inputs)
    if case.op == "gemm_fp8":
        assert dtype == "f32", "%s/%s: 16-bit inputs" % (case.op, case.name)
        ins = {n: t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.numpy()
               for n, t in inputs.items()}
        assert list(expected) == ["out"], (case.op, case.name, list(expected))
        got = expected["out"].to(torch.float32).numpy()
        _, tols = gemm_fp8_yardstick()
        return check_gemm_fp8(case.op + "/" + case.name, case, params, ins, got,
                              tols[params["out_dtype"]])[0]
    if case.op in FUSED_QUANT:
        check_fused_quant(case, params, inputs, expected)
        return 0.0
    if case.op in ("set_rows_fp8", "attention_decode_fp8"):
        return check_kv_fp8(case, params, inputs, expected)
    if case.op == "quant_fp8":
        got = {n: t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.numpy()
               for n, t in expected.items()}
        check_quant_fp8(case.op + "/" + case.name, params,
                        {n: a(t).astype(np.float32) for n, t in inputs.items()}, got)
        return 0.0
    ins = {n: a(t) for n, t in inputs.items()}
    properties(case, params, ins, "bf16" if dtype == "bf16" else "f16")
    ref = reference(case.op, params, ins, bf16 if dtype == "bf16" else f16)
    assert list(ref) == list(expected), "%s/%s: outputs %s vs %s" % (
        case.op, case.name, list(ref), list(expected))
    worst = 0.0
    for n, want in ref.items():
        got = expected[n].float().numpy().astype(np.float64)
        assert got.shape == want.shape, (case.op, case.name, n, got.shape, want.shape)
        if case.op in ("embedding", "set_rows") or (case.op, n) == ("moe_router", "ids"):
            assert np.array_equal(got, want), "%s/%s: %s not exact" % (case.op, case.name, n)
            continue
        # got is the fp64 torch result rounded to fp32: within half an fp32 ulp (plus fp64 noise
        # far below that) of an independent fp64 computation.
        atol = 1e-10 * max(1.0, float(np.abs(want).max()))
        err = np.abs(got - want) - (2.0**-24 * 1.01 * np.abs(want) + atol)
        assert np.all(err <= 0), "%s/%s: %s differs from numpy by %g" % (
            case.op, case.name, n, float(np.abs(got - want).max()))
        worst = max(worst, float((np.abs(got - want) / (np.abs(want) + atol)).max()))
    return worst


def check_kv_fp8(case, p, inputs, expected):
    """The FP8 KV cache by numpy: set_rows_fp8's codes are e4m3_encode of src / scale[head] (a
    float32 division) at the given rows, every other row dst's, byte for byte; attention_decode_
    fp8's output is numpy attention over e4m3_decode(code) * scale[kv head] (fp64), within half
    an fp32 ulp as the other ops'. Returns the worst relative difference (0 for the exact op)."""
    where = case.op + "/" + case.name
    f8 = lambda t: t.view(torch.uint8).numpy().astype(np.int64)  # noqa: E731
    if case.op == "set_rows_fp8":
        dst, rows = f8(inputs["dst"]), inputs["rows"].numpy()
        src = a(inputs["src"]).astype(np.float32)
        scale = inputs["scale"].numpy().astype(np.float32)
        T, heads, D = src.shape
        per = np.broadcast_to(scale.reshape(-1, 1) if scale.size > 1 else scale.reshape(1, 1), (heads, 1))
        want = dst.copy()
        want[rows] = e4m3_encode(np.divide(src, per[None], dtype=np.float32))
        got = f8(expected["out"])
        assert np.array_equal(got, want), "%s: %d codes differ from numpy" % (where, int((got != want).sum()))
        assert scale.size in (1, heads) and (scale.size > 1) == ("per-head" in case.name), where
        return 0.0
    q = a(inputs["q"])
    nKV = p["n_kv_heads"]
    assert (inputs["k_scale"].numel() > 1) == ("per-head" in case.name), where
    kv = {}
    for n, sn in (("k_cache", "k_scale"), ("v_cache", "v_scale")):
        sc = inputs[sn].numpy().astype(np.float64)
        per = sc if sc.size > 1 else np.repeat(sc, nKV)
        kv[n] = e4m3_decode(f8(inputs[n])) * per[None, None, :, None]
    lens = inputs["cache_lens"].numpy()
    want = np.stack([np_attention(q[b][None], kv["k_cache"][b, :n], kv["v_cache"][b, :n], p["scale"], False,
                                  softcap=p.get("softcap", 0.0))[0]
                     for b, n in enumerate(lens)])
    for b, n in enumerate(lens):  # a kernel that reads past a length sees +448
        assert np.all(f8(inputs["k_cache"])[b, n:] == 0x7E), where
    got = expected["out"].float().numpy().astype(np.float64)
    atol = 1e-10 * max(1.0, float(np.abs(want).max()))
    err = np.abs(got - want) - (2.0**-24 * 1.01 * np.abs(want) + atol)
    assert np.all(err <= 0), "%s: out differs from numpy by %g" % (where, float(np.abs(got - want).max()))
    return float((np.abs(got - want) / (np.abs(want) + atol)).max())


# ---------------------------------------------------------------------------------------------
# The paged KV cache (attention_decode_paged): a pool k_cache, v_cache [num_blocks, block_size,
# nKV, D], sequence b's position p at slot p % block_size of page block_table[b, p // block_size].
# A kernel's reads are modelled as rows of the pool viewed as [num_blocks * block_size, nKV, D]:
# the contract's rows, and those of broken kernels, where a row outside the pool (a -1 entry
# followed, a table read past its end) reads poison, as guard memory around the pool would hold.


def paged_rows(i, b, n, entry=None, block=None):
    """The pool rows sequence b's first n positions are read from: position p in page
    block_table[b, p // block] at slot p % block, block the pool's block size unless a broken
    kernel assumes another, the table read flattened row by row at entry(b, p // block) (b *
    max_blocks + e by the contract). -1 for a row outside the pool: a -1 entry, an entry past
    the table, a row past the pool's end."""
    t = i["block_table"]
    nb, bs = i["k_cache"].shape[:2]
    block = bs if block is None else block
    flat = t.ravel().astype(np.int64)
    e = (entry or (lambda b, e: b * t.shape[1] + e))(b, np.arange(n) // block)
    page = np.where((e >= 0) & (e < flat.size), flat[np.clip(e, 0, flat.size - 1)], -1)
    rows = page * block + np.arange(n) % block
    return np.where((page >= 0) & (rows < nb * bs), rows, -1)


def _lens(i):
    """Each sequence's length in the pool: attention_decode_paged's cache_lens,
    attention_prefill_paged's kv_lens (prefix and new tokens)."""
    return i["cache_lens"] if "cache_lens" in i else i["kv_lens"]


def paged_caches(i):
    """Each sequence's cache gathered from the pool by the contract: k_cache, v_cache [B,
    max_blocks * block_size, nKV, D], NaN past cache_lens[b] (attention_decode reads [0, n))."""
    t, lens = i["block_table"], _lens(i)
    nb, bs = i["k_cache"].shape[:2]
    out = {}
    for c in ("k_cache", "v_cache"):
        pool = i[c].reshape((nb * bs,) + i[c].shape[2:])
        out[c] = np.full((t.shape[0], t.shape[1] * bs) + i[c].shape[2:], np.nan)
        for b, n in enumerate(lens):
            rows = paged_rows(i, b, n)
            assert np.all(rows >= 0), "sequence %d leaves the pool" % b
            out[c][b, :n] = pool[rows]
    return out


def paged_properties(name, p, i, dtype, prefix=None, fp8=False):
    """The contract's table and pool: attention_decode's params; a power-of-two block size from
    1 to 256, named in the case (bs<N>); each length in [1, max_blocks * block_size]; a row's
    first ceil(n / block_size) entries distinct pages of the pool, -1 after them; a page in two
    rows only in a shared case, as the same leading entries of both, full in both and inside
    both prefixes (prefix: the cached positions of each sequence, default its whole length);
    a spare page; sequence 0 not starting at page 0 (where a kernel ignoring the table reads);
    every slot no sequence holds poison, every held slot not. An FP8 pool (fp8, i holding its
    codes): the poison is the code 0x7E (+448), which a held slot may hold too (a saturated
    value); its scales are checked by paged_fp8_properties. Returns the held slots
    [num_blocks, block_size]."""
    t, lens = i["block_table"], _lens(i)
    prefix = lens if prefix is None else prefix
    nb, bs = i["k_cache"].shape[:2]
    B, max_blocks = t.shape
    assert list(p) == ["n_heads", "n_kv_heads", "head_dim", "scale"] + (
        ["window"] if "window" in p else []) + (["softcap"] if "softcap" in p else []), name
    assert bs in [2 ** k for k in range(9)] and "_bs%d_" % bs in name + "_", name
    assert t.dtype == np.int32 and lens.shape == (B,), name
    held = np.zeros((nb, bs), dtype=bool)
    users = {}
    for b, n in enumerate(lens):
        k = _pages(i, n)
        assert 1 <= n <= max_blocks * bs, "%s: length %d" % (name, n)
        assert np.all(t[b, k:] == -1), "%s: sequence %d's unused entries are not -1" % (name, b)
        assert np.all((t[b, :k] >= 0) & (t[b, :k] < nb)) and len(set(t[b, :k])) == k, name
        for e in range(k):
            users.setdefault(int(t[b, e]), []).append((b, e))
            held[t[b, e], :n - e * bs] = True
    shared = {page: u for page, u in users.items() if len(u) > 1}
    assert bool(shared) == ("shared" in name), "%s: shared pages %s" % (name, shared)
    for page, u in shared.items():
        assert len(u) == 2, "%s: page %d in %d rows" % (name, page, len(u))
        (a, e), (b, e2) = u
        assert e == e2 and np.array_equal(t[a, :e], t[b, :e]), "%s: no shared prefix" % name
        assert min(prefix[a], prefix[b]) >= (e + 1) * bs, \
            "%s: shared page %d not full inside both prefixes" % (name, page)
    assert len(users) < nb, "%s: no spare page" % name
    assert t[0, 0] != 0, "%s: sequence 0 starts at page 0" % name
    poison = FP8_POISON if fp8 else ROUND[dtype](np.float64(kernel_ops.POISON))
    for c in ("k_cache", "v_cache"):
        assert np.all(i[c][~held] == poison), "%s: %s: poison missing" % (name, c)
        assert fp8 or not np.any(i[c][held] == poison), "%s: %s: poison where it is read" % (
            name, c)
    return held


def _heads_first(i, c):
    """The pool's memory read as [num_blocks, nKV, block_size, D] (vLLM's paged_attention value
    layout puts the heads before the slots), as rows of [num_blocks * block_size, nKV, D]."""
    nb, bs, nkv, D = i[c].shape
    return i[c].reshape(nb, nkv, bs, D).transpose(0, 2, 1, 3).reshape(nb * bs, nkv, D)


def _pages(i, n):
    """The pages n positions take at the pool's block size."""
    return -(-int(n) // i["k_cache"].shape[1])


# Broken kernels the committed attention_decode_paged sets must reject, each a realistic
# mistake: name -> (rows(i, b, n): the pool rows sequence b's reads come from, as paged_rows
# gives them; the view the pool is read through, None for its stored layout).
PAGED_BROKEN = {
    "the block table ignored (sequence b contiguous from page b * max_blocks)":
        (lambda i, b, n: b * i["block_table"].shape[1] * i["k_cache"].shape[1] + np.arange(n),
         None),
    "the table's rows as long as the longest sequence's pages, not max_blocks":
        (lambda i, b, n: paged_rows(i, b, n, entry=lambda b, e: b * _pages(
            i, _lens(i).max()) + e), None),
    "the next table entry (block_table[b, p // block_size + 1])":
        (lambda i, b, n: paged_rows(i, b, n, entry=lambda b, e: b * i["block_table"].shape[1]
                                    + e + 1), None),
    "the last page read to its end (the slots past cache_lens[b])":
        (lambda i, b, n: paged_rows(i, b, _pages(i, n) * i["k_cache"].shape[1]), None),
    "pages of 16 positions (vLLM's default block size) whatever the pool's":
        (lambda i, b, n: paged_rows(i, b, n, block=16), None),
    "the pool read as [num_blocks, nKV, block_size, D] (heads before slots)":
        (lambda i, b, n: paged_rows(i, b, n), _heads_first),
}


def guarded_pool(i, view, poison):
    """k, v of the pool as rows [num_blocks * block_size + 1, nKV, D], read through view
    (default: as stored), the last row poison: where a row outside the pool reads."""
    nb, bs = i["k_cache"].shape[:2]
    kv = []
    for c in ("k_cache", "v_cache"):
        pool = view(i, c) if view else i[c].reshape((nb * bs,) + i[c].shape[2:])
        kv.append(np.concatenate([pool, np.full((1,) + pool.shape[1:], poison)]))
    return kv


def inside(i, r):
    """Pool rows r with every row outside the pool (-1, past its end) the guard row."""
    nb, bs = i["k_cache"].shape[:2]
    return np.where((r >= 0) & (r < nb * bs), r, nb * bs)


def np_paged_broken(p, i, rows, view, rnd):
    """out of a broken paged kernel: sequence b attends to the pool rows rows(i, b, n) (a row
    outside the pool reads poison), the pool read through view (default: as stored), the output
    rounded to the storage type as a kernel stores it."""
    kv = guarded_pool(i, view, rnd(np.float64(kernel_ops.POISON)))
    out = []
    for b, n in enumerate(i["cache_lens"]):
        r = inside(i, rows(i, b, int(n)))
        out.append(np_attention(i["q"][b][None], kv[0][r], kv[1][r], p["scale"], False,
                                softcap=p.get("softcap", 0.0))[0])
    return rnd(np.stack(out))


def check_paged_broken_kernels(op, broken, fallback=None):
    """Every broken kernel of broken (name -> got(p, inputs, rnd)) fails op's tolerance in
    golden/tolerances.yaml (fallback's while op has none) in at least one committed set of op,
    and some set hands out page 0 (a kernel that takes page 0 for an empty entry fails there)."""
    _, tols = yardstick(op, fallback or op)
    caught = {what: [] for what in broken}
    page0 = []
    for case in kernel_cases.cases_for(kernel_cases.COMMITTED, [op]):
        _, p, inputs, expected = kernel_cases.build(case)
        i = {n: a(t) for n, t in inputs.items()}
        dtype = "bf16" if case.name.startswith("bf16-") else "f16"
        want = expected["out"].float().numpy().astype(np.float64)
        for what, got_of in broken.items():
            if tolerance_share(got_of(p, i, ROUND[dtype]), want, tols[dtype]) > 1:
                caught[what].append(case.name)
        if np.any(i["block_table"] == 0):
            page0.append(case.name)
    assert page0, "%s: no committed set hands out page 0" % op
    for what, by in caught.items():
        assert by, "%s: no committed set rejects %s" % (op, what)
        print("%s rejects %-72s in %d set(s), e.g. %s" % (op, what, len(by), by[0]))


# ---------------------------------------------------------------------------------------------
# Paged prefill (attention_prefill_paged): attention_decode_paged's pool holding each sequence's
# prefix and new tokens (kv_lens), q [total_q, nH, D] the new tokens' queries, sequence b's the
# rows q_starts[b] .. q_starts[b+1]-1; its query t (of m = q_len) at position n - m + t (n =
# kv_len) sees positions 0 .. n - m + t.


def np_prefill_paged(p, i, rows, view, seen, poison=np.nan, values=None):
    """out [total_q, nH, D] of a paged prefill, right or broken: sequence b (kv_len n, q_len m)
    reads its keys from the pool rows rows(i, b, n, m) (a row outside the pool reads poison),
    the pool read through view (None: as stored), its query t attending to the first
    seen(i, n, m)[t] of them. The contract: rows paged_rows(i, b, n), seen n - m + 1 + t.
    values(i, (k, v)): the values a kernel computes with from the rows it reads (an FP8 pool's
    codes, fp8_values), None for a 16-bit pool's own."""
    kv = guarded_pool(i, view, poison)
    if values is not None:
        kv = values(i, kv)
    starts = i["q_starts"]
    out = np.empty_like(i["q"])
    for b, n in enumerate(i["kv_lens"]):
        n, first, m = int(n), int(starts[b]), int(starts[b + 1] - starts[b])
        r = inside(i, rows(i, b, n, m))
        out[first:first + m] = np_attention_seen(i["q"][first:first + m], kv[0][r], kv[1][r],
                                                 p["scale"], seen(i, n, m), p.get("window", 0),
                                                 p.get("softcap", 0.0))
    return out


_PREFILL_NAME = re.compile(r"_pre([0-9-]+)_new([0-9-]+)(_|$)")


def prefill_paged_properties(name, p, i, dtype, fp8=False):
    """q_starts [B + 1] int32 from 0 to total_q (q's rows), each sequence at least one new token;
    kv_len >= q_len; the prefixes and new-token counts those the name says (pre<a-b-..>,
    new<a-b-..>); the pool as attention_decode_paged's (paged_properties), the shared pages
    inside both sequences' prefixes. Returns the held slots (paged_properties)."""
    starts, kv = i["q_starts"], i["kv_lens"]
    B = kv.shape[0]
    assert starts.dtype == np.int32 and kv.dtype == np.int32 and starts.shape == (B + 1,), name
    q_lens = np.diff(starts)
    assert starts[0] == 0 and starts[-1] == i["q"].shape[0], "%s: q_starts %s" % (name, starts)
    assert np.all(q_lens >= 1), "%s: a sequence with no new token" % name
    assert np.all(kv >= q_lens), "%s: kv_lens %s shorter than q_lens %s" % (name, kv, q_lens)
    match = _PREFILL_NAME.search(name)
    assert match, name
    named = [[int(v) for v in g.split("-")] for g in match.groups()[:2]]
    assert named == [list(kv - q_lens), list(q_lens)], "%s: prefixes %s, new tokens %s" % (
        name, list(kv - q_lens), list(q_lens))
    return paged_properties(name, p, i, dtype, prefix=kv - q_lens, fp8=fp8)


def _offset(i, n, m):
    """The contract's keys seen by each of m queries over n positions: n - m + 1 + t."""
    return n - m + 1 + np.arange(m)


def _page_end(i, n):
    """n rounded up to a whole page of the pool."""
    return _pages(i, n) * i["k_cache"].shape[1]


# Broken kernels the committed attention_prefill_paged sets must reject, each a realistic
# mistake: name -> (rows(i, b, n, m): the pool rows sequence b's keys come from (n its kv_len,
# m its q_len), as paged_rows gives them; the view the pool is read through, None for its
# stored layout; seen(i, n, m): how many of those keys each of its m queries attends to).
PREFILL_PAGED_BROKEN = {
    "a causal mask without the prefix offset (query t sees keys 0..t)":
        (lambda i, b, n, m: paged_rows(i, b, n), None, lambda i, n, m: 1 + np.arange(m)),
    "the prefix length taken for the new-token count (query t sees keys 0..q_len+t)":
        (lambda i, b, n, m: paged_rows(i, b, n), None,
         lambda i, n, m: np.minimum(m + 1 + np.arange(m), n)),
    "the last partial page dropped (keys only up to kv_len rounded down to a page)":
        (lambda i, b, n, m: paged_rows(i, b, n), None,
         lambda i, n, m: np.minimum(_offset(i, n, m), n // i["k_cache"].shape[1] *
                                    i["k_cache"].shape[1])),
    "the last page taken as full (kv_len = pages x block_size; FlashInfer's last_page_len)":
        (lambda i, b, n, m: paged_rows(i, b, _page_end(i, n)), None,
         lambda i, n, m: _offset(i, _page_end(i, n), m)),
}
# attention_decode_paged's broken table and pool reads, under the contract's causal mask (its
# last page read to its end is the last page taken as full above)
PREFILL_PAGED_BROKEN.update({
    what: (lambda i, b, n, m, rows=rows: rows(i, b, n), view, _offset)
    for what, (rows, view) in PAGED_BROKEN.items()
    if what != "the last page read to its end (the slots past cache_lens[b])"})


def np_prefill_broken(p, i, what, rnd):
    """out of the broken kernel PREFILL_PAGED_BROKEN[what], rounded to the storage type."""
    rows, view, seen = PREFILL_PAGED_BROKEN[what]
    return rnd(np_prefill_paged(p, i, rows, view, seen, rnd(np.float64(kernel_ops.POISON))))


# ---------------------------------------------------------------------------------------------
# The FP8 paged ops (attention_decode_paged_fp8, attention_prefill_paged_fp8): the 16-bit paged
# ops' table, lengths and mask over a pool of E4M3 codes, key j of KV head h standing for
# e4m3_decode(code) * k_scale[h] (k_scale [1]: one scale for every head), values likewise with
# v_scale; every slot no sequence holds the code 0x7E (+448). Their references are the 16-bit
# ops' numpy references over those values; their broken kernels are the 16-bit ops' table and
# mask mistakes over the same values plus the FP8 mistakes of FP8_BROKEN, each read through the
# prefill's model of a kernel (a decode is a prefill of one new token a sequence, as_prefill).

PAGED_FP8 = {"attention_decode_paged_fp8": "attention_decode_paged",
             "attention_prefill_paged_fp8": "attention_prefill_paged"}
E4M3_TOP = 448.0    # the largest f8e4m3 value, codes 0x7E and 0xFE
FP8_POISON = 0x7E   # +448: every slot of an FP8 pool no sequence holds


def fp8_values(i, kv, key_head=None, value_scale=True, top=None):
    """k, v of E4M3 codes [..., nKV, D] (the pool, or rows a kernel reads from it) as the values a
    kernel computes with: e4m3_decode(code) * the scale of the code's KV head (i's k_scale,
    v_scale, one or one a head). Broken: each KV head h scaling its keys by k_scale[key_head(h,
    nKV)]; the value scale never applied; the saturation codes (+-448) read as +-top."""
    out = []
    for codes, sn in zip(kv, ("k_scale", "v_scale")):
        nkv = codes.shape[-2]
        per = np.broadcast_to(i[sn], (nkv,)).astype(np.float64)
        if sn == "k_scale" and key_head is not None:
            per = per[key_head(np.arange(nkv), nkv)]
        if sn == "v_scale" and not value_scale:
            per = np.ones(nkv)
        x = e4m3_decode(codes)
        if top is not None:
            x = np.where(np.abs(x) == E4M3_TOP, np.sign(x) * top, x)
        out.append(x * per[:, None])
    return out


def paged_fp8_properties(name, i, held, headroom):
    """An FP8 pool's scales: float32 > 0, both of one size, 1 or n_kv_heads ("per-head" in the
    name exactly when there is one a head), calibrated over the held slots (amax / 448 *
    headroom, headroom <= 1: the largest held value of each scale's heads has the code of
    +-448), a calibration below 1 saturating more of them than their largest."""
    nkv = i["k_cache"].shape[2]
    for c, sn in (("k_cache", "k_scale"), ("v_cache", "v_scale")):
        sc = i[sn]
        assert sc.shape == i["k_scale"].shape and sc.size in (1, nkv) and np.all(sc > 0), name
        assert np.all(sc.astype(np.float32) == sc), name
        assert (sc.size > 1) == ("per-head" in name), "%s: %s of %d" % (name, sn, sc.size)
        mag = np.abs(e4m3_decode(i[c][held]))                       # [held slots, nKV, D]
        groups = mag.reshape(-1, nkv, mag.shape[-1]).transpose(1, 0, 2).reshape(sc.size, -1)
        assert np.all(groups.max(-1) == E4M3_TOP), "%s: %s not calibrated" % (name, sn)
        top = (groups == E4M3_TOP).sum(-1)
        assert headroom == 1.0 or top.max() >= 2, "%s: headroom %g saturates nothing" % (
            name, headroom)


def as_prefill(i):
    """A paged decode's inputs as a paged prefill's: one new token a sequence (q_starts 0 .. B),
    kv_lens its cache_lens; its query at position n - 1 sees positions 0 .. n - 1 (and a
    window's last positions), the same attention."""
    lens = i["cache_lens"]
    return dict(i, q_starts=np.arange(len(lens) + 1, dtype=np.int32), kv_lens=lens)


# Broken FP8 reads the committed FP8 paged sets must reject, each a realistic mistake: name ->
# fp8_values' broken arguments, under the contract's table reads and mask.
FP8_BROKEN = {
    "the key scale of the next KV head (k_scale[(h + 1) % n_kv_heads])":
        dict(key_head=lambda h, n: (h + 1) % n),
    "the key scale of head 0 for every head (a per-tensor scale assumed)":
        dict(key_head=lambda h, n: 0 * h),
    "the value scale not applied (each value's code taken for it)":
        dict(value_scale=False),
    "the saturation code 0x7E (+448) read as its neighbour 0x7D (+416)":
        dict(top=416.0),
}
# The 16-bit ops' mask mistakes that a decode has no room for: its one query sees every key.
_PREFILL_ONLY = ("a causal mask without the prefix offset (query t sees keys 0..t)",
                 "the prefix length taken for the new-token count (query t sees keys 0..q_len+t)")


def paged_fp8_broken(op):
    """The broken kernels of an FP8 paged op for check_paged_broken_kernels: the 16-bit op's
    table and mask mistakes (PREFILL_PAGED_BROKEN; a decode's slots past cache_lens are its last
    page taken as full) over the values the codes stand for, and FP8_BROKEN's value mistakes
    under the contract's reads."""
    decode = op == "attention_decode_paged_fp8"

    def kernel(rows, view, seen, **values):
        def got(p, i, rnd):
            j = as_prefill(i) if decode else i
            return rnd(np_prefill_paged(p, j, rows, view, seen, FP8_POISON,
                                        lambda i, kv: fp8_values(i, kv, **values)))
        return got

    broken = {what: kernel(rows, view, seen)
              for what, (rows, view, seen) in PREFILL_PAGED_BROKEN.items()
              if not (decode and what in _PREFILL_ONLY)}
    broken.update({what: kernel(lambda i, b, n, m: paged_rows(i, b, n), None, _offset, **kw)
                   for what, kw in FP8_BROKEN.items()})
    return broken


def check_round_trip():
    """Write a few sets, read them back the way a reader would, and regenerate identically."""
    picks = [c for c in kernel_cases.cases_for(kernel_cases.COMMITTED)
             if (c.op, c.name) in {("rope", "partial-r32-d64_t3"), ("gemm", "odd-m3-n257-k1001"),
                                   ("softmax", "attn-causal-f16_t8"),
                                   ("rmsnorm_residual", "bf16-outliers-x20_llama3.2-1b_t1_inplace"),
                                   ("set_rows", "bf16-odd-3x50_l8_t3"),
                                   ("quant_fp8", "static_s1_e4m3-boundaries_h128_f32"),
                                   ("quant_fp8", "bf16-dynamic-g128_llama3.2-1b_t3"),
                                   ("gemm_fp8", "block_partial-row-block-n200_m3-k384_out-bf16"),
                                   ("moe_router", "ties-int_e8-k2_t33"),
                                   ("attention_prefill_paged_fp8",
                                    "bf16-gqa2_d64_bs4_pre8-3-10_new2-1-3_per-head_shared2")}]
    assert len(picks) == 10
    with tempfile.TemporaryDirectory() as tmp:
        for c in picks:
            digests = []
            for rep in range(2):
                d = os.path.join(tmp, c.op, c.name)
                seed, params, inputs, expected = kernel_cases.build(c)
                manifest.write_set(d, op=c.op, case=c.name, tier=c.tier, seed=seed,
                                   params=params, inputs=inputs, expected=expected)
                with open(os.path.join(d, "manifest.json"), "rb") as f:
                    raw = f.read()
                m = json.loads(raw)
                assert raw.endswith(b"\n") and list(m) == [
                    "format_version", "generator", "kind", "op", "case", "tier", "seed",
                    "params", "files"]
                assert m["format_version"] == 1 and m["kind"] == "kernel" and 0 <= m["seed"] < 2**32
                listed = {e["file"] for e in m["files"]}
                assert set(os.listdir(d)) == listed | {"manifest.json"}
                h = hashlib.sha256(raw)
                for e in m["files"]:
                    with open(os.path.join(d, e["file"]), "rb") as f:
                        data = f.read()
                    h.update(data)
                    assert data.startswith(b"\x93NUMPY\x01\x00")
                    assert hashlib.sha256(data).hexdigest() == e["sha256"]
                    arr = np.load(os.path.join(d, e["file"]), allow_pickle=False)
                    want = {"f16": "<f2", "bf16": "<u2", "f32": "<f4", "i32": "<i4",
                            "f8e4m3": "|u1", "f8e5m2": "|u1"}[e["dtype"]]
                    assert arr.dtype.str == want and list(arr.shape) == e["shape"]
                    assert arr.flags.c_contiguous
                    # the header names the stored type literally ('<u2' for bf16 bits)
                    assert ("'descr': '%s'" % want).encode() in data[:128], e["file"]
                    if e["role"] == "input":
                        t = inputs[e["name"]]
                        assert e["dtype"] == manifest.DTYPES[t.dtype][0]
                        if e["dtype"] == "bf16":  # the bits, read back, are the input's values
                            assert np.array_equal(bf16_bits_to_f64(arr), a(t)), e["file"]
                            assert np.array_equal(arr, t.view(torch.int16).numpy().view(np.uint16))
                        else:
                            # the bytes: every NaN of quant_fp8's conversion table and its sign;
                            # gemm_fp8's f8e4m3 inputs
                            raw = t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t
                            assert arr.tobytes() == raw.numpy().tobytes(), e["file"]
                    else:  # fp64 references as f32, exact outputs as built (f8e4m3: the bytes)
                        t = expected[e["name"]]
                        assert e["dtype"] == ("f32" if t.dtype == torch.float64 else
                                              manifest.DTYPES[t.dtype][0]), e["file"]
                        if e["dtype"] == "f8e4m3":
                            assert np.array_equal(arr, t.view(torch.uint8).numpy()), e["file"]
                    assert (e["role"] != "input") == (e["name"] in expected)
                    assert (e["role"] == "allowance") == e["name"].endswith("_allowance")
                digests.append(h.hexdigest())
            assert digests[0] == digests[1], "%s/%s: regeneration differs" % (c.op, c.name)


def emulated_gpt_ffn(i, p, dtype, sequential):
    """gpt_ffn as a kernel within its contract computes it: the pre-activation accumulated in
    fp32 (torch's blocked float32 matmul, or a sequential float32 sum over the hidden dimension),
    the GELU in fp32, one rounding of the activation, the down projection in fp32 and one rounding
    of the output."""
    x, w1, w2 = (torch.from_numpy(i[n]).float() for n in ("x", "w1", "w2"))
    if sequential:
        pre = torch.cumsum(x[:, None, :] * w1[None, :, :], dim=-1)[..., -1]
    else:
        pre = x @ w1.T
    if p["has_bias"]:
        pre = pre + torch.from_numpy(i["b1"]).float()
    g = torch.nn.functional.gelu(pre, approximate="tanh" if p["gelu"] == "tanh" else "none")
    t = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    out = g.to(t).float() @ w2.T
    if p["has_bias"]:
        out = out + torch.from_numpy(i["b2"]).float()
    return out.to(t).double().numpy()


def check_gpt_ffn_allowance():
    """An fp32 gpt_ffn within the contract, in two accumulation orders, passes every gpt_ffn case
    of both tiers (the full tier's too large for a sequential sum are cut to their first rows)
    under the op's tolerance plus the case's allowance: the allowance covers the activations such
    a kernel rounds the other way. Prints how many elements needed it."""
    import yaml
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden", "tolerances.yaml")) as f:
        tols = yaml.safe_load(f)["kernels"]["gpt_ffn"]
    for c in [c for c in kernel_cases.CASES if c.op == "gpt_ffn"]:
        seed, params, inputs, expected = kernel_cases.build(c)
        dtype = "bf16" if c.name.startswith("bf16-") else "f16"
        tol = tols[dtype]
        ins = {n: a(t) for n, t in inputs.items()}
        want = expected["out"].numpy()
        allowance = expected["out_allowance"].float().double().numpy()
        rows = want.shape[0] if want.shape[0] * want.shape[1] * ins["w1"].shape[0] <= 64 << 20 else 8
        want, allowance = want[:rows], allowance[:rows]
        ins = dict(ins, x=ins["x"][:rows])
        rms = np.sqrt((want ** 2).mean(-1, keepdims=True))
        limit = tol["atol"] + tol["atol_rms"] * rms + tol["rtol"] * np.abs(want)
        worst = []
        for sequential in (False, True):
            err = np.abs(emulated_gpt_ffn(ins, params, dtype, sequential) - want)
            with_allowance = float((err / (limit + allowance)).max())
            assert with_allowance <= 1, "%s/%s: an fp32 kernel (%s sum) uses %.3g of tolerance + allowance" % (
                c.op, c.name, "sequential" if sequential else "blocked", with_allowance)
            worst += [float((err / limit).max()), with_allowance]
        print("gpt_ffn %-56s allowance > 0 at %5.1f%% of the outputs; worst element of an fp32 kernel "
              "(blocked, sequential sums): %.2f, %.2f of the tolerance, %.2f, %.2f with the allowance"
              % (c.name + ("" if c.tier == "committed" else " [full]"), 100 * float((allowance > 0).mean()),
                 worst[0], worst[2], worst[1], worst[3]))


# ---------------------------------------------------------------------------------------------
# The fused quantisers (rmsnorm_quant_fp8, swiglu_quant_fp8; docs/quantization.md, "Fused
# quantisers") in numpy: y from the formulas in float64, rounded to the storage type through fp32
# (f16, bf16), then quant_fp8's numpy twin (np_quant_fp8) on it, which must give the committed
# bytes and scales bit for bit. Their tolerance (golden/tolerances.yaml: FP8 codes within
# max_steps of the reference's, at most max_mismatch of them differing; scales within rtol) is
# measured here: correct fp32 kernels that compute y in another order must pass it on every
# committed case, the most any kernel within the contract's fp32 accuracy of y could move is
# counted, and realistic broken kernels must fail it.

FUSED_QUANT = ("rmsnorm_quant_fp8", "swiglu_quant_fp8")

# The accuracy of a correct kernel's fp32 y before its one rounding to the storage type, in
# float32 ulps of |y| (2^-24 |y|): RMSNorm's sum of squares taken sequentially over 16384 values
# is 60-80 ulps off (measured below), a tree of partial sums 2-3, the CPU backend's fp64 sum 2;
# SwiGLU's fp32 exp (or ex2.approx, 2 ulps) and reciprocal (rcp.approx, 1 ulp) and two products
# reach ~7. A y that lies within this of a rounding boundary of the storage type may round either
# way; nothing else may differ.
FUSED_Y_ULPS = {"rmsnorm_quant_fp8": 128, "swiglu_quant_fp8": 16}


def e4m3_position(codes):
    """Each f8e4m3 code's position on the number line (compare.fp8Position): the magnitude
    bits, negated for a negative code; +0 and -0 are one position."""
    c = np.asarray(codes, dtype=np.int64)
    return np.where(c & 0x80, -(c & 0x7F), c & 0x7F)


def truncate(x, dtype):
    """x (float64) rounded to float32, then toward zero to the storage type: the truncating
    store of a broken kernel (bf16: the top 16 bits; fp16: round, then one step back where that
    went away from zero)."""
    v = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "bf16":
        return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)
    h = v.astype(np.float16)
    away = np.abs(h.astype(np.float32)) > np.abs(v)
    return np.where(away, np.nextafter(h, np.float16(0)), h).astype(np.float64)


def fused_quantise(p, y, scale=None, encode=e4m3_encode, scales=group_scales):
    """quant_fp8 of the values y (float32 after their rounding): np_quant_fp8 with the static
    scale or dynamic per p."""
    i = {"x": np.asarray(y, dtype=np.float32)}
    if p["mode"] == "static":
        i["scale"] = scale
    return np_quant_fp8(p, i, encode=encode, scales=scales)


def fused_y(op, p, i, norm=None, weight_index=None, act=None):
    """The exact intermediate of a fused quantiser in float64 (before its rounding to the
    storage type), and the residual sum s (rmsnorm_quant_fp8 with a residual, else None). The
    keywords make broken variants: norm(s) -> 1 / rms replaces the exact one; weight_index(H)
    -> the column of the weight each element reads; act(g, u) replaces silu(g) * u."""
    if op == "swiglu_quant_fp8":
        g, u = i["gate"], i["up"]
        return (act or (lambda g, u: np_silu(g) * u))(g, u), None
    s = i["x"]
    if p["has_residual"]:
        s = i["_round"]((i["x"].astype(np.float32) + i["residual"].astype(np.float32)).astype(np.float64))
    inv = norm(s) if norm else 1.0 / np.sqrt((s * s).mean(-1, keepdims=True) + p["eps"])
    H = s.shape[1]
    w = i["weight"][weight_index(H)] if weight_index else i["weight"]
    return s * inv * w, (s if p["has_residual"] else None)


def fused_reference(op, p, i):
    """A fused quantiser's outputs from the formulas: out and scales of the rounded y, and the
    fp64 sum x + residual (rmsnorm_quant_fp8 with a residual)."""
    y, _ = fused_y(op, p, i)
    outs = fused_quantise(p, i["_round"](y), i.get("scale"))
    if op == "rmsnorm_quant_fp8" and p["has_residual"]:
        outs["sum"] = i["x"] + i["residual"]
    return outs


def emulated_fused_y(op, p, i):
    """y as correct fp32 kernels compute it before their rounding, {name: float32 [T, H]}:
    RMSNorm's sum of squares sequential, reversed, pairwise (numpy's float32 sum), in vectors of 8
    then a tree (the CUDA kernel's order), and the CPU backend's fp64 sum; then 1 / sqrt(ms + eps)
    and (s inv) w in fp32. SwiGLU's silu(g) u in fp32 with a division, with a reciprocal, with an
    exp one ulp off (ex2.approx), and the CPU backend's fp64 silu."""
    out = {}
    if op == "swiglu_quant_fp8":
        g, u = i["gate"].astype(np.float32), i["up"].astype(np.float32)
        one = np.float32(1)
        with np.errstate(over="ignore"):
            e = np.exp(-g)
            out["fp32 silu, a division"] = (g / (one + e)) * u
            out["fp32 silu, a reciprocal"] = g * (one / (one + e)) * u
            out["fp32 exp one ulp high"] = g * (one / (one + e * np.float32(1 + 2**-23))) * u
            out["fp64 silu (the CPU backend)"] = (i["gate"] / (1 + np.exp(-i["gate"]))).astype(np.float32) * u
        return out
    _, s = fused_y(op, p, i)
    s = i["x"] if s is None else s
    s32, w32 = s.astype(np.float32), i["weight"].astype(np.float32)
    T, H = s.shape
    sq = s32 * s32

    def finish(ss):
        inv = np.float32(1) / np.sqrt(ss / np.float32(H) + np.float32(p["eps"]))
        return (s32 * inv[:, None]) * w32

    seq, rev = np.zeros(T, np.float32), np.zeros(T, np.float32)
    for j in range(H):
        seq += sq[:, j]
        rev += sq[:, H - 1 - j]
    out["fp32 sequential"] = finish(seq)
    out["fp32 reversed"] = finish(rev)
    out["fp32 pairwise"] = finish(sq.sum(-1, dtype=np.float32))
    if H % 8 == 0:
        part = np.zeros((T, H // 8), np.float32)
        for j in range(8):
            part += sq[:, j::8]
        out["fp32 vectors of 8, then a tree"] = finish(part.sum(-1, dtype=np.float32))
    inv64 = 1.0 / np.sqrt((s * s).mean(-1) + p["eps"])
    out["fp64 sum (the CPU backend)"] = (s * inv64[:, None]).astype(np.float32) * w32
    return out


def within_contract(op, p, i, y):
    """The most a kernel whose fp32 y is within FUSED_Y_ULPS of the exact y (float64) can move:
    every element's y may take either rounding of y -+ its error, and every group's scale the
    amax of either; returns (codes whose value is not decided, groups whose scale is not)."""
    err = np.abs(y) * FUSED_Y_ULPS[op] * 2.0**-24
    rnd = i["_round"]
    lo, hi = rnd(y - err).astype(np.float32), rnd(y + err).astype(np.float32)
    if p["mode"] == "static":
        a, b = (fused_quantise(p, v, i["scale"])["out"] for v in (lo, hi))
        return int((e4m3_position(a) != e4m3_position(b)).sum()), 0
    T, H = y.shape
    G = p["group_size"]
    mag = np.abs(np.stack([lo, hi]))
    amax = [mag.min(0).reshape(T, H // G, G).max(-1), mag.max(0).reshape(T, H // G, G).max(-1)]
    codes = []
    for m in amax:
        s = group_scales(m[..., None]).astype(np.float32)
        for v in (lo, hi):
            with np.errstate(invalid="ignore", divide="ignore"):
                q = e4m3_encode(np.divide(v.reshape(T, H // G, G), s[..., None])).reshape(T, H)
            codes.append(e4m3_position(q))
    c = np.stack(codes)
    return int((c.max(0) != c.min(0)).sum()), int((amax[0] != amax[1]).sum())


def fused_tolerance():
    """golden/tolerances.yaml's entries of the fused quantisers: {op: {key: entry}}."""
    import yaml
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden",
                           "tolerances.yaml")) as f:
        kernels = yaml.safe_load(f)["kernels"]
    return {op: kernels[op] for op in FUSED_QUANT}


def fused_verdict(tol, dtype, got, want):
    """got against want (out bytes; scales float32) under an op's entries, as engine/compare
    judges them: (passes, share of codes differing, largest step, worst scale error over its
    allowance)."""
    f8 = tol["f8e4m3"]
    d = np.abs(e4m3_position(got["out"]) - e4m3_position(want["out"]))
    share, steps = float((d > 0).mean()), int(d.max())
    ok = steps <= f8["max_steps"] and share <= f8["max_mismatch"]
    worst = 0.0
    if "scales" in want:
        t = tol.get("f32@" + dtype, tol["f32"])
        g, w = got["scales"].astype(np.float64), want["scales"].astype(np.float64)
        excess = np.abs(g - w) - (t["atol"] + t["rtol"] * np.abs(w))
        worst = float((np.abs(g - w) / (t["atol"] + t["rtol"] * np.abs(w))).max())
        ok = ok and bool(np.all(excess <= 0))
    return ok, share, steps, worst


def _rms_no_eps(s):
    return 1.0 / np.sqrt((s * s).mean(-1, keepdims=True))


def _amax_before_weight(op, p, i):
    """Codes of the right y, scales from the amax of s * inv: the weight not applied yet."""
    y, s = fused_y(op, p, i)
    s = i["x"] if s is None else s
    pre = (s / np.sqrt((s * s).mean(-1, keepdims=True) + p["eps"])).astype(np.float32)
    T, H = pre.shape
    wrong = group_scales(np.abs(pre).reshape(T, H // p["group_size"], p["group_size"]))
    return fused_quantise(p, i["_round"](y), scales=lambda xg: wrong.astype(np.float32))


# Broken fused quantisers the committed sets must reject (fail the op's tolerance in at least
# one set), each a realistic mistake: op -> {name: (applies(p, H), outputs(op, p, i))}.
FUSED_BROKEN = {
    "rmsnorm_quant_fp8": {
        "the norm weight indexed by the position in its quantisation group (w[i % G])": (
            lambda p, H: p["mode"] == "dynamic" and p["group_size"] < H,
            lambda op, p, i: fused_quantise(p, i["_round"](fused_y(
                op, p, i, weight_index=lambda H: np.arange(H) % p["group_size"])[0]))),
        "eps dropped (1 / rms)": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, i["_round"](fused_y(op, p, i, norm=_rms_no_eps)[0]),
                                            i.get("scale"))),
        "the fp32 norm quantised, not rounded to the storage type": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, fused_y(op, p, i)[0].astype(np.float32),
                                            i.get("scale"))),
        "the amax taken before the weight multiply": (
            lambda p, H: p["mode"] == "dynamic", _amax_before_weight),
        "y truncated to the storage type (round toward zero)": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, truncate(fused_y(op, p, i)[0], i["_dtype"]),
                                            i.get("scale"))),
        "e4m3 rounds toward zero": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, i["_round"](fused_y(op, p, i)[0]), i.get("scale"),
                                            encode=functools.partial(e4m3_encode, ties="zero"))),
    },
    "swiglu_quant_fp8": {
        "silu applied to up instead of gate": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, i["_round"](fused_y(
                op, p, i, act=lambda g, u: np_silu(u) * g)[0]), i.get("scale"))),
        "the fp32 activation quantised, not rounded to the storage type": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, fused_y(op, p, i)[0].astype(np.float32),
                                            i.get("scale"))),
        "the activation truncated to the storage type (round toward zero)": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, truncate(fused_y(op, p, i)[0], i["_dtype"]),
                                            i.get("scale"))),
        "e4m3 rounds toward zero": (
            lambda p, H: True,
            lambda op, p, i: fused_quantise(p, i["_round"](fused_y(op, p, i)[0]), i.get("scale"),
                                            encode=functools.partial(e4m3_encode, ties="zero"))),
    },
}


def fused_inputs(case, inputs):
    """A case's inputs as float64 arrays, with its storage rounding (_round), dtype (_dtype)."""
    dtype = "bf16" if case.name.startswith("bf16-") else "f16"
    i = {n: a(t) for n, t in inputs.items()}
    i.update(_round=ROUND[dtype], _dtype=dtype)
    return i


def check_fused_quant(case, p, inputs, expected):
    """One committed fused-quantiser case: its out and scales bit for bit those of the formulas'
    rounded y, its sum within half an fp32 ulp of x + residual; the params and name agree; and
    what the case is there for holds in its data."""
    i = fused_inputs(case, inputs)
    where = "%s/%s" % (case.op, case.name)
    want = fused_reference(case.op, p, i)
    got = {n: t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else
           t.to(torch.float64).numpy() if t.dtype == torch.float64 else t.numpy()
           for n, t in expected.items()}
    assert sorted(got) == sorted(want), "%s: outputs %s" % (where, list(got))
    assert np.array_equal(got["out"], want["out"]), "%s: out differs at %d codes" % (
        where, int((got["out"] != want["out"]).sum()))
    if "scales" in want:
        assert same_bits(got["scales"], want["scales"]), where
    if "sum" in want:
        assert np.all(np.abs(got["sum"] - want["sum"]) <= 2.0**-24 * np.abs(want["sum"])), where
    name = case.name[len("bf16-"):] if case.name.startswith("bf16-") else case.name
    assert name.startswith(p["mode"]), "%s: mode %s" % (where, p["mode"])
    y, _ = fused_y(case.op, p, i)
    T, H = y.shape
    if p["mode"] == "dynamic":
        G = p["group_size"]
        assert "scale" not in i and H % G == 0, where
        assert ("per-token" in name) == (G == H) and ("g128" in name) == (G == 128), where
    else:
        assert "group_size" not in p and i["scale"].shape == (1,), where
        tag = name.split("_")[1]
        assert np.float32(float(tag[1:])) == i["scale"][0], where
        # the scale is small enough for the largest values to saturate (at 448)
        assert np.any(np.abs(got["out"].astype(np.int64) & 0x7F) == 0x7E), where
    if case.op == "rmsnorm_quant_fp8":
        assert list(p) == ["eps", "mode"] + (["group_size"] if p["mode"] == "dynamic" else []) + \
            ["has_residual", "inplace"], where
        assert ("residual" in name) == p["has_residual"] == ("residual" in i), where
        assert name.endswith("_inplace") == p["inplace"], where
    else:
        assert list(p) == ["mode"] + (["group_size"] if p["mode"] == "dynamic" else []), where
    if "zero-row" in name:
        zero = np.all(y == 0, axis=-1)
        assert zero.any() and np.all(got["scales"][zero] == np.float32(1e-10) / np.float32(448)), where
    if "small-rms" in name:
        s = i["x"]
        ms = (s * s).mean(-1)
        live = ms > 0
        ratio = np.sqrt((ms[live] + p["eps"]) / ms[live])
        assert np.all(ratio - 1 > 0.1), "%s: a dropped eps would pass" % where
    if "outliers" in name:
        s = got["scales"]
        assert np.all(s.max(-1) > 5 * s.min(-1)), "%s: outlier groups not apart" % where


def check_fused_quant_tolerance():
    """The fused quantisers' tolerance against every committed case: the emulated correct fp32
    kernels pass it (the share of codes they move printed), no kernel within FUSED_Y_ULPS of the
    exact y could move more than max_mismatch of the codes of any case, and every broken variant
    of FUSED_BROKEN fails it in at least one case."""
    tols = fused_tolerance()
    for op in FUSED_QUANT:
        caught = {what: [] for what in FUSED_BROKEN[op]}
        worst_emulated, worst_contract, scale_moves, ambiguous = 0.0, 0.0, 0, 0
        for case in kernel_cases.cases_for(kernel_cases.COMMITTED, [op]):
            _, p, inputs, expected = kernel_cases.build(case)
            i = fused_inputs(case, inputs)
            want = {"out": expected["out"].view(torch.uint8).numpy()}
            if "scales" in expected:
                want["scales"] = expected["scales"].numpy()
            tol, dtype = tols[op], i["_dtype"]
            for what, y32 in emulated_fused_y(op, p, i).items():
                got = fused_quantise(p, i["_round"](y32.astype(np.float64)), i.get("scale"))
                ok, share, steps, worst = fused_verdict(tol, dtype, got, want)
                assert ok, "%s/%s: a correct kernel (%s) fails: %.2g of the codes, %d steps, " \
                    "scales %.2g of their allowance" % (op, case.name, what, share, steps, worst)
                worst_emulated = max(worst_emulated, share)
            y, _ = fused_y(op, p, i)
            moved, groups = within_contract(op, p, i, y)
            worst_contract = max(worst_contract, moved / y.size)
            scale_moves += groups
            ambiguous += moved
            assert moved / y.size <= tol["f8e4m3"]["max_mismatch"], \
                "%s/%s: a kernel within %d ulps of y could move %d of %d codes" % (
                    op, case.name, FUSED_Y_ULPS[op], moved, y.size)
            for what, (applies, broken) in FUSED_BROKEN[op].items():
                if applies(p, y.shape[1]):
                    if not fused_verdict(tol, dtype, broken(op, p, i), want)[0]:
                        caught[what].append(case.name)
        max_mismatch = tols[op]["f8e4m3"]["max_mismatch"]
        print("%s: correct fp32 kernels move at most %.2g of a case's codes; one within %d ulps "
              "of y at most %.2g (%d codes, %d group scales in all); max_mismatch %g"
              % (op, worst_emulated, FUSED_Y_ULPS[op], worst_contract, ambiguous, scale_moves,
                 max_mismatch))
        for what, by in caught.items():
            assert by, "%s: no committed set rejects %s" % (op, what)
            print("%s rejects %-80s in %d set(s), e.g. %s" % (op, what, len(by), by[0]))



# ---------------------------------------------------------------------------------------------
# Mixture of experts (moe_router, moe_ffn): numpy's twins above (np_moe_router, np_moe_ffn) check
# every case in memory and every committed set on disk; transformers' own modules (the
# reference the contract names) must land on the same sets: MixtralTopKRouter and
# Qwen3MoeTopKRouter fed the logits through an identity gate, MixtralExperts loaded with the
# stored experts and run in the storage type on the CPU.

# A case's shape in its name: _e<E>-k<k>[-h<H>-f<F>]_[decode-|prefill-]t<T>
_MOE_NAME = re.compile(r"(?:^|_)e([0-9]+)-k([0-9]+)(?:-h([0-9]+)-f([0-9]+))?_(?:[a-z]+-)?t([0-9]+)"
                       r"(?:_|$)")
# fp32's largest finite value is e^88.72: a larger logit overflows an fp32 exp of the raw logit
F32_EXP_MAX = float(np.log(np.finfo(np.float32).max))
# How far transformers' experts, run in the storage type, may land from the fp64 golden (nmse):
# they round gate, up, the activation, each expert's weighted output and the running sum to it
# (measured 2.5e-7 to 4.1e-7 in fp16, u = 2^-11, and 2.2e-5 to 2.7e-5 in bf16, u = 2^-8); a
# wrong expert, a swapped gate and up or a lost weight is O(1).
MOE_TRANSFORMERS_NMSE = {"f16": 1e-4, "bf16": 1e-3}
# transformers' fp32 router weights against the float64 ones (relative): an fp32 softmax, and
# a division by the fp32 sum of the top k, a few roundings of 2^-24 (measured 4 of them)
MOE_ROUTER_F32_REL = 8 * 2.0**-24


def moe_properties(op, name, p, i):
    """What a MoE case is named for holds in its data: the shape in its name, distinct experts
    per row, a router's weights (positive, highest first, summing to one when renormalised),
    ties where the name says ties, the outlier expert first in every row and past fp32's exp
    range, one expert taking every token in the hot-expert cases."""
    m = _MOE_NAME.search(name)
    assert m, "%s/%s: no _e<E>-k<k>_t<T> in the name" % (op, name)
    E, k, T = int(m.group(1)), int(m.group(2)), int(m.group(5))
    if op == "moe_router":
        logits = i["logits"]
        assert list(p) == ["top_k", "renormalize"] and isinstance(p["renormalize"], bool), p
        assert logits.shape == (T, E) and p["top_k"] == k and 1 <= k <= E, (name, logits.shape, p)
        assert name.endswith("_no-renorm") == (not p["renormalize"]), name
        top = -np.sort(-logits, axis=-1)
        inside = (top[:, :k - 1] == top[:, 1:k]).any(-1)
        boundary = top[:, k - 1] == top[:, k] if k < E else np.zeros(T, dtype=bool)
        if "ties" in name:
            assert inside.any() and boundary.any(), \
                "%s: no ties inside the top %d (%d rows) or at its edge (%d rows)" % (
                    name, k, inside.sum(), boundary.sum())
            assert not name.startswith("ties-int") or (~(inside | boundary)).any(), name
        if "all-experts" in name:
            assert k == E, name
        o = re.search(r"outlier-expert([0-9]+)", name)
        if o:
            e = int(o.group(1))
            others = np.delete(logits, e, axis=1)
            assert np.all(logits[:, e] >= others.max(-1) + 8), "%s: expert %d not 8 above" % (name, e)
            assert logits[:, e].min() > F32_EXP_MAX, "%s: e^logit fits fp32" % name
        return
    x, ids, w, gu, down = i["x"], i["ids"], i["weights"], i["gate_up"], i["down"]
    H, ffn = int(m.group(3)), int(m.group(4))
    assert p == {}, (name, p)
    assert x.shape == (T, H) and ids.shape == (T, k) and w.shape == (T, k), name
    assert gu.shape == (E, 2 * ffn, H) and down.shape == (E, H, ffn), name
    assert H % 16 == 0 and ffn % 16 == 0, name
    assert ids.dtype.kind == "i" and np.all((ids >= 0) & (ids < E)), name
    assert all(len(set(row.tolist())) == k for row in ids), "%s: an expert twice in a row" % name
    assert np.all(w > 0) and np.all(w[:, :-1] >= w[:, 1:]), "%s: weights not a router's" % name
    assert np.all(np.abs(w.sum(-1) - 1) < 1e-6), "%s: weights not renormalised" % name
    hot = re.search(r"hot-expert([0-9]+)", name)
    if hot:
        e = int(hot.group(1))
        used = np.bincount(ids.ravel(), minlength=E)
        assert np.all(ids[:, 0] == e) and used[e] == T, "%s: expert %d not in every row" % (name, e)
        assert (used == 0).sum() >= E // 2, "%s: only %d idle experts" % (name, (used == 0).sum())


def moe_files(op, dt):
    """The files of a MoE set, in order: (name, role, dtype)."""
    if op == "moe_router":
        return [("logits", "input", dt), ("weights", "expected", "f32"), ("ids", "expected", "i32")]
    return [("x", "input", dt), ("ids", "input", "i32"), ("weights", "input", "f32"),
            ("gate_up", "input", dt), ("down", "input", dt), ("out", "expected", "f32")]


def same_up_to_ties(logits, got, want):
    """Whether the expert lists got and want [T, k] of a router pick the same logit at every
    place: the same experts, but where a row holds equal logits, any of them in any order."""
    return np.array_equal(np.take_along_axis(logits, got, -1), np.take_along_axis(logits, want, -1))


def transformers_router(kind, logits, k, renormalize, tdt):
    """(router_logits, weights, ids) of transformers' MixtralTopKRouter ("mixtral") or
    Qwen3MoeTopKRouter ("qwen3", norm_topk_prob = renormalize) on logits [T, E] (float64
    numpy), through an identity gate in the torch dtype tdt: F.linear(logits, I) is the logits
    exactly, so the router sees what the gate linear stored."""
    from transformers import MixtralConfig, Qwen3MoeConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
    T, E = logits.shape
    if kind == "mixtral":
        assert renormalize
        router = MixtralTopKRouter(MixtralConfig(hidden_size=E, num_local_experts=E,
                                                 num_experts_per_tok=k))
    else:
        router = Qwen3MoeTopKRouter(Qwen3MoeConfig(hidden_size=E, num_experts=E,
                                                   num_experts_per_tok=k,
                                                   norm_topk_prob=renormalize))
    router = router.to(tdt)
    x = torch.from_numpy(logits).to(tdt)
    with torch.no_grad():
        router.weight.copy_(torch.eye(E, dtype=tdt))
        out_logits, weights, ids = router(x)
    assert torch.equal(out_logits, x), "%s router: the identity gate changed the logits" % kind
    return weights.to(torch.float64).numpy(), ids.numpy()


def transformers_experts(i, tdt):
    """out [T, H] (float64 numpy) of transformers' MixtralExperts (the eager loop over experts)
    holding the set's gate_up and down, on its x, ids and f32 weights, in the storage type tdt."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts
    E, f2, H = i["gate_up"].shape
    cfg = MixtralConfig(hidden_size=H, intermediate_size=f2 // 2, num_local_experts=E,
                        num_experts_per_tok=i["ids"].shape[1], hidden_act="silu")
    cfg._experts_implementation = "eager"
    experts = MixtralExperts(cfg).to(tdt)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.from_numpy(i["gate_up"]).to(tdt))
        experts.down_proj.copy_(torch.from_numpy(i["down"]).to(tdt))
        out = experts(torch.from_numpy(i["x"]).to(tdt), torch.from_numpy(i["ids"]).long(),
                      torch.from_numpy(i["weights"]).to(torch.float32))
    assert out.dtype == tdt
    return out.to(torch.float64).numpy()


def check_moe_sets():
    """The committed moe_router and moe_ffn sets on disk, read as a reader does: exactly the
    committed case table, the files, params and properties of each, recomputed by numpy (ids
    exactly, weights and out within half an fp32 ulp); then transformers on the same sets:
    MixtralTopKRouter (the renormalised cases, in the storage type) and Qwen3MoeTopKRouter (every
    case, in fp32: its last cast to the logits' type would round the weights to 16 bits) pick
    the same experts up to the order of equal logits (torch.topk keeps equal values in no
    particular order: the rows where it differs are counted), with weights within
    MOE_ROUTER_F32_REL, and MixtralExperts in the storage type lands within
    MOE_TRANSFORMERS_NMSE."""
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "golden", "kernels")
    t_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}
    for op in ("moe_router", "moe_ffn"):
        op_dir = os.path.join(root, op)
        table = {c.name for c in kernel_cases.cases_for(kernel_cases.COMMITTED, [op])}
        assert os.path.isdir(op_dir) and set(os.listdir(op_dir)) == table, \
            "golden/kernels/%s is not the case table (run: python3 tools/gen-golden kernels " \
            "--op %s)" % (op, op)
        tie_rows, worst = {}, {}
        for name in sorted(table):
            where = "%s/%s" % (op, name)
            m, arrays = read_set(os.path.join(op_dir, name))
            assert m["kind"] == "kernel" and m["op"] == op and m["case"] == name and \
                m["tier"] == "committed", where
            dt = "bf16" if name.startswith("bf16-") else "f16"
            files = [(e["name"], e["role"], e["dtype"]) for e in m["files"]]
            assert files == moe_files(op, dt), "%s: files %s" % (where, files)
            p = m["params"]
            ins = {n: (arrays[n].astype(np.float64) if arrays[n].dtype.kind == "f" else arrays[n])
                   for n, role, _ in files if role == "input"}
            moe_properties(op, name[len("bf16-"):] if dt == "bf16" else name, p, ins)
            for n, want in reference(op, p, ins).items():
                got = arrays[n]
                if n == "ids":
                    assert np.array_equal(got, want), "%s: ids differ from numpy" % where
                    continue
                got = got.astype(np.float64)
                atol = 1e-10 * max(1.0, float(np.abs(want).max()))
                assert np.all(np.abs(got - want) <= 2.0**-24 * 1.01 * np.abs(want) + atol), \
                    "%s: %s differs from numpy by %g" % (where, n, float(np.abs(got - want).max()))
            if op == "moe_router":
                logits, k, renorm = ins["logits"], p["top_k"], p["renormalize"]
                ids, want = arrays["ids"], arrays["weights"].astype(np.float64)
                exact = np_moe_router(logits, k, renorm)["weights"]
                for kind, tdt in (("mixtral", t_dtype[dt]), ("qwen3", torch.float32)):
                    if kind == "mixtral" and not renorm:
                        continue
                    w, got = transformers_router(kind, logits, k, renorm, tdt)
                    assert same_up_to_ties(logits, got, ids), \
                        "%s: transformers' %s router picks other experts" % (where, kind)
                    differ = int((got != ids).any(-1).sum())
                    if differ:
                        tie_rows.setdefault(name, {})[kind] = differ
                    rel = float((np.abs(w - exact) / exact).max())
                    assert rel <= MOE_ROUTER_F32_REL, "%s: transformers' %s router weights " \
                        "%.3g off (relative)" % (where, kind, rel)
                    worst[kind] = max(worst.get(kind, 0.0), rel)
            else:
                want = arrays["out"].astype(np.float64)
                got = transformers_experts({n: arrays[n] for n in ins}, t_dtype[dt])
                err = got - want
                nmse = float((err ** 2).sum() / (want ** 2).sum())
                rms = np.sqrt((want ** 2).mean(-1, keepdims=True))
                max_err_rms = float((np.abs(err) / rms).max())
                assert nmse < MOE_TRANSFORMERS_NMSE[dt], \
                    "%s: transformers' MixtralExperts in %s is %.3g (nmse) off" % (where, dt, nmse)
                print("moe_ffn %-44s transformers' MixtralExperts in %-4s: nmse %.3g, "
                      "max |err| / rms(row) %.3g" % (name, dt, nmse, max_err_rms))
        if op == "moe_router":
            print("moe_router: transformers' routers pick the golden experts in every set up to "
                  "equal logits; weights within %.3g (MixtralTopKRouter) and %.3g "
                  "(Qwen3MoeTopKRouter, fp32) relative" % (worst["mixtral"], worst["qwen3"]))
            for name, by in sorted(tie_rows.items()):
                print("moe_router %-36s torch.topk orders equal logits otherwise in %s" % (
                    name, ", ".join("%d rows (%s)" % (n, kind) for kind, n in sorted(by.items()))))
        print("%s: %d committed sets on disk match numpy" % (op, len(table)))


def run():
    t0 = time.time()
    # The seed derivation is part of the golden data: changing it changes every set.
    assert seeds.case_seed("rmsnorm", "qwen2.5-0.5b_t4") == 3317702193, \
        seeds.case_seed("rmsnorm", "qwen2.5-0.5b_t4")
    cases = kernel_cases.cases_for(kernel_cases.COMMITTED)
    per_op = {}
    for c in cases:
        worst = check_case(c)
        per_op.setdefault(c.op, []).append(worst)
    for op in kernel_ops.OPS:
        n = len(per_op.get(op, []))
        assert n >= 4, "%s has only %d committed cases" % (op, n)
        print("%-20s %d cases match numpy (worst relative difference %.2g)"
              % (op, n, max(per_op[op])))
    check_round_trip()
    print("round trip: manifests, sha256, .npy headers and regeneration OK")
    check_paged_broken_kernels("attention_decode_paged", {
        what: (lambda p, i, rnd, rows=rows, view=view: np_paged_broken(p, i, rows, view, rnd))
        for what, (rows, view) in PAGED_BROKEN.items()})
    check_paged_broken_kernels("attention_prefill_paged", {
        what: (lambda p, i, rnd, what=what: np_prefill_broken(p, i, what, rnd))
        for what in PREFILL_PAGED_BROKEN})
    for op, fallback in PAGED_FP8.items():
        check_paged_broken_kernels(op, paged_fp8_broken(op), fallback)
    check_quant_fp8_sets()
    check_gemm_fp8_sets()
    check_moe_sets()
    check_fused_quant_tolerance()
    check_gpt_ffn_allowance()
    gemma_selftest.check_geglu_tolerance(lambda op: yardstick(op, "swiglu"), tolerance_share, a, ROUND)
    gemma_selftest.check_w32_weights(a)
    logit_softcap_selftest.check_tolerance(lambda op: yardstick(op, "softmax"), tolerance_share, a, ROUND)
    moe_shared_selftest.check_tolerance(lambda op: yardstick(op, "residual_add"), tolerance_share, a, ROUND)
    int4_selftest.check_int4_formats()
    fp8_accum.check_gemm_fp8_accumulation(gemm_fp8_yardstick()[1]["bf16"]["atol_rms"])
    print("selftest OK: %d committed cases, %.1fs" % (len(cases), time.time() - t0))
    return 0
