"""common/int4.py (docs/quantization.md, "4-bit weights") against loops over single words written
from the formats' own descriptions (AutoAWQ's reverse order, GPTQ's packing along k and its
stored z - 1), round trips of every packing, and a dequantisation checked element by element."""

import numpy as np
import torch

from common import int4

# AutoAWQ unpacks a word's nibbles in order and then reorders columns with this: logical column
# i of a word is its nibble AWQ_REVERSE_ORDER[i].
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def _nibble(word, j):
    return (int(word) & 0xFFFFFFFF) >> (4 * j) & 0xF


def check_int4_formats():
    g = torch.Generator().manual_seed(20261127)
    K, N, G = 384, 48, 128
    q = torch.randint(0, 16, (K, N), generator=g)
    z = torch.randint(0, 16, (K // G, N), generator=g)
    s = (torch.rand(K // G, N, generator=g) * 0.02 + 1e-3).to(torch.float16)

    w = int4.pack_awq(q)
    assert w.dtype == torch.int32 and w.shape == (K, N // 8)
    assert torch.equal(int4.unpack_awq(w), q)
    for k in (0, 1, K - 1):
        for i in range(N):
            assert _nibble(w[k, i // 8], AWQ_REVERSE_ORDER[i % 8]) == int(q[k, i]), (k, i)

    qw = int4.pack_gptq_weight(q)
    assert qw.dtype == torch.int32 and qw.shape == (K // 8, N)
    assert torch.equal(int4.unpack_gptq_weight(qw), q)
    for k in (0, 7, 8, K - 1):
        for n in range(N):
            assert _nibble(qw[k // 8, n], k % 8) == int(q[k, n]), (k, n)

    zg = torch.randint(1, 17, (K // G, N), generator=g)
    qz = int4.pack_gptq_zeros(zg)
    assert torch.equal(int4.unpack_gptq_zeros(qz), zg)
    for n in range(N):
        assert _nibble(qz[0, n // 8], n % 8) + 1 == int(zg[0, n])
    # a symmetric 4-bit GPTQ checkpoint stores 7 (0x77777777) for z = 8
    assert int(int4.pack_gptq_zeros(torch.full((1, 8), 8))[0, 0]) == 0x77777777

    # dequantisation, element by element in float64 then one fp16 rounding
    W = int4.awq_dequant(w, int4.pack_awq(z), s, G, torch.float16)
    for k, n in ((0, 0), (130, 5), (K - 1, N - 1)):
        want = np.float16((int(q[k, n]) - int(z[k // G, n])) * float(s[k // G, n]))
        assert W[k, n].item() == float(want), (k, n, W[k, n].item(), want)
    # act-order: g_idx permutes the groups; without it g_idx = k // G gives AWQ's grouping
    g_idx = torch.randint(0, K // G, (K,), generator=g).to(torch.int32)
    Wg = int4.gptq_dequant(qw, qz, s, g_idx, torch.bfloat16)
    for k in (3, 200, K - 1):
        gk = int(g_idx[k])
        want = torch.tensor((int(q[k, 9]) - int(zg[gk, 9])) * float(s[gk, 9]), dtype=torch.float64)
        assert Wg[k, 9] == want.to(torch.float32).to(torch.bfloat16), k
    for bad in (lambda: int4.pack_awq(q[:, :5]), lambda: int4.pack_gptq_weight(q[:5]),
                lambda: int4.pack_gptq_zeros(zg - 1), lambda: int4.pack_awq(q + 16)):
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("a malformed packing was accepted")
    print("int4 formats: AWQ and GPTQ packings, round trips and dequantisation OK")
