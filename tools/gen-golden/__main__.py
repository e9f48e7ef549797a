"""gen-golden: the Python reference that writes touchstone's golden sets (docs/golden-format.md).

    python3 tools/gen-golden kernels [--tier committed|full] [--out DIR] [--op NAME]... [--check]
    python3 tools/gen-golden models [--tier committed|full] [--out DIR] [--model NAME]... [--check]
    python3 tools/gen-golden models --checkpoint DIR --name NAME [--tier full] [--check]
    python3 tools/gen-golden batches [--tier committed|full] [--out DIR] [--set NAME]... [--check]
        kernels, models, batches: [--sets PATTERN[,PATTERN]] [--force] [--no-verify]
    python3 tools/gen-golden list [--tier full|committed] [--sets PATTERN[,PATTERN]] [--keys]
    python3 tools/gen-golden key [--tier full|committed] [--sets PATTERN[,PATTERN]]
    python3 tools/gen-golden sampling [--out DIR] [--check]
    python3 tools/gen-golden selftest [--only imports|incremental|kernels|...] [--set DIR]...
    python3 tools/gen-golden randinit --preset qwen2.5-1.5b --out DIR [--seed N] [--layers N] [--vocab N]
    python3 tools/gen-golden checkpoint --model NAME --out DIR
"""

import os
import sys

import numerics  # first: the environment that pins the bits, before torch is imported

import argparse  # noqa: E402
import filecmp  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import incremental  # noqa: E402
import sets  # noqa: E402
from common import configs, manifest  # noqa: E402
from kernels import cases as kernel_cases  # noqa: E402
from kernels import ops as kernel_ops  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED_BUDGET = 52_890_000  # bytes, `du -sb golden/kernels` (52.1 MB until attention_decode_paged_fp8 and attention_prefill_paged_fp8, the FP8 paged KV cache, 38 sets: the decode kernel's head dims 32, 64, 96 and 128 with up to 8 and with 16 query heads a KV head and its soft-capping instance, each in fp16 and bf16 (pages of 1 to 16, lengths of 1, on and one past a page boundary and mid-page, a table wider than needed, a shared prefix, a window, outlier values), the prefill at every padded head dim of its kernel, 32 to 256, in fp16 and bf16 (two 64-row query tiles over 129 keys in pages of 64, decodes beside a prefill, a ragged batch of four, a shared prefix, a window, the soft cap), per-tensor and per-head scales, saturating calibrations, every slot no sequence holds the code 0x7E: +0.79 MB (785,514 measured); 51.05 MB until moe_shared_add, Qwen2-MoE's gated shared expert, 12 sets in fp16 and bf16: Qwen1.5-MoE-A2.7B's hidden 2048 at a decode step, a prefill of 17 (0.35 MB each) and in place, Qwen2-57B-A14B's 3584 at a decode step, 8 and 100 wide: +1.09 MB (1,093,272 measured); 50.9 MB until logit_softcap, Gemma 2's final logit soft cap, 8 sets: fp32 logits at caps 30 and 50, in place, one logit alone, fp16 with +-inf logits and bf16, lengths leaving each vector path's scalar tail: +0.12 MB (117,385 measured); 49.5 MB until Gemma 2's attention soft-capping, 18 sets over the six attention ops at Gemma-2-2B/9B/27B head layouts (head_dim 256 and 128, query_pre_attn_scalar 144) with softcap 50 and scores far beyond it, causal, sliding, paged, fp8 and scores, in fp16 and bf16, each soft-capping kernel instance they take in both: +1.56 MB (1,564,439 measured); 47.85 MB until Gemma 3's kernel cases, 25 sets: rmsnorm and rmsnorm_residual with the fp32 weight 1 + w at every row plan in fp16 and bf16 (Gemma-3-1B's 1152, Gemma-3-4B's 2560, its per-head q/k norm at 256, 4104 and 8200 for the two wide plans), the scaled embedding (sqrt(hidden) in the storage type, products past fp16's range), geglu in both GELUs and storage types at Gemma-3-1B's ffn 6912: +1.65 MB (1,647,109 measured); 47 MB until the MoE ops moe_router and moe_ffn, 20 sets: the router at Mixtral's, Qwen3-MoE's and Qwen1.5-MoE's widths with exact ties and an outlier expert, tiny Mixtral- and Qwen3-like experts, one expert taking every token, 64-row tiles at T = 64, in fp16 and bf16: +0.81 MB; 44.85 MB until the sliding-window cases, 13 sets over the four attention ops with windows ending mid-tile and mid-page, of 1 and longer than the sequence, spanning decode key splits, both decode kernels, pages of 1 to 16: +1.95 MB; 30 MB until prefill needed multi-tile cases, 31 until layernorm_gemm, 32 until the scaled RoPE cases: +0.69 MB, 32.25 until the bf16 cases, 105 of them taking every kernel path once more in bf16: +3.36 MB; 35.75 until gpt_ffn's allowances and its narrow-intermediate cases: +1.72 MB; 37.5 until quant_fp8's conversion table, traps and bf16 static case; 38 until gemm_fp8's 8 sets, block and per-channel scales with their FP8 weights: +0.96 MB; 38.75 until the fused quantisers rmsnorm_quant_fp8 and swiglu_quant_fp8, 18 sets taking every row plan of the norm in fp16 and bf16 (up to hidden 16384): +0.83 MB; 39.75 until gemm_fp8's prefill (cuBLASLt) and decode-kernel cases, every template instance once: +0.14 MB; 39.9 until gemm_w4a16's 10 AWQ and GPTQ sets: +0.23 MB; 40.15 until its decode gemv's 7 path cases and 2 bf16 prefill cases: +0.15 MB; 40.35 until the FP8 KV cache's 22 sets, set_rows_fp8 and attention_decode_fp8 at every head dim and group size of the decode kernel in both storage types: +0.63 MB; 41 until attention_decode_paged's 30 sets, every block size from 1 to 256 with its spare pages and poisoned tails (the tensor-core kernel's split at head_dim 128 through 33 pages alone 0.3 MB) and every instance of its two kernels in fp16 and bf16: +1.52 MB; 42.55 until attention_prefill_paged's 17 sets, chunks on prefixes of 0 to 130 positions through pages of 1 to 256 (several 64-row query and 64-key tiles, decodes beside prefills, a ragged batch of four, a shared prefix) at head_dim 64, 80, 96, 128 and 256, 4 of them bf16: +2.09 MB; 44.64 until its 9 path cases, one a padded head dim of the prefill kernel not yet taken in f16 or bf16: +0.26 MB)
MODELS_COMMITTED_BUDGET = 32_550_000  # bytes, `du -sb golden/models` (31.1 MB until qwen2-moe-tiny, Qwen2-MoE's sparse block (8 experts of width 24, top 4 not renormalised) beside its gated shared expert (width 96) on Qwen2's attention with q/k/v biases (8 q / 2 kv heads of 16), its checkpoint in the published mlp.experts.{e} and mlp.shared_expert layout: +1.42 MB (1,415,298 measured), the one of 36 shapes tried whose draw routes decisively and spans the shared gate; 28.25 MB until gemma2-tiny and gemma2-tiny-bf16, Gemma 2's layers (Gemma 3's without q/k norms, one RoPE, alternating sliding layers) with its attention and final soft caps in fp16 and bf16: +2.83 MB (1,540,085 and 1,539,840 measured); 25.25 MB until gemma3-tiny and gemma3-tiny-bf16, Gemma 3's layers (four norms of weight 1 + w, q/k norms, GeGLU, the scaled embedding, a sliding and a global layer with their own RoPE) in fp16 and bf16: +3.06 MB (1,516,660 and 1,517,117 measured); 23.75 MB until qwen3-moe-tiny, Qwen3-MoE's sparse block (8 experts of width 16, top 2 renormalised) on Qwen3's attention with q_norm / k_norm (head_dim 64, q twice the residual width), its checkpoint in the published mlp.experts.{e} layout: +1.47 MB (1,467,011 measured), one of the 2 of 18 shapes tried whose draw routes decisively; 22.5 MB until mixtral-tiny, Mixtral's sparse mixture of experts (4 experts of width 64, top 2) on Mistral's attention without a window, its checkpoint in the published block_sparse_moe layout: +1.21 MB; 21 MB until qwen3-tiny, Qwen3's per-head q/k norms with q twice the residual width: +1.56 MB; 19.6 MB until mistral-tiny, Mistral's every-layer window on Llama's layers with an untied head: +1.21 MB; 18.5 MB until qwen2-swa-tiny, Qwen2's sliding window on its second layer: +1.81 MB; 14.5 MB until the quantized Qwen2 sets qwen2-tiny-fp8-bf16 and qwen2-tiny-awq; 11 MB until the quantized sets llama3-tiny-fp8-bf16, -fp8dyn-bf16, -awq and -gptq: +3.75 MB; 4 MB until the RoPE-scaled tiny sets llama3-tiny, phi3.5-tiny and qwen2-yarn-tiny: +3.9 MB; 8 MB until the bf16 sets qwen2-tiny-bf16 and llama3-tiny-bf16: +2.94 MB)
BATCHES_COMMITTED_BUDGET = 8_400_000  # bytes, `du -sb golden/batches` (7.2 MB until mixtral-tiny-b4, four sequences through the sparse MoE block, prompts drawn under the first tag (mixtral-tiny-b4.3) whose every routing decision clears 8x its calibrated error: .1, .2, .4, .5 and .6 each had one that did not, +1.38 MB (7,978,019 measured); 5.25 MB until qwen2-swa-tiny-b3, the sliding-window model served over pages: +1.82 MB, 6,603,032 measured; 4,778,257 measured for qwen2-tiny-b4, phi3.5-tiny-b3 and gpt2-tiny-b3: about 10% of room)
SAMPLING_BUDGET = 4_000_000  # bytes, `du -sb golden/sampling`


def default_out(tier):
    """The default root of a tier: the repository's golden/ for committed, golden/.cache/ for
    full (relative to the repository, not to the working directory)."""
    return os.path.join(REPO, "golden") if tier == "committed" \
        else os.path.join(REPO, "golden", ".cache")


def list_files(root):
    """Relative paths of all files under root (empty when root is absent)."""
    found = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            found.add(os.path.relpath(os.path.join(dirpath, f), root))
    return found


def compare_trees(fresh_dir, have_dir, fresh, have):
    """Problems between a fresh generation and what is on disk, given each side's relative file
    paths: files only one side has, and files whose bytes differ."""
    problems = ["missing   %s" % os.path.join(have_dir, p) for p in sorted(fresh - have)]
    problems += ["extra     %s" % os.path.join(have_dir, p) for p in sorted(have - fresh)]
    for p in sorted(fresh & have):
        if not filecmp.cmp(os.path.join(fresh_dir, p), os.path.join(have_dir, p), shallow=False):
            problems.append("differs   %s" % os.path.join(have_dir, p))
    return problems


def check_jobs(out, jobs, tier, stale, prepare=None):
    """Regenerate jobs into a temporary directory and compare byte for byte with out: each
    job's set directory, and the directories `stale` (paths under out) that the same run
    without --check would delete. Returns the list of problems (empty when out is exactly what
    generation produces)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="gen-golden-check-") as tmp:
        incremental.run(tmp, jobs, tier, reuse=False, prepare=prepare)
        for rel in [j.rel for j in jobs] + list(stale):
            fresh_dir, have_dir = os.path.join(tmp, rel), os.path.join(out, rel)
            problems += compare_trees(fresh_dir, have_dir, list_files(fresh_dir),
                                      list_files(have_dir))
    return problems


def run_jobs(args, out, jobs, prepare=None):
    """Write jobs' sets under out: the full tier reuses every set whose key is unchanged
    (incremental.py) unless --force; one progress line a set. Returns the Summary."""
    return incremental.run(out, jobs, args.tier, reuse=args.tier == "full", force=args.force,
                           verify=not args.no_verify, prepare=prepare)


def remove_stale(out, rels):
    """Delete stale set directories (paths under out) and their key records."""
    for rel in rels:
        shutil.rmtree(os.path.join(out, rel))
        incremental.drop_key(out, rel)
        print("removed stale %s" % rel)


def selected(jobs, args, kind):
    """The jobs --sets selects; a note on stderr when it selects none of this kind."""
    pats = incremental.patterns(args.sets)
    chosen = incremental.select(jobs, pats)
    if pats and not chosen:
        print("%s: no set matches --sets %s" % (kind, ",".join(pats)), file=sys.stderr)
    return chosen


def model_types(jobs):
    """The config.json model_types of model and batch jobs (real checkpoints: unknown)."""
    out = set()
    for j in jobs:
        if j.kind == "models" and j.spec is not None:
            out.add(j.spec.config["model_type"])
        elif j.kind == "batches":
            out.add(configs.BY_NAME[j.spec.model].config["model_type"])
    return sorted(out)


def transformers_prepare(fork=False):
    """A prepare for incremental.run that imports transformers and the modeling modules the
    jobs to build need, only when something is built; with fork (full-tier model sets) the
    first one's checkpoint is drawn in a forked process meanwhile (build.start_checkpoint)."""
    from models import build as model_build
    from models import reference

    def prepare(todo, first_dir):
        t0 = time.time()
        ahead = None
        if fork and todo[0].kind == "models" and todo[0].spec is not None:
            ahead = model_build.start_checkpoint(todo[0].spec, first_dir)
        numerics.setup_models()
        for model_type in model_types(todo):
            reference.modeling_module(model_type)
        if ahead is not None:
            print("transformers imported in %.1fs beside the forked checkpoint writer"
                  % (time.time() - t0), file=sys.stderr, flush=True)
        return ahead
    return prepare


def cmd_kernels(args):
    ops = list(kernel_ops.OPS) if not args.op else args.op
    for op in ops:
        if op not in kernel_ops.OPS:
            sys.exit("unknown op %r (known: %s)" % (op, ", ".join(kernel_ops.OPS)))
    out = args.out if args.out is not None else default_out(args.tier)
    numerics.setup_torch()
    t0 = time.time()
    jobs = selected(sets.kernel_jobs(args.tier, ops), args, "kernels")
    stale = []
    if not args.sets:  # the listed ops' case directories that the table no longer has
        for op in ops:
            names = {c.name for c in kernel_cases.cases_for(args.tier, [op])}
            op_dir = os.path.join(out, "kernels", op)
            stale += ["kernels/%s/%s" % (op, n)
                      for n in manifest.stale_case_dirs(op_dir, names, args.tier)]

    if args.check:
        return report_check(check_jobs(out, jobs, args.tier, stale), os.path.join(out, "kernels"),
                            t0)

    summary = run_jobs(args, out, jobs)
    remove_stale(out, stale)
    print(incremental.summary_line(summary))
    kdir = os.path.join(out, "kernels")
    if args.tier == "committed" and os.path.isdir(kdir):
        if not within_budget(kdir, COMMITTED_BUDGET, "committed golden sets"):
            return 1
    return 0


def cmd_models(args):
    from models import build as model_build
    if bool(args.checkpoint) != bool(args.name):
        sys.exit("--checkpoint DIR and --name NAME go together")
    if args.checkpoint and (args.model or args.layers):
        sys.exit("--checkpoint takes no --model or --layers")
    if args.name and not all(c.isalnum() or c in "._-" for c in args.name):
        sys.exit("--name %r: use letters, digits, '.', '_' and '-' only" % args.name)
    if args.tier is None:
        args.tier = "full" if args.checkpoint else "committed"
    for name in args.model or []:
        if name not in configs.BY_NAME:
            sys.exit("unknown model %r (known: %s)" % (name, ", ".join(configs.BY_NAME)))
        if configs.BY_NAME[name].tier != args.tier:
            sys.exit("model %s is in the %s tier (use --tier %s)"
                     % (name, configs.BY_NAME[name].tier, configs.BY_NAME[name].tier))
    if args.layers is not None and args.layers < 1:
        sys.exit("--layers must be >= 1")
    out = args.out if args.out is not None else default_out(args.tier)
    t0 = time.time()
    numerics.setup_torch()
    model_build.PHASE_STREAM = sys.stderr  # per-phase seconds of each set
    if args.checkpoint:
        src = os.path.abspath(args.checkpoint)
        model_build.check_checkpoint_dir(src, os.path.join(out, "models", args.name))
        jobs = [sets.checkpoint_job(src, args.name, args.tier)]
    else:
        jobs = sets.model_jobs(args.tier, args.model, args.layers)
    jobs = selected(jobs, args, "models")
    # Only a run over the whole synthetic table of a tier may delete other sets as stale.
    stale = []
    if not (args.checkpoint or args.model or args.layers or args.sets):
        stale = ["models/" + n for n in model_build.stale_model_dirs(
            os.path.join(out, "models"), {j.name for j in jobs}, args.tier)]

    if args.check:
        return report_check(check_jobs(out, jobs, args.tier, stale, transformers_prepare()),
                            ", ".join(os.path.join(out, j.rel) for j in jobs), t0)

    # full tier: the first checkpoint to build is drawn in a forked process while transformers
    # is imported here
    summary = run_jobs(args, out, jobs, transformers_prepare(fork=args.tier == "full"))
    remove_stale(out, stale)
    print(incremental.summary_line(summary))
    mdir = os.path.join(out, "models")
    if args.tier == "committed" and os.path.isdir(mdir):
        if not within_budget(mdir, MODELS_COMMITTED_BUDGET, "committed model sets"):
            return 1
    return 0


def cmd_batches(args):
    """Batch sets (docs/golden-format.md, "Batch sets"): B sequences of different prompt lengths
    for the checkpoint of a model set of the same tier, which must exist under DIR/models/."""
    import batches
    from models import build as model_build
    for name in args.set or []:
        if name not in batches.BY_NAME:
            sys.exit("unknown batch set %r (known: %s)" % (name, ", ".join(batches.BY_NAME)))
        if batches.BY_NAME[name].tier != args.tier:
            sys.exit("batch set %s is in the %s tier (use --tier %s)"
                     % (name, batches.BY_NAME[name].tier, batches.BY_NAME[name].tier))
    out = args.out if args.out is not None else default_out(args.tier)
    t0 = time.time()
    numerics.setup_torch()
    model_build.PHASE_STREAM = sys.stderr  # per-phase seconds of each set
    jobs = selected(sets.batch_jobs(args.tier, args.set, models_root=out), args, "batches")
    for job in jobs:  # before transformers is imported: a missing model set fails at once
        batches.read_model_set(job.spec, out)
    stale = []
    if not (args.set or args.sets):  # only a run over the whole tier deletes stale sets
        stale = ["batches/" + n for n in batches.stale_batch_dirs(
            os.path.join(out, "batches"), {j.name for j in jobs}, args.tier)]

    if args.check:
        return report_check(check_jobs(out, jobs, args.tier, stale, transformers_prepare()),
                            ", ".join(os.path.join(out, j.rel) for j in jobs), t0)

    summary = run_jobs(args, out, jobs, transformers_prepare())
    remove_stale(out, stale)
    print(incremental.summary_line(summary))
    bdir = os.path.join(out, "batches")
    if args.tier == "committed" and os.path.isdir(bdir):
        if not within_budget(bdir, BATCHES_COMMITTED_BUDGET, "committed batch sets"):
            return 1
    return 0


def cmd_list(args):
    """The sets of a tier that --sets selects (all of them without): kind, name, labels, and
    with --keys each set's key. Exits 1 when nothing matches."""
    jobs = incremental.select(sets.all_jobs(args.tier), incremental.patterns(args.sets))
    for j in jobs:
        print("%-8s %-58s %s%s" % (j.kind, j.name, ",".join(j.labels),
                                   "  " + incremental.set_key(j, args.tier) if args.keys else ""))
    if not jobs:
        print("no %s-tier set matches --sets %s" % (args.tier, ",".join(
            incremental.patterns(args.sets))), file=sys.stderr)
        return 1
    return 0


def cmd_key(args):
    """One hash of every selected set's key: what a CI runner keys its cache of the tier's
    directory (golden/.cache) by. It changes when any of those sets would be rebuilt."""
    jobs = incremental.select(sets.all_jobs(args.tier), incremental.patterns(args.sets))
    if not jobs:
        print("no %s-tier set matches --sets %s" % (args.tier, ",".join(
            incremental.patterns(args.sets))), file=sys.stderr)
        return 1
    print(incremental.combined_key(jobs, args.tier))
    return 0


def within_budget(directory, budget, what):
    """Prints the size of directory (du -sb) against its budget; False when over it."""
    du = manifest.tree_size(directory)
    print("%s: %d bytes (du -sb), budget %d" % (directory, du, budget))
    if du > budget:
        print("error: %s exceed their size budget" % what, file=sys.stderr)
        return False
    return True


def report_check(problems, what, t0):
    """Prints a --check verdict and returns the exit status."""
    for p in problems:
        print(p)
    if problems:
        print("check FAILED: %d file(s) differ from a fresh generation (%.1fs)"
              % (len(problems), time.time() - t0))
        return 1
    print("check OK: %s is byte-identical to a fresh generation (%.1fs)" % (what, time.time() - t0))
    return 0


def cmd_sampling(args):
    """Sampling sets: one committed tier, golden/sampling/<set>/."""
    import sampling_sets
    out = args.out if args.out is not None else os.path.join(REPO, "golden")
    numerics.setup_torch()
    t0 = time.time()
    have_dir = os.path.join(out, "sampling")
    if args.check:
        with tempfile.TemporaryDirectory(prefix="gen-golden-check-") as tmp:
            sampling_sets.generate(tmp)
            fresh_dir = os.path.join(tmp, "sampling")
            # every directory under sampling/ is a set of the table or stale: all of it is ours
            problems = compare_trees(fresh_dir, have_dir, list_files(fresh_dir),
                                     list_files(have_dir))
        return report_check(problems, have_dir, t0)
    n_sets, n_bytes = sampling_sets.generate(out)
    print("total: %d sets, %d bytes, %.1fs" % (n_sets, n_bytes, time.time() - t0))
    return 0 if within_budget(have_dir, SAMPLING_BUDGET, "sampling sets") else 1


def cmd_selftest(args):
    numerics.setup_torch()
    rc = 0
    if args.set and args.only not in ("models", "batches"):
        sys.exit("--set DIR goes with --only models or --only batches")
    if args.only in (None, "imports"):
        from selftest import imports as selftest_imports
        rc = selftest_imports.run()
    if rc == 0 and args.only in (None, "incremental"):
        from selftest import incremental as selftest_incremental
        rc = selftest_incremental.run()
    if rc == 0 and args.only in (None, "kernels"):
        from selftest import kernels as selftest_kernels
        rc = selftest_kernels.run()
    if rc == 0 and args.only in (None, "sampling"):
        from selftest import sampling as selftest_sampling
        rc = selftest_sampling.run()
    if rc == 0 and args.only in (None, "models"):
        numerics.setup_models()
        from selftest import models as selftest_models
        rc = selftest_models.run(args.set if args.only == "models" else None)
    if rc == 0 and args.only in (None, "batches"):
        numerics.setup_models()
        from selftest import batches as selftest_batches
        rc = selftest_batches.run(args.set if args.only == "batches" else None)
    return rc


def cmd_randinit(args):
    """A checkpoint of a real model's shape with transformers' own random initialisation
    (randinit.py), for models --checkpoint."""
    import randinit
    numerics.setup_torch()
    numerics.setup_models()
    t0 = time.time()
    cfg = randinit.build(args.preset, args.out, seed=args.seed, layers=args.layers,
                         vocab=args.vocab)
    print("%s: %s, %d layers, vocab %d, seed %d (%.1fs)" % (args.out, args.preset,
          cfg["num_hidden_layers"], cfg["vocab_size"], args.seed, time.time() - t0))
    return 0


def add_selection(parser):
    """--sets, --force and --no-verify of the kernels, models and batches commands."""
    parser.add_argument("--sets", action="append", metavar="PATTERN[,PATTERN]",
                        help="only the sets a pattern matches (shell globs, comma-separated, "
                             "repeatable): a set's name (rope/qwen2.5-0.5b_t2048 or just its "
                             "case name, qwen2.5-0.5b, qwen2.5-0.5b-b16) or directory "
                             "(kernels/rope/...), or a label: kernels, models, batches, an op, a "
                             "dtype (f16, bf16, f32), a model family (qwen2, phi3, llama, gpt2, "
                             "qwen3, mixtral, qwen3_moe, qwen2_moe, gemma3, gemma2), "
                             "a batch set's model set; no stale set is deleted")
    parser.add_argument("--force", action="store_true",
                        help="full tier: build every selected set, even one whose key is "
                             "unchanged")
    parser.add_argument("--no-verify", action="store_true",
                        help="full tier: reuse a set whose key is unchanged on its files' sizes "
                             "alone, without recomputing their sha256")


def cmd_checkpoint(args):
    """A model set's synthetic checkpoint alone (config.json and model.safetensors as drawn,
    before the set's build peaks its output rows: models/peak.py; a quantized set's in its
    format, by the set's quantizer), without references: the
    shapes, dtype and scales the timing commands need (`touchstone bench-batch DIR`), in seconds
    where the whole set takes minutes."""
    from models.checkpoint import write_synthetic_checkpoint
    from models.generation import set_seed
    from models.threads import intra_op_threads, one_thread_workers, tier_threads
    spec = configs.BY_NAME.get(args.model)
    if spec is None:
        sys.exit("checkpoint: --model %r: unknown (known: %s)" % (args.model,
                 ", ".join(configs.BY_NAME)))
    if args.layers is not None:
        if args.layers < 1:
            sys.exit("checkpoint: --layers %d: must be at least 1" % args.layers)
        spec = configs.with_layers(spec, args.layers)
    if os.path.exists(os.path.join(args.out, "config.json")):
        sys.exit("checkpoint: --out %s already holds a checkpoint" % args.out)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    with intra_op_threads(1), one_thread_workers(tier_threads(spec.tier)) as pool:
        write_synthetic_checkpoint(args.out, spec, set_seed(spec.name), pool)
    if spec.quant is not None:
        # the set's quantizer over the drawn weights (the set quantizes them after peaking)
        from models.quantize import quantize_stored
        quantize_stored(args.out, spec.config["num_hidden_layers"], spec.quant, spec.quant_group)
    print("%s: %s's synthetic checkpoint (%.1fs)" % (args.out, spec.name, time.time() - t0))
    return 0


def add_tier_listing(parser):
    parser.add_argument("--tier", choices=("committed", "full"), default="full")
    parser.add_argument("--sets", action="append", metavar="PATTERN[,PATTERN]",
                        help="only the sets a pattern matches (as the kernels, models and batches "
                             "commands' --sets)")


def main(argv=None):
    p = argparse.ArgumentParser(prog="gen-golden", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kernels", help="write kernel golden sets")
    k.add_argument("--tier", choices=("committed", "full"), default="committed")
    k.add_argument("--out", metavar="DIR",
                   help="root directory; sets go to DIR/kernels/<op>/<case>/ (default: the "
                        "repository's golden/ for committed, golden/.cache/ for full)")
    k.add_argument("--op", action="append", metavar="NAME",
                   help="only this op (repeatable); default: all")
    k.add_argument("--check", action="store_true",
                   help="generate into a temporary directory and compare byte for byte with "
                        "DIR; exit 1 listing differing, missing and extra files")
    add_selection(k)
    k.set_defaults(func=cmd_kernels)
    m = sub.add_parser("models", help="write model golden sets (synthetic checkpoints, or a real "
                                      "one with --checkpoint)")
    m.add_argument("--tier", choices=("committed", "full"), default=None,
                   help="committed: the tiny variants (default); full: the real-size configs "
                        "(default with --checkpoint)")
    m.add_argument("--out", metavar="DIR",
                   help="root directory; sets go to DIR/models/<model>/ (default: the "
                        "repository's golden/ for committed, golden/.cache/ for full)")
    m.add_argument("--model", action="append", metavar="NAME",
                   help="only this model of the tier (repeatable); default: all")
    m.add_argument("--checkpoint", metavar="DIR",
                   help="a real HF checkpoint directory (config.json + model.safetensors, or "
                        "model.safetensors.index.json + shards) used instead of synthetic weights")
    m.add_argument("--name", metavar="NAME", help="the set name for --checkpoint")
    m.add_argument("--layers", type=int, metavar="N",
                   help="smoke test: cut every selected model to N layers (sets named "
                        "<model>-l<N>); not a golden set anyone should commit")
    m.add_argument("--check", action="store_true",
                   help="generate into a temporary directory and compare byte for byte with "
                        "DIR; exit 1 listing differing, missing and extra files")
    add_selection(m)
    m.set_defaults(func=cmd_models)
    b = sub.add_parser("batches", help="write batch golden sets: ragged batched decode, one "
                                        "reference run per sequence on a model set's checkpoint")
    b.add_argument("--tier", choices=("committed", "full"), default="committed")
    b.add_argument("--out", metavar="DIR",
                   help="root directory; sets go to DIR/batches/<set>/ and are computed from the "
                        "model sets in DIR/models/<model>/, which must exist (default: the "
                        "repository's golden/ for committed, golden/.cache/ for full)")
    b.add_argument("--set", action="append", metavar="NAME",
                   help="only this batch set of the tier (repeatable); default: all")
    b.add_argument("--check", action="store_true",
                   help="generate into a temporary directory (from DIR's model sets) and compare "
                        "byte for byte with DIR; exit 1 listing differing, missing and extra files")
    add_selection(b)
    b.set_defaults(func=cmd_batches)
    ls = sub.add_parser("list", help="list a tier's sets (kind, name, labels) that --sets "
                                     "selects; exit 1 when none")
    add_tier_listing(ls)
    ls.add_argument("--keys", action="store_true", help="each set's key too")
    ls.set_defaults(func=cmd_list)
    ky = sub.add_parser("key", help="print one hash of the selected sets' keys: a CI cache key "
                                    "for the tier's directory (golden/.cache)")
    add_tier_listing(ky)
    ky.set_defaults(func=cmd_key)
    sp = sub.add_parser("sampling", help="write the sampling golden sets (docs/sampling.md)")
    sp.add_argument("--out", metavar="DIR",
                    help="root directory; sets go to DIR/sampling/<set>/ (default: the "
                         "repository's golden/)")
    sp.add_argument("--check", action="store_true",
                    help="generate into a temporary directory and compare byte for byte with "
                         "DIR; exit 1 listing differing, missing and extra files")
    sp.set_defaults(func=cmd_sampling)
    s = sub.add_parser("selftest", help="check the references against independent numpy code")
    s.add_argument("--only", choices=("imports", "incremental", "kernels", "sampling", "models",
                                      "batches"),
                   help="run only the import graph's, the incremental runner's, the kernel, the "
                        "sampling, the model or the batch checks")
    s.add_argument("--set", action="append", metavar="DIR",
                   help="with --only models: check these existing model set directories (e.g. a "
                        "full-size or --layers set) instead of building the committed ones; with "
                        "--only batches: these existing batch set directories (their model sets "
                        "in DIR/../../models/)")
    s.set_defaults(func=cmd_selftest)
    r = sub.add_parser("randinit", help="write a checkpoint of a real model's shape with "
                                         "transformers' own random initialisation (for models "
                                         "--checkpoint)")
    r.add_argument("--preset", required=True, choices=("qwen2.5-1.5b",))
    r.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory to create")
    r.add_argument("--seed", type=int, default=20261121, help="torch.manual_seed (default 20261121)")
    r.add_argument("--layers", type=int, metavar="N", help="fewer layers than the preset")
    r.add_argument("--vocab", type=int, metavar="N", help="a smaller vocabulary than the preset")
    r.set_defaults(func=cmd_randinit)
    c = sub.add_parser("checkpoint", help="write a model set's synthetic checkpoint alone (for "
                                           "touchstone bench-batch / bench-model DIR)")
    c.add_argument("--model", required=True, metavar="NAME", help="a model set (qwen2.5-0.5b, ...)")
    c.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory to create")
    c.add_argument("--layers", type=int, metavar="N",
                   help="the model's config with N layers (a cut-down set's model at full depth: "
                        "gemma3-1b-l6 --layers 26 is Gemma-3-1B)")
    c.set_defaults(func=cmd_checkpoint)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
