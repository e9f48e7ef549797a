#!/usr/bin/env python3
"""Builds FlashInfer's JIT modules for the golden cases of the FlashInfer adapter in parallel,
before touchstone calls the adapter (which would build them one at a time, inside each call's
deadline). Each configuration is one process that calls the op once on small data of the case's
dtype, head dim, window and soft cap; FlashInfer caches what it built (FLASHINFER_WORKSPACE_BASE).

    python3 tools/adapters/flashinfer/prebuild.py golden [--jobs 16] [--tier committed]
"""

import argparse
import concurrent.futures as cf
import glob
import json
import multiprocessing
import os
import sys
import time

ATTENTION = ("attention_decode", "attention_prefill")
HEAD_DIMS = (64, 128, 256)


def configs(root, tier):
    """The distinct module configurations of the adapter's ops among the golden cases."""
    seen = set()
    for path in sorted(glob.glob(os.path.join(root, "kernels", "*", "*", "manifest.json"))):
        m = json.load(open(path))
        if tier != "all" and m["tier"] != tier:
            continue
        dtype = next((f["dtype"] for f in m["files"] if f["role"] == "input" and f["dtype"] in ("f16", "bf16")), None)
        if dtype is None:
            continue
        p = m["params"]
        if m["op"] in ATTENTION and p["head_dim"] in HEAD_DIMS:
            op = m["op"]
            if op == "attention_decode" and p["n_heads"] // p["n_kv_heads"] > 4:
                op += "-tc"  # the adapter's tensor-core decode (vLLM's rule)
            seen.add((op, dtype, p["head_dim"], bool(p.get("window")), bool(p.get("softcap"))))
        elif m["op"] in ("rmsnorm", "rope", "swiglu"):
            seen.add((m["op"], dtype, 0, False, False))
        elif m["op"] == "geglu":
            seen.add((m["op"] + "-" + p["gelu"], dtype, 0, False, False))
    return sorted(seen)


def build(cfg):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")
    from flashinfer import activation, decode, norm, prefill, rope
    op, dtype, d, window, softcap = cfg
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    t0 = time.time()
    x = lambda *s: torch.randn(*s, device="cuda", dtype=dt)  # noqa: E731
    args = dict(window_left=3 if window else -1, logits_soft_cap=30.0 if softcap else None, sm_scale=d ** -0.5 if d else None)
    if op.startswith("attention_decode"):
        tc = op.endswith("-tc")
        decode.single_decode_with_kv_cache(x(16 if tc else 4, d), x(9, 2, d), x(9, 2, d), kv_layout="NHD",
                                           use_tensor_cores=tc, **args)
    elif op == "attention_prefill":
        backend = os.environ.get("TOUCHSTONE_FLASHINFER_PREFILL_BACKEND", "fa2")
        prefill.single_prefill_with_kv_cache(x(9, 4, d), x(9, 2, d), x(9, 2, d), causal=True, kv_layout="NHD",
                                             backend=backend, **args)
    elif op == "rmsnorm":
        w = x(256)
        norm.rmsnorm(x(2, 256), w)
        norm.fused_add_rmsnorm(x(2, 256), x(2, 256), w)
    elif op == "rope":
        q, k, pos = x(3, 4, 64), x(3, 2, 64), torch.arange(3, device="cuda", dtype=torch.int32)
        rope.apply_rope_pos_ids(q, k, pos)
        rope.apply_rope_with_cos_sin_cache(pos, q.reshape(3, -1), k.reshape(3, -1), 64,
                                           torch.randn(3, 64, device="cuda", dtype=torch.float32))
    elif op == "swiglu":
        activation.silu_and_mul(x(2, 256))
    elif op == "geglu-tanh":
        activation.gelu_tanh_and_mul(x(2, 256))
    elif op == "geglu-erf":
        activation.gelu_and_mul(x(2, 256))
    torch.cuda.synchronize()
    return cfg, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--tier", default="committed")
    a = ap.parse_args()
    todo = configs(a.golden, a.tier)
    print("prebuild: %d configurations, %d jobs" % (len(todo), a.jobs), flush=True)
    failed = 0
    with cf.ProcessPoolExecutor(a.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(build, c): c for c in todo}
        for f in cf.as_completed(futures):
            try:
                cfg, s = f.result()
                print("built %s in %.0f s" % (cfg, s), flush=True)
            except Exception as e:  # reported; the adapter reports the case again when it runs it
                failed += 1
                print("FAILED %s: %s: %s" % (futures[f], type(e).__name__, str(e)[-2000:]), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
