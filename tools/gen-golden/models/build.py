"""Writing a model set: the phases of one set (checkpoint, load, checks, the references in lockstep,
the calibration, the tap files) with their timing, the synthetic and the real-checkpoint builds,
the first checkpoint written by a forked process, and stale-set detection."""

import hashlib
import json
import os
import shutil
import threading
import time
from contextlib import contextmanager

from common import manifest
from common.configs import CHECKPOINT_DECODE_STEPS, CHECKPOINT_EPSILON, CHECKPOINT_EPSILON_BF16, \
    COMMITTED, FAMILY_OF_MODEL_TYPE, dims
from common.dtypes import BF16, F32, TORCH_DTYPE
from models import lockstep, peak
from models.calibration import CALIBRATION_FILE, calibration_bytes, run_rounded
from models.checkpoint import place_checkpoint, sha256_file, write_synthetic_checkpoint
from models.generation import CASE, GREEDY_TOKENS, SAMPLE_TEMPERATURE, SAMPLE_TOKENS, \
    SAMPLE_TOP_K, SAMPLE_TOP_P, prompt_ids, sample_seed, set_seed
from models.quantize import check_reference, format_of, quantize_checkpoint, \
    stored_quantization
from models.reference import check_loaded_weights, load_model, reference_hparams, run_reference, \
    run_sampled
from models.threads import intra_op_threads, one_thread_workers, split_linears, tier_threads

SYNTHETIC, CHECKPOINT = "synthetic", "checkpoint"

# ---------------------------------------------------------------------------------------------
# Writing a set


# Where build_set reports the seconds each phase of a set took, one line a phase
# ("<set>: run_reference 41.2s"); None (the default, e.g. in the selftest) reports nothing.
# __main__.py's models command sets it to stderr, so stdout stays one line a set.
PHASE_STREAM = None


class PhaseTimer:
    """`with phase("name"):` times a block and reports it to PHASE_STREAM."""

    def __init__(self, name):
        self.name = name

    def log(self, line):
        """One line about the set to PHASE_STREAM ("<set>: <line>")."""
        if PHASE_STREAM is not None:
            print("%s: %s" % (self.name, line), file=PHASE_STREAM, flush=True)

    @contextmanager
    def __call__(self, what):
        t0 = time.perf_counter()
        yield
        if PHASE_STREAM is not None:
            print("%s: %s %.1fs" % (self.name, what, time.perf_counter() - t0),
                  file=PHASE_STREAM, flush=True)


def check_checkpoint_dir(checkpoint, set_dir):
    """Exits when a real checkpoint directory and the set directory it goes to overlap (the set
    directory is deleted first)."""
    src, dst = os.path.realpath(checkpoint), os.path.realpath(set_dir)
    if src == dst or src.startswith(dst + os.sep) or dst.startswith(src + os.sep):
        raise SystemExit("--checkpoint %s overlaps the set directory %s (which is deleted "
                         "first): give another --name or --out" % (checkpoint, set_dir))


def build_set(set_dir, **kwargs):
    """Write one model set into set_dir (removed first; removed again if the build fails, so no
    half-written set is left behind). Returns (files, bytes)."""
    try:
        # the tier's worker threads (models/threads.py); torch itself on one thread throughout
        with intra_op_threads(1), one_thread_workers(tier_threads(kwargs["tier"])) as pool:
            return _build_set(set_dir, pool=pool, **kwargs)
    except BaseException:
        if os.path.isdir(set_dir) and not os.path.exists(os.path.join(set_dir, "manifest.json")):
            shutil.rmtree(set_dir, ignore_errors=True)
        raise


def set_dtype(stored, spec=None):
    """A set's dtype (params.dtype) from the dtypes its checkpoint stores (check_loaded_weights):
    a synthetic set's is its spec's, which its checkpoint must store exactly; a real checkpoint
    whose floating tensors are all BF16 is a bf16 set (run, rounded and calibrated in bf16, as it
    was trained and shipped), any other (F16, F32, mixed) an fp16 set as before: its values
    rounded to fp16 where they are not fp16 already."""
    if spec is not None:
        if stored != {TORCH_DTYPE[spec.dtype]}:
            raise RuntimeError("%s: the checkpoint stores %s, want %s only"
                               % (spec.name, sorted(map(str, stored)), spec.dtype))
        return spec.dtype
    floating = {t for t in stored if t.is_floating_point}
    return "bf16" if floating == {BF16} else "f16"


def _build_set(set_dir, *, name, family, tier, seed, source, decode_steps, margin_epsilon,
               spec=None, checkpoint=None, pool=None, ahead=None):
    if checkpoint is not None:
        check_checkpoint_dir(checkpoint, set_dir)
    if ahead is None:
        if os.path.lexists(set_dir):
            shutil.rmtree(set_dir)
        os.makedirs(set_dir)
    phase = PhaseTimer(name)
    threads = 1 if pool is None else pool.size
    with phase("checkpoint" if ahead is None else "checkpoint (the forked writer's rest)"):
        if ahead is not None:
            ckpt = ahead()
        elif source == SYNTHETIC:
            ckpt = write_synthetic_checkpoint(set_dir, spec, seed, pool)
        else:
            ckpt = place_checkpoint(set_dir, checkpoint)
    with open(os.path.join(set_dir, "config.json"), "rb") as f:
        cfg = json.loads(f.read())
    mt = cfg.get("model_type")
    if FAMILY_OF_MODEL_TYPE.get(mt) != family:
        raise SystemExit("%s: model_type %r is not family %s" % (set_dir, mt, family))
    d = dims(family, cfg)
    prompt = prompt_ids(d.V)
    s_seed = sample_seed(name)
    peaked = None
    if source == SYNTHETIC:
        # the output rows boosted until every greedy and seeded step is decisive (models/peak.py)
        with phase("peak"):
            peaked = peak.peak_checkpoint(set_dir, family, d.tied, prompt, s_seed,
                                          margin_epsilon, spec.dtype, pool=pool, threads=threads,
                                          log=phase.log,
                                          quant=(spec.quant, spec.quant_group) if spec.quant
                                          else None)
        ckpt = [(n, f, sha256_file(os.path.join(set_dir, f)) if f == "model.safetensors"
                 else h) for n, f, h in ckpt]
    with phase("load_model"):
        model = load_model(set_dir, family, threads=threads)
    with phase("check_loaded_weights"):
        stored = check_loaded_weights(model, set_dir, pool)
        hparams = reference_hparams(model, family)
    quantization = stored_quantization(model)  # a real quantized checkpoint's
    if spec is not None and spec.quant:
        # the projections stored in the format, the reference computing its arithmetic
        with phase("quantize"):
            ckpt, quantization = quantize_checkpoint(model, set_dir, spec.quant, spec.quant_group)
    dtype = set_dtype(stored, spec)
    weights_stored = stored == {TORCH_DTYPE[dtype]}
    if source == CHECKPOINT and dtype == "bf16":
        margin_epsilon = CHECKPOINT_EPSILON_BF16

    # the greedy tokens as they are chosen, for a calibration in lockstep
    feed = lockstep.TokenFeed()

    def greedy():
        try:
            return run_reference(model, family, cfg, prompt, decode_steps, feed=feed)
        finally:
            feed.close()

    def seeded():
        return run_sampled(model, prompt, s_seed)

    def rounded():
        return run_rounded(model, family, cfg, prompt, feed, decode_steps, pool=pool,
                           weights_stored=True, dtype=dtype)

    # With a pool the references run in lockstep (run_lockstep), one after the other without.
    # The calibration forward joins them where the weights are its own already (a checkpoint of
    # the set's dtype: no rounding in place), teacher-forced on the greedy tokens as they come.
    # A mixture of experts' calibration routes as the reference did (run_rounded's routes), so it
    # runs after the reference, whose router_logits it reads.
    moe = bool(d.E and d.K < d.E)
    jobs = [greedy, seeded] + ([rounded] if weights_stored and not moe else [])
    group = lockstep.Lockstep(len(jobs)) if pool is not None and threads > 1 else None
    cal_taps = None
    with split_linears(model, pool, threads, group):
        if group is not None:
            with phase("run_reference + run_sampled%s (lockstep)"
                       % (" + run_rounded" if len(jobs) == 3 else "")):
                results = lockstep.run_lockstep(group, *jobs)
            (taps, tokens, margins, top5), (s_tokens, s_margins) = results[:2]
            if len(jobs) == 3:
                cal_taps = results[2]
        else:
            with phase("run_reference"):
                taps, tokens, margins, top5 = greedy()
            with phase("run_sampled"):
                s_tokens, s_margins = seeded()
    if group is not None and PHASE_STREAM is not None:
        print("%s: lockstep groups of %s linear calls" % (name, ", ".join(
            "%d: %d" % (k, n) for k, n in sorted(group.groups.items(), reverse=True))),
            file=PHASE_STREAM, flush=True)
    if cal_taps is None:
        with split_linears(model, pool, threads):
            # Last: the calibration rounds the model's weights to fp16 (bf16) in place.
            with phase("run_rounded"):
                cal_taps = run_rounded(model, family, cfg, prompt, tokens, decode_steps,
                                       pool=pool, weights_stored=weights_stored, dtype=dtype,
                                       routes=taps if moe else None)
    del model
    if quantization is not None:
        with phase("check_reference"):
            check_reference(set_dir, family, TORCH_DTYPE[dtype], taps)
    with phase("calibration"):
        fp8 = quantization is not None and quantization["format"].startswith("fp8")
        cal = calibration_bytes(taps, cal_taps, pool, dtype, fp8_activations=fp8)
        with open(os.path.join(set_dir, CALIBRATION_FILE), "wb") as f:
            f.write(cal)

    if d.E and d.K < d.E:
        with phase("routing"):
            check_routing_decisive(name, taps, json.loads(cal), d.K,
                                   strict=source == SYNTHETIC and tier == COMMITTED)

    params = {
        "family": family,
        "source": source,
        "dtype": dtype,
        "prompt_ids": [int(t) for t in prompt],
        "decode_steps": decode_steps,
        "greedy_tokens": GREEDY_TOKENS,
        "margin_epsilon": margin_epsilon,
        "sample": {"temperature": SAMPLE_TEMPERATURE, "top_k": SAMPLE_TOP_K,
                   "top_p": SAMPLE_TOP_P, "seed": s_seed, "tokens": SAMPLE_TOKENS},
        "hparams": hparams,
    }
    if peaked is not None:
        params["peak"] = peaked
    if quantization is not None:
        params["quantization"] = quantization
    tensors = [("prompt_ids", prompt, "input")]
    tensors += [(k, v, "expected") for k, v in taps.items()]
    tensors += [("greedy_tokens", tokens, "expected"),
                ("greedy_top2_margin", margins.to(F32), "expected"),
                ("greedy_top5", top5, "expected"),
                ("sample_tokens", s_tokens, "expected"),
                ("sample_margin", s_margins.to(F32), "expected")]
    calibration = ("calibration", CALIBRATION_FILE, hashlib.sha256(cal).hexdigest())
    with phase("write_taps"):
        return manifest.write_model_set(set_dir, model=name, case=CASE, tier=tier, seed=seed,
                                        params=params, checkpoint=ckpt, tensors=tensors,
                                        calibration=calibration, pool=pool)


def build_synthetic(spec, set_dir, ahead=None):
    """Build spec's set into set_dir (normally <out>/models/<name>; the incremental runner's
    temporary sibling); `ahead` is start_checkpoint's waiter for this set."""
    seed = set_seed(spec.name)
    return build_set(set_dir, name=spec.name,
                     family=spec.family, tier=spec.tier, seed=seed, source=SYNTHETIC,
                     decode_steps=spec.decode_steps, margin_epsilon=spec.margin_epsilon,
                     spec=spec, ahead=ahead)


def _threads_now():
    """Threads of this process as the OS counts them (torch's own included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def start_checkpoint(spec, set_dir):
    """Start writing spec's synthetic checkpoint into set_dir (emptied first; the tier's
    worker threads) in a forked child process, so that this process can import transformers
    meanwhile: on hosts that run Python without writing bytecode the imports take ~14 s, the
    Phi-3-mini checkpoint ~18 s (docs/PERF.md). The child computes exactly what
    write_synthetic_checkpoint computes here. Returns a function that waits for the child and
    returns that result (build_synthetic's `ahead`), or None where a fork is not safe: only a
    process with a single thread is forked (call it before anything starts a thread)."""
    if not hasattr(os, "fork") or threading.active_count() != 1 or _threads_now() != 1:
        return None
    import multiprocessing as mp
    import traceback
    ctx = mp.get_context("fork")
    rx, tx = ctx.Pipe(duplex=False)

    def child():
        try:
            if os.path.lexists(set_dir):
                shutil.rmtree(set_dir)
            os.makedirs(set_dir)
            with intra_op_threads(1), one_thread_workers(tier_threads(spec.tier)) as pool:
                tx.send(("ok", write_synthetic_checkpoint(set_dir, spec, set_seed(spec.name),
                                                          pool)))
        except BaseException:
            tx.send(("error", traceback.format_exc()))

    proc = ctx.Process(target=child, name="gen-golden-checkpoint")
    proc.start()
    tx.close()

    def wait():
        try:
            status, value = rx.recv()
        except EOFError:
            status, value = "error", "it ended without a result"
        finally:
            rx.close()
            proc.join()
        if status != "ok":
            raise RuntimeError("%s: writing the checkpoint in a forked process failed (exit code "
                               "%s):\n%s" % (set_dir, proc.exitcode, value))
        return value
    return wait


def build_checkpoint(src, name, tier, set_dir):
    """Build the set `name` of a real checkpoint directory src into set_dir."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    family = FAMILY_OF_MODEL_TYPE.get(cfg.get("model_type"))
    if family is None:
        raise SystemExit("%s: model_type %r is not one of %s"
                         % (src, cfg.get("model_type"), sorted(FAMILY_OF_MODEL_TYPE)))
    qc = cfg.get("quantization_config")
    if qc is not None:
        # the formats engine/model runs (docs/quantization.md); anything else is refused by
        # name here, as the engine refuses it
        format_of(qc)
        if family not in ("llama", "qwen2"):
            raise SystemExit("%s: a quantized %s checkpoint is not implemented (llama, qwen2)"
                             % (src, family))
    return build_set(set_dir, name=name, family=family, tier=tier,
                     seed=set_seed(name), source=CHECKPOINT,
                     decode_steps=CHECKPOINT_DECODE_STEPS,
                     margin_epsilon=CHECKPOINT_EPSILON, checkpoint=src)


def stale_model_dirs(models_dir, keep, tier):
    """Model directories a regeneration of `tier` deletes: not in `keep`, and either without a
    readable manifest or a synthetic set of the same tier. Checkpoint sets and sets of the other
    tier are left alone."""
    if not os.path.isdir(models_dir):
        return []
    stale = []
    for name in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, name)
        if name in keep or not os.path.isdir(path):
            continue
        m = manifest.read_manifest(path)
        if m is None or (m.get("tier") == tier and m.get("kind") == "model"
                         and (m.get("params") or {}).get("source") == SYNTHETIC):
            stale.append(name)
    return stale


# A backend may make this many times the calibrated error (golden/tolerances.yaml's
# tap_calibration factor); a routing decision must clear twice that.
ROUTING_MARGIN = 2 * 4


def check_routing_decisive(name, taps, cal, k, strict):
    """Whether every stored token's expert choice in a mixture-of-experts set is decisive: the
    gap between its k-th and next router logit exceeds ROUTING_MARGIN times the calibrated
    router_logits error of its row (max_err_rms x the row's rms). Where it does not, a correct
    engine, whose logits err by up to that, may choose another expert, and its ffn_out then
    differs by a whole expert. The engine follows the reference's choice at such a row
    (engine/model/routes.go reads it off router_logits by the same rule), so a set may keep them;
    a committed synthetic set (strict) still refuses any, so that the CPU suites judge the
    engine's own choice at every row (another seed or prompt gives one that passes). Full-tier
    and real-checkpoint sets report how many rows will follow the reference. selftest/models.py's
    check_router checks the committed sets the same way."""
    errs = {e["tap"]: e for e in cal["taps"]}
    worst, where, close, rows = float("inf"), None, 0, 0
    for tap, t in taps.items():
        if not tap.endswith(".router_logits"):
            continue
        rl = t.double()
        top = rl.sort(dim=-1, descending=True).values
        gap = top[:, k - 1] - top[:, k]
        err = (errs[tap]["max_err_rms"] * rl.pow(2).mean(-1).sqrt()).clamp(min=1e-30)
        ratios = gap / err
        close += int((ratios <= ROUTING_MARGIN).sum())
        rows += ratios.numel()
        ratio = ratios.min().item()
        if ratio < worst:
            worst, where = ratio, tap
    if worst <= ROUTING_MARGIN:
        msg = ("%s: %s: a token's %d-th and %d-th router logits are %.3g times their calibrated "
               "error apart (want > %d): a correct engine may route it to another expert"
               % (name, where, k, k + 1, worst, ROUTING_MARGIN))
        if strict:
            raise SystemExit(msg + "; draw the set with another seed or prompt")
        print("note: %s; %d of %d stored routing decisions are that close: the engine follows "
              "the reference's experts there" % (msg, close, rows), flush=True)
