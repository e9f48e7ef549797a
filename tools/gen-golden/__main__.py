"""gen-golden: the Python reference that writes touchstone's golden sets (docs/golden-format.md).

    python3 tools/gen-golden kernels [--tier committed|full] [--out DIR] [--op NAME]... [--check]
    python3 tools/gen-golden selftest
"""

import os
import sys

# Pin torch's numerics before it is imported, so every host computes the same bits:
#  - never touch a GPU, even where one is present: the reference is a CPU computation;
#  - ATen's vectorised CPU kernels (erf, exp, reductions) differ in the last fp64 bits between
#    the AVX2, AVX512 and default builds it picks at run time: always pick the default build;
#  - MKL's BLAS (fp64 matmul, also inside SDPA) likewise picks code by CPU: ask for its
#    conditional-numerical-reproducibility mode, which is the same on every x86-64 CPU.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ["MKL_CBWR"] = "COMPATIBLE"
os.environ["OMP_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import filecmp  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
import manifest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED_BUDGET = 16_000_000  # bytes, `du -sb golden/kernels`
PINNED_TORCH = "2.11.0"
PINNED_NUMPY = ("2.4.6", "2.5.2")


def setup_torch():
    torch.set_num_threads(1)  # one thread: a fixed reduction order
    torch.use_deterministic_algorithms(True)
    if torch.__version__.split("+")[0] != PINNED_TORCH or np.__version__ not in PINNED_NUMPY:
        print("warning: torch %s / numpy %s differ from the pinned versions "
              "(tools/gen-golden/requirements.txt); sets may not be byte-identical"
              % (torch.__version__, np.__version__), file=sys.stderr)


def generate(out, tier, ops, quiet=False):
    """Write every case of `tier` for `ops` under out/kernels/<op>/<case>/ and delete stale
    case directories of those ops. Returns (sets, bytes)."""
    n_sets = n_bytes = 0
    for op in ops:
        op_dir = os.path.join(out, "kernels", op)
        cases = kernels.cases_for(tier, [op])
        for case in cases:
            t0 = time.time()
            seed, params, inputs, expected = kernels.build(case)
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
            generated = {c.name for c in kernels.cases_for(tier, [op])}
            ours = generated | set(manifest.stale_case_dirs(have_dir, generated, tier))
            have = {p for p in list_files(have_dir) if p.split(os.sep)[0] in ours}
            for p in sorted(fresh - have):
                problems.append("missing   %s" % os.path.join(have_dir, p))
            for p in sorted(have - fresh):
                problems.append("extra     %s" % os.path.join(have_dir, p))
            for p in sorted(fresh & have):
                if not filecmp.cmp(os.path.join(fresh_dir, p), os.path.join(have_dir, p),
                                   shallow=False):
                    problems.append("differs   %s" % os.path.join(have_dir, p))
    return problems


def cmd_kernels(args):
    ops = list(kernels.OPS) if not args.op else args.op
    for op in ops:
        if op not in kernels.OPS:
            sys.exit("unknown op %r (known: %s)" % (op, ", ".join(kernels.OPS)))
    out = args.out
    if out is None:  # defaults are relative to the repository, not to the working directory
        out = os.path.join(REPO, "golden") if args.tier == "committed" \
            else os.path.join(REPO, "golden", ".cache")
    setup_torch()
    t0 = time.time()

    if args.check:
        problems = check(out, args.tier, ops)
        for p in problems:
            print(p)
        if problems:
            print("check FAILED: %d file(s) differ from a fresh generation (%.1fs)"
                  % (len(problems), time.time() - t0))
            return 1
        print("check OK: %s is byte-identical to a fresh generation (%.1fs)"
              % (os.path.join(out, "kernels"), time.time() - t0))
        return 0

    n_sets, n_bytes = generate(out, args.tier, ops)
    print("total: %d sets, %d bytes, %.1fs" % (n_sets, n_bytes, time.time() - t0))
    kdir = os.path.join(out, "kernels")
    if args.tier == "committed" and os.path.isdir(kdir):
        du = manifest.tree_size(kdir)
        print("%s: %d bytes (du -sb), budget %d" % (kdir, du, COMMITTED_BUDGET))
        if du > COMMITTED_BUDGET:
            print("error: committed golden sets exceed their size budget", file=sys.stderr)
            return 1
    return 0


def cmd_selftest(args):
    setup_torch()
    import selftest
    return selftest.run()


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
    s = sub.add_parser("selftest", help="check the references against independent numpy code")
    s.set_defaults(func=cmd_selftest)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
