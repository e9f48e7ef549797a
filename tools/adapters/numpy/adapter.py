#!/usr/bin/env python3
"""touchstone's reference external adapter: a few golden ops in numpy alone, over the protocol of
docs/external-backends.md (tools/adapters/protocol.py). It is the adapter CI runs the external
backend against, and the smallest template for adapters of other kernel libraries.

Each op computes in float64 from the stored inputs and rounds once to the output's dtype, as
docs/golden-format.md defines the op. TOUCHSTONE_NUMPY_ADAPTER_BUG plants one misbehaviour, for
the external backend's own tests: rope-interleaved (RoPE rotating adjacent pairs, GPT-J's
pairing, instead of rotate_half's), die (exit 3 at the first call), hang (never answer a call),
wrong-shape (rewrite an output's file with one row fewer), protocol2 (a hello of protocol 2),
garbage (answer a call with a line that is not JSON), time-count (answer a time request with one
time fewer than asked), time-negative (a negative time), and three sampler bugs:
sample-temperature-ignored (draws at temperature 1), sample-top-p-one-more (the nucleus keeps one
token past the cut) and sample-shared-uniform (every row of a batch draws row 0's random number).

TOUCHSTONE_NUMPY_ADAPTER_TIMING=wall offers timing on the host's wall clock, the only device this
adapter has, so that the time requests of compare and bench run where no GPU is (tests, CI).
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from protocol import Unsupported, load, serve, store, store_raw  # noqa: E402

BUG = os.environ.get("TOUCHSTONE_NUMPY_ADAPTER_BUG", "")


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


def kept_cdf(row, p):
    """One row's kept tokens in order (logit descending, index ascending) and their prefix sums
    of exp((logit - max) / T), in float64: top-k, then the smallest prefix reaching top_p of the
    top-k mass (docs/sampling.md's cut)."""
    temp = 1.0 if BUG == "sample-temperature-ignored" else p["temperature"]
    order = np.argsort(-row, kind="stable")
    n = int(np.count_nonzero(np.isfinite(row)))
    if 0 < p["top_k"] < n:
        n = p["top_k"]
    x = row[order[:n]].astype(np.float64)
    cdf = np.cumsum(np.exp((x - x[0]) / temp))
    if p["top_p"] < 1:
        kept = int(np.searchsorted(cdf, p["top_p"] * cdf[-1], side="left")) + 1
        if BUG == "sample-top-p-one-more":
            kept += 1
        n = min(kept, n)
    return order[:n], cdf[:n]


def sample(p, i, o):
    """Draws with numpy's own generator keyed by (seed, step): one uniform per row, inverted
    through the row's kept prefix sums. Rows with the same logits (a batch of copies) share
    one sort."""
    logits = np.load(i["logits"]["path"], mmap_mode="r")  # a batch of copies is read row by row
    if p["temperature"] == 0:
        tokens = np.argmax(logits, axis=1)
    else:
        u = np.random.default_rng([p["seed"], p["step"]]).random(logits.shape[0])
        if BUG == "sample-shared-uniform":
            u[:] = u[0]
        tokens = np.empty(logits.shape[0], dtype=np.int64)
        cache = {}
        for r, row in enumerate(logits):
            key = row.tobytes()
            if key not in cache:
                cache[key] = kept_cdf(row, p)
            order, cdf = cache[key]
            tokens[r] = order[min(int(np.searchsorted(cdf, u[r] * cdf[-1], side="right")), len(order) - 1)]
    store_raw(o["tokens"], tokens.astype(np.int32))


OPS = {"residual_add": residual_add, "rmsnorm": rmsnorm, "rope": rope, "swiglu": swiglu,
       "softmax": softmax, "sample": sample}


def run(op, params, inputs, outputs):
    fp8 = {ref["dtype"] for ref in list(inputs.values()) + list(outputs.values())} & {"f8e4m3", "f8e5m2"}
    if fp8:
        raise Unsupported("%s with %s tensors: this adapter reads f16, bf16 and f32" % (op, sorted(fp8)))
    OPS[op](params, inputs, outputs)


class WallTimer:
    """Times a launch with the host's monotonic clock; there is no L2 to flush on this path."""
    timing_device = "cpu (wall clock)"

    def time(self, launch, warmup, repeats, flush_bytes):
        for _ in range(warmup + 1):
            launch()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            launch()
            times.append((time.perf_counter() - t0) * 1e3)
        if BUG == "time-count":
            times = times[:-1]
        if BUG == "time-negative":
            times[0] = -times[0]
        return times

    def copy_gbps(self):
        src = np.random.default_rng(1).integers(0, 255, 64 << 20, dtype=np.uint8)
        dst = np.empty_like(src)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - t0)
        return 2 * src.nbytes / sorted(times)[2] / 1e9


def planted(msg):
    """The planted misbehaviour of a call, or None to run it."""
    if BUG == "die":
        sys.stderr.write("numpy adapter: planted death\n")
        sys.exit(3)
    if BUG == "hang":
        time.sleep(3600)
    if BUG == "garbage":
        sys.stdout.write("not json\n")
        sys.stdout.flush()
    if BUG == "wrong-shape":
        for ref in msg["outputs"].values():
            out = np.load(ref["path"])
            np.save(ref["path"], np.zeros((max(out.shape[0] - 1, 0),) + out.shape[1:], dtype=out.dtype))
        return {"status": "ok"}
    return None


if __name__ == "__main__":
    serve("numpy-reference", np.__version__, OPS, ["f16", "bf16"], run, on_call=planted,
          protocol=2 if BUG == "protocol2" else 1,
          timer=WallTimer() if os.environ.get("TOUCHSTONE_NUMPY_ADAPTER_TIMING") == "wall" else None)
