"""RoPE scaling: the divisor tables and attention factors of the scaled RoPE types (llama3, yarn,
longrope) computed in fp64 from a config as transformers 5.17 reads it (rope_scaling), the spec
the Go engine implements (docs/golden-format.md, "rope"); and published_rope, a published config's
tables checked once per process against transformers' own ROPE_INIT_FUNCTIONS (the scaled `rope`
kernel cases use them; the model selftest checks the sets' hparams against rope_scaling)."""

import math
from collections import namedtuple

import torch

from common import configs
from common.dtypes import F32, F64


def rope_inv_freq(base, rope_dim):
    """base^(-2i/rope_dim) for i < rope_dim/2, in fp64."""
    return float(base) ** (-torch.arange(0, rope_dim, 2, dtype=F64) / rope_dim)


# ---------------------------------------------------------------------------------------------
# RoPE scaling: the divisor tables and attention factors of the scaled RoPE types, in fp64 from a
# published config (transformers 5.17's modeling_rope_utils, which the generation-time self-check
# below compares against). For pair i < d/2 the scaled inverse frequency is base^(-2i/d) / div_i;
# cos and sin are multiplied by the attention factor. These three functions are also the spec the
# Go engine implements (docs/golden-format.md, "rope").

def llama3_divisor(base, dim, factor, low_freq_factor, high_freq_factor, original):
    """Llama 3.1's scaling: wavelengths below original/high_freq_factor keep their frequency,
    those above original/low_freq_factor are divided by factor, and in between a smooth blend.
    Returns the divisor of each pair (attention factor 1)."""
    low_wl, high_wl = original / low_freq_factor, original / high_freq_factor
    out = []
    for i in range(dim // 2):
        wavelen = 2 * math.pi / float(base) ** (-2.0 * i / dim)
        if wavelen < high_wl:
            out.append(1.0)
        elif wavelen > low_wl:
            out.append(float(factor))
        else:
            s = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - s) / factor + s))
    return out


def yarn_divisor(base, dim, factor, original, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """YaRN (NTK-by-parts): pairs that turn more than beta_fast times over the original context
    keep their frequency (extrapolation), those under beta_slow turns are divided by factor
    (interpolation), a linear ramp over the pair index in between. Returns the divisor of each
    pair; the attention factor is yarn_attention_factor's."""
    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    out = []
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        e = 1.0 - ramp  # the extrapolation share
        out.append(1.0 / ((1 - e) / factor + e))
    return out


def yarn_attention_factor(factor, mscale=None, mscale_all_dim=None):
    """0.1 ln(factor) + 1 (1 for factor <= 1): YaRN's default when the config gives none; with
    both mscale and mscale_all_dim (DeepSeek's), the ratio of 0.1 m ln(factor) + 1 for the two,
    as transformers computes it."""
    def get_mscale(m):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    if mscale and mscale_all_dim:
        return float(get_mscale(mscale) / get_mscale(mscale_all_dim))
    return get_mscale(1)


def longrope_attention_factor(factor, original):
    """sqrt(1 + ln(factor) / ln(original)) (1 for factor <= 1): LongRoPE's default, factor being
    max_position_embeddings / original_max_position_embeddings unless the config gives it."""
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


# The scaled RoPE of a config: rope_type ("default", "linear", "llama3", "yarn", "longrope"), base, dim (the
# rotated dims), freq_divisor and long_divisor (lists of fp64 divisors per pair, or None),
# attention_factor (fp64) and long_from (the first position that uses long_divisor, or None).
RopeScaling = namedtuple("RopeScaling", "rope_type base dim freq_divisor long_divisor "
                                        "attention_factor long_from")


def rope_scaling(cfg):
    """The RoPE of an HF config dict (config.json) as transformers 5.17 reads it:
    rope_scaling (or a transformers-5 rope_parameters) with its type under "rope_type" or the
    old "type"; original_max_position_embeddings from the top level where the config has one
    there (Phi-3's config class always does: its default is 4096), else from rope_scaling, else
    max_position_embeddings; an absent factor is max_position_embeddings / original."""
    sc = cfg.get("rope_scaling") or {}
    if not sc and isinstance(cfg.get("rope_parameters"), dict):
        sc = cfg["rope_parameters"]
    base = float(cfg["rope_theta"] if "rope_theta" in cfg else sc["rope_theta"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    partial = cfg.get("partial_rotary_factor", sc.get("partial_rotary_factor", 1.0))
    dim = int(head_dim * partial)
    kind = sc.get("rope_type", sc.get("type", "default"))
    if cfg.get("model_type") == "phi3" and kind in ("su", "yarn"):
        kind = "longrope"  # Phi3Config's own renaming of the old names
    if kind == "default":
        return RopeScaling(kind, base, dim, None, None, 1.0, None)
    max_pos = cfg["max_position_embeddings"]
    if "original_max_position_embeddings" in cfg:
        original = cfg["original_max_position_embeddings"]
    elif cfg.get("model_type") == "phi3":
        original = 4096  # Phi3Config's default wins over rope_scaling's (transformers 5.17)
    else:
        original = sc.get("original_max_position_embeddings", max_pos)
    if kind == "linear":  # every pair's frequency divided by the factor (Gemma-3-4B's global layers)
        return RopeScaling(kind, base, dim, [float(sc["factor"])] * (dim // 2), None, 1.0, None)
    if kind == "llama3":
        div = llama3_divisor(base, dim, sc["factor"], sc["low_freq_factor"],
                             sc["high_freq_factor"], original)
        return RopeScaling(kind, base, dim, div, None, 1.0, None)
    if kind == "yarn":
        factor = sc.get("factor") or max_pos / original
        div = yarn_divisor(base, dim, factor, original, sc.get("beta_fast") or 32,
                           sc.get("beta_slow") or 1, sc.get("truncate", True))
        af = sc.get("attention_factor")
        if af is None:
            af = yarn_attention_factor(factor, sc.get("mscale"), sc.get("mscale_all_dim"))
        return RopeScaling(kind, base, dim, div, None, float(af), None)
    if kind == "longrope":
        short, long = [float(v) for v in sc["short_factor"]], [float(v) for v in sc["long_factor"]]
        if len(short) != dim // 2 or len(long) != dim // 2:
            raise ValueError("longrope factors of %d and %d entries for %d pairs"
                             % (len(short), len(long), dim // 2))
        factor = sc.get("factor") or max_pos / original
        af = sc.get("attention_factor")
        return RopeScaling(kind, base, dim, short, long,
                           longrope_attention_factor(factor, original) if af is None
                           else float(af), original)
    raise NotImplementedError("rope_type %r" % kind)


def published_rope(name):
    """(config, RopeScaling) of a published model config (configs.PUBLISHED_ROPE), checked
    once per process against transformers' own ROPE_INIT_FUNCTIONS."""
    if name not in _PUBLISHED:
        cfg = configs.PUBLISHED_ROPE[name]
        sc = rope_scaling(cfg)
        check_rope_scaling(name, cfg, sc)
        _PUBLISHED[name] = (cfg, sc)
    return _PUBLISHED[name]


_PUBLISHED = {}
INV_FREQ_RTOL, ATTENTION_FACTOR_RTOL = 1e-5, 1e-6


def check_rope_scaling(name, cfg, sc):
    """Generation-time self-check: transformers' config class built from the published config,
    ROPE_INIT_FUNCTIONS[rope_type] (for longrope also with seq_len = original + 1, the long
    table) gives fp32 inv_freq equal to base^(-2i/d) / fp32(div) within INV_FREQ_RTOL and the
    same attention factor within ATTENTION_FACTOR_RTOL. Prints the errors to stderr."""
    import copy
    import sys
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    transformers.logging.set_verbosity_error()
    cfg = copy.deepcopy(cfg)  # transformers standardizes rope_scaling in place
    c = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    rp = c.rope_parameters
    assert rp["rope_type"] == sc.rope_type, (name, rp["rope_type"], sc.rope_type)
    fn = ROPE_INIT_FUNCTIONS[sc.rope_type]
    tables = [("inv_freq", fn(c, "cpu"), sc.freq_divisor)]
    if sc.long_divisor is not None:
        assert rp["original_max_position_embeddings"] == sc.long_from, (name, rp, sc.long_from)
        tables.append(("long inv_freq", fn(c, "cpu", seq_len=sc.long_from + 1), sc.long_divisor))
    notes = []
    for what, (inv, af), div in tables:
        assert inv.dtype == F32 and inv.shape == (sc.dim // 2,), (name, inv.dtype, inv.shape)
        ours = rope_inv_freq(sc.base, sc.dim) / torch.tensor(div, dtype=F64).to(F32).to(F64)
        rel = float(((ours - inv.to(F64)) / ours).abs().max())
        af_rel = abs(af - sc.attention_factor) / sc.attention_factor
        assert rel <= INV_FREQ_RTOL, "%s: %s off transformers' by %.3g" % (name, what, rel)
        assert af_rel <= ATTENTION_FACTOR_RTOL, "%s: attention factor %r, transformers %r" % (
            name, sc.attention_factor, af)
        notes.append("%s max relative error %.2g, attention factor %.9g (error %.2g)"
                     % (what, rel, af, af_rel))
    print("rope scaling self-check %s (%s, d %d, base %g): %s" % (
        name, sc.rope_type, sc.dim, sc.base, "; ".join(notes)), file=sys.stderr, flush=True)
