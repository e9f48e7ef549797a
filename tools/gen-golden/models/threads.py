"""The full tier's worker threads (see "Threads" below): the pool of one-thread workers, and the
linear layers' GEMMs split into blocks of output features on it (split_linears), single or for a
lockstep group (lockstep.py)."""

import os
from contextlib import contextmanager
from typing import List, Optional

import torch

from common.configs import COMMITTED, FULL

# ---------------------------------------------------------------------------------------------
# Threads
#
# Every torch op of a set runs on one thread (__main__.py: torch.set_num_threads(1)), in both
# tiers: that is what fixes the bits, since ATen splits a sum into one value by the thread count
# and MKL's threaded GEMMs (those with more than one row) block their work by it. The full tier
# is made fast by running independent pieces of work at the same time on a pool of worker threads
# (one_thread_workers), each of which also runs its torch ops on one thread: the tensors of the
# synthetic checkpoint (drawn and written), the checkpoint's tensors when transformers loads and
# upcasts them and when check_loaded_weights compares them, the fp16 rounding of the parameters,
# blocks of output features of every linear layer's GEMM (split_linears, shared by the greedy
# and the seeded reference running in lockstep: run_lockstep), the calibration's taps
# and the tap files. Each piece computes exactly what it computes alone on one thread, so the
# bytes are those of a one-thread run (qwen2.5-0.5b and gpt2-124m: identical with 1, 2, 4 and 16
# workers). The worker count is fixed per tier, never taken from the host (a host with fewer
# cores is only slower): the blocks of split_linears depend on it, and although the blocked GEMM
# is bit-identical to the unsplit one for every shape checked, that is MKL's behaviour rather
# than a documented guarantee, so the canonical full-tier bytes are those of 16 workers.
# GEN_GOLDEN_THREADS overrides the full tier's count (for experiments).
TIER_THREADS = {COMMITTED: 1, FULL: 16}


def tier_threads(tier):
    """The number of worker threads a set of `tier` is built with (1: no pool)."""
    if tier == FULL and os.environ.get("GEN_GOLDEN_THREADS"):
        return int(os.environ["GEN_GOLDEN_THREADS"])
    return TIER_THREADS[tier]


@contextmanager
def intra_op_threads(n):
    """torch.set_num_threads(n) inside the block (which also sets MKL's count on this thread and
    turns MKL's dynamic thread adjustment off), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Decode steps feed one token: every linear layer is then a GEMM with one row, which MKL runs on
# one core whatever the thread count (its one-row path is not threaded), so at full size a decode
# step streams the whole fp32 model through one core. split_linears spreads the GEMMs of the
# model's linear layers over a pool of threads instead: the output features are cut into blocks
# (boundaries at multiples of SPLIT_ALIGN, a fixed function of the shape and the block count,
# never of the host) and each block is the same op (F.linear, or Conv1D's addmm) on a slice of the
# weight, run by a pool thread whose ATen and MKL use one thread. Each output element is still
# the same single-threaded MKL computation over the whole input, in CNR mode: the blocked result
# is bit-identical to the unsplit one-thread GEMM (checked for every linear shape of the three
# families, full size and tiny, 1 to 16 rows, 2 to 16 blocks, with and without bias: MKL's
# kernels work on groups of 4 output features counted from the first one of the call, so blocks
# starting at multiples of 4 change nothing; 64 leaves margin).
# A block has at least SPLIT_MIN weights (1 MiB of fp32), so small layers are cut into fewer
# blocks (or none) and a block's work outweighs handing it to a thread.
SPLIT_ALIGN = 64
SPLIT_MIN = 1 << 18


def split_bounds(n_out, n_in, n_blocks):
    """Block boundaries [0, ..., n_out] of split_linears for a weight of n_out output and n_in
    input features."""
    n_blocks = max(1, min(n_blocks, n_out * n_in // SPLIT_MIN))
    cuts = {min(n_out, (n_out * i // n_blocks) // SPLIT_ALIGN * SPLIT_ALIGN)
            for i in range(n_blocks)}
    return sorted(cuts | {n_out})


def _worker_init():
    torch.get_num_threads()  # ATen's lazy per-thread init first, so it cannot undo the next line
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # grad mode is per thread; nothing on the pool needs autograd


@contextmanager
def one_thread_workers(n):
    """A pool of n threads whose torch ops run single-threaded (ATen and MKL), or None for n <= 1
    (a concurrent.futures.ThreadPoolExecutor; `size` is n). Work split across it computes what
    one thread computes, in the same order per result."""
    if n <= 1:
        yield None
        return
    import concurrent.futures as cf
    main_threads = torch.get_num_threads()
    pool = cf.ThreadPoolExecutor(n, thread_name_prefix="gen-golden", initializer=_worker_init)
    pool.size = n
    try:
        yield pool
    finally:
        pool.shutdown()
        # torch.set_num_threads in the pool's threads also set ATen's default for new threads
        torch.set_num_threads(main_threads)


# Work a lockstep group (Lockstep) does on one slice of a weight: every row's op on this many
# bytes of fp32 weight at a time (a multiple of SPLIT_ALIGN output features, at least one), so the
# second read of the slice comes from the core's cache instead of memory. On the 16-core GPU host
# (2 MiB of L2 a core), Phi-3-mini's layer shapes on 16 workers against the two rows' passes one
# after the other: 256-512 KiB 1.91-1.93x, 1 MiB 1.75x, 4 MiB 1.71x, whole blocks 1.49x
# (tools/gen-golden/pairbench.py; docs/PERF.md). It changes no byte of a set (every slice starts
# at a multiple of SPLIT_ALIGN): GEN_GOLDEN_PAIR_SLICE overrides it (for experiments).
PAIR_SLICE_BYTES = int(os.environ.get("GEN_GOLDEN_PAIR_SLICE", 512 << 10))


def pair_rows(n_in):
    """Output features of one paired slice of a weight with n_in input features."""
    return max(1, PAIR_SLICE_BYTES // (4 * n_in) // SPLIT_ALIGN) * SPLIT_ALIGN


def _group_linear(xs: List[torch.Tensor], w: torch.Tensor, b: Optional[torch.Tensor], lo: int, hi: int,
                  step: int) -> List[torch.Tensor]:
    """F.linear of each x in xs on the output features lo:hi of (w, b), step features at a time,
    every input on a slice before the next."""
    ys: List[List[torch.Tensor]] = []
    for _ in range(len(xs)):
        ys.append([])
    s = lo
    while s < hi:
        e = min(hi, s + step)
        ws = w[s:e]
        if b is None:
            for j in range(len(xs)):
                ys[j].append(torch.nn.functional.linear(xs[j], ws))
        else:
            bs = b[s:e]
            for j in range(len(xs)):
                ys[j].append(torch.nn.functional.linear(xs[j], ws, bs))
        s = e
    return [torch.cat(y, -1) for y in ys]


def _group_addmm(xs: List[torch.Tensor], w: torch.Tensor, b: torch.Tensor, lo: int, hi: int,
                 step: int) -> List[torch.Tensor]:
    """GPT-2 Conv1D's addmm(b, x, w) of each x in xs (2-D) on the output features (columns of
    w) lo:hi, step at a time, every input on a slice before the next."""
    ys: List[List[torch.Tensor]] = []
    for _ in range(len(xs)):
        ys.append([])
    s = lo
    while s < hi:
        e = min(hi, s + step)
        ws, bs = w[:, s:e], b[s:e]
        for j in range(len(xs)):
            ys[j].append(torch.addmm(bs, xs[j], ws))
        s = e
    return [torch.cat(y, -1) for y in ys]


_GROUP_OPS = {}


def group_op(fn):
    """fn compiled by TorchScript, whose interpreter runs the slice loop without the Python GIL
    (16 pool threads each taking the GIL for every slice's op serialise on it: measured on a
    16-core host, the lockstep references in Python were slower than the two one after the
    other). It runs with the graph executor's optimisations off: they would rewrite addmm as mm
    + add, another rounding. So the ops are the ATen ops of the Python form (the selftest checks
    the bytes); without TorchScript, fn itself."""
    if fn not in _GROUP_OPS:
        import warnings
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.jit.script is deprecated, still exact
                scripted = torch.jit.script(fn)
        except Exception:
            _GROUP_OPS[fn] = fn
        else:
            def call(*args):
                with torch.jit.optimized_execution(False):
                    return scripted(*args)
            _GROUP_OPS[fn] = call
    return _GROUP_OPS[fn]


def blocked(single, group, bounds, pool, xs, n_in):
    """For each x in xs (one, or a lockstep group), the op on blocks lo:hi of output features,
    concatenated: one pool task per block. single(x, lo, hi) is the op on one block; a group runs
    group(xs, lo, hi, step), which walks the block in slices of pair_rows(n_in) features and runs
    every input on each slice before the next, so the weight is read from memory once for all.
    Every slice starts at a multiple of SPLIT_ALIGN, so each row's result is the one the unsplit
    op gives (see SPLIT_ALIGN)."""
    if len(xs) == 1:
        parts = [pool.submit(single, xs[0], lo, hi) for lo, hi in zip(bounds, bounds[1:])]
        return [torch.cat([p.result() for p in parts], dim=-1)]
    step = pair_rows(n_in)
    parts = [pool.submit(group, list(xs), lo, hi, step) for lo, hi in zip(bounds, bounds[1:])]
    done = [p.result() for p in parts]
    return [torch.cat([d[j] for d in done], dim=-1) for j in range(len(xs))]


@contextmanager
def split_linears(model, pool, n_blocks, lockstep=None):
    """Within the block, the GEMMs of the model's nn.Linear and GPT-2 Conv1D layers run as
    n_blocks blocks of output features on `pool` (see SPLIT_ALIGN). No-op without a pool. With a
    Lockstep, the calls of its two threads are paired (run_lockstep)."""
    if pool is None or n_blocks <= 1:
        if lockstep is not None:
            raise ValueError("a lockstep pair needs the split linears of a pool")
        yield
        return
    import torch.nn.functional as F
    from transformers.pytorch_utils import Conv1D

    group_linear, group_addmm = group_op(_group_linear), group_op(_group_addmm)

    def linear(mod, orig, bounds):
        def single(x, lo, hi):
            b = mod.bias
            return F.linear(x, mod.weight[lo:hi], None if b is None else b[lo:hi])

        def group(xs, lo, hi, step):
            return group_linear(xs, mod.weight, mod.bias, lo, hi, step)

        def run(xs):
            return blocked(single, group, bounds, pool, xs, mod.in_features)

        # a module whose input goes through a transform first (the FP8 reference's activation
        # quantisation, models/quantize.py: input_transform) splits the GEMM after it
        transform = getattr(mod, "input_transform", None)

        def forward(x):
            if torch.is_grad_enabled():
                return orig(x)
            if transform is not None:
                x = transform(x)
            return run([x])[0] if lockstep is None else lockstep.call(mod, x, run)
        return forward

    def conv1d(mod, orig, bounds):
        # Conv1D.forward: addmm(bias, x.view(-1, nx), weight), weight [nx, nf]
        def single(x2, lo, hi):
            return torch.addmm(mod.bias[lo:hi], x2, mod.weight[:, lo:hi])

        def group(xs, lo, hi, step):
            return group_addmm(xs, mod.weight, mod.bias, lo, hi, step)

        def run(xs):
            ys = blocked(single, group, bounds, pool, [x.view(-1, x.size(-1)) for x in xs], mod.nx)
            return [y.view(x.size()[:-1] + (mod.nf,)) for x, y in zip(xs, ys)]

        def forward(x):
            if torch.is_grad_enabled():
                return orig(x)
            return run([x])[0] if lockstep is None else lockstep.call(mod, x, run)
        return forward

    patched = []
    try:
        for mod in model.modules():
            if type(mod) is torch.nn.Linear or hasattr(mod, "input_transform"):
                bounds, make = split_bounds(mod.out_features, mod.in_features, n_blocks), linear
            elif type(mod) is Conv1D:
                bounds, make = split_bounds(mod.nf, mod.nx, n_blocks), conv1d
            else:
                continue
            if len(bounds) > 2:
                # an instance attribute: Module.__call__ still runs the hooks around it
                mod.forward = make(mod, mod.forward, bounds)
                patched.append(mod)
        # this thread's own ops on one thread too: an OpenMP team of its own would spin on the
        # cores the pool's threads need
        with intra_op_threads(1):
            yield
    finally:
        for mod in patched:
            del mod.forward
