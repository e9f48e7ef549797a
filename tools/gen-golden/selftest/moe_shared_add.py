"""Qwen2-MoE's gated shared expert (moe_shared_add) in the kernels selftest (selftest/kernels.py
calls these):

- each committed case is what it is named for: its width and tokens, in place where named, the
  outlier channels of x where kernels.ops.shared_gate_columns puts them, its logits' reach (the
  sigmoid's linear part and its saturation over the op's cases, in each storage type), the rows
  whose halves cancel;
- an fp32 emulation of cuda/kernels/moe_shared_add.cu (the dot as the block reduces it, expf at
  its error bound, the fma, one rounding), transformers' eager order (the logit, the sigmoid, the
  product and the sum each rounded to the storage type: numpy, and torch's own expression on the
  CPU) and the product alone rounded before the add all pass golden/tolerances.yaml's
  moe_shared_add entry on every committed case, while the broken kernels (the gate not applied,
  tanh or the raw logit for the sigmoid, the previous token's gate, the dot without its last
  element, its last or first 8, the gate on routed, the shared term dropped, a truncating bf16
  store) fail it.

No import of selftest.kernels (it imports this): its helpers come in as arguments.
"""

import re

import numpy as np
import torch
import torch.nn.functional as F

from kernels import cases as kernel_cases
from kernels.ops import shared_gate_columns

OPS = ("moe_shared_add",)
F32 = np.float32
ROW_THREADS = 256  # ts::kRowThreads


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference(p, i):
    """routed + sigmoid(x . gate) * shared in fp64, one gate value a token."""
    z = i["x"] @ i["gate"].T
    return {"out": i["routed"] + _sigmoid(z) * i["shared"]}


def properties(name, p, i, dtype):
    """What each moe_shared_add case is there for holds in its data (i: float64 inputs)."""
    x, gate, routed, shared = i["x"], i["gate"], i["routed"], i["shared"]
    T, H = x.shape
    assert gate.shape == (1, H) and routed.shape == shared.shape == (T, H), name
    assert re.search(r"[_-]h%d_" % H, name) and re.search(r"[_-]t%d(_|$)" % T, name), (name, T, H)
    assert name.endswith("_inplace") == p["inplace"], name
    rest = np.delete(np.abs(x), shared_gate_columns(H), axis=1)
    outliers = np.abs(x[:, shared_gate_columns(H)])
    assert outliers.min() > 10 and (rest.size == 0 or rest.max() < 6), "%s: outlier channels" % name
    # each outlier channel's term of the dot moves the logit by 0.1 or more: a kernel that drops
    # one (the first or last vector, the last element) changes the gate visibly
    terms = np.abs(x[:, shared_gate_columns(H)] * gate[0, shared_gate_columns(H)])
    assert terms.min() > 0.1, "%s: an outlier channel's term of the dot is %.3g" % (name, terms.min())
    z = (x @ gate.T)[:, 0]
    assert np.abs(z).max() <= 6.1, "%s: logits beyond [-6, 6]" % name
    s = _sigmoid(z)
    # rows where half of routed cancels s * shared (the names say nothing of them: every case of
    # more than two tokens has one or two)
    cancel = [t for t in range(T) if np.mean(np.abs(routed[t] + s[t] * shared[t]) <
                                             2.0**-7 * np.abs(s[t] * shared[t])) > 0.4]
    assert (len(cancel) > 0) == (T > 2), "%s: cancelling rows %s" % (name, cancel)


def reach(logits_by_dtype):
    """Over the op's committed cases of each storage type, the logits reach the sigmoid's
    saturation (|z| > 3: s within 0.05 of 0 or 1) and its linear part (|z| < 0.5)."""
    for dt, z in logits_by_dtype.items():
        z = np.abs(np.concatenate(z))
        assert z.max() > 3 and z.min() < 0.5, "moe_shared_add %s: logits %.3g..%.3g" % (dt, z.min(), z.max())


# ---- an fp32 emulation of cuda/kernels/moe_shared_add.cu -------------------------------------

def _f32(v):
    return np.asarray(v, dtype=np.float64).astype(F32)


def _fma(a, b, c):
    """fmaf: the exact a * b + c rounded once to fp32 (the fp64 product of two floats is exact)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def _plan(H):
    """ts::plan_row capped at 2 vectors a thread (the kernel's): (vpt, threads); vpt 0 is the
    generic kernel."""
    if H % 8 == 0:
        nvec = H // 8
        for vpt in (1, 2):
            if nvec <= vpt * ROW_THREADS:
                t = -(-nvec // vpt)
                return vpt, -(-t // 32) * 32
    return 0, 1024 if H >= 1024 else -(-H // 32) * 32


def _block_sum(parts):
    """ts::block_sum over [T, threads] fp32 partials: each warp's xor butterfly, then the warp
    sums in one warp's butterfly (lanes past the warps hold 0)."""
    T, n = parts.shape
    w = parts.reshape(T, n // 32, 32)
    for o in (16, 8, 4, 2, 1):
        w = (w + w[:, :, np.arange(32) ^ o]).astype(F32)
    sums = np.zeros((T, 32), dtype=F32)
    sums[:, :n // 32] = w[:, :, 0]
    for o in (16, 8, 4, 2, 1):
        sums = (sums + sums[:, np.arange(32) ^ o]).astype(F32)
    return sums[:, 0]


def kernel_dot(x, gate):
    """x [T, H] . gate in fp32 as the kernel forms it: each thread's fma chain over its elements
    (vec<VPT>: its vectors c = thread + k * threads, 8 values each; generic: elements thread,
    thread + threads, ...), then the block's reduction."""
    T, H = x.shape
    vpt, threads = _plan(H)
    xf, gf = _f32(x), _f32(gate[0])
    acc = np.zeros((T, threads), dtype=F32)
    if vpt:
        for k in range(vpt):
            for th in range(threads):
                c = th + k * threads
                if c < H // 8:
                    for j in range(8):
                        acc[:, th] = _fma(xf[:, c * 8 + j], np.full(T, gf[c * 8 + j], F32), acc[:, th])
    else:
        for th in range(min(threads, H)):
            for col in range(th, H, threads):
                acc[:, th] = _fma(xf[:, col], np.full(T, gf[col], F32), acc[:, th])
    return _block_sum(acc)


def emulated(i, rnd, exp_rel=0.0):
    """The kernel's out: z = kernel_dot, s = 1 / (1 + expf(-z)) with expf off by exp_rel
    (relative; the full-accuracy expf is within 2 ulps, 2^-22), an IEEE add and division, then
    fmaf(s, shared, routed) and one rounding (rnd). Returns float64."""
    z = kernel_dot(i["x"], i["gate"])
    with np.errstate(over="ignore"):
        e = (np.exp(-z.astype(np.float64)) * (1.0 + exp_rel)).astype(F32)
    s = (F32(1.0) / (F32(1.0) + e).astype(F32)).astype(F32)
    out = _fma(np.broadcast_to(s[:, None], i["shared"].shape), _f32(i["shared"]), _f32(i["routed"]))
    return rnd(out.astype(np.float64))


def torch_order(i, rnd):
    """transformers' eager order in numpy: the logit (fp32 dot) rounded, sigmoid rounded, the
    product rounded, the sum rounded, each to the storage type."""
    z = rnd(kernel_dot(i["x"], i["gate"]).astype(np.float64))
    s = rnd(_f32(_sigmoid(z)).astype(np.float64))
    return rnd(i["routed"] + rnd(s[:, None] * i["shared"]))


def torch_eager(inputs):
    """Qwen2MoeSparseMoeBlock's own expression in torch on the CPU, in the storage type:
    `routed + F.sigmoid(F.linear(x, gate)) * shared`."""
    out = inputs["routed"] + F.sigmoid(F.linear(inputs["x"], inputs["gate"])) * inputs["shared"]
    return out.to(torch.float64).numpy()


def truncate_bf16(x):
    """The truncating bf16 store of a broken kernel: the top 16 bits of the float32."""
    v = np.asarray(x, dtype=np.float64).astype(F32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32).astype(np.float64)


def _with_z(i, z, rnd, s_of=_sigmoid):
    return rnd(i["routed"] + s_of(z) * i["shared"])


def broken(i, z, rnd, dt):
    """The broken kernels on one case: {what: out}, None where a bug cannot show (the previous
    token's gate with one token)."""
    x, g = i["x"], i["gate"]
    prev = np.concatenate([z[:1], z[:-1]])
    s = _sigmoid(z)
    out = {
        "the gate not applied (s = 1)": rnd(i["routed"] + i["shared"]),
        "tanh for the sigmoid": _with_z(i, z, rnd, np.tanh),
        "the raw logit for the sigmoid": _with_z(i, z, rnd, lambda v: v),
        "the previous token's gate": _with_z(i, prev, rnd) if x.shape[0] > 1 else None,
        "the dot without its last element": _with_z(i, z - x[:, -1:] * g[:, -1:], rnd),
        "the dot without its last 8": _with_z(i, z - x[:, -8:] @ g[:, -8:].T, rnd),
        "the dot without its first 8": _with_z(i, z - x[:, :8] @ g[:, :8].T, rnd),
        "the gate on routed": rnd(s * i["routed"] + i["shared"]),
        "the shared term dropped": rnd(i["routed"]),
    }
    if dt == "bf16":
        # too few values in the 8-wide case for nmse to tell a truncation's bias from rounding
        out["a truncating bf16 store"] = truncate_bf16(i["routed"] + s * i["shared"]) if x.size > 8 else None
    return out


def check_tolerance(yardstick, tolerance_share, a, rounds):
    """The emulated kernel (expf at both ends of its bound), transformers' eager order (numpy and
    torch) and the product rounded before the add pass golden/tolerances.yaml's moe_shared_add
    entry (yardstick("moe_shared_add")) on every committed case; each broken kernel fails it on
    every case it can show on. Prints the worst shares: the numbers the tolerance's rationale
    quotes."""
    _, tols = yardstick("moe_shared_add")
    worst, caught, logits = {}, {}, {}
    for c in kernel_cases.cases_for(kernel_cases.COMMITTED, list(OPS)):
        _, p, inputs, expected = kernel_cases.build(c)
        dt = {torch.float16: "f16", torch.bfloat16: "bf16"}[inputs["x"].dtype]
        rnd, tol = rounds[dt], tols[dt]
        i = {n: a(t) for n, t in inputs.items()}
        want = expected["out"].to(torch.float64).numpy()
        z = (i["x"] @ i["gate"].T)[:, 0]
        logits.setdefault(dt, []).append(z)
        s = _sigmoid(z)[:, None]
        correct = {
            "the fp32 kernel (expf -2 ulps)": emulated(i, rnd, -2.0**-22),
            "the fp32 kernel (expf +2 ulps)": emulated(i, rnd, 2.0**-22),
            "the fp64 contract rounded once (the cpu backend)": rnd(_f32(want).astype(np.float64)),
            "transformers' eager order (numpy)": torch_order(i, rnd),
            "transformers' eager order (torch, CPU)": torch_eager(inputs),
            "the product rounded before the add": rnd(i["routed"] + rnd(s * i["shared"])),
        }
        for what, got in correct.items():
            share = tolerance_share(got, want, tol)
            assert share <= 1, "moe_shared_add/%s: %s uses %.3g of the tolerance" % (c.name, what, share)
            worst[(dt, what)] = max(worst.get((dt, what), 0.0), share)
        for what, got in broken(i, z[:, None], rnd, dt).items():
            if got is None:
                continue
            share = tolerance_share(got, want, tol)
            assert share > 1, "moe_shared_add/%s: %s passes the tolerance (%.3g)" % (c.name, what, share)
            caught.setdefault((dt, what), []).append(share)
    reach(logits)
    for (dt, what), shares in sorted(caught.items()):
        print("moe_shared_add %-4s broken: %-34s caught on %d cases, at %.3g-%.3gx its budget"
              % (dt, what, len(shares), min(shares), max(shares)))
    for (dt, what), share in sorted(worst.items()):
        print("moe_shared_add %-4s %-50s uses %.3f of the tolerance at worst" % (dt, what, share))
