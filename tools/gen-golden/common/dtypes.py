"""The numeric types of every set: torch's names for them, the rounding of a float64 draw to the
16-bit storage type a kernel receives (fp16 or bf16), a set dtype's torch dtype, and the FP8
conversion of docs/quantization.md."""

import torch

F16, BF16, F32, F64, I32 = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32
F8E4M3, F8E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_f16(t):
    """The fp16 input a kernel receives: the fp64 draw rounded to fp32, then to fp16."""
    h = t.to(F32).to(F16)
    if not torch.isfinite(h).all():
        raise ValueError("input overflows fp16")
    return h


def to_bf16(t):
    """The bf16 input a kernel receives: the fp64 draw rounded to fp32, then to bf16 (round to
    nearest even, as __float2bfloat16_rn; bf16 has fp32's exponent range and 8 significant
    bits)."""
    h = t.to(F32).to(BF16)
    if not torch.isfinite(h).all():
        raise ValueError("input overflows bf16")
    return h


# A case's storage type (the `dtype` of every op) -> the rounding to it.
STORAGE = {"f16": to_f16, "bf16": to_bf16}


def storage(dtype):
    """The rounding to a case's 16-bit storage type ("f16" or "bf16")."""
    if dtype not in STORAGE:
        raise ValueError("storage dtype %r (want f16 or bf16)" % (dtype,))
    return STORAGE[dtype]


# A model set's dtype (params.dtype, configs.DTYPES) -> the torch dtype its checkpoint stores and
# its calibration rounds to.
TORCH_DTYPE = {"f16": F16, "bf16": BF16}


# docs/quantization.md, "FP8 storage types": the largest finite f8e4m3 value and its NaN byte.
E4M3_MAX = 448.0
E4M3_NAN = 0x7F


def to_e4m3(v):
    """e4m3(v) of docs/quantization.md for a float32 tensor: saturated to [-448, 448] first
    (torch's own conversion turns everything from 464 up, and inf, into NaN), then the nearest
    f8e4m3 value, ties to even; every NaN becomes 0x7F (torch keeps a NaN's sign bit, and x86's
    default NaN, inf / inf, is negative: no implementation may depend on it)."""
    if v.dtype != F32:
        raise TypeError("to_e4m3 takes float32, not %s" % v.dtype)
    bits = v.clamp(-E4M3_MAX, E4M3_MAX).to(F8E4M3).view(torch.uint8).clone()
    bits[(bits & 0x7F) == E4M3_NAN] = E4M3_NAN
    return bits.view(F8E4M3)
