"""The 4-bit weight formats of docs/quantization.md ("4-bit weights"): the AWQ GEMM packing and
the GPTQ packing of a Linear's weight, as the published checkpoints store them, and their
dequantisation. A Linear y = x @ W.T has W [N, K] (out_features N, in_features K); both formats
store the quantised weight transposed, Wq [K, N] of unsigned 4-bit codes q, with a scale s and a
zero point z per group of G consecutive inputs k (or, GPTQ with act-order, per the group g_idx[k]
names) and output column n:

    W.T[k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n]

AWQ (AutoAWQ's GEMM version, transformers' quant_method "awq"):
    qweight int32 [K, N/8]   8 codes of one row k along n: nibble j (bits 4j..4j+3) of word c
                             is column 8c + AWQ_PACK_ORDER[j]
    qzeros  int32 [K/G, N/8] the zero points, packed as qweight
    scales  T     [K/G, N]
GPTQ (AutoGPTQ / GPTQModel, quant_method "gptq", checkpoint_format "gptq"):
    qweight int32 [K/8, N]   8 codes of one column n along k: nibble j of word r is row 8r + j
    qzeros  int32 [G_n, N/8] nibble j of word c is column 8c + j, storing z - 1 (the v1 format's
                             offset: a symmetric 4-bit checkpoint stores 7 for z = 8)
    scales  T     [G_n, N]
    g_idx   int32 [K]        the group of each input k: k // G without act-order (desc_act
                             false), any permutation's groups with it
Words are int32 as safetensors stores them: the codes are their bits, read unsigned."""

import torch

from common.dtypes import F64

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble j of an AWQ word holds column 8c + this
BITS = 4
PER_WORD = 32 // BITS


def _words(codes):
    """[..., 8] codes 0..15 (int64) -> [...] int32 words, code j in bits 4j..4j+3."""
    if codes.shape[-1] != PER_WORD:
        raise ValueError("pack: %d codes, want 8 a word" % codes.shape[-1])
    if codes.min() < 0 or codes.max() > 15:
        raise ValueError("pack: codes outside 0..15")
    shifts = torch.arange(0, 32, BITS, dtype=torch.int64)
    w = (codes.to(torch.int64) << shifts).sum(-1)
    return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)


def _codes(words):
    """[...] int32 words -> [..., 8] int64 codes, code j from bits 4j..4j+3 (unsigned)."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, BITS, dtype=torch.int64)
    return (w.unsqueeze(-1) >> shifts) & 0xF


def pack_awq(q):
    """Codes [R, N] (N % 8 == 0) -> AWQ words [R, N/8]: qweight from q [K, N], qzeros from
    z [K/G, N]."""
    R, N = q.shape
    if N % PER_WORD:
        raise ValueError("pack_awq: N = %d is not a multiple of 8" % N)
    cols = q.reshape(R, N // PER_WORD, PER_WORD)
    return _words(cols[:, :, list(AWQ_PACK_ORDER)])


def unpack_awq(words):
    """AWQ words [R, N/8] -> codes [R, N]."""
    R, C = words.shape
    nib = _codes(words)  # [R, C, 8], nibble j
    out = torch.empty_like(nib)
    out[:, :, list(AWQ_PACK_ORDER)] = nib
    return out.reshape(R, C * PER_WORD)


def pack_gptq_weight(q):
    """Codes [K, N] (K % 8 == 0) -> GPTQ qweight [K/8, N], packed along k."""
    K, N = q.shape
    if K % PER_WORD:
        raise ValueError("pack_gptq_weight: K = %d is not a multiple of 8" % K)
    return _words(q.reshape(K // PER_WORD, PER_WORD, N).transpose(1, 2))


def unpack_gptq_weight(words):
    """GPTQ qweight [K/8, N] -> codes [K, N]."""
    R, N = words.shape
    return _codes(words).transpose(1, 2).reshape(R * PER_WORD, N)


def pack_gptq_zeros(z):
    """Zero points [G_n, N] (1..16: the v1 format stores z - 1) -> qzeros [G_n, N/8], packed
    along n in plain order."""
    if z.min() < 1 or z.max() > 16:
        raise ValueError("pack_gptq_zeros: zero points outside 1..16 (stored as z - 1)")
    G, N = z.shape
    if N % PER_WORD:
        raise ValueError("pack_gptq_zeros: N = %d is not a multiple of 8" % N)
    return _words((z - 1).reshape(G, N // PER_WORD, PER_WORD))


def unpack_gptq_zeros(words):
    """qzeros [G_n, N/8] -> zero points [G_n, N] (the stored nibble + 1)."""
    G, C = words.shape
    return _codes(words).reshape(G, C * PER_WORD) + 1


def dequant(q, z, s, groups, dtype):
    """W.T [K, N] in dtype: (q - z[g(k)]) * s[g(k)], one rounding to dtype of the exact product
    (q - z is an integer in -16..15, exact in every float type). groups: int64 [K], g(k)."""
    diff = (q - z[groups]).to(torch.float64)
    return (diff * s[groups].to(torch.float64)).to(torch.float32).to(dtype)


def awq_dequant(qweight, qzeros, scales, group_size, dtype):
    """An AWQ Linear's W.T [K, N] in dtype."""
    q, z = unpack_awq(qweight), unpack_awq(qzeros)
    K = q.shape[0]
    if K % group_size or z.shape[0] != K // group_size or scales.shape != z.shape:
        raise ValueError("awq: qweight %s, qzeros %s, scales %s, group_size %d"
                         % (tuple(qweight.shape), tuple(qzeros.shape), tuple(scales.shape), group_size))
    return dequant(q, z, scales, torch.arange(K) // group_size, dtype)


def gptq_dequant(qweight, qzeros, scales, g_idx, dtype):
    """A GPTQ (v1) Linear's W.T [K, N] in dtype; g_idx [K] names each input's group."""
    q, z = unpack_gptq_weight(qweight), unpack_gptq_zeros(qzeros)
    if g_idx.shape != (q.shape[0],) or scales.shape != z.shape or g_idx.min() < 0 or \
            g_idx.max() >= z.shape[0]:
        raise ValueError("gptq: qweight %s, qzeros %s, scales %s, g_idx %s"
                         % (tuple(qweight.shape), tuple(qzeros.shape), tuple(scales.shape), tuple(g_idx.shape)))
    return dequant(q, z, scales, g_idx.to(torch.int64), dtype)


def quant_int4(Wt, groups, ng, sym, zmin=0):
    """Codes q [K, N], zero points z [ng, N] and scales s [ng, N] (float64) of W^T [K, N] per
    group g (the rows k with groups[k] == g) and column: asymmetric, s = (max - min) / 15 over the
    group's range widened to hold 0, z = round(-min / s) in zmin..15, q = round(w / s) + z in
    0..15 (AWQ's and GPTQ's asymmetric quantisers); symmetric, s = 2 amax / 15, z = 8 (GPTQ's
    sym)."""
    K, N = Wt.shape
    q = torch.empty(K, N, dtype=torch.int64)
    z = torch.empty(ng, N, dtype=torch.int64)
    s = torch.empty(ng, N, dtype=F64)
    for g in range(ng):
        rows = (groups == g).nonzero().flatten()
        w = Wt[rows]
        if sym:
            sc = (2 * w.abs().amax(0) / 15).clamp_min(1e-8)
            zz = torch.full((N,), 8, dtype=torch.int64)
        else:
            lo, hi = w.amin(0).clamp(max=0), w.amax(0).clamp(min=0)
            sc = ((hi - lo) / 15).clamp_min(1e-8)
            zz = torch.round(-lo / sc).to(torch.int64).clamp(zmin, 15)
        q[rows] = (torch.round(w / sc) + zz).clamp(0, 15).to(torch.int64)
        z[g], s[g] = zz, sc
    return q, z, s
