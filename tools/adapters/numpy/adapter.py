#!/usr/bin/env python3
"""touchstone's reference external adapter: a few golden ops in numpy alone, over the protocol of
docs/external-backends.md (protocol 1). It is the adapter CI runs the external backend against,
and the template for adapters of other kernel libraries: read a hello, answer with the ops; then
for each call load the inputs' .npy files, compute, write the outputs' files in place, answer.

Each op computes in float64 from the stored inputs and rounds once to the output's dtype, as
docs/golden-format.md defines the op. TOUCHSTONE_NUMPY_ADAPTER_BUG plants one misbehaviour, for
the external backend's own tests: rope-interleaved (RoPE rotating adjacent pairs, GPT-J's
pairing, instead of rotate_half's), die (exit 3 at the first call), hang (never answer a call),
wrong-shape (rewrite an output's file with one row fewer), protocol2 (a hello of protocol 2),
garbage (answer a call with a line that is not JSON).
"""

import json
import os
import sys
import time

import numpy as np

PROTOCOL = 1
BUG = os.environ.get("TOUCHSTONE_NUMPY_ADAPTER_BUG", "")
STORAGE = ["f16", "bf16"]


def load(ref):
    """The tensor of a call's input as float64 (bf16 files hold the raw bits, '<u2')."""
    a = np.load(ref["path"])
    if ref["dtype"] == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def to_bf16_bits(v):
    """float64 -> bf16 bits: to fp32 (nearest even), then to bf16 (nearest even), NaN kept quiet."""
    f = np.asarray(v, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded)


def store(ref, value):
    """Writes value (float64) into the output's file in place, rounded once to its dtype."""
    out = np.load(ref["path"], mmap_mode="r+")
    if BUG == "wrong-shape":
        np.save(ref["path"], np.zeros((max(out.shape[0] - 1, 0),) + out.shape[1:], dtype=out.dtype))
        return
    if ref["dtype"] == "bf16":
        out[...] = to_bf16_bits(value)
    elif ref["dtype"] in ("f16", "f32"):
        out[...] = np.asarray(value, dtype=np.float64).astype(out.dtype)
    else:
        raise ValueError("output dtype %s is not written by this adapter" % ref["dtype"])
    out.flush()


def residual_add(p, i, o):
    store(o["out"], load(i["x"]) + load(i["residual"]))


def rmsnorm(p, i, o):
    x, w = load(i["x"]), load(i["weight"])
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + p["eps"])
    store(o["out"], x * inv * w)


def swiglu(p, i, o):
    g, u = load(i["gate"]), load(i["up"])
    store(o["out"], g / (1.0 + np.exp(-g)) * u)


def softmax(p, i, o):
    x = load(i["x"])
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    store(o["out"], e / np.sum(e, axis=-1, keepdims=True))


def rope(p, i, o):
    """NeoX / rotate_half pairing: dim j rotates with j + r/2 for j < r/2 by pos * base^(-2j/r)
    / divisor_j, times attention_factor; dims from r on pass through."""
    r, base = p["rope_dim"], p["freq_base"]
    pos = np.load(i["positions"]["path"]).astype(np.float64)
    inv = base ** (-2.0 * np.arange(r // 2) / r)
    div = np.ones((len(pos), r // 2))
    if "freq_divisor" in i:
        div[:] = load(i["freq_divisor"])
    if "long_divisor" in i:
        div[pos >= p["long_from"]] = load(i["long_divisor"])
    theta = pos[:, None] * inv[None, :] / div              # [T, r/2]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    a = p.get("attention_factor", 1.0)
    for name in ("q", "k"):
        x = load(i[name])
        y = x.copy()
        if BUG == "rope-interleaved":
            lo, hi = x[..., 0:r:2], x[..., 1:r:2]          # GPT-J's adjacent pairs
            y[..., 0:r:2] = a * (lo * cos - hi * sin)
            y[..., 1:r:2] = a * (hi * cos + lo * sin)
        else:
            lo, hi = x[..., : r // 2], x[..., r // 2: r]
            y[..., : r // 2] = a * (lo * cos - hi * sin)
            y[..., r // 2: r] = a * (hi * cos + lo * sin)
        store(o[name + "_out"], y)


OPS = {"residual_add": residual_add, "rmsnorm": rmsnorm, "rope": rope, "swiglu": swiglu,
       "softmax": softmax}


def answer(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def call(msg):
    op, inputs, outputs = msg["op"], msg["inputs"], msg["outputs"]
    dts = {ref["dtype"] for ref in list(inputs.values()) + list(outputs.values())}
    storage = dts & {"f16", "bf16", "f8e4m3", "f8e5m2"}
    if storage - set(STORAGE):
        return {"status": "unsupported", "reason": "%s in %s: this adapter reads f16 and bf16" % (op, sorted(storage))}
    try:
        OPS[op](msg["params"], inputs, outputs)
    except Exception as e:  # the op's own failure: reported, the adapter lives on
        return {"status": "error", "message": "%s: %s" % (type(e).__name__, e)}
    return {"status": "ok"}


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["type"] == "hello":
            answer({"type": "hello", "protocol": 2 if BUG == "protocol2" else PROTOCOL,
                    "name": "numpy-reference", "version": np.__version__,
                    "ops": {op: {"dtypes": STORAGE} for op in OPS}})
        elif msg["type"] == "bye":
            return
        elif msg["type"] == "call":
            if BUG == "die":
                sys.stderr.write("numpy adapter: planted death\n")
                sys.exit(3)
            if BUG == "hang":
                time.sleep(3600)
            if BUG == "garbage":
                sys.stdout.write("not json\n")
                sys.stdout.flush()
                continue
            result = call(msg) if msg["op"] in OPS else {
                "status": "unsupported", "reason": "%s is not one of this adapter's ops" % msg["op"]}
            answer(dict(type="result", id=msg["id"], **result))


if __name__ == "__main__":
    main()
