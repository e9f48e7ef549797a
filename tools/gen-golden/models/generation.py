"""What every model set generates, and its seeds: the set seed, the prompt (its length, seed and
ids), the greedy tokens, and the seeded generation's configuration and RNG key."""

import hashlib

import torch

import sampling
from common.dtypes import F64, I32
from common.seeds import MASTER_SEED, case_seed

CASE = "greedy32"
PROMPT_LEN = 16
GREEDY_TOKENS = 32
# Seeded generation (docs/sampling.md) from the same prompt: a typical chat configuration, whose
# temperature and top_p are the fp32 values a C caller passes (0.8f, 0.95f).
SAMPLE_TOKENS = 32
SAMPLE_TEMPERATURE = sampling.f32(0.8)
SAMPLE_TOP_K = 40
SAMPLE_TOP_P = sampling.f32(0.95)


def set_seed(model):
    """The set's 32-bit seed: sha256("<master>:models/<model>/<case>")[:4], big-endian."""
    return case_seed("models/" + model, CASE)


def sample_seed(model):
    """The RNG key of a set's seeded generation: sha256("<master>:models/<model>/sample32")[:8],
    big-endian, a uint64 (so both Philox key words are exercised)."""
    text = "%d:models/%s/sample%d" % (MASTER_SEED, model, SAMPLE_TOKENS)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


PROMPT_SEED = case_seed("models", "prompt")


def prompt_ids(vocab_size):
    """The prompt of every set: PROMPT_LEN fp64 uniforms u from one fixed seed, ids = floor(u * V).
    The same draws for every model, scaled to its vocabulary."""
    g = torch.Generator(device="cpu").manual_seed(PROMPT_SEED)
    u = torch.rand((PROMPT_LEN,), generator=g, dtype=F64)
    return torch.clamp((u * vocab_size).floor().to(torch.int64), 0, vocab_size - 1).to(I32)
