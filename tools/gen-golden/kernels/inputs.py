"""The inputs of the kernel cases: distributions (each returns draw(r, shape) -> float64 tensor,
r a common.seeds.Draw), the weights of the norms and projections, and the softmax masks."""

import math

import torch

from common.dtypes import F64, to_f16

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


def norm_weight(r, n, cast=to_f16):
    """RMSNorm weight / LayerNorm gamma: near one, like trained models."""
    return cast(1.0 + 0.1 * r.randn((n,)))


def linear_weight(r, out_features, in_features, cast=to_f16):
    """std 1/sqrt(in_features), so activations stay O(1) through the layer."""
    return cast(r.randn((out_features, in_features)) / math.sqrt(in_features))


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
