"""The inputs of the kernel cases: distributions (each returns draw(r, shape) -> float64 tensor,
r a common.seeds.Draw), the weights of the norms and projections (and FP8 weight blocks of
different magnitudes), the softmax masks, and the f8e4m3 conversion's boundary values."""

import math

import torch

from common.dtypes import E4M3_MAX, F32, F64, F8E4M3, to_f16

# Input distributions for the case table: each returns draw(r, shape) -> float64 tensor.

def normal(std=1.0, mean=0.0):
    return lambda r, shape: mean + std * r.randn(shape)


def uniform(lo, hi):
    return lambda r, shape: lo + (hi - lo) * r.rand(shape)


def log_magnitude(lo, hi):
    """Random sign, |x| log-uniform in [lo, hi]: every value large, none near zero."""
    def draw(r, shape):
        sign = torch.where(r.rand(shape) < 0.5, -1.0, 1.0).to(F64)
        return sign * torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * r.rand(shape))
    return draw


def with_zeros(dist, frac):
    """dist with a fraction of exact zeros mixed in."""
    def draw(r, shape):
        x = dist(r, shape)
        return torch.where(r.rand(shape) < frac, 0.0, x).to(F64)
    return draw


def gelu_inputs(std=1.5):
    """N(0, std^2) with a quarter of the values moved into [-4, -1], the negative tail where the
    erf and tanh GELUs differ most relative to their (small) values."""
    def draw(r, shape):
        x = std * r.randn(shape)
        tail = -4.0 + 3.0 * r.rand(shape)
        return torch.where(r.rand(shape) < 0.25, tail, x).to(F64)
    return draw


def row_offsets(offsets, std):
    """Row i is offsets[i] + N(0, std^2); an offset of None makes the row U(-1e4, 1e4)."""
    def draw(r, shape):
        rows = []
        for i in range(shape[0]):
            if offsets[i] is None:
                rows.append(uniform(-1e4, 1e4)(r, shape[1:]))
            else:
                rows.append(offsets[i] + std * r.randn(shape[1:]))
        return torch.stack(rows)
    return draw


def outlier_channels(channels, magnitude, std=1.0):
    """N(0, std^2) with a few fixed channels (the same columns in every row, as in real LLM
    activations) of magnitude ~`magnitude` and random sign: they dominate each row's rms."""
    def draw(r, shape):
        x = std * r.randn(shape)
        sign = torch.where(r.rand(shape[:-1] + (len(channels),)) < 0.5, -1.0, 1.0).to(F64)
        x[..., list(channels)] = sign * magnitude * (1.0 + 0.1 * r.randn(shape[:-1] + (len(channels),)))
        return x
    return draw


def row_scales(lo, hi, dist=None):
    """dist (default N(0, 1)) with each row (last dim) multiplied by a log-uniform scale in
    [lo, hi]: rows of very different rms in one tensor."""
    base = dist or normal()

    def draw(r, shape):
        x = base(r, shape)
        scale = torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * r.rand(shape[:-1] + (1,)))
        return x * scale
    return draw


def odd_rows_scaled(factor):
    """N(0, 1) with every odd row (first dim) multiplied by factor: a table whose odd rows are
    large (embedding's draw always reads the last row, odd for an even vocabulary, and row 0)."""
    def draw(r, shape):
        x = r.randn(shape)
        x[1::2] *= factor
        return x
    return draw


def with_large(dist, frac, lo, hi):
    """dist with a fraction of its values replaced by random-sign log-uniform magnitudes in
    [lo, hi] (beyond fp16's 65504 for the bf16 cases: bf16 has fp32's range)."""
    big = log_magnitude(lo, hi)

    def draw(r, shape):
        x = dist(r, shape)
        return torch.where(r.rand(shape) < frac, big(r, shape), x).to(F64)
    return draw


def constant_rows(rows, dist=None):
    """dist (default N(0, 1)) with the listed rows (first dim) set to one repeated value: a
    zero-variance row, where LayerNorm returns beta and RMSNorm sign(x) * weight."""
    base = dist or normal()

    def draw(r, shape):
        x = base(r, shape)
        for i, value in rows.items():
            x[i] = value
        return x
    return draw


def with_spans(dist, spans):
    """dist with fixed values written over parts of rows: spans is ((row, start, values), ...),
    values a tuple of floats put at x[row, start:start + len(values)] (an all-zero quantisation
    group, an inf or a NaN in one group)."""
    def draw(r, shape):
        x = dist(r, shape)
        for row, start, values in spans:
            x[row, start:start + len(values)] = torch.tensor(values, dtype=F64)
        return x
    return draw


def table_rows(values):
    """No randomness: the floats of `values` in row-major order, zeros after them (the shape
    must hold them all)."""
    def draw(r, shape):
        x = torch.zeros(shape, dtype=F64)
        assert len(values) <= x.numel(), (len(values), shape)
        x.view(-1)[:len(values)] = torch.tensor(values, dtype=F64)
        return x
    return draw


def f32_bits(u):
    """The float32 whose bits are u, as a Python float (exact)."""
    return torch.tensor([u], dtype=torch.int64).to(torch.int32).view(F32).item()


def f32_next(v, toward):
    """The float32 next to the float32 v in the direction of toward, as a Python float."""
    return torch.nextafter(torch.tensor(v, dtype=F32), torch.tensor(toward, dtype=F32)).item()


def e4m3_boundaries():
    """Every float32 at which the f8e4m3 conversion (docs/quantization.md, e4m3) can go wrong, as
    a tuple of Python floats, each exactly a float32: the 254 finite values themselves (both
    zeros), the midpoint of each pair of neighbours (a tie: to even) and its float32 neighbours
    below and above (nearest), the range's edge (448 to 480 in steps that saturate, inf, the
    largest float32s), the NaNs of both signs, and the underflow: below, at and above half the
    smallest subnormal, float32 subnormals. Built with torch's decoding of the codes; the
    selftest decodes them from the bit layout."""
    finite = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(F8E4M3).to(F32)
    finite = finite[~torch.isnan(finite)]
    pos = torch.unique(finite[finite >= 0])                # 0, 2^-9, ..., 448: sorted
    mid = (pos[1:] + pos[:-1]) / 2                         # exact: 5 significant bits
    near = [torch.nextafter(mid, torch.full_like(mid, d)) for d in (-math.inf, math.inf)]
    up = math.inf
    # (448, 464) rounds to 448, 464 ties to 448 (even), above it torch's unclamped conversion
    # gives NaN; the clamp makes all of them 448
    edge = [E4M3_MAX, f32_next(E4M3_MAX, up), 456.0, f32_next(464.0, 0.0), 464.0,
            f32_next(464.0, up), 470.0, f32_next(480.0, 0.0), 480.0, f32_next(480.0, up), 1e6,
            3.4e38, f32_bits(0x7F7FFFFF), up]
    # half the smallest subnormal (2^-10) ties to 0; float32 subnormals and its smallest normal
    tiny = [2.0**-149, 2.0**-126, 2.0**-11, f32_next(2.0**-10, 0.0), 2.0**-10,
            f32_next(2.0**-10, 1.0)]
    values = [float(v) for v in finite.tolist()]
    for v in torch.cat([mid] + near).tolist() + edge + tiny:
        v = float(torch.tensor(v, dtype=F32))              # 1e6, 3.4e38: their float32
        values += [v, -v]
    values += [f32_bits(0x7FC00000), f32_bits(0xFFC00000)]  # +NaN, -NaN
    return tuple(values)


def norm_weight(r, n, cast=to_f16):
    """RMSNorm weight / LayerNorm gamma: near one, like trained models."""
    return cast(1.0 + 0.1 * r.randn((n,)))


def gemma_norm_weight(r, n, cast=to_f16):
    """Gemma's RMSNorm weight as an engine holds it: the checkpoint's w (small, as trained Gemma
    norms are; in the storage dtype, as the checkpoint stores it) folded once at load into the fp32
    1 + w, as transformers' Gemma3RMSNorm computes (1.0 + self.weight.float()): exact in fp32,
    which no 16-bit type holds (1 + w needs more significant bits than w)."""
    return 1.0 + cast(0.1 * r.randn((n,))).to(F32)


def linear_weight(r, out_features, in_features, cast=to_f16):
    """std 1/sqrt(in_features), so activations stay O(1) through the layer."""
    return cast(r.randn((out_features, in_features)) / math.sqrt(in_features))


def block_magnitudes(block, lo, hi):
    """A weight [N, K]: linear_weight's N(0, 1/K) with each block x block tile (the last ones
    partial) multiplied by its own log-uniform factor in [lo, hi], drawn after the values: FP8
    weight blocks whose scales differ as a trained checkpoint's do, so a kernel that reads
    another block's scale is off by up to hi / lo."""
    def draw(r, shape):
        N, K = shape
        w = r.randn(shape) / math.sqrt(K)
        nb, kb = -(-N // block), -(-K // block)
        f = torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * r.rand((nb, kb)))
        return w * f.repeat_interleave(block, 0)[:N].repeat_interleave(block, 1)[:, :K]
    return draw


def causal_mask(start):
    """Row t masks columns > start + t (an attention-score-like pattern)."""
    def mask(r, shape):
        cols = torch.arange(shape[1])[None, :]
        return cols > (start + torch.arange(shape[0])[:, None])
    return mask


def random_mask(frac):
    return lambda r, shape: r.rand(shape) < frac


def all_but_one(rows):
    """The listed rows keep one finite entry at a random column, every other entry -inf (a
    causal row 0 in a long sequence, or a top-1 filter): softmax must give exactly 1 there."""
    def mask(r, shape):
        m = torch.zeros(shape, dtype=torch.bool)
        keep = r.randint(0, shape[1], (shape[0],))
        for i in rows:
            m[i] = True
            m[i, int(keep[i])] = False
        return m
    return mask
