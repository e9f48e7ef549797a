"""Paired against single one-row linears at Phi-3-mini's layer shapes (4 layers, 1.8 GB of fp32)
on a pool of 16 one-thread workers: the split_linears path that the full-tier references take,
for each slice size of a lockstep pair (models/threads.py, PAIR_SLICE_BYTES). Timings only; no set is
written.

    python3 tools/gen-golden/pairbench.py
"""

import os
import sys
import time

os.environ.update(ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", OMP_NUM_THREADS="1",
                  CUDA_VISIBLE_DEVICES="")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import threads  # noqa: E402

SHAPES = [(9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192)] * 4  # qkv, o, gate_up, down
SLICES = [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 1 << 30]


def median_seconds(f, n=5):
    f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2]


def main():
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(o, i, generator=g) * 0.02 for o, i in SHAPES]
    gb = sum(w.numel() for w in ws) * 4 / 1e9
    xa = {i: torch.randn(1, 1, i, generator=g) for i in (3072, 8192)}
    xb = {i: torch.randn(1, 1, i, generator=g) for i in (3072, 8192)}
    group = threads.group_op(threads._group_linear)
    with threads.intra_op_threads(1), threads.one_thread_workers(16) as pool:
        def singles():
            for w in ws:
                bounds = threads.split_bounds(w.shape[0], w.shape[1], 16)
                for x in (xa, xb):
                    threads.blocked(lambda x, lo, hi, w=w: F.linear(x, w[lo:hi]), None, bounds,
                                    pool, [x[w.shape[1]]], w.shape[1])

        def pairs():
            for w in ws:
                bounds = threads.split_bounds(w.shape[0], w.shape[1], 16)
                threads.blocked(None,
                                lambda xs, lo, hi, step, w=w: group(xs, w, None, lo, hi, step),
                                bounds, pool, [xa[w.shape[1]], xb[w.shape[1]]], w.shape[1])

        base = median_seconds(singles)
        print("weights %.2f GB; the two rows one pass each: %.3f s (%.1f GB/s of weight reads)"
              % (gb, base, 2 * gb / base))
        kept = threads.PAIR_SLICE_BYTES
        for size in SLICES:
            threads.PAIR_SLICE_BYTES = size
            t = median_seconds(pairs)
            print("paired, slice %7d KiB: %.3f s (%.2fx)%s" % (size >> 10, t, base / t,
                                                               "  <- kept" if size == kept else ""))
        threads.PAIR_SLICE_BYTES = kept


if __name__ == "__main__":
    main()
