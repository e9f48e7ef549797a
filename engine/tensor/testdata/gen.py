"""Regenerates the numpy-written fixtures in this directory.

Run with the project venv: /opt/tsvenv/bin/python gen.py (numpy 2.4.6 wrote the committed files).
The Go tests compare their own encoder byte-for-byte against these files and check that the
decoder reproduces every bit pattern, so the fixtures must come from numpy itself, not from Go.
"""

import numpy as np


def f16_bits(bits, shape):
    return np.array(bits, dtype=np.uint16).reshape(shape).view(np.float16)


# fp16 bit patterns that must survive a round trip unchanged: NaNs with payloads and both signs,
# infinities, signed zeros, subnormals, the extremes of the normal range.
special = [
    0x7E00, 0x7C01, 0xFE00, 0x7D55, 0x7C00, 0xFC00,
    0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x83FF,
    0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3555,
    0x1234, 0x4321, 0xC000, 0x5A5A, 0x0200, 0x8200,
]
np.save("f16_special_3d.npy", f16_bits(special, (2, 3, 4)))

f32 = np.array(
    [0.0, -0.0, 1.0, -2.5, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
     1.1754944e-38, np.inf, -np.inf, np.nan, 0.1, 1e10, -7.0],
    dtype=np.float32,
)
f32.view(np.uint32)[11] = 0x7FC12345  # NaN with a payload
np.save("f32_2d.npy", f32.reshape(3, 5))

np.save("i32_1d.npy", np.array([0, 1, -1, 2**31 - 1, -(2**31), 42, -42], dtype=np.int32))
np.save("f32_0d.npy", np.float32(1.5))
np.save("f16_empty.npy", np.zeros((0, 3), dtype=np.float16))
np.save("i32_4d.npy", np.arange(2 * 1 * 3 * 2, dtype=np.int32).reshape(2, 1, 3, 2))

# Files numpy writes happily but the harness must refuse.
np.save("bad_fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save("bad_big_endian.npy", np.zeros(3, dtype=">f2"))
np.save("bad_f8.npy", np.zeros(3, dtype=np.float64))
np.save("bad_bool.npy", np.zeros(3, dtype=np.bool_))

# float32 -> float16 rounding as numpy does it (round to nearest even, overflow to inf), the
# same rule CUDA's __float2half follows. Inputs mix random values across the whole fp16 range
# (exponents chosen so subnormals, normals and overflow all occur) with exact ties.
rng = np.random.default_rng(1234)
mant = rng.integers(0, 2**23, size=400, dtype=np.uint32)
exp = rng.integers(127 - 26, 127 + 17, size=400, dtype=np.uint32)
sign = rng.integers(0, 2, size=400, dtype=np.uint32)
rand = ((sign << 31) | (exp << 23) | mant).view(np.float32)
ties = []
for h in [0x0001, 0x0002, 0x03FE, 0x0400, 0x3C00, 0x3C01, 0x7BFE]:
    lo = np.array([h], dtype=np.uint16).view(np.float16).astype(np.float32)[0]
    hi = np.array([h + 1], dtype=np.uint16).view(np.float16).astype(np.float32)[0]
    ties.append((np.float64(lo) + np.float64(hi)) / 2)
edges = [65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 1e-8, 2.0**-25, 2.0**-24, 3 * 2.0**-26,
         np.inf, -np.inf, -0.0]
vals = np.concatenate([rand, np.array(ties + edges, dtype=np.float32)]).astype(np.float32)
np.save("round_f16_in.npy", vals)
np.save("round_f16_out.npy", vals.astype(np.float16))
