package tensor

import "math"

// BFloat16 is a bfloat16 value as its bit pattern: the top half of a float32 (sign, 8 exponent
// bits, 7 mantissa bits). Its range is fp32's and its unit roundoff 2^-8, 8 times fp16's
// 2^-11. Checkpoints on the hub store it; numpy has no such dtype, so .npy files carry its bits
// as '<u2' (docs/golden-format.md, "bf16").
type BFloat16 uint16

// Float32 widens b exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Bits is the bit pattern.
func (b BFloat16) Bits() uint16 { return uint16(b) }

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even, as CUDA's __float2bfloat16_rn
// and torch's .to(torch.bfloat16) do: values past the largest finite bfloat16 round to ±Inf, a
// NaN stays a (quiet) NaN of the same sign.
func BF16FromFloat32(f float32) BFloat16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet mantissa bit
		return BFloat16(u>>16 | 0x0040)
	}
	// Round to nearest even on the 16 bits dropped: add 0x7fff plus the lowest kept bit. A
	// carry out of the mantissa bumps the exponent, which is the correct result (up to Inf).
	u += 0x7fff + (u>>16)&1
	return BFloat16(u >> 16)
}

// RoundBF16 rounds x to the nearest bfloat16 and widens it back: what a kernel storing bf16
// does to an fp32 result.
func RoundBF16(x float32) float32 { return BF16FromFloat32(x).Float32() }

// Round rounds x to dt's precision: fp16 or bf16 rounding, x itself for F32. It panics on
// another dtype: rounding an activation to an integer type is a bug in the caller.
func Round(dt DType, x float32) float32 {
	switch dt {
	case F16:
		return RoundF16(x)
	case BF16:
		return RoundBF16(x)
	case F32:
		return x
	}
	panic("tensor: Round to " + dt.String())
}

// FromBF16 is FromF16 for bfloat16 data.
func FromBF16(shape []int, data []BFloat16) *Tensor {
	checkLen("FromBF16", shape, len(data))
	return &Tensor{DType: BF16, Shape: cloneShape(shape), BF16: data}
}

// IsFloat16Bit reports whether dt is one of the 16-bit float storage types (F16, BF16) that
// activations and weights are kept in.
func (d DType) IsFloat16Bit() bool { return d == F16 || d == BF16 }
