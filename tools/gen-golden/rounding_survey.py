"""How far correct kernels that round differently from an op's contract land from its reference,
and how far its bugs do: the surveys behind golden/tolerances.yaml's quantized entries.

    python3 tools/gen-golden/rounding_survey.py gemm_w4a16
    python3 tools/gen-golden/rounding_survey.py attention_decode_fp8

gemm_w4a16: the contract dequantises a weight as (q - z) * s rounded once to the storage type.
Kernels that serve these formats round it in other orders, all correct: exllama's and TensorRT-LLM's fma of
q * s with a pre-rounded -z * s, tinygemm's (q - 8) * s plus a pre-rounded (8 - z) * s, or no
16-bit rounding at all. Bugs move weights by whole quantisation steps. For cases drawn as the
generator draws gemm_w4a16's (kernels/ops.py), over decode and prefill rows, K from 256 to
14336, groups of 32 and 128, AWQ, GPTQ symmetric and GPTQ with act-order, plain and
outlier-channel activations, this prints for each storage type the atol_rms the allclose check
needs at the entry's rtol (|err| <= atol + atol_rms * rms(row) + rtol * |want|) and the nmse:
the worst case of each correct order, and the least case of each bug. Products are summed in
float64 (fp32 accumulation adds far less than these) and rounded once to the storage type.

attention_decode_fp8: the contract multiplies each code by its scale exactly; FlashInfer's and
vLLM's FP8-cache kernels dequantise K and V to the storage type first (code * scale rounded to
T) and attend in 16 bits. For caches drawn as the generator draws them (kernels/ops.py) at
Llama-3-8B's, Qwen2.5-0.5B's and Phi-3-mini's head layouts and an MQA one, up to 4096 positions,
per-head and per-tensor scales, this prints each order's share of the entry's atol_rms and nmse
limits (a share above 1 fails).
"""

import collections
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from common import int4  # noqa: E402
from common.seeds import Draw, case_seed  # noqa: E402
from kernels import ops  # noqa: E402
from kernels.inputs import normal, outlier_channels  # noqa: E402

F64 = torch.float64
RTOL = {"f16": 1e-3, "bf16": 4e-3}  # tolerances.yaml's rtol: two units of the output's rounding
SHAPES = [(1, 4096, 4096), (4, 2048, 14336), (16, 1024, 8192), (1, 8192, 896), (24, 512, 256)]
FORMATS = {"awq": dict(format="awq"), "gptq-sym": dict(format="gptq", sym=True),
           "gptq-act-order": dict(format="gptq", act_order=True)}
DISTS = {"normal": normal(), "outliers": outlier_channels((3, 77, 200), 50.0)}


def rounded(a, dt):
    return a.to(torch.float32).to(dt).to(F64)


def budget(out, want, rtol):
    """The atol_rms allclose needs (atol 1e-7) and the nmse of out against want."""
    rms = want.pow(2).mean(-1, keepdim=True).sqrt()
    err = out - want
    need = ((err.abs() - 1e-7 - rtol * want.abs()).clamp_min(0) / rms).max().item()
    return need, (err.pow(2).sum() / want.pow(2).sum()).item()


def weights(fmt, inputs, K, N, G, dt):
    """The correct orders' and the bugs' W^T [K, N] (float64) from a case's packed tensors."""
    sc = inputs["scales"]
    if fmt == "awq":
        q, z = int4.unpack_awq(inputs["qweight"]), int4.unpack_awq(inputs["qzeros"])
        g = torch.arange(K) // G
    else:
        q, z = int4.unpack_gptq_weight(inputs["qweight"]), int4.unpack_gptq_zeros(inputs["qzeros"])
        g = inputs["g_idx"].to(torch.int64)
    qf, zf, sf = q.to(F64), z[g].to(F64), sc[g].to(F64)

    def contract(qq, zz, ss):
        return rounded((qq - zz) * ss, dt)

    w = {
        "fma": rounded(qf * sf + rounded(-zf * sf, dt), dt),
        "tinygemm": rounded((qf - 8) * sf + rounded((8 - zf) * sf, dt), dt),
        "unrounded": ((qf - zf) * sf).to(torch.float32).to(F64),
        "bug: zero point off by one": contract(qf, zf + 1, sf),
        "bug: the next group's scale": contract(qf, zf, sc[(g + 1) % sc.shape[0]].to(F64)),
        "bug: the first group's scale and zero point throughout": contract(qf, z[g[:1]].to(F64), sc[g[:1]].to(F64)),
    }
    ok = contract(qf, zf, sf)
    w["bug: one eighth of k dropped"] = torch.cat([ok[:K - K // 8], torch.zeros(K // 8, N, dtype=F64)])
    if fmt == "awq":
        order = torch.tensor(int4.AWQ_PACK_ORDER)
        cols = torch.arange(N)
        w["bug: AWQ's nibble order read plainly"] = contract(q[:, (cols // 8) * 8 + order[cols % 8]].to(F64), zf, sf)
    if fmt == "gptq-act-order":
        plain = torch.arange(K) // G
        w["bug: g_idx ignored"] = contract(qf, z[plain].to(F64), sc[plain].to(F64))
    return w


def survey_w4a16():
    worst = collections.defaultdict(lambda: [0.0, 0.0])
    least = collections.defaultdict(lambda: [float("inf"), float("inf")])
    cases = 0
    for dtype, (M, N, K), fmt, G, dist in itertools.product(RTOL, SHAPES, FORMATS, (128, 32), DISTS):
        dt = torch.float16 if dtype == "f16" else torch.bfloat16
        kw = dict(FORMATS[fmt], M=M, N=N, K=K, group_size=G, dtype=dtype, dist=DISTS[dist])
        name = "%s-%s-g%d-m%d-n%d-k%d-%s" % (dtype, fmt, G, M, N, K, dist)
        # (the seeds' namespace predates the file's name: tolerances.yaml quotes these draws)
        _, inputs, outs = ops.gemm_w4a16(Draw(case_seed("w4a16_rounding", name)), **kw)
        want, x = outs["out"].to(F64), inputs["x"].to(F64)
        for variant, w in weights(fmt, inputs, K, N, G, dt).items():
            need, nmse = budget(rounded(x @ w, dt), want, RTOL[dtype])
            cell = (least if variant.startswith("bug") else worst)[(dtype, variant)]
            pick = min if variant.startswith("bug") else max
            cell[0], cell[1] = pick(cell[0], need), pick(cell[1], nmse)
        cases += 1
    print("%d cases; correct orders, the worst case:" % cases)
    for (dtype, variant), (need, nmse) in sorted(worst.items()):
        print("  %-4s %-10s atol_rms %.2e  nmse %.2e" % (dtype, variant, need, nmse))
    print("bugs, the least case:")
    for (dtype, variant), (need, nmse) in sorted(least.items()):
        print("  %-4s %-56s atol_rms %.2e  nmse %.2e" % (dtype, variant, need, nmse))


# attention_decode_fp8's limits (tolerances.yaml): rtol, atol_rms, nmse
KV_LIMITS = {"f16": (2e-3, 5e-3, 1e-6), "bf16": (1.6e-2, 4e-2, 6.4e-5)}
KV_SHAPES = [  # n_heads, n_kv_heads, head_dim, cache length, cache_lens, per-head scales
    (32, 8, 128, 4096, [4096, 1000, 7, 2500], True), (14, 2, 64, 4096, [4096, 33], True),
    (32, 32, 96, 2048, [2048, 100], False), (16, 1, 64, 512, [512], False)]


def survey_attention_decode_fp8():
    worst = collections.defaultdict(lambda: [0.0, 0.0])
    for dtype, (nH, nKV, D, L, lens, per_head) in itertools.product(KV_LIMITS, KV_SHAPES):
        dt = torch.float16 if dtype == "f16" else torch.bfloat16
        name = "%s-h%d-kv%d-d%d-l%d" % (dtype, nH, nKV, D, L)
        p, i, o = ops.attention_decode_fp8(Draw(case_seed("rounding_survey", name)), nH=nH, nKV=nKV, D=D,
                                           L=L, cache_lens=lens, scale_heads=per_head, dtype=dtype)
        want, q = o["out"], i["q"].to(F64)
        kc, vc = i["k_cache"].to(F64), i["v_cache"].to(F64)
        ks, vs = i["k_scale"].to(F64), i["v_scale"].to(F64)
        pk = (ks if ks.numel() > 1 else ks.expand(nKV))[:, None]
        pv = (vs if vs.numel() > 1 else vs.expand(nKV))[:, None]
        orders = {"exact dequantisation": (kc * pk, vc * pv),
                  "K and V dequantised to T first": (rounded(kc * pk, dt), rounded(vc * pv, dt))}
        rtol, atol_rms, nmse_limit = KV_LIMITS[dtype]
        for order, (kd, vd) in orders.items():
            out = torch.empty_like(want)
            for b, n in enumerate(lens):
                out[b] = ops.sdpa(q[b][None, :, None, :], kd[b, :n].transpose(0, 1)[None],
                                  vd[b, :n].transpose(0, 1)[None], causal=False, scale=p["scale"])[0, :, 0, :]
            need, nmse = budget(rounded(out, dt), want, rtol)
            cell = worst[(dtype, order)]
            cell[0], cell[1] = max(cell[0], need / atol_rms), max(cell[1], nmse / nmse_limit)
    print("%d cases; the worst share of each limit:" % (len(KV_LIMITS) * len(KV_SHAPES)))
    for (dtype, order), (a, n) in sorted(worst.items()):
        print("  %-4s %-32s atol_rms %.2f  nmse %.2f" % (dtype, order, a, n))


SURVEYS = {"gemm_w4a16": survey_w4a16, "attention_decode_fp8": survey_attention_decode_fp8}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SURVEYS:
        sys.exit("usage: rounding_survey.py {%s}" % ", ".join(SURVEYS))
    SURVEYS[sys.argv[1]]()
