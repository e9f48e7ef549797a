"""The Gemma 3 kernel capabilities in the kernels selftest (selftest/kernels.py calls these):

- rmsnorm and rmsnorm_residual with an fp32 weight (cases named ..._w32...): the weight is the
  fold 1 + w of a checkpoint's w in the storage type, exact in fp32, and not a 16-bit value (so a
  kernel that reads it as one is wrong);
- the scaled embedding: its scale is sqrt(hidden) rounded to the storage type as transformers
  rounds Gemma's embed_scale, the overflow case reaches inf and keeps finite values;
- geglu: each case is what it is named for, and an fp32 emulation of the CUDA kernel (gelu.cuh's
  GELUs with ex2.approx and rcp.approx at their error bounds, the product in fp32, one rounding)
  passes golden/tolerances.yaml's geglu entry on every committed case, while realistic broken
  kernels (the other GELU, the GELU applied to up, a truncating bf16 store) fail it.

No import of selftest.kernels (it imports this): its helpers come in as arguments.
"""

import math

import numpy as np
import torch

from kernels import cases as kernel_cases

OPS = ("rmsnorm", "rmsnorm_residual", "embedding", "geglu")


def properties(op, name, p, i, rnd):
    """What each Gemma case is there for holds in its data (i: float64 inputs; rnd: the
    rounding to the case's storage type)."""
    if op in ("rmsnorm", "rmsnorm_residual") and "_w32" in name:
        w = i["weight"]
        # 1 + a small w (a trained Gemma norm's), and no 16-bit value for most channels: a
        # kernel that read it as one, or a loader that rounded the fold, would be wrong there
        assert np.all(np.abs(w - 1.0) < 0.75), "%s: weight is not 1 + a small w" % name
        assert np.mean(rnd(w) != w) > 0.25, "%s: a 16-bit weight would do" % name
    if op == "embedding":
        assert ("scale" in p) == name.endswith("_scaled"), name
        if "scale" in p:
            H = i["table"].shape[1]
            assert p["scale"] == rnd(np.float64(math.sqrt(H))), "%s: scale %r" % (name, p["scale"])
            with np.errstate(over="ignore"):
                prod = rnd(i["table"][i["ids"]] * p["scale"])
            if name.startswith("overflow-inf"):
                assert np.isinf(prod).sum() > 10 and np.isfinite(prod).sum() > 10, name
            else:
                assert np.all(np.isfinite(prod)), name
    if op == "geglu":
        g = i["gate"]
        assert p["gelu"] in ("erf", "tanh") and name.endswith("_" + p["gelu"]), name
        n = g.size
        if name.startswith("odd"):
            assert n % 8 != 0, "%s: %d elements, no scalar tail" % (name, n)
        if name.startswith("large-gate"):
            assert np.abs(g).max() > 30 and np.mean(g < -10) > 0.2, "%s: no tanh tails" % name
        elif name.startswith("outliers"):
            assert np.abs(g).max() > 15 and np.abs(i["up"]).max() > 15, name
        elif not name.startswith("large-mag"):
            assert np.mean((g >= -4) & (g <= -1)) > 0.2, "%s: too few negative-tail gates" % name


def check_w32_weights(a):
    """Exactly the cases named _w32 hold an fp32 weight (the others the storage type's)."""
    n = 0
    for c in kernel_cases.cases_for(kernel_cases.COMMITTED, ["rmsnorm", "rmsnorm_residual"]):
        _, _, inputs, _ = kernel_cases.build(c)
        w32 = inputs["weight"].dtype == torch.float32
        assert w32 == ("_w32" in c.name), "%s/%s: weight %s" % (c.op, c.name, inputs["weight"].dtype)
        n += w32
    print("rmsnorm, rmsnorm_residual: %d committed cases with Gemma's fp32 weight 1 + w" % n)


# ---- geglu: an fp32 emulation of cuda/kernels/geglu.cu ---------------------------------------

F32 = np.float32


def _fma(a, b, c):
    """fmaf: the exact a * b + c (float64 holds a product of two float32s exactly) rounded once."""
    return (a.astype(np.float64) * b + c).astype(F32)


def _ex2(x, rel):
    """ex2.approx.ftz.f32: 2^x within its relative error bound (rel, about 2^-22), results below
    2^-126 flushed to zero."""
    with np.errstate(over="ignore"):
        y = (np.exp2(x.astype(np.float64)) * (1.0 + rel)).astype(F32)
    return np.where(np.abs(y) < 2.0**-126, F32(0), y)


def _rcp(x, rel):
    """rcp.approx.ftz.f32: 1/x within one ulp (rel, 2^-23 relative), 1 / inf = 0."""
    with np.errstate(divide="ignore"):
        return ((1.0 / x.astype(np.float64)) * (1.0 + rel)).astype(F32)


def gelu_erf32(x, e_rel, r_rel):
    """gelu.cuh's gelu_erf in float32."""
    ax = np.abs(x).astype(F32)
    a2 = (ax * F32(0.849321800)).astype(F32)
    t = _rcp(_fma(ax, F32(0.353553391), F32(1.0)), r_rel)
    p = np.full_like(x, F32(2.465172979e-01))
    for c in (-1.186114945e+00, 2.147474464e+00, -1.637753152e+00, 4.023215817e-01, -2.687568603e-01,
              1.396300565e-01, 5.397006155e-01, 1.442729204e+00, -2.825748218e+00):
        p = _fma(p, t, F32(c))
    e = (t * _ex2(_fma(-a2, a2, p), e_rel)).astype(F32)
    return (x * np.where(x < 0, e, (F32(1.0) - e).astype(F32))).astype(F32)


def gelu_tanh32(x, e_rel, r_rel):
    """gelu.cuh's gelu_tanh in float32: x / (1 + 2^(x (c1 + c2 x^2)))."""
    with np.errstate(over="ignore", invalid="ignore"):
        xx = (x * x).astype(F32)
        e = _ex2((x * _fma(xx, F32(-0.102943240), F32(-2.302208198))).astype(F32), e_rel)
        return (x * _rcp((F32(1.0) + e).astype(F32), r_rel)).astype(F32)


GELU32 = {"erf": gelu_erf32, "tanh": gelu_tanh32}


def emulated_geglu(p, gate, up, e_rel, r_rel, rnd):
    """The kernel's out, float64: gelu(gate) * up in float32, one rounding to the storage type."""
    g, u = gate.astype(F32), up.astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        return rnd((GELU32[p["gelu"]](g, e_rel, r_rel) * u).astype(F32).astype(np.float64))


def truncate_bf16(x):
    """The truncating bf16 store of a broken kernel: the top 16 bits of the float32."""
    v = np.asarray(x, dtype=np.float64).astype(F32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32).astype(np.float64)


GEGLU_BROKEN = {
    "the other GELU (erf and tanh swapped)":
        lambda p, g, u, rnd: emulated_geglu(dict(gelu="erf" if p["gelu"] == "tanh" else "tanh"), g, u, 0, 0, rnd),
    "the GELU applied to up, gate passed through":
        lambda p, g, u, rnd: emulated_geglu(p, u, g, 0, 0, rnd),
    "silu(gate) * up (SwiGLU's activation)":
        lambda p, g, u, rnd: rnd((g / (1.0 + np.exp(-np.clip(g, -80, 80)))) * u),
}


def check_geglu_tolerance(yardstick, tolerance_share, a, rounds):
    """The emulated kernel passes golden/tolerances.yaml's geglu entry (yardstick("geglu"))
    on every committed geglu case, at each corner of ex2's and rcp's error bounds; each broken
    kernel fails it on some case of each dtype it applies to. Prints the worst shares."""
    _, tols = yardstick("geglu")
    worst, caught = {}, {}
    for c in kernel_cases.cases_for(kernel_cases.COMMITTED, ["geglu"]):
        _, p, inputs, expected = kernel_cases.build(c)
        dt = "bf16" if c.name.startswith("bf16-") else "f16"
        rnd, tol = rounds[dt], tols[dt]
        g, u = a(inputs["gate"]), a(inputs["up"])
        want = expected["out"].to(torch.float64).numpy()
        for e_rel in (-2.0**-22, 2.0**-22):
            for r_rel in (-2.0**-23, 2.0**-23):
                share = tolerance_share(emulated_geglu(p, g, u, e_rel, r_rel, rnd), want, tol)
                assert share <= 1, "geglu/%s: the emulated fp32 kernel uses %.3g of the tolerance" % (
                    c.name, share)
                worst[dt] = max(worst.get(dt, 0.0), share)
        broken = dict(GEGLU_BROKEN)
        if dt == "bf16":
            broken["a truncating bf16 store"] = lambda p, g, u, rnd: emulated_geglu(p, g, u, 0, 0, truncate_bf16)
        for what, f in broken.items():
            with np.errstate(over="ignore", invalid="ignore"):
                share = tolerance_share(f(p, g, u, rnd), want, tol)
            caught.setdefault((dt, what), []).append(share)
    for (dt, what), shares in sorted(caught.items()):
        assert max(shares) > 1, "geglu %s: %s passes the tolerance (%s)" % (dt, what, shares)
        print("geglu %-4s broken: %-46s caught at up to %.3gx its budget" % (dt, what, max(shares)))
    for dt, share in sorted(worst.items()):
        print("geglu %-4s the emulated fp32 kernel (ex2.approx, rcp.approx at their bounds) uses "
              "%.3f of the tolerance at worst" % (dt, share))
