"""gemm_fp8's atol_rms against an emulation of Hopper's FP8 tensor-core accumulation: the exact
sums of 32 products (one k = 32 step of the instruction) added into an accumulator that keeps 14
significant bits (DeepSeek-V3's measurement of the H800's), truncating. A kernel that promotes
that accumulator to fp32 every 128 of K (DeepGEMM, cuBLASLt's block-scaled GEMMs) must pass the
tolerance with room; one that keeps the whole K in it must fail it at a real projection's K."""

import math

import torch

BITS, CHUNK, BLOCK = 14, 32, 128


def _truncate(v, bits=BITS):
    m, e = torch.frexp(v)
    return torch.ldexp(torch.trunc(m * 2.0 ** bits) / 2.0 ** bits, e)


def _e4m3(v):
    return v.clamp(-448, 448).to(torch.float8_e4m3fn).to(torch.float64)


def worst_error(M, N, K, promote, seed=0):
    """max |out - exact| / rms(row of exact) of an emulated per-channel FP8 GEMM."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g, dtype=torch.float64)
    w = torch.randn(N, K, generator=g, dtype=torch.float64) / math.sqrt(K)
    xs, ws = x.abs().amax(-1, keepdim=True) / 448, w.abs().amax(-1, keepdim=True) / 448
    xq, wq = _e4m3(x / xs), _e4m3(w / ws)
    exact = (xq @ wq.T) * xs * ws.T
    acc = torch.zeros(M, N, dtype=torch.float64)
    part = torch.zeros(M, N, dtype=torch.float64)
    for k0 in range(0, K, CHUNK):
        step = xq[:, k0:k0 + CHUNK] @ wq[:, k0:k0 + CHUNK].T  # exact: FP8 products are
        if promote:
            part = _truncate(part + step)
            if (k0 + CHUNK) % BLOCK == 0:
                acc, part = acc + part, torch.zeros_like(part)
        else:
            acc = _truncate(acc + step)
    out = acc * xs * ws.T
    rms = exact.pow(2).mean(-1, keepdim=True).sqrt()
    return ((out - exact).abs() / rms).max().item()


def check_gemm_fp8_accumulation(atol_rms):
    promoted = max(worst_error(128, 128, K, True) for K in (256, 4096))
    unpromoted = worst_error(128, 128, 4096, False)
    # The truncating accumulator is the pessimistic reading of "14 bits": it errs toward zero on
    # every add, and gives more than the H100's cuBLASLt did (5.8e-4 of the rms over 29M outputs)
    assert promoted < atol_rms, (promoted, atol_rms)
    assert unpromoted > 5 * atol_rms, (unpromoted, atol_rms)
    print("gemm_fp8 accumulation: a 14-bit FP8 accumulator promoted every 128 of K at most "
          "%.2g of the row's rms (atol_rms %.0e), kept over K = 4096 %.2g" % (promoted, atol_rms, unpromoted))
