"""`python3 tools/gen-golden selftest --only incremental`: the incremental runner (incremental.py)
on a few small committed kernel cases in a temporary directory, with reuse on as the full tier
has it. A second run reuses every set and writes nothing; a set is built again when its key
record is missing, when a file was changed (same size: the sha256 check), added or removed,
when its inputs change, when a source file its kind is built from changes (a comment added to
a copy of the generator) but not when only another kind's does, and with force; a build that
fails leaves neither a set directory, a temporary one, nor a key; a temporary directory left by
another run is removed; the bytes are those of manifest.write_set; --sets patterns select by
name, directory and label; the combined key follows every set's. A few seconds, no transformers.
"""

import hashlib
import io
import os
import re
import shutil
import tempfile
import time
from contextlib import redirect_stdout

import incremental
import sets
import sources
from kernels import cases as kernel_cases
from kernels import inputs

# small committed cases: one per storage type, a scaled-RoPE one (published configs)
PICKS = ["rmsnorm/qwen2.5-0.5b_t1", "softmax/attn-causal-f16_t8", "set_rows/bf16-odd-3x50_l8_t3",
         "rope/partial-r32-d64_t3"]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def digests(root):
    """{relative path: sha256} of every file under root, the key records excepted."""
    out = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != incremental.KEY_DIR]
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


LINE = re.compile(r"^(\S+) +\d+ files +(\d+) bytes +[\d.]+s (reused|built.*)$")


def run_quiet(out, jobs, **kw):
    """incremental.run with reuse, its progress lines read back: (summary, {name: status})."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        s = incremental.run(out, jobs, "committed", reuse=True, **kw)
    status = {}
    for line in buf.getvalue().splitlines():
        m = LINE.match(line)
        check(m is not None, "progress line %r" % line)
        status[m.group(1)[len("kernels/"):]] = m.group(3)
    return s, status


def fresh_jobs():
    """New Job objects (their keys are cached per object) for the picked cases, by name."""
    return {j.name: j for j in sets.kernel_jobs(kernel_cases.COMMITTED) if j.name in PICKS}


def statuses(**want):
    return {PICKS[int(k[1:])]: v for k, v in want.items()}


def check_runs(tmp):
    out = os.path.join(tmp, "out")
    jobs = fresh_jobs()
    check(sorted(jobs) == sorted(PICKS), "picked cases %s" % sorted(jobs))
    jobs = list(jobs.values())
    s, st = run_quiet(out, jobs)
    check((s.built, s.reused) == (4, 0) and all(v == "built (no key)" for v in st.values()), st)
    want = digests(out)
    # the bytes are write_set's, and nothing is left beside the sets but the key records
    ref = os.path.join(tmp, "ref")
    for j in jobs:
        j.build(os.path.join(ref, j.rel))
    check(digests(ref) == want, "the runner's sets differ from write_set's")
    names = set()
    for dirpath, dirnames, files in os.walk(out):
        names |= set(dirnames) | set(files)
    check(not [n for n in names if ".tmp-" in n], "a temporary directory is left: %s" % names)
    for j in jobs:
        check(os.path.isfile(incremental.key_path(out, j.rel)), "no key for %s" % j.rel)

    s, st = run_quiet(out, list(fresh_jobs().values()))
    check((s.built, s.reused) == (0, 4) and set(st.values()) == {"reused"}, st)
    check(digests(out) == want, "a reusing run changed the sets")

    rms, soft, _, rope = (os.path.join(out, "kernels", n) for n in PICKS)
    # a changed byte (same size: only the sha256 sees it), an extra file, a missing key
    path = os.path.join(rms, "out.npy")
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 1]))
    s, st = run_quiet(out, list(fresh_jobs().values()), verify=False)
    check(set(st.values()) == {"reused"}, "--no-verify reuses on sizes: %s" % st)
    with open(os.path.join(soft, "stray.txt"), "w") as f:
        f.write("x")
    os.remove(incremental.key_path(out, "kernels/" + PICKS[2]))
    s, st = run_quiet(out, list(fresh_jobs().values()))
    check(st == statuses(p0="built (sha256 of out.npy differs from the manifest's)",
                         p1="built (files differ from the manifest's)",
                         p2="built (no key)", p3="reused"), st)
    check(digests(out) == want, "rebuilt sets differ")

    # changed inputs (a case's keyword arguments), and force
    jobs = fresh_jobs()
    j = jobs[PICKS[0]]
    j.inputs = dict(j.inputs, kwargs=dict(j.inputs["kwargs"], eps="1e-05"))
    s, st = run_quiet(out, list(jobs.values()))
    check(st[PICKS[0]] == "built (key changed)" and s.built == 1, st)
    s, st = run_quiet(out, list(fresh_jobs().values()), force=True)
    check(s.built == 4 and set(st.values()) == {"built (--force)"}, st)

    # a failing build: the old set and its key are gone, no temporary directory is left; the
    # next run builds it; a temporary directory of another run is removed
    jobs = fresh_jobs()

    def fail(set_dir, ahead=None):
        os.makedirs(set_dir)
        with open(os.path.join(set_dir, "manifest.json"), "w") as f:
            f.write("{}")
        raise RuntimeError("planted failure")
    j = jobs[PICKS[3]]
    j.build, j.inputs = fail, dict(j.inputs, planted=True)
    try:
        run_quiet(out, list(jobs.values()))
    except RuntimeError as e:
        check("planted" in str(e), e)
    else:
        raise AssertionError("the planted failure did not raise")
    check(not os.path.exists(rope) and not os.path.exists(
        incremental.key_path(out, "kernels/" + PICKS[3])), "a failed build left its set or key")
    check(not [n for n in os.listdir(os.path.dirname(rope)) if ".tmp-" in n],
          "a failed build left its temporary directory")
    stray = os.path.join(os.path.dirname(rope), ".%s.tmp-1" % os.path.basename(rope))
    os.makedirs(stray)
    s, st = run_quiet(out, list(fresh_jobs().values()))
    check(st[PICKS[3]] == "built (no key)" and s.built == 1, st)
    check(not os.path.exists(stray), "another run's temporary directory was not removed")
    check(digests(out) == want, "sets differ after the failure")


def check_sources(tmp):
    """A comment added to a file of the kernel sets' closure changes their keys (and the combined
    key); one added to a models-only file changes no kernel key."""
    copy = os.path.join(tmp, "gen")
    shutil.copytree(sources.ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    files = sources.source_files(incremental.ROOTS["kernels"], copy)
    check("kernels/ops.py" in files and "common/rope_scaling.py" in files
          and "numerics.py" in files and "models/taps.py" not in files
          and "__main__.py" not in files and "incremental.py" not in files, files)

    def keys():
        saved = incremental.SOURCE_ROOT
        incremental.SOURCE_ROOT = copy
        try:
            jobs = list(fresh_jobs().values())
            return [incremental.set_key(j, "committed") for j in jobs], \
                incremental.combined_key(jobs, "committed")
        finally:
            incremental.SOURCE_ROOT = saved
    base, base_all = keys()
    jobs = list(fresh_jobs().values())
    check((base, base_all) == ([incremental.set_key(j, "committed") for j in jobs],
                               incremental.combined_key(jobs, "committed")),
          "a copy of the generator gives other keys")
    with open(os.path.join(copy, "models", "taps.py"), "a") as f:
        f.write("# a comment\n")
    check(keys() == (base, base_all), "a models-only edit changed kernel keys")
    with open(os.path.join(copy, "kernels", "ops.py"), "a") as f:
        f.write("# a comment\n")
    new, new_all = keys()
    check(all(a != b for a, b in zip(base, new)) and new_all != base_all,
          "a comment in kernels/ops.py left a kernel key unchanged")


def check_select():
    jobs = sets.kernel_jobs(kernel_cases.COMMITTED) + sets.model_jobs("full") + \
        sets.batch_jobs("full")

    def names(*pats):
        return {j.name for j in incremental.select(jobs, incremental.patterns(pats))}
    check(names("rope/partial-r32-d64_t3") == {"rope/partial-r32-d64_t3"}, "by name")
    check(names("partial-r32-d64_t3") == {"rope/partial-r32-d64_t3"}, "by case name")
    check(names("kernels/set_rows/bf16-*") == {j.name for j in jobs if j.kind == "kernels" and
                                               j.name.startswith("set_rows/bf16-")}, "by dir")
    check(names("qwen2.5-0.5b") == {"qwen2.5-0.5b", "qwen2.5-0.5b-b16"},
          "a model set and the batch set made from it")
    check(names("gpt2") >= {"gpt2-124m"} and "qwen2.5-0.5b" not in names("gpt2"), "by family")
    check(names("batches") == {"qwen2.5-0.5b-b16", "llama3.2-1b-b16"}, "by kind")
    check(names("bf16") == {j.name for j in jobs if "bf16" in j.labels}, "by dtype")
    check(names("softmax,gelu") == names("softmax") | names("gelu"), "a comma-separated list")
    check(names("nothing-*") == set(), "no match")
    check(len(incremental.select(jobs, [])) == len(jobs), "no pattern: everything")


def check_describe():
    a = kernel_cases.CASES[0].kwargs
    check(incremental.describe(a) == incremental.describe(dict(a)), "describe is stable")
    d1 = incremental.describe({"dist": inputs.normal(3.0)})
    d2 = incremental.describe({"dist": inputs.normal(3.0)})
    d3 = incremental.describe({"dist": inputs.normal(2.0)})
    check(d1 == d2 and d1 != d3, "closures described by their values: %s %s" % (d1, d3))
    try:
        incremental.describe(object())
    except TypeError:
        pass
    else:
        raise AssertionError("an object with only an address was described")


def run():
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gen-golden-selftest-") as tmp:
        check_runs(tmp)
        check_sources(tmp)
    check_select()
    check_describe()
    print("selftest incremental OK: reuse, rebuilds (key, sha256, files, inputs, sources, "
          "force), failures, --sets (%.1fs)" % (time.time() - t0))
    return 0
