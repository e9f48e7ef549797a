"""Gemma 2's final logit soft cap (logit_softcap) in the kernels selftest (selftest/kernels.py calls
these):

- each committed case is what it is named for: its cap (cap30: Gemma 2's final_logit_softcapping,
  cap50: its attention cap) as the float32 the kernel receives, logits far past the cap with the
  saturation region and the edges in them, a length that leaves a scalar tail, in place where named;
- an fp32 emulation of the CUDA kernel (internal.h's softcap_score: x * (1 / cap), ex2.approx and
  rcp.approx at their error bounds, the last step fused or not, one rounding to the storage type)
  passes golden/tolerances.yaml's logit_softcap entry on every committed case, while the broken
  kernels (the cap ignored, a clamp for tanh, cap * tanh(x), tanh(x / cap) without the product,
  tanh.approx.f32, a truncating bf16 store) fail it.

No import of selftest.kernels (it imports this): its helpers come in as arguments.
"""

import numpy as np
import torch

from kernels import cases as kernel_cases

OPS = ("logit_softcap",)
F32 = np.float32
VECTOR = {"f32": 4, "f16": 8, "bf16": 8}  # values in the kernels' 16-byte vectors


def reference(p, i):
    """transformers' three steps in fp64: logits / cap, tanh, * cap (tanh(±inf) = ±1)."""
    cap = p["softcap"]
    return {"out": np.tanh(i["x"] / cap) * cap}


def properties(name, p, i, dtype):
    """What each logit_softcap case is there for holds in its data (i: float64 inputs; dtype: the
    logits' type, f32, f16 or bf16)."""
    x, cap = i["x"], p["softcap"]
    assert np.float32(cap) == cap and cap > 0, "%s: softcap %r" % (name, cap)
    assert name.endswith("_cap%g" % cap) or name.endswith("_cap%g_inplace" % cap), (name, cap)
    assert name.endswith("_inplace") == p["inplace"], name
    assert (("-" + dtype + "_") in name) or (dtype == "bf16" and name.startswith("bf16-")), (name, dtype)
    n = x.size
    if name.startswith("one-logit"):
        assert n == 1, name
        return
    assert n % VECTOR[dtype] != 0, "%s: %d logits leave no scalar tail" % (name, n)
    finite = x[np.isfinite(x)]
    assert np.mean(np.abs(finite) > cap / 2) > 0.5, "%s: too few logits past half the cap" % name
    assert np.mean(np.abs(finite) < cap / 4) > 0.05, "%s: too few logits in tanh's linear part" % name
    # the saturation region, and both sides of where e^(2x / cap) overflows fp32 (x / cap > 44.36)
    assert np.any((np.abs(finite) > 3 * cap) & (np.abs(finite) < 20 * cap)), name
    near = lambda v: np.any(np.isclose(x, v, rtol=2.0**-8, atol=0))  # 1e4 is 9984 in bf16
    assert near(1e4) and near(-1e4) and np.any(x == 0), name
    if cap == 30:
        for side in (1, -1):
            assert np.any(side * x > 44.5 * cap) and np.any((side * x > 40 * cap) & (side * x < 44.3 * cap)), name
    assert np.isinf(x).any() == (dtype == "f16"), "%s: ±inf in the fp16 cases only" % name
    if dtype == "f16":
        assert np.isposinf(x).any() and np.isneginf(x).any(), name


# ---- an fp32 emulation of cuda/kernels/logit_softcap.cu --------------------------------------

def _ex2(x, rel):
    """ex2.approx.ftz.f32 within its relative error bound (rel, 2^-22), overflow to inf."""
    with np.errstate(over="ignore"):
        y = (np.exp2(x.astype(np.float64)) * (1.0 + rel)).astype(F32)
    return np.where(np.abs(y) < 2.0**-126, F32(0), y)


def _rcp(x, rel):
    """rcp.approx.ftz.f32 within one ulp (rel, 2^-23 relative), 1 / inf = 0."""
    with np.errstate(divide="ignore"):
        return ((1.0 / x.astype(np.float64)) * (1.0 + rel)).astype(F32)


def emulated(x, cap, e_rel, r_rel, fused, rnd):
    """softcap_score in float32: e = ex2(x * inv_cap * 2 log2(e)), cap - 2 cap * rcp(e + 1), the
    last step one fma (nvcc's default contraction) or two roundings; then rnd (the storage type's
    rounding, or float32's). Returns float64."""
    c = F32(cap)
    inv = F32(1.0) / c
    xf = x.astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        arg = ((xf * inv).astype(F32) * F32(2.88539008177792681)).astype(F32)
        r = _rcp((_ex2(arg, e_rel) + F32(1.0)).astype(F32), r_rel)
        two_c = (F32(2.0) * c).astype(F32)
        if fused:
            out = (c.astype(np.float64) - two_c.astype(np.float64) * r.astype(np.float64)).astype(F32)
        else:
            out = (c - (two_c * r).astype(F32)).astype(F32)
    return rnd(out.astype(np.float64))


def truncate_bf16(x):
    """The truncating bf16 store of a broken kernel: the top 16 bits of the float32."""
    v = np.asarray(x, dtype=np.float64).astype(F32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32).astype(np.float64)


def _f32(v):
    with np.errstate(over="ignore"):
        return np.asarray(v, dtype=np.float64).astype(F32).astype(np.float64)


# Broken kernels: (x, cap) -> out before the storage rounding, float64.
BROKEN = {
    "the cap ignored (identity)": lambda x, c: x,
    "clamp(x, -cap, cap) for tanh": lambda x, c: np.clip(x, -c, c),
    "cap * tanh(x) (the division dropped)": lambda x, c: c * np.tanh(x),
    "tanh(x / cap) (the product by cap dropped)": lambda x, c: np.tanh(x / c),
}


def check_tolerance(yardstick, tolerance_share, a, rounds):
    """The emulated kernel passes golden/tolerances.yaml's logit_softcap entry (yardstick
    ("logit_softcap")) on every committed case at each corner of ex2's and rcp's error bounds,
    fused or not; each broken kernel fails it on every case it applies to. Prints the worst
    shares: the numbers the tolerance's rationale quotes."""
    _, tols = yardstick("logit_softcap")
    rounds = dict(rounds, f32=_f32)
    worst, caught = {}, {}
    for c in kernel_cases.cases_for(kernel_cases.COMMITTED, list(OPS)):
        _, p, inputs, expected = kernel_cases.build(c)
        dt = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[inputs["x"].dtype]
        rnd, tol, cap = rounds[dt], tols[dt], p["softcap"]
        x = a(inputs["x"])
        want = expected["out"].to(torch.float64).numpy()
        for e_rel in (-2.0**-22, 0.0, 2.0**-22):
            for r_rel in (-2.0**-23, 0.0, 2.0**-23):
                for fused in (True, False):
                    share = tolerance_share(emulated(x, cap, e_rel, r_rel, fused, rnd), want, tol)
                    assert share <= 1, "logit_softcap/%s: the emulated fp32 kernel uses %.3g of the tolerance" % (
                        c.name, share)
                    worst[dt] = max(worst.get(dt, 0.0), share)
        if x.size == 1:  # one logit: a bug shows only where that logit says it does
            continue
        broken = dict(BROKEN)
        if dt == "f32":  # 2^-10.987 relative: within one 16-bit rounding, so an fp32 bug only
            broken["tanh.approx.f32 (2^-11 relative)"] = lambda x, c: c * np.tanh(x / c) * (1 + 2.0**-10.987)
        if dt == "bf16":
            broken["a truncating bf16 store"] = None
        for what, f in broken.items():
            with np.errstate(over="ignore", invalid="ignore"):
                got = emulated(x, cap, 0, 0, True, truncate_bf16) if f is None else rnd(f(x, cap))
                share = tolerance_share(got, want, tol)
            assert share > 1, "logit_softcap/%s: %s passes the tolerance (%.3g)" % (c.name, what, share)
            caught.setdefault((dt, what), []).append(share)
    for (dt, what), shares in sorted(caught.items()):
        print("logit_softcap %-4s broken: %-44s caught on %d of %d cases, at %.3g-%.3gx its budget"
              % (dt, what, len(shares), len(shares), min(shares), max(shares)))
    for dt, share in sorted(worst.items()):
        print("logit_softcap %-4s the emulated fp32 kernel (ex2.approx, rcp.approx at their bounds) uses "
              "%.3f of the tolerance at worst" % (dt, share))
