"""The master seed and what every set's randomness is derived from: case_seed (a 32-bit seed of a
name, sha256-based, never hash()) and Draw (a case's float64 CPU generator). Kernel cases, model
sets, batch sets and sampling sets all derive their seeds here (README, "Determinism")."""

import hashlib

import torch

from common.dtypes import F64, I32

MASTER_SEED = 20261121


def case_seed(op, case):
    """A 32-bit seed that depends only on the master seed and "op/case" (never on hash())."""
    digest = hashlib.sha256(("%d:%s/%s" % (MASTER_SEED, op, case)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


class Draw:
    """All randomness of one case, from one CPU generator.

    Values are drawn in float64 on purpose: torch's float32 randn takes a vectorised AVX2 path on
    some CPUs and a scalar path on others, and the two differ in the last bits (enough to change
    hundreds of fp16 values per million). The float64 path is the same on every CPU.
    """

    def __init__(self, seed):
        self.g = torch.Generator(device="cpu").manual_seed(seed)

    def randn(self, shape):
        return torch.randn(shape, generator=self.g, dtype=F64)

    def rand(self, shape):
        return torch.rand(shape, generator=self.g, dtype=F64)

    def randint(self, lo, hi, shape):
        return torch.randint(lo, hi, shape, generator=self.g, dtype=torch.int64).to(I32)
