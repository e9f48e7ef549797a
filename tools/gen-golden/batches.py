"""Batch sets: references for ragged batched decode (docs/golden-format.md, "Batch sets").

A batch set holds B sequences of different prompt lengths for the checkpoint of an existing model
set: an engine prefills each sequence on its own, then decodes all B together, one token per
sequence per step, and compares every tap of every sequence. The reference is one transformers
run per sequence, exactly the model sets' (models/reference.py's run_reference, models/
calibration.py's run_rounded and calibration_bytes), with a prompt of the sequence's own: a
sequence that reads another's KV-cache slot (or its positions, or its length) then cannot pass,
since no two prompts share a prefix. The full-tier sets' SHARED sequences are the exception, on
purpose: their prompts begin with an earlier sequence's tokens, so a paged run can start them
from that sequence's cached pages (prefix caching) and must still match their own references. The checkpoint is not copied: the manifest names the model
set and the sha256 of each of its checkpoint files, so a reader can tell when the model set was
regenerated since.

    <out>/batches/<name>/ manifest.json, s<b>.prompt_ids.npy, s<b>.prefill.<tap>.npy,
                          s<b>.decode.<i>.<tap>.npy, s<b>.greedy_tokens.npy,
                          s<b>.greedy_top2_margin.npy (b = 0..B-1), calibration.json
    read from <out>/models/<model>/ (the model set, which must exist)
"""

import hashlib
import json
import os
import shutil
import time
from collections import namedtuple
from contextlib import contextmanager

import torch

from common import configs, manifest, seeds
from models import build as model_build
from models import calibration, checkpoint, lockstep, reference, threads

F16, F64, I32 = torch.float16, torch.float64, torch.int32
COMMITTED, FULL = configs.COMMITTED, configs.FULL

CASE = "ragged"
KIND = "batch"
# Prompt lengths of sequences 0, 1, ...: a set of B sequences takes the first B. Mixed on purpose
# (long and short alternate; 1 is a prefill of a single token), so no two neighbouring cache slots
# hold sequences of one length.
LENGTHS = [16, 5, 11, 1, 23, 8, 30, 2, 13, 19, 7, 27, 3, 32, 10, 21]
DECODE_STEPS = 8
# Greedy tokens per sequence: the token fed at decode step i is greedy_tokens[i]; the last one is
# the prediction after the last stored step.
N_TOKENS = DECODE_STEPS + 1

# name: the set; model: the model set whose checkpoint it uses (same tier); batch: B; shared:
# {dst: (src, n)}, sequence dst's first n prompt tokens are sequence src's (src < dst).
# prompt_tag: the name the prompts are drawn under (prompt_ids), the set's own when None; a
# mixture of experts' set may need another draw for every routing decision to be decisive
# (models/build.py, check_routing_decisive).
BatchSpec = namedtuple("BatchSpec", "name model tier batch shared prompt_tag", defaults=(None, None))

# Shared prompt prefixes of the full-tier B=16 sets, over LENGTHS: chains (4 from 0, 6 from 4,
# 11 from 6, 13 from 11, 15 from 13), a prefix of a whole prompt (4 takes all 16 of sequence
# 0's), one that ends a token before the sharer's own last (11: 26 of 27), and one shorter than
# a 16-position page (9: 12 tokens).
SHARED_B16 = {4: (0, 16), 6: (4, 20), 9: (0, 12), 11: (6, 26), 13: (11, 18), 15: (13, 21)}

BATCHES = [
    BatchSpec("qwen2-tiny-b4", "qwen2-tiny", COMMITTED, 4),
    # phi3.5-tiny's LongRoPE has an original context of 20: sequence 0 (16 prompt tokens) decodes
    # positions 16-23 and switches to the long table at step 4 (position 20), while sequences 1
    # and 2 (5 and 11 tokens) stay on the short one: one batch step, two tables.
    BatchSpec("phi3.5-tiny-b3", "phi3.5-tiny", COMMITTED, 3),
    BatchSpec("gpt2-tiny-b3", "gpt2-tiny", COMMITTED, 3),
    # qwen2-swa-tiny's 7-position window on layer 1: served over pages of 4 and 16, the windows'
    # edges fall inside pages and inside prompt chunks
    BatchSpec("qwen2-swa-tiny-b3", "qwen2-swa-tiny", COMMITTED, 3),
    # mixtral-tiny's sparse MoE block: four sequences' tokens routed in one moe_router and
    # moe_ffn call per layer and step, served over pages as every batch set is
    BatchSpec("mixtral-tiny-b4", "mixtral-tiny", COMMITTED, 4, prompt_tag="mixtral-tiny-b4.3"),
    BatchSpec("qwen2.5-0.5b-b16", "qwen2.5-0.5b", FULL, 16, SHARED_B16),
    BatchSpec("llama3.2-1b-b16", "llama3.2-1b", FULL, 16, SHARED_B16),
]
BY_NAME = {b.name: b for b in BATCHES}
assert len(BY_NAME) == len(BATCHES)
for _b in BATCHES:
    assert _b.model in configs.BY_NAME and configs.BY_NAME[_b.model].tier == _b.tier, _b
    assert configs.BY_NAME[_b.model].dtype == "f16", _b  # the calibration here rounds to fp16
    assert 1 <= _b.batch <= len(LENGTHS), _b
    for _dst, (_src, _n) in (_b.shared or {}).items():
        assert 0 <= _src < _dst < _b.batch and 0 < _n <= min(LENGTHS[_src], LENGTHS[_dst]), _b


def batches_for(tier, names=None):
    return [b for b in BATCHES if b.tier == tier and (not names or b.name in names)]


def prompt_lens(spec):
    return LENGTHS[:spec.batch]


# ---------------------------------------------------------------------------------------------
# Seeds and prompts


def set_seed(name):
    """The set's 32-bit seed: sha256("<master>:batches/<name>/ragged")[:4], big-endian (as
    generation.set_seed for model sets). Nothing is drawn from it: the prompts have seeds of their
    own."""
    return seeds.case_seed("batches/" + name, CASE)


def prompt_seed(name, b):
    """Sequence b's prompt seed: sha256("<master>:batches/<name>/s<b>")[:4], big-endian."""
    return seeds.case_seed("batches", "%s/s%d" % (name, b))


def prompt_ids(name, b, length, vocab_size):
    """Sequence b's prompt: `length` fp64 uniforms u from its own seed, ids = floor(u * V), the
    draw generation.prompt_ids makes from the model sets' one seed."""
    g = torch.Generator(device="cpu").manual_seed(prompt_seed(name, b))
    u = torch.rand((length,), generator=g, dtype=F64)
    return torch.clamp((u * vocab_size).floor().to(torch.int64), 0, vocab_size - 1).to(I32)


def set_prompts(spec, vocab_size):
    """Every sequence's prompt: its own draw (prompt_ids), with a shared sequence's first n
    tokens replaced by its source's (spec.shared)."""
    prompts = []
    for b, P in enumerate(prompt_lens(spec)):
        p = prompt_ids(spec.prompt_tag or spec.name, b, P, vocab_size)
        src, n = (spec.shared or {}).get(b, (None, 0))
        if n:
            p = torch.cat([prompts[src][:n], p[n:]])
        prompts.append(p)
    return prompts


# ---------------------------------------------------------------------------------------------
# The model set a batch set reads


def models_command(spec, models_root):
    """The command that writes the model set spec needs under models_root."""
    tier = " --tier full" if spec.tier == FULL else ""
    return "python3 tools/gen-golden models%s --model %s --out %s" % (tier, spec.model,
                                                                     models_root)


def read_model_set(spec, models_root):
    """The model set's directory and manifest, checked: it exists, is the synthetic set of spec's
    model and tier, and its checkpoint files are the ones its manifest lists (sha256). Exits with
    the command that (re)generates it otherwise."""
    model_dir = os.path.join(models_root, "models", spec.model)
    cmd = models_command(spec, models_root)
    m = manifest.read_manifest(model_dir)
    if m is None:
        what = "no such directory" if not os.path.isdir(model_dir) else \
            "no readable manifest.json"
        raise SystemExit("batch set %s needs the model set %s (%s); generate it first:\n  %s"
                         % (spec.name, model_dir, what, cmd))
    if m.get("kind") != "model" or m.get("model") != spec.model or m.get("tier") != spec.tier:
        raise SystemExit("%s is not the %s model set %s (kind %r, model %r, tier %r); "
                         "regenerate it:\n  %s" % (model_dir, spec.tier, spec.model, m.get("kind"),
                                                   m.get("model"), m.get("tier"), cmd))
    ckpt = [e for e in m.get("files", []) if e.get("role") == "checkpoint"]
    if not ckpt:
        raise SystemExit("%s: the manifest lists no checkpoint files; regenerate it:\n  %s"
                         % (model_dir, cmd))
    for e in ckpt:
        path = os.path.join(model_dir, e["file"])
        if not os.path.isfile(path) or checkpoint.sha256_file(path) != e["sha256"]:
            raise SystemExit("%s: %s is missing or differs from its manifest's sha256; "
                             "regenerate the model set:\n  %s" % (model_dir, e["file"], cmd))
    return model_dir, m


def checkpoint_params(model_manifest):
    """params.checkpoint: the model set's checkpoint entries in its manifest order, file and
    sha256 only."""
    return [{"file": e["file"], "sha256": e["sha256"]} for e in model_manifest["files"]
            if e["role"] == "checkpoint"]


# ---------------------------------------------------------------------------------------------
# Building a set


class Phases:
    """`with phases("name"):` adds a block's seconds to its phase; report() prints each phase's
    total over the sequences to model_build.PHASE_STREAM, one line a phase, in first-use order."""

    def __init__(self, name):
        self.name = name
        self.seconds = {}

    @contextmanager
    def __call__(self, what):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0

    def report(self, n_seqs):
        if model_build.PHASE_STREAM is None:
            return
        for what, sec in self.seconds.items():
            print("%s: %s %.1fs (%d sequences)" % (self.name, what, sec, n_seqs),
                  file=model_build.PHASE_STREAM, flush=True)


def run_sequence(model, family, cfg, prompt, pool, weights_f16, phase):
    """One sequence's reference (prefill, DECODE_STEPS greedy decode steps, N_TOKENS greedy
    tokens) and its calibration forward teacher-forced on those tokens, as models/build.py's
    _build_set runs them: with a pool, each linear layer's GEMM split over it and (fp16 weights)
    the two forwards in lockstep, sharing each read of the weights; one after the other without.
    `phase` times each part (Phases). Returns (taps, tokens, margins, calibration taps)."""
    n_threads = 1 if pool is None else pool.size
    feed = lockstep.TokenFeed()

    def greedy():
        try:
            return reference.run_reference(model, family, cfg, prompt, DECODE_STEPS,
                                           n_tokens=N_TOKENS, feed=feed)
        finally:
            feed.close()

    def rounded():
        return calibration.run_rounded(model, family, cfg, prompt, feed, DECODE_STEPS, pool=pool,
                                       weights_stored=True)

    group = lockstep.Lockstep(2) if pool is not None and n_threads > 1 and weights_f16 else None
    cal_taps = None
    with threads.split_linears(model, pool, n_threads, group):
        if group is not None:
            with phase("run_reference + run_rounded (lockstep)"):
                (taps, tokens, margins, _), cal_taps = lockstep.run_lockstep(group, greedy,
                                                                             rounded)
        else:
            with phase("run_reference"):
                taps, tokens, margins, _ = greedy()
    if cal_taps is None:
        with threads.split_linears(model, pool, n_threads):
            # rounds the weights in place unless they are fp16 values already (then the caller
            # reloads the model before the next sequence)
            with phase("run_rounded"):
                cal_taps = calibration.run_rounded(model, family, cfg, prompt, tokens,
                                                   DECODE_STEPS, pool=pool,
                                                   weights_stored=weights_f16)
    return taps, tokens, margins, cal_taps


CAL_HEAD = '{\n  "version": %d,\n  "implementation": %s,\n  "taps": [\n' % (
    calibration.CALIBRATION_VERSION, json.dumps(calibration.CALIBRATION_IMPLEMENTATION))
CAL_TAIL = "\n  ]\n}\n"


def merge_calibration(parts):
    """One calibration.json from the per-sequence ones (calibration.calibration_bytes, tap names
    prefixed s<b>.): their tap lines in order, the bytes calibration_bytes writes for all the
    taps at once."""
    bodies = []
    for p in parts:
        t = p.decode("ascii")
        if not (t.startswith(CAL_HEAD) and t.endswith(CAL_TAIL)):
            raise RuntimeError("calibration_bytes wrote a layout merge_calibration does not know")
        bodies.append(t[len(CAL_HEAD):-len(CAL_TAIL)])
    out = (CAL_HEAD + ",\n".join(bodies) + CAL_TAIL).encode("ascii")
    if json.loads(out)["taps"] != [t for p in parts for t in json.loads(p)["taps"]]:
        raise RuntimeError("merged calibration.json is not the parts' taps in order")
    return out


def check_positions(spec, d):
    """Every sequence fits the model: prompt + DECODE_STEPS decode steps + the last prediction."""
    for b, P in enumerate(prompt_lens(spec)):
        if P + N_TOKENS > d.P:
            raise SystemExit("batch set %s: sequence %d needs %d + %d = %d positions, more than "
                             "model %s has (%d)" % (spec.name, b, P, N_TOKENS, P + N_TOKENS,
                                                    spec.model, d.P))


def build(spec, set_dir, models_root):
    """Write spec's set into set_dir (normally <out>/batches/<name>/; removed first, removed
    again if the build fails) from the model set under models_root/models/<model>/. Returns
    (files, bytes)."""
    model_dir, mm = read_model_set(spec, models_root)
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        cfg = json.loads(f.read())
    family = mm["params"]["family"]
    if mm["params"].get("dtype", "f16") != "f16":
        # the calibration here rounds to fp16 (calibration.run_rounded's default) and says so
        raise SystemExit("batch set %s: model set %s is %s; batch sets of bf16 model sets are not "
                         "implemented" % (spec.name, spec.model, mm["params"]["dtype"]))
    if configs.FAMILY_OF_MODEL_TYPE.get(cfg.get("model_type")) != family or \
            family != configs.BY_NAME[spec.model].family:
        raise SystemExit("%s: model_type %r is not family %s" % (model_dir, cfg.get("model_type"),
                                                                 family))
    check_positions(spec, configs.dims(family, cfg))
    try:
        # the tier's worker threads (models/threads.py); torch itself on one thread throughout
        with threads.intra_op_threads(1), \
                threads.one_thread_workers(threads.tier_threads(spec.tier)) as pool:
            return _build(spec, set_dir, model_dir, mm, cfg, family, pool)
    except BaseException:
        if os.path.isdir(set_dir) and not os.path.exists(os.path.join(set_dir, "manifest.json")):
            shutil.rmtree(set_dir, ignore_errors=True)
        raise


def _build(spec, set_dir, model_dir, mm, cfg, family, pool):
    if os.path.lexists(set_dir):
        shutil.rmtree(set_dir)
    os.makedirs(set_dir)
    phase = model_build.PhaseTimer(spec.name)
    n_threads = 1 if pool is None else pool.size
    d = configs.dims(family, cfg)
    lens = prompt_lens(spec)
    with phase("load_model"):
        model = reference.load_model(model_dir, family, threads=n_threads)
    with phase("check_loaded_weights"):
        weights_f16 = reference.check_loaded_weights(model, model_dir, pool) == {F16}

    entries, total, cal_parts = [], 0, []
    phases = Phases(spec.name)
    prompts = set_prompts(spec, d.V)
    for b, P in enumerate(lens):
        tag = "s%d" % b
        if b > 0 and not weights_f16:
            # the calibration rounded the last sequence's weights to fp16 in place
            with phases("reload_model"):
                model = reference.load_model(model_dir, family, threads=n_threads)
        prompt = prompts[b]
        taps, tokens, margins, cal_taps = run_sequence(model, family, cfg, prompt, pool,
                                                       weights_f16, phases)
        pre = tag + "."
        with phases("calibration"):
            cal_parts.append(calibration.calibration_bytes(
                {pre + k: v for k, v in taps.items()},
                {pre + k: cal_taps[k] for k in taps}, pool))
        del cal_taps
        if d.E and d.K < d.E:
            # each sequence's routing decisive, as a model set's (models/build.py)
            with phases("routing"):
                model_build.check_routing_decisive(spec.name, {pre + k: v for k, v in taps.items()},
                                                   json.loads(cal_parts[-1]), d.K, strict=True)
        tensors = [(pre + "prompt_ids", prompt, "input")]
        tensors += [(pre + k, v, "expected") for k, v in taps.items()]
        tensors += [(pre + "greedy_tokens", tokens, "expected"),
                    (pre + "greedy_top2_margin", margins.to(torch.float32), "expected")]
        with phases("write_taps"):
            written = list((map if pool is None else pool.map)(
                lambda e: manifest.write_tensor(set_dir, e[0], e[1], e[2]), tensors))
        for entry, size in written:
            entries.append(entry)
            total += size
        del taps, tensors
    del model
    phases.report(len(lens))

    cal = merge_calibration(cal_parts)
    with open(os.path.join(set_dir, calibration.CALIBRATION_FILE), "wb") as f:
        f.write(cal)
    total += len(cal)
    entries.append({"name": "calibration", "file": calibration.CALIBRATION_FILE,
                    "role": "calibration", "sha256": hashlib.sha256(cal).hexdigest()})
    names, files = [e["name"] for e in entries], [e["file"] for e in entries]
    assert len(set(names)) == len(names) and len(set(files)) == len(files), "duplicate entry"

    params = {
        "model_set": spec.model,
        "family": family,
        "checkpoint": checkpoint_params(mm),
        "batch": spec.batch,
        "decode_steps": DECODE_STEPS,
        "margin_epsilon": mm["params"]["margin_epsilon"],
        "prompt_lens": list(lens),
    }
    doc = {
        "format_version": manifest.FORMAT_VERSION,
        "generator": manifest.generator_info(with_transformers=True),
        "kind": KIND,
        "model": spec.name,
        "case": CASE,
        "tier": spec.tier,
        "seed": set_seed(spec.name),
        "params": params,
        "files": entries,
    }
    return len(entries) + 1, total + manifest.write_manifest(set_dir, doc)


def stale_batch_dirs(batches_dir, keep, tier):
    """Batch set directories a regeneration of `tier` deletes: not in `keep`, and either without
    a readable manifest or a batch set of the same tier. Sets of the other tier are left alone."""
    if not os.path.isdir(batches_dir):
        return []
    stale = []
    for name in sorted(os.listdir(batches_dir)):
        path = os.path.join(batches_dir, name)
        if name in keep or not os.path.isdir(path):
            continue
        m = manifest.read_manifest(path)
        if m is None or (m.get("tier") == tier and m.get("kind") == KIND):
            stale.append(name)
    return stale
