#!/usr/bin/env python3
"""Builds FlashInfer's JIT modules for the golden cases of the FlashInfer adapter in parallel,
before touchstone calls the adapter (which would build them one at a time, inside each call's
deadline). Each configuration is one process that calls the adapter's entry points once on
small data of the case's dtype, head dim, window, soft cap and (decode) tensor-core choice; FlashInfer caches what it built (FLASHINFER_WORKSPACE_BASE).

    python3 tools/adapters/flashinfer/prebuild.py golden [--jobs 16] [--tier committed] [--op OP ...]
"""

import argparse
import concurrent.futures as cf
import glob
import json
import multiprocessing
import os
import sys
import time

HEAD_DIMS = (64, 128, 256)
KIND = {"attention_decode": "decode", "attention_decode_paged": "decode", "attention_prefill": "ragged",
        "attention_prefill_paged": "paged"}


def configs(root, tier, ops):
    """The distinct module configurations of the adapter's ops among the golden cases."""
    seen = set()
    for path in sorted(glob.glob(os.path.join(root, "kernels", "*", "*", "manifest.json"))):
        m = json.load(open(path))
        if (tier != "all" and m["tier"] != tier) or (ops and m["op"] not in ops):
            continue
        dtype = next((f["dtype"] for f in m["files"] if f["role"] == "input" and f["dtype"] in ("f16", "bf16")), None)
        if dtype is None:
            continue
        p = m["params"]
        if m["op"] in KIND and p["head_dim"] in HEAD_DIMS:
            group = p["n_heads"] // p["n_kv_heads"]
            seen.add((KIND[m["op"]], dtype, p["head_dim"], bool(p.get("window")), bool(p.get("softcap")),
                      group if KIND[m["op"]] == "decode" else 1))
        elif m["op"] in ("rmsnorm", "rope", "swiglu"):
            seen.add((m["op"], dtype, 0, False, False, 1))
        elif m["op"] == "geglu":
            seen.add((m["op"] + "-" + p["gelu"], dtype, 0, False, False, 1))
    if not ops or "sample" in ops:  # the sampling sets: the sampling and radix top-k modules
        seen.add(("sample", "f32", 0, False, False, 1))
    # a decode's module depends on the group only through the tensor-core choice
    out, kinds = [], set()
    for c in sorted(seen):
        key = c[:5] + ((c[5] > 4),) if c[0] == "decode" else c
        if key not in kinds:
            kinds.add(key)
            out.append(c)
    return out


def build(cfg):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import adapter
    from flashinfer import activation, norm, rope
    kind, dtype, d, window, softcap, group = cfg
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    t0 = time.time()
    x = lambda *s: torch.randn(*s, device="cuda", dtype=dt)  # noqa: E731
    p = {"scale": d ** -0.5 if d else 1.0}
    if window:
        p["window"] = 4
    if softcap:
        p["softcap"] = 30.0
    if kind == "decode":
        args = adapter.attention_args(p, kind, d)
        q, kc = x(2, 2 * group, d), x(2, 9, 2, d)
        adapter.plan_decode([5, 9], 9, 2 * group, 2, d, dt, args).run(q, (kc, kc))
    elif kind == "ragged":
        args = adapter.attention_args(p, kind, d)
        adapter.plan_prefill_ragged([5], [5], 4, 2, d, dt, True, args).run(x(5, 4, d), x(5, 2, d), x(5, 2, d))
    elif kind == "paged":
        args = adapter.attention_args(p, kind, d)
        kc = x(3, 4, 2, d)
        table = adapter.np.array([[2, 0]])
        adapter.plan_prefill_paged([0, 3], [7], 4, table, 4, 2, d, dt, args).run(x(3, 4, d), (kc, kc))
    elif kind == "rmsnorm":
        w = x(256)
        norm.rmsnorm(x(2, 256), w)
        norm.fused_add_rmsnorm(x(2, 256), x(2, 256), w)
    elif kind == "rope":
        q, k, pos = x(3, 4, 64), x(3, 2, 64), torch.arange(3, device="cuda", dtype=torch.int32)
        rope.apply_rope_pos_ids(q, k, pos)
        rope.apply_rope_with_cos_sin_cache(pos, q.reshape(3, -1), k.reshape(3, -1), 64,
                                           torch.randn(3, 64, device="cuda", dtype=torch.float32))
    elif kind == "swiglu":
        activation.silu_and_mul(x(2, 256))
    elif kind == "geglu-tanh":
        activation.gelu_tanh_and_mul(x(2, 256))
    elif kind == "geglu-erf":
        activation.gelu_and_mul(x(2, 256))
    elif kind == "sample":
        # The sampling module, and the radix top-k's (its fast path starts at a vocabulary of
        # 65536; its JIT build takes about 14 minutes on 16 cores, which a call would wait for).
        for vocab in (32064, 151936):
            for k, top_p in ((0, 1.0), (40, 1.0), (0, 0.9), (40, 0.9)):
                adapter.draw(torch.randn(4, vocab, device="cuda"),
                             {"temperature": 0.8, "top_k": k, "top_p": top_p, "seed": 1, "step": 2})
    torch.cuda.synchronize()
    return cfg, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--tier", default="committed")
    ap.add_argument("--op", action="append", default=[], help="only this op's configurations (repeatable)")
    a = ap.parse_args()
    todo = configs(a.golden, a.tier, a.op)
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
