"""gen-golden: the Python reference that writes touchstone's golden sets (docs/golden-format.md).

    python3 tools/gen-golden kernels [--tier committed|full] [--out DIR] [--op NAME]... [--check]
    python3 tools/gen-golden models [--tier committed|full] [--out DIR] [--model NAME]... [--check]
    python3 tools/gen-golden models --checkpoint DIR --name NAME [--tier full] [--check]
    python3 tools/gen-golden batches [--tier committed|full] [--out DIR] [--set NAME]... [--check]
    python3 tools/gen-golden sampling [--out DIR] [--check]
    python3 tools/gen-golden selftest [--only imports|kernels|sampling|models|batches] [--set DIR]...
    python3 tools/gen-golden randinit --preset qwen2.5-1.5b --out DIR [--seed N] [--layers N] [--vocab N]
"""

import os
import sys

import numerics  # first: the environment that pins the bits, before torch is imported

import argparse  # noqa: E402
import filecmp  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from common import configs, manifest  # noqa: E402
from kernels import cases as kernel_cases  # noqa: E402
from kernels import ops as kernel_ops  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED_BUDGET = 35_750_000  # bytes, `du -sb golden/kernels` (30 MB until prefill needed multi-tile cases, 31 until layernorm_gemm, 32 until the scaled RoPE cases: +0.69 MB, 32.25 until the bf16 cases, 105 of them taking every kernel path once more in bf16: +3.36 MB)
MODELS_COMMITTED_BUDGET = 11_000_000  # bytes, `du -sb golden/models` (4 MB until the RoPE-scaled tiny sets llama3-tiny, phi3.5-tiny and qwen2-yarn-tiny: +3.9 MB; 8 MB until the bf16 sets qwen2-tiny-bf16 and llama3-tiny-bf16: +2.94 MB)
BATCHES_COMMITTED_BUDGET = 5_250_000  # bytes, `du -sb golden/batches` (4,778,257 measured for qwen2-tiny-b4, phi3.5-tiny-b3 and gpt2-tiny-b3: about 10% of room)
SAMPLING_BUDGET = 4_000_000  # bytes, `du -sb golden/sampling`


def generate(out, tier, ops, quiet=False):
    """Write every case of `tier` for `ops` under out/kernels/<op>/<case>/ and delete stale
    case directories of those ops. Returns (sets, bytes)."""
    n_sets = n_bytes = 0
    for op in ops:
        op_dir = os.path.join(out, "kernels", op)
        cases = kernel_cases.cases_for(tier, [op])
        for case in cases:
            t0 = time.time()
            seed, params, inputs, expected = kernel_cases.build(case)
            files, size = manifest.write_set(
                os.path.join(op_dir, case.name), op=op, case=case.name, tier=tier, seed=seed,
                params=params, inputs=inputs, expected=expected)
            n_sets += 1
            n_bytes += size
            if not quiet:
                print("%-50s %2d files %11d bytes %6.1fs"
                      % (op + "/" + case.name, files, size, time.time() - t0), flush=True)
        for name in manifest.stale_case_dirs(op_dir, {c.name for c in cases}, tier):
            shutil.rmtree(os.path.join(op_dir, name))
            if not quiet:
                print("removed stale %s/%s" % (op, name))
    return n_sets, n_bytes


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


def check(out, tier, ops):
    """Regenerate into a temporary directory and compare byte for byte with out. Returns the
    list of problems (empty when out is exactly what generation produces)."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="gen-golden-check-") as tmp:
        generate(tmp, tier, ops)
        for op in ops:
            fresh_dir = os.path.join(tmp, "kernels", op)
            have_dir = os.path.join(out, "kernels", op)
            fresh = list_files(fresh_dir)
            # Judge the sets this run writes plus those it would delete as stale; sets of the
            # other tier sharing the directory are not ours.
            generated = {c.name for c in kernel_cases.cases_for(tier, [op])}
            ours = generated | set(manifest.stale_case_dirs(have_dir, generated, tier))
            have = {p for p in list_files(have_dir) if p.split(os.sep)[0] in ours}
            problems += compare_trees(fresh_dir, have_dir, fresh, have)
    return problems


def cmd_kernels(args):
    ops = list(kernel_ops.OPS) if not args.op else args.op
    for op in ops:
        if op not in kernel_ops.OPS:
            sys.exit("unknown op %r (known: %s)" % (op, ", ".join(kernel_ops.OPS)))
    out = args.out
    if out is None:  # defaults are relative to the repository, not to the working directory
        out = os.path.join(REPO, "golden") if args.tier == "committed" \
            else os.path.join(REPO, "golden", ".cache")
    numerics.setup_torch()
    t0 = time.time()

    if args.check:
        return report_check(check(out, args.tier, ops), os.path.join(out, "kernels"), t0)

    n_sets, n_bytes = generate(out, args.tier, ops)
    print("total: %d sets, %d bytes, %.1fs" % (n_sets, n_bytes, time.time() - t0))
    kdir = os.path.join(out, "kernels")
    if args.tier == "committed" and os.path.isdir(kdir):
        if not within_budget(kdir, COMMITTED_BUDGET, "committed golden sets"):
            return 1
    return 0


def model_jobs(args):
    """[(set name, build function(out_root, ahead=None), synthetic spec or None)] that a models
    command covers (`ahead`: model_build.start_checkpoint's waiter for that set)."""
    from models import build as model_build
    if args.checkpoint:
        src = os.path.abspath(args.checkpoint)
        return [(args.name, lambda root, ahead=None:
                 model_build.build_checkpoint(src, args.name, args.tier, root), None)]
    specs = configs.models_for(args.tier, args.model)
    if args.layers:
        specs = [configs.with_layers(s, args.layers) for s in specs]
    return [(s.name, lambda root, ahead=None, s=s: model_build.build_synthetic(s, root, ahead), s)
            for s in specs]


def generate_models(out, jobs, tier, prune, quiet=False, ahead=None):
    """Build every job's set under out; `ahead` is start_checkpoint's waiter for the first."""
    from models import build as model_build
    n_sets = n_bytes = 0
    for i, (name, build, _) in enumerate(jobs):
        t0 = time.time()
        files, size = build(out, ahead if i == 0 else None)
        n_sets += 1
        n_bytes += size
        if not quiet:
            print("%-50s %3d files %11d bytes %6.1fs"
                  % ("models/" + name, files, size, time.time() - t0), flush=True)
    if prune:
        mdir = os.path.join(out, "models")
        for name in model_build.stale_model_dirs(mdir, {n for n, _, _ in jobs}, tier):
            shutil.rmtree(os.path.join(mdir, name))
            if not quiet:
                print("removed stale models/%s" % name)
    return n_sets, n_bytes


def check_models(out, jobs, tier, prune):
    from models import build as model_build
    problems = []
    with tempfile.TemporaryDirectory(prefix="gen-golden-check-") as tmp:
        generate_models(tmp, jobs, tier, prune=False)
        have_root = os.path.join(out, "models")
        names = [n for n, _, _ in jobs]
        if prune:
            names += model_build.stale_model_dirs(have_root, set(names), tier)
        for name in names:
            fresh_dir = os.path.join(tmp, "models", name)
            have_dir = os.path.join(have_root, name)
            problems += compare_trees(fresh_dir, have_dir, list_files(fresh_dir), list_files(have_dir))
    return problems


def cmd_models(args):
    from models import build as model_build
    from models import reference
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
    out = args.out
    if out is None:
        out = os.path.join(REPO, "golden") if args.tier == "committed" \
            else os.path.join(REPO, "golden", ".cache")
    t0 = time.time()
    numerics.setup_torch()
    model_build.PHASE_STREAM = sys.stderr  # per-phase seconds of each set
    jobs = model_jobs(args)
    # Only a run over the whole synthetic table of a tier may delete other sets as stale.
    prune = not (args.checkpoint or args.model or args.layers)
    ahead = None
    if not args.check and args.tier == "full" and jobs and jobs[0][2] is not None:
        # the first checkpoint is drawn in a forked process while transformers is imported here
        ahead = model_build.start_checkpoint(jobs[0][2], out)
    numerics.setup_models()
    for _, _, spec in jobs:
        if spec is not None:
            reference.modeling_module(spec.family)
    if ahead is not None:
        print("transformers imported in %.1fs beside the forked checkpoint writer" % (time.time() - t0),
              file=sys.stderr, flush=True)

    if args.check:
        return report_check(check_models(out, jobs, args.tier, prune),
                            ", ".join(os.path.join(out, "models", n) for n, _, _ in jobs), t0)

    n_sets, n_bytes = generate_models(out, jobs, args.tier, prune, ahead=ahead)
    print("total: %d sets, %d bytes, %.1fs" % (n_sets, n_bytes, time.time() - t0))
    mdir = os.path.join(out, "models")
    if args.tier == "committed" and os.path.isdir(mdir):
        if not within_budget(mdir, MODELS_COMMITTED_BUDGET, "committed model sets"):
            return 1
    return 0


def generate_batches(out, specs, tier, prune, models_root, quiet=False):
    """Build every batch set of specs under out/batches/, reading the model sets under
    models_root/models/; with prune, delete stale batch sets of the tier."""
    import batches
    n_sets = n_bytes = 0
    for spec in specs:
        t0 = time.time()
        files, size = batches.build(spec, out, models_root)
        n_sets += 1
        n_bytes += size
        if not quiet:
            print("%-50s %4d files %11d bytes %6.1fs"
                  % ("batches/" + spec.name, files, size, time.time() - t0), flush=True)
    if prune:
        bdir = os.path.join(out, "batches")
        for name in batches.stale_batch_dirs(bdir, {s.name for s in specs}, tier):
            shutil.rmtree(os.path.join(bdir, name))
            if not quiet:
                print("removed stale batches/%s" % name)
    return n_sets, n_bytes


def check_batches(out, specs, tier, prune):
    """Regenerate into a temporary directory (from the model sets under out) and compare byte
    for byte with out/batches/."""
    import batches
    problems = []
    with tempfile.TemporaryDirectory(prefix="gen-golden-check-") as tmp:
        generate_batches(tmp, specs, tier, prune=False, models_root=out)
        have_root = os.path.join(out, "batches")
        names = [s.name for s in specs]
        if prune:
            names += batches.stale_batch_dirs(have_root, set(names), tier)
        for name in names:
            fresh_dir = os.path.join(tmp, "batches", name)
            have_dir = os.path.join(have_root, name)
            problems += compare_trees(fresh_dir, have_dir, list_files(fresh_dir),
                                      list_files(have_dir))
    return problems


def cmd_batches(args):
    """Batch sets (docs/golden-format.md, "Batch sets"): B sequences of different prompt lengths
    for the checkpoint of a model set of the same tier, which must exist under DIR/models/."""
    import batches
    from models import build as model_build
    from models import reference
    for name in args.set or []:
        if name not in batches.BY_NAME:
            sys.exit("unknown batch set %r (known: %s)" % (name, ", ".join(batches.BY_NAME)))
        if batches.BY_NAME[name].tier != args.tier:
            sys.exit("batch set %s is in the %s tier (use --tier %s)"
                     % (name, batches.BY_NAME[name].tier, batches.BY_NAME[name].tier))
    out = args.out
    if out is None:  # as models: golden/ for committed, golden/.cache/ for full
        out = os.path.join(REPO, "golden") if args.tier == "committed" \
            else os.path.join(REPO, "golden", ".cache")
    t0 = time.time()
    numerics.setup_torch()
    model_build.PHASE_STREAM = sys.stderr  # per-phase seconds of each set
    specs = batches.batches_for(args.tier, args.set)
    for spec in specs:  # before transformers is imported: a missing model set fails at once
        batches.read_model_set(spec, out)
    prune = not args.set  # only a run over the whole tier deletes stale sets
    numerics.setup_models()
    for family in sorted({configs.BY_NAME[s.model].family for s in specs}):
        reference.modeling_module(family)

    if args.check:
        return report_check(check_batches(out, specs, args.tier, prune),
                            ", ".join(os.path.join(out, "batches", s.name) for s in specs), t0)

    n_sets, n_bytes = generate_batches(out, specs, args.tier, prune, models_root=out)
    print("total: %d sets, %d bytes, %.1fs" % (n_sets, n_bytes, time.time() - t0))
    bdir = os.path.join(out, "batches")
    if args.tier == "committed" and os.path.isdir(bdir):
        if not within_budget(bdir, BATCHES_COMMITTED_BUDGET, "committed batch sets"):
            return 1
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
    b.set_defaults(func=cmd_batches)
    sp = sub.add_parser("sampling", help="write the sampling golden sets (docs/sampling.md)")
    sp.add_argument("--out", metavar="DIR",
                    help="root directory; sets go to DIR/sampling/<set>/ (default: the "
                         "repository's golden/)")
    sp.add_argument("--check", action="store_true",
                    help="generate into a temporary directory and compare byte for byte with "
                         "DIR; exit 1 listing differing, missing and extra files")
    sp.set_defaults(func=cmd_sampling)
    s = sub.add_parser("selftest", help="check the references against independent numpy code")
    s.add_argument("--only", choices=("imports", "kernels", "sampling", "models", "batches"),
                   help="run only the import graph's, the kernel, the sampling, the model or the "
                        "batch checks")
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
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
