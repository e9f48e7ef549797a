"""The adapter side of touchstone's external-backend protocol 1 (docs/external-backends.md), numpy
only: the message loop and the .npy exchange files, for adapters to build on.

    serve(name, version, ops, dtypes, run)

answers the handshake with ops (each listed with dtypes, the storage dtypes its cases may use),
then for each call runs run(op, params, inputs, outputs), where inputs and outputs map golden
names to the messages' tensor references ({"path", "dtype", "shape"}); run writes every output
in place (store, or its own writer) and returns None for ok or the reason of an unsupported
case as a string (Unsupported). An exception becomes an error result; the adapter lives on.
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


def serve(name, version, ops, dtypes, run, on_call=None, protocol=PROTOCOL):
    """The message loop over stdin and stdout. on_call(msg), when given, sees every call first (the
    reference adapter's planted misbehaviour) and may answer it itself by returning a result;
    protocol is the version the handshake claims (another only to test touchstone's refusal)."""
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["type"] == "hello":
            answer({"type": "hello", "protocol": protocol, "name": name, "version": version,
                    "ops": {op: {"dtypes": dtypes} for op in ops}})
        elif msg["type"] == "bye":
            return
        elif msg["type"] == "call":
            result = on_call(msg) if on_call else None
            if result is None:
                if msg["op"] not in ops:
                    result = {"status": "unsupported", "reason": "%s is not one of %s's ops" % (msg["op"], name)}
                else:
                    try:
                        run(msg["op"], msg["params"], msg["inputs"], msg["outputs"])
                        result = {"status": "ok"}
                    except Unsupported as e:
                        result = {"status": "unsupported", "reason": str(e)}
                    except Exception as e:  # the op's own failure: reported, the adapter lives on
                        result = {"status": "error", "message": "%s: %s" % (type(e).__name__, e)}
            answer(dict(type="result", id=msg["id"], **result))
