"""The adapter side of touchstone's external-backend protocol 1 (docs/external-backends.md), numpy
only: the message loop and the .npy exchange files, for adapters to build on.

    serve(name, version, ops, dtypes, run)

answers the handshake with ops (each listed with dtypes, the storage dtypes its cases may use),
then for each call runs run(op, params, inputs, outputs), where inputs and outputs map golden
names to the messages' tensor references ({"path", "dtype", "shape"}); run writes every output
in place (store, or its own writer); a case it does not implement raises Unsupported with the
reason. An exception becomes an error result; the adapter lives on.

An adapter that times its ops on a device passes timer: an object with .timing_device (the
device's name), .time(launch, warmup, repeats, flush_bytes), the list of times in milliseconds of repeats
launches of the op after warmup untimed ones, each after an L2 flush of flush_bytes, and
.copy_gbps(), its device's copy bandwidth (bytes read plus written per second / 1e9). launch
runs the op once: run(op, params, inputs, outputs), which in a time request need not write its
outputs (torchio.TorchIO keeps them on the device).
"""

import json
import sys

import numpy as np

PROTOCOL = 1


class Unsupported(Exception):
    """A case the adapter does not implement: the call is UNSUPPORTED with this reason."""


def load(ref):
    """The tensor of a reference as float64 (bf16 files hold the raw bits, '<u2')."""
    a = np.load(ref["path"])
    if ref["dtype"] == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def load_raw(ref):
    """The file's array as stored: float16, uint16 bf16 bits, float32, int32 or uint8 codes."""
    return np.load(ref["path"])


def to_bf16_bits(v):
    """float64 -> bf16 bits: to fp32 (nearest even), then to bf16 (nearest even), NaN kept quiet."""
    f = np.asarray(v, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded)


def store(ref, value):
    """Writes value (float64) into the output's file in place, rounded once to its dtype."""
    out = np.load(ref["path"], mmap_mode="r+")
    if ref["dtype"] == "bf16":
        out[...] = to_bf16_bits(value)
    elif ref["dtype"] in ("f16", "f32"):
        out[...] = np.asarray(value, dtype=np.float64).astype(out.dtype)
    else:
        raise ValueError("output dtype %s is not a float this helper writes" % ref["dtype"])
    out.flush()


def store_raw(ref, array):
    """Writes an array already in the file's storage (float16, uint16 bf16 bits, float32, int32,
    uint8) into the output's file in place; its shape must be the file's."""
    out = np.load(ref["path"], mmap_mode="r+")
    if out.shape != array.shape or out.dtype != array.dtype:
        raise ValueError("output %s: got %s %s, the file is %s %s" % (ref["path"], array.dtype, array.shape,
                                                                      out.dtype, out.shape))
    out[...] = array
    out.flush()


def answer(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve(name, version, ops, dtypes, run, on_call=None, protocol=PROTOCOL, timer=None):
    """The message loop over stdin and stdout. on_call(msg), when given, sees every call and time
    request first (the reference adapter's planted misbehaviour) and may answer it itself by
    returning a result; protocol is the version the handshake claims (another only to test
    touchstone's refusal); timer, when given, answers time and copy_bandwidth requests."""
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["type"] == "hello":
            hello = {"type": "hello", "protocol": protocol, "name": name, "version": version,
                     "ops": {op: {"dtypes": dtypes} for op in ops}}
            if timer is not None:
                hello["timing"] = {"device": timer.timing_device}
            answer(hello)
        elif msg["type"] == "bye":
            return
        elif msg["type"] in ("call", "time"):
            result = on_call(msg) if on_call else None
            if result is None:
                result = handle(msg, name, ops, run, timer)
            answer(dict(type="result", id=msg["id"], **result))
            if result["status"] == "error" and "CUDA error" in result["message"]:
                # A device fault (an illegal or misaligned address) is sticky: every later
                # call of this process would fail. Leave, so that the next call starts afresh.
                sys.exit(70)
        elif msg["type"] == "copy_bandwidth":
            try:
                result = {"status": "ok", "gbps": timer.copy_gbps()} if timer else \
                    {"status": "error", "message": "%s offers no timing" % name}
            except Exception as e:
                result = {"status": "error", "message": "%s: %s" % (type(e).__name__, e)}
            answer(dict(type="result", id=msg["id"], **result))


def handle(msg, name, ops, run, timer):
    """The result of a call or a time request."""
    op = msg["op"]
    if op not in ops:
        return {"status": "unsupported", "reason": "%s is not one of %s's ops" % (op, name)}
    try:
        if msg["type"] == "call":
            run(op, msg["params"], msg["inputs"], msg["outputs"])
            return {"status": "ok"}
        if timer is None:
            return {"status": "error", "message": "%s offers no timing" % name}
        times = timer.time(lambda: run(op, msg["params"], msg["inputs"], msg["outputs"]),
                           msg["warmup"], msg["repeats"], msg["flush_bytes"])
        return {"status": "ok", "times_ms": [float(t) for t in times]}
    except Unsupported as e:
        return {"status": "unsupported", "reason": str(e)}
    except Exception as e:  # the op's own failure: reported, the adapter lives on
        return {"status": "error", "message": "%s: %s" % (type(e).__name__, e)}
