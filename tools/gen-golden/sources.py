"""The generator's own source files and the imports between them, read with ast (nothing is
imported): the import graph that the selftest checks for cycles and for its layering (LAYERS),
and the hash of the files a kind of set is computed by (source_hash: part of every set's key in
incremental.py).

A module is named as Python imports it with tools/gen-golden on sys.path (`common.configs`,
`models.build`, `batches`); a package by its folder (`models`, for models/__init__.py). Every
import counts, also one inside a function (the CLI imports the model code lazily, but a cycle
through a lazy import is still a cycle).
"""

import ast
import hashlib
import os

ROOT = os.path.dirname(os.path.abspath(__file__))

# Which local modules each part of the generator may import (by the first component of the
# imported name). common/ is the bottom layer that kernels/ and models/ both import, so neither of
# those imports the other; sampling.py (docs/sampling.md in numpy) imports nothing of ours.
LAYERS = {
    "common": {"common"},
    "kernels": {"common", "kernels"},
    "models": {"common", "models", "sampling"},
    "sampling": set(),
    "numerics": set(),
}


def modules(root=ROOT):
    """{module name: file path} of every .py file under root (folders without __init__.py are
    no packages, but their files are named the same way)."""
    found = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        rel = os.path.relpath(dirpath, root)
        parts = [] if rel == "." else rel.split(os.sep)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            name = parts + ([] if f == "__init__.py" else [f[:-3]])
            if name:
                found[".".join(name)] = os.path.join(dirpath, f)
    return found


def _local(name, known):
    """The local module an imported dotted name resolves to (the longest known prefix), or
    None for a module that is not ours (torch, numpy, ...)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def imports_of(name, path, known):
    """The local modules that module `name` (file `path`) imports, sorted: for `import a.b` and
    `from a import b` both a (its package, run first) and a.b where that is a module."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    deps = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .a import b
                up = package.split(".") if package else []
                up = up[:len(up) - (node.level - 1)] if node.level > 1 else up
                base = ".".join(p for p in up + ([base] if base else []) if p)
            targets = [base + "." + a.name if base else a.name for a in node.names] + [base]
        for t in targets:
            parts = t.split(".") if t else []
            for n in range(1, len(parts) + 1):  # the packages on the way are imported too
                m = _local(".".join(parts[:n]), known)
                if m is not None and m != name:
                    deps.add(m)
    return sorted(deps)


def import_graph(root=ROOT):
    """{module: [local modules it imports]} for every module under root."""
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycle(graph):
    """One import cycle as [m0, m1, ..., m0], or None when the graph has none."""
    state = {}  # absent: not seen; 1: on the current path; 2: done
    path = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for d in graph.get(m, []):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def layer_violations(graph, layers=LAYERS):
    """["a imports b"] for every import that LAYERS forbids."""
    bad = []
    for m, deps in sorted(graph.items()):
        allowed = layers.get(m.split(".")[0])
        if allowed is None:
            continue
        for d in deps:
            if d.split(".")[0] not in allowed:
                bad.append("%s imports %s" % (m, d))
    return bad


def closure(graph, roots):
    """The modules roots import, directly or not, roots included, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        if m not in graph:
            raise KeyError("no module %s under %s" % (m, ROOT))
        seen.add(m)
        todo += graph[m]
    return sorted(seen)


_GRAPHS = {}


def source_files(roots, root=ROOT):
    """The files (paths relative to root, sorted) of roots and every local module they import,
    directly or not: what a set built by roots' code can depend on."""
    if root not in _GRAPHS:
        _GRAPHS[root] = (modules(root), import_graph(root))
    mods, graph = _GRAPHS[root]
    return sorted(os.path.relpath(mods[m], root) for m in closure(graph, roots))


def source_hash(roots, root=ROOT):
    """sha256 over source_files(roots): each file's path and the sha256 of its bytes. Any edit
    of one of them, a comment included, changes it."""
    h = hashlib.sha256()
    for rel in source_files(roots, root):
        with open(os.path.join(root, rel), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        h.update(("%s %s\n" % (rel.replace(os.sep, "/"), digest)).encode("utf-8"))
    return h.hexdigest()
