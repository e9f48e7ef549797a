"""Writing golden sets: .npy files plus manifest.json, as docs/golden-format.md specifies.

Everything here is byte-deterministic: no timestamps, fixed key order, numpy's standard
format 1.0 header, and the sha256 taken from the very bytes that land on disk.
"""

import hashlib
import io
import json
import os
import shutil

import numpy as np
import torch

FORMAT_VERSION = 1
GENERATOR_NAME = "gen-golden"
GENERATOR_VERSION = "1.0.0"

# torch dtype -> (contract dtype name, numpy dtype). Nothing else may be written. numpy has no
# bfloat16: a bf16 tensor is stored as its raw bits, little-endian uint16 ('<u2'), and only the
# manifest's "bf16" says what they are (docs/golden-format.md, "bf16 storage"). Nor has it FP8:
# f8e4m3 and f8e5m2 tensors are their raw bytes ('|u1'), named by the manifest alone
# (docs/quantization.md, "FP8 storage types").
DTYPES = {
    torch.float16: ("f16", "<f2"),
    torch.bfloat16: ("bf16", "<u2"),
    torch.float32: ("f32", "<f4"),
    torch.int32: ("i32", "<i4"),
    torch.float8_e4m3fn: ("f8e4m3", "|u1"),
    torch.float8_e5m2: ("f8e5m2", "|u1"),
}

# The dtypes stored as their raw bits: torch dtype -> the integer type of the same width whose
# view holds them (reinterpreted, not converted).
RAW_BITS = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}

NPY_V1_MAGIC = b"\x93NUMPY\x01\x00"


def generator_info(with_transformers=False):
    # Only values that are the same on every supported host go here, so a set regenerated on the
    # GPU host (Python 3.12, numpy 2.5.2) is byte-identical to one made on a dev box (3.11, 2.4.6).
    # The Python and numpy versions differ by design between those hosts and do not influence the
    # numbers (torch computes; numpy only serialises), so they are left out. Model sets also name
    # the transformers version whose modeling code is the reference (pinned, the same everywhere).
    info = {
        "name": GENERATOR_NAME,
        "version": GENERATOR_VERSION,
        "torch": torch.__version__.split("+")[0],
    }
    if with_transformers:
        import transformers
        info["transformers"] = transformers.__version__
    info["device"] = "cpu"
    return info


def npy_bytes(t):
    """Serialise one tensor as a .npy (format 1.0, C order, little-endian) and return the bytes."""
    if t.dtype not in DTYPES:
        raise TypeError("cannot write dtype %s" % t.dtype)
    t = t.detach().cpu().contiguous()
    if t.dtype in RAW_BITS:
        # the bits, reinterpreted (not converted): numpy has no bfloat16 and no FP8
        arr = np.ascontiguousarray(t.view(RAW_BITS[t.dtype]).numpy().view(DTYPES[t.dtype][1]))
    else:
        arr = np.ascontiguousarray(t.numpy(), dtype=DTYPES[t.dtype][1])
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = buf.getvalue()
    # np.save picks format 1.0 unless the header is huge; the Go reader only accepts 1.0.
    if not data.startswith(NPY_V1_MAGIC):
        raise RuntimeError("numpy wrote a .npy header other than format 1.0")
    return data


def write_tensor(directory, name, t, role):
    """Write one tensor as <name>.npy in directory; returns its manifest entry and byte size."""
    data = npy_bytes(t)
    fname = name + ".npy"
    with open(os.path.join(directory, fname), "wb") as f:
        f.write(data)
    entry = {
        "name": name,
        "file": fname,
        "role": role,
        "dtype": DTYPES[t.dtype][0],
        "shape": [int(d) for d in t.shape],
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    return entry, len(data)


ALLOWANCE_SUFFIX = "_allowance"


def write_set(case_dir, *, op, case, tier, seed, params, inputs, expected):
    """Write one golden set into case_dir (removed first, so no stale file survives).

    inputs: ordered {name: tensor in f16/bf16/f32/i32}; expected: ordered {name: tensor}, a
    float64 one (an fp64 reference) cast to f32 here, any other (an exact output: quant_fp8's
    f8e4m3 bytes and f32 scales) written as it is; a name ending in _allowance is the
    per-element allowance of the output it names (role allowance). Returns (number of files,
    total bytes) including manifest.json.
    """
    if os.path.lexists(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)

    entries = []
    total = 0
    tensors = [(n, t, "input") for n, t in inputs.items()]
    # <output>_allowance: the reference's per-element allowance for that output (role allowance)
    tensors += [(n, t.to(torch.float32) if t.dtype == torch.float64 else t,
                 "allowance" if n.endswith(ALLOWANCE_SUFFIX) else "expected")
                for n, t in expected.items()]
    for name, t, role in tensors:
        entry, size = write_tensor(case_dir, name, t, role)
        entries.append(entry)
        total += size

    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": generator_info(),
        "kind": "kernel",
        "op": op,
        "case": case,
        "tier": tier,
        "seed": seed,
        "params": params,
        "files": entries,
    }
    return len(entries) + 1, total + write_manifest(case_dir, manifest)


def write_model_set(set_dir, *, model, case, tier, seed, params, checkpoint, tensors, calibration,
                    pool=None):
    """Finish a model set whose checkpoint files and calibration file already lie in set_dir:
    write every tensor as .npy and manifest.json (docs/golden-format.md, "Model sets").

    checkpoint: [(name, file, sha256)] listed first with role "checkpoint" and no dtype/shape;
    tensors: ordered [(name, tensor in f32/i32, role)], written as <name>.npy;
    calibration: (name, file, sha256) of calibration.json, listed last with role "calibration".
    pool: an optional concurrent.futures executor that writes the .npy files in parallel (the
    manifest lists them in the given order either way).
    Returns (number of files, total bytes) including the checkpoint files and manifest.json.
    """
    entries = []
    total = 0
    for name, fname, digest in checkpoint:
        entries.append({"name": name, "file": fname, "role": "checkpoint", "sha256": digest})
        total += os.path.getsize(os.path.join(set_dir, fname))
    written = (map if pool is None else pool.map)(
        lambda e: write_tensor(set_dir, e[0], e[1], e[2]), tensors)
    for entry, size in written:
        entries.append(entry)
        total += size
    name, fname, digest = calibration
    entries.append({"name": name, "file": fname, "role": "calibration", "sha256": digest})
    total += os.path.getsize(os.path.join(set_dir, fname))
    names = [e["name"] for e in entries]
    files = [e["file"] for e in entries]
    assert len(set(names)) == len(names) and len(set(files)) == len(files), "duplicate entry"
    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": generator_info(with_transformers=True),
        "kind": "model",
        "model": model,
        "case": case,
        "tier": tier,
        "seed": seed,
        "params": params,
        "files": entries,
    }
    return len(entries) + 1, total + write_manifest(set_dir, manifest)


def write_sampling_set(set_dir, *, case, tier, seed, params, logits):
    """Write one sampling set into set_dir (removed first): logits.npy (fp32 [R, V], role input)
    and manifest.json (docs/golden-format.md, "Sampling sets"). Returns (files, bytes)."""
    if os.path.lexists(set_dir):
        shutil.rmtree(set_dir)
    os.makedirs(set_dir)
    if logits.dtype != torch.float32:
        raise TypeError("sampling logits must be f32")
    entry, size = write_tensor(set_dir, "logits", logits, "input")
    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": generator_info(),
        "kind": "sampling",
        "case": case,
        "tier": tier,
        "seed": seed,
        "params": params,
        "files": [entry],
    }
    return 2, size + write_manifest(set_dir, manifest)


def write_manifest(set_dir, manifest):
    """Write manifest.json into set_dir; returns its size in bytes."""
    text = manifest_text(manifest).encode("ascii")
    with open(os.path.join(set_dir, "manifest.json"), "wb") as f:
        f.write(text)
    return len(text)


def manifest_text(manifest):
    """JSON laid out like the examples in docs/golden-format.md: one top-level key per line, each
    files entry on one line, params and generator inline (a sampling set's params one key per
    line, each case and stream on one line). Deterministic: keys keep insertion order,
    floats use Python's shortest repr (1e-06, 1000000.0), and the text ends with a newline."""
    def inline(v):
        return json.dumps(v, separators=(", ", ": "), allow_nan=False)

    def rows(items, indent):
        return ",\n".join(indent + inline(e) for e in items)

    lines = []
    for key, value in manifest.items():
        if key == "files":
            lines.append('  "files": [\n%s\n  ]' % rows(value, "    "))
        elif key == "params" and manifest.get("kind") == "sampling":
            # Sampling sets hold hundreds of cases: one per line, likewise each RNG stream, so a
            # regenerated set diffs case by case.
            inner = []
            for k, v in value.items():
                if isinstance(v, list) and v and isinstance(v[0], dict):
                    inner.append('    %s: [\n%s\n    ]' % (json.dumps(k), rows(v, "      ")))
                else:
                    inner.append("    %s: %s" % (json.dumps(k), inline(v)))
            lines.append('  "params": {\n%s\n  }' % ",\n".join(inner))
        else:
            lines.append("  %s: %s" % (json.dumps(key), inline(value)))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_manifest(case_dir):
    """A set directory's manifest as a dict, or None when it has no readable one."""
    try:
        with open(os.path.join(case_dir, "manifest.json"), "rb") as f:
            m = json.loads(f.read())
        return m if isinstance(m, dict) else None
    except (OSError, ValueError):
        return None


def read_tier(case_dir):
    """The tier a set directory claims, or None when it has no readable manifest."""
    m = read_manifest(case_dir)
    return None if m is None else m.get("tier")


def stale_case_dirs(op_dir, keep, tier):
    """Case directories under op_dir that a regeneration of `tier` would delete.

    A directory is stale when its name is not in `keep` and it is either of the same tier or has no
    readable manifest. Sets of the other tier are left alone, so pointing --tier full at the
    committed directory never deletes committed sets.
    """
    if not os.path.isdir(op_dir):
        return []
    stale = []
    for name in sorted(os.listdir(op_dir)):
        path = os.path.join(op_dir, name)
        if name in keep or not os.path.isdir(path):
            continue
        if read_tier(path) in (tier, None):
            stale.append(name)
    return stale


def tree_size(path):
    """Apparent size of a tree as `du -sb` reports it (files and directory entries)."""
    total = os.lstat(path).st_size
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            total += os.lstat(os.path.join(root, n)).st_size
    return total
