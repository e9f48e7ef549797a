"""Incremental generation: a set whose generator inputs are unchanged is not built again.

Every set (a Job) has a key, the sha256 of what its bytes are computed from:
  - the generator: manifest.GENERATOR_VERSION and FORMAT_VERSION, and sources.source_hash of
    the files that build its kind (ROOTS: numerics.py and everything kernels/cases.py and
    common/manifest.py import for a kernel set, models/build.py for a model set, batches.py for
    a batch set; any edit of one of them, a comment included, changes the key; the CLI, this
    file, sets.py and the selftests are no part of it);
  - the set: its kind, name and tier, and its inputs (a kernel case's op, keyword arguments and
    seed; a model set's ModelSpec, seed and worker threads; a batch set's BatchSpec, seed,
    threads and the key of its model set);
  - the libraries: torch and numpy, and transformers for model and batch sets.
The key of a set built with reuse on (the full tier) is recorded in
<out>/.genkeys/<kind>/.../<set>.genkey, outside the set's directory (which may hold only the
files its manifest lists), once the set is complete, with the sha256 of its manifest and its
files' sizes. A set is reused when that record holds the same key, its manifest.json is the one
built then, its directory holds exactly the files the manifest lists, with the recorded sizes,
and (unless verify is off) every file's sha256 is the manifest's. Otherwise it is built: its key
record and the old set deleted first, the new one written into a temporary sibling directory
(.<name>.tmp-<pid>) and renamed into place, the key recorded last; so an interrupted run never
leaves a set directory that looks complete, nor a key for one that is not.
"""

import concurrent.futures as cf
import fnmatch
import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from collections import namedtuple

import sources
from common import manifest

KEY_DIR = ".genkeys"
KEY_SUFFIX = ".genkey"
# The modules that build each kind of set (sources.source_hash of their import closure).
ROOTS = {
    "kernels": ["numerics", "kernels.cases", "common.manifest"],
    "models": ["numerics", "models.build"],
    "batches": ["numerics", "batches"],
}
TRANSFORMERS_KINDS = ("models", "batches")  # computed by transformers: its version is in the key
SOURCE_ROOT = sources.ROOT  # the generator whose sources are hashed (the selftest uses a copy)
HASH_WORKERS = min(16, os.cpu_count() or 1)
HASH_BLOCK = 1 << 24


class Job:
    """One set the generator writes.

    kind     "kernels", "models" or "batches"
    name     unique within its kind: "<op>/<case>", "<model>", "<batch set>"
    rel      its directory under the output root: "kernels/<op>/<case>", "models/<model>", ...
    labels   what --sets matches besides its names: "kernels" and the op and storage dtype, or
             "models" and the family and dtype, or "batches", the model set and its family
    inputs   JSON-able: what it is computed from besides the sources and libraries (None: it is
             never reused, e.g. a real checkpoint's set, whose files the key cannot see)
    build    build(set_dir, ahead) -> (files, bytes): writes the set into set_dir
    depends  the Job of the set it is computed from (a batch set's model set), whose key is part
             of its own
    spec     the ModelSpec (synthetic model sets) or BatchSpec (batch sets)
    check    check(manifest dict) -> None, or why the set on disk cannot be reused though its
             key matches (a batch set made from another model set than the one on disk)
    """

    def __init__(self, kind, name, rel, labels, inputs, build, depends=None, spec=None,
                 check=None):
        self.kind, self.name, self.rel, self.labels = kind, name, rel, tuple(labels)
        self.inputs, self.build, self.depends, self.spec = inputs, build, depends, spec
        self.check = check
        self._keys = {}

    @property
    def names(self):
        return (self.name, self.rel, os.path.basename(self.rel))

    def __repr__(self):
        return "Job(%s)" % self.rel


# ---------------------------------------------------------------------------------------------
# Keys


def describe(obj):
    """A JSON-able description of a value that is the same in every process: a function as its
    qualified name, its closure's values and its defaults (a kernel case's distributions are
    closures such as normal(3.0)), floats by their repr (exact), containers element by element."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return repr(obj)
    if isinstance(obj, (list, tuple)):
        return [describe(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): describe(v) for k, v in obj.items()}
    if callable(obj) and hasattr(obj, "__code__"):
        return {"function": "%s.%s" % (obj.__module__, obj.__qualname__),
                "closure": [describe(c.cell_contents) for c in obj.__closure__ or ()],
                "defaults": describe(obj.__defaults__ or ())}
    text = repr(obj)
    if " at 0x" in text:
        raise TypeError("no stable description of %s" % text)
    return text


def library_versions(kind):
    """The versions of the libraries that compute a set of `kind` (as installed; transformers
    from its package metadata, so that nothing imports it)."""
    import numpy
    import torch
    out = {"torch": torch.__version__, "numpy": numpy.__version__}
    if kind in TRANSFORMERS_KINDS:
        try:
            out["transformers"] = importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            out["transformers"] = None
    return out


def key_inputs(job, tier):
    """Everything a set's key is the hash of (see the module doc), as a dict."""
    doc = {
        "generator": {"version": manifest.GENERATOR_VERSION, "format": manifest.FORMAT_VERSION,
                      "sources": sources.source_hash(ROOTS[job.kind], SOURCE_ROOT)},
        "libraries": library_versions(job.kind),
        "kind": job.kind,
        "name": job.name,
        "tier": tier,
        "inputs": job.inputs,
    }
    if job.depends is not None:
        doc["depends"] = set_key(job.depends, tier)
    return doc


def set_key(job, tier):
    """The set's key (hex sha256), or None for a set that is never reused."""
    if job.inputs is None:
        return None
    if tier not in job._keys:
        text = json.dumps(key_inputs(job, tier), sort_keys=True, separators=(",", ":"))
        job._keys[tier] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return job._keys[tier]


def combined_key(jobs, tier):
    """One key for a whole collection of sets (a CI cache key): the sha256 of every set's
    directory and key, in directory order. It changes exactly when some set's key does, or the
    collection does."""
    h = hashlib.sha256()
    for job in sorted(jobs, key=lambda j: j.rel):
        h.update(("%s %s\n" % (job.rel, set_key(job, tier))).encode("utf-8"))
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Selection (--sets)


def patterns(values):
    """--sets values (repeatable, comma-separated) as a list of patterns."""
    return [p.strip() for v in values or [] for p in v.split(",") if p.strip()]


def matches(job, pats):
    """Whether a shell pattern of pats matches one of the job's names or labels."""
    return any(fnmatch.fnmatchcase(x, p) for p in pats for x in job.names + job.labels)


def select(jobs, pats):
    """The jobs pats select (all of them without patterns), in their order."""
    return [j for j in jobs if not pats or matches(j, pats)]


# ---------------------------------------------------------------------------------------------
# Key records and reuse


def key_path(out, rel):
    return os.path.join(out, KEY_DIR, rel + KEY_SUFFIX)


def drop_key(out, rel):
    """Delete a set's key record (before the set is deleted or rebuilt)."""
    try:
        os.remove(key_path(out, rel))
    except FileNotFoundError:
        pass


def _sha256_file(path):
    t0 = time.perf_counter()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(HASH_BLOCK), b""):
            h.update(block)  # hashlib releases the GIL: files hash in parallel on the pool
    return h.hexdigest(), time.perf_counter() - t0


def write_key(out, job, key):
    """Record a complete set's key, its manifest's sha256 and its files' sizes (atomically)."""
    set_dir = os.path.join(out, job.rel)
    with open(os.path.join(set_dir, "manifest.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    sizes = {n: os.path.getsize(os.path.join(set_dir, n)) for n in sorted(os.listdir(set_dir))}
    record = {"key": key, "set": job.rel, "manifest_sha256": digest, "sizes": sizes}
    path = key_path(out, job.rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _candidate(out, job, key):
    """The cheap part of the reuse test: (manifest entries, sizes) of job's set under out when
    its key record, manifest, file list and sizes say it may be reused, else (None, why)."""
    if key is None:
        return None, "never reused"
    try:
        with open(key_path(out, job.rel)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None, "no key"
    if not isinstance(record, dict) or record.get("key") != key:
        return None, "key changed"
    set_dir = os.path.join(out, job.rel)
    try:
        with open(os.path.join(set_dir, "manifest.json"), "rb") as f:
            raw = f.read()
        m = json.loads(raw)
        entries = list(m["files"])
        listed = {e["file"] for e in entries} | {"manifest.json"}
        present = set(os.listdir(set_dir))
        sizes = {n: os.path.getsize(os.path.join(set_dir, n)) for n in present}
    except (OSError, ValueError, KeyError, TypeError):
        return None, "no readable set"
    if hashlib.sha256(raw).hexdigest() != record.get("manifest_sha256"):
        return None, "manifest changed"
    if present != listed:
        return None, "files differ from the manifest's"
    if sizes != record.get("sizes"):
        return None, "sizes changed"
    why = job.check(m) if job.check is not None else None
    if why:
        return None, why
    return (entries, sizes), None


def reusable(out, jobs, keys, verify=True):
    """({job.rel: (files, bytes, seconds)} of the jobs whose sets under out can be reused with
    their keys (see the module doc), {job.rel: why not} of the others). With verify every
    listed file's sha256 is recomputed, on a pool of HASH_WORKERS threads (seconds: the hashing
    time of the set's files)."""
    found, pending, why_not = {}, [], {}
    for job in jobs:
        t0 = time.perf_counter()
        cand, why = _candidate(out, job, keys.get(job.rel))
        if cand is None:
            why_not[job.rel] = why
            continue
        entries, sizes = cand
        found[job.rel] = (len(sizes), sum(sizes.values()), time.perf_counter() - t0)
        if verify:
            pending.append((job, entries))
    if pending:
        with cf.ThreadPoolExecutor(HASH_WORKERS, thread_name_prefix="gen-golden-hash") as pool:
            futures = [(job, e, pool.submit(_sha256_file, os.path.join(out, job.rel, e["file"])))
                       for job, entries in pending for e in entries]
            for job, e, fut in futures:
                digest, seconds = fut.result()
                files, size, secs = found.get(job.rel, (0, 0, 0.0))
                if job.rel not in found:
                    continue
                if digest != e.get("sha256"):
                    del found[job.rel]
                    why_not[job.rel] = "sha256 of %s differs from the manifest's" % e["file"]
                    continue
                found[job.rel] = (files, size, secs + seconds)
    return found, why_not


# ---------------------------------------------------------------------------------------------
# Building


def temp_dir(out, job):
    """The temporary sibling a set is built in before it is renamed into place."""
    parent, base = os.path.split(os.path.join(out, job.rel))
    return os.path.join(parent, ".%s.tmp-%d" % (base, os.getpid()))


def build_one(out, job, key, ahead=None):
    """Build job's set under out: its key record, old directory and leftover temporary
    directories of other runs deleted first, the set written into temp_dir and renamed into
    place, then its key recorded (key None: none). `ahead` (models: start_checkpoint's waiter)
    is writing into temp_dir already. Returns (files, bytes)."""
    set_dir, tmp = os.path.join(out, job.rel), temp_dir(out, job)
    parent, base = os.path.split(set_dir)
    drop_key(out, job.rel)
    for old in glob.glob(os.path.join(glob.escape(parent), "." + glob.escape(base) + ".tmp-*")):
        if old != tmp:
            shutil.rmtree(old, ignore_errors=True)
    if os.path.lexists(set_dir):
        shutil.rmtree(set_dir)
    if ahead is None and os.path.lexists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(parent, exist_ok=True)
    try:
        files, size = job.build(tmp, ahead)
        os.rename(tmp, set_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if key is not None:
        write_key(out, job, key)
    return files, size


Summary = namedtuple("Summary", "sets built reused bytes seconds")


def progress_line(job, files, size, seconds, status):
    return "%-60s %4d files %12d bytes %7.1fs %s" % (job.rel, files, size, seconds, status)


def run(out, jobs, tier, *, reuse, force=False, verify=True, prepare=None, quiet=False):
    """Write every job's set under out, one progress line each (directory, files, bytes,
    seconds, reused or built, and with reuse on why it was built). With reuse (and not force) a
    set whose key is unchanged and whose files verify is reused (reusable). prepare(todo,
    first_temp_dir), when given, runs once before the first build with the jobs to build
    (models: imports transformers, after starting the first checkpoint's forked writer into
    that directory) and returns that build's `ahead`.
    Returns a Summary."""
    t0 = time.time()
    keys = {j.rel: set_key(j, tier) for j in jobs} if reuse else {}
    found, why_not = {}, {}
    if reuse:
        if force:
            why_not = {j.rel: "--force" for j in jobs}
        else:
            found, why_not = reusable(out, jobs, keys, verify)
    todo = [j for j in jobs if j.rel not in found]
    ahead = prepare(todo, temp_dir(out, todo[0])) if todo and prepare is not None else None
    built = reused = total = 0
    for job in jobs:
        if job.rel in found:
            files, size, seconds = found[job.rel]
            status = "reused"
            reused += 1
        else:
            t1 = time.time()
            files, size = build_one(out, job, keys.get(job.rel), ahead if job is todo[0] else None)
            seconds = time.time() - t1
            status = "built" if job.rel not in why_not else "built (%s)" % why_not[job.rel]
            built += 1
        total += size
        if not quiet:
            print(progress_line(job, files, size, seconds, status), flush=True)
    return Summary(len(jobs), built, reused, total, time.time() - t0)


def summary_line(s):
    return "total: %d sets (%d built, %d reused), %d bytes, %.1fs" % (
        s.sets, s.built, s.reused, s.bytes, s.seconds)
