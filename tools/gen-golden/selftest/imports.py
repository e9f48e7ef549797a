"""`python3 tools/gen-golden selftest --only imports`: the generator's import graph (sources.py)
has no cycle and keeps its layers (sources.LAYERS: common/ imports none of kernels/, models/ or
the set kinds above it; kernels/ and models/ never import each other). Also checks that the
checker itself finds a cycle where there is one, lazy imports included. Milliseconds, no torch.
"""

import os
import tempfile
import time

import sources


def check_detects_cycles():
    """A package whose modules import each other (one of them inside a function) and a relative
    import: find_cycle reports the cycle, and the layer rule its import."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "pkg"))
        files = {
            "pkg/__init__.py": '"""A package."""\n',
            "pkg/a.py": "import os\n\nfrom pkg import b\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "import pkg.a as a\n",
            "top.py": "from pkg.b import f\nimport numpy\n",
        }
        for rel, text in files.items():
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        graph = sources.import_graph(tmp)
        assert graph["pkg.b"] == ["pkg", "pkg.c"], graph["pkg.b"]
        assert graph["top"] == ["pkg", "pkg.b"], graph["top"]
        cycle = sources.find_cycle(graph)
        assert cycle is not None and cycle[0] == cycle[-1], cycle
        assert set(cycle) == {"pkg.a", "pkg.b", "pkg.c"}, cycle
        del graph["pkg.c"]
        graph["pkg.b"] = ["pkg"]
        assert sources.find_cycle(graph) is None, graph
        assert sources.layer_violations(graph, {"pkg": {"pkg"}, "top": set()}) == [
            "top imports pkg", "top imports pkg.b"]


def run():
    t0 = time.time()
    check_detects_cycles()
    graph = sources.import_graph()
    cycle = sources.find_cycle(graph)
    if cycle:
        print("import cycle: %s" % " -> ".join(cycle))
        return 1
    bad = sources.layer_violations(graph)
    for b in bad:
        print("layering: %s (sources.LAYERS)" % b)
    if bad:
        return 1
    edges = sum(len(d) for d in graph.values())
    print("selftest imports OK: %d modules, %d imports, no cycle, layers kept (%.2fs)"
          % (len(graph), edges, time.time() - t0))
    return 0
