package model

import (
	"math"

	"github.com/x448/float16"
)

// roundF32 rounds src to fp16 into dst (as long) and returns the index of the first element
// that overflows, or -1. The common case, an fp16 normal (weights are), is inline; the rest
// goes through f32ToF16.
func roundF32(dst []float16.Float16, src []float32) int {
	dst = dst[:len(src)]
	for k, v := range src {
		u := math.Float32bits(v)
		if a := u & 0x7fffffff; a-minNormal < overflow-minNormal {
			dst[k] = float16.Frombits(normalF16(u, a))
			continue
		}
		h := f32ToF16(u)
		if h&0x7fff == 0x7c00 {
			return k
		}
		dst[k] = float16.Frombits(h)
	}
	return -1
}

// roundBF16 rounds BF16 bits to fp16 bits in place (a BF16 value is the float32 of its bits
// shifted up 16), as roundF32 does.
func roundBF16(v []uint16) int {
	for k, b := range v {
		u := uint32(b) << 16
		if a := u & 0x7fffffff; a-minNormal < overflow-minNormal {
			v[k] = normalF16(u, a)
			continue
		}
		h := f32ToF16(u)
		if h&0x7fff == 0x7c00 {
			return k
		}
		v[k] = h
	}
	return -1
}

// Magnitude bits of float32s: fp16's least normal, 2^-14, and 65520, the least value that
// rounds past fp16's largest finite one, 65504.
const (
	minNormal = 0x38800000
	overflow  = 0x477ff000
)

// normalF16 rounds u, whose magnitude bits a lie in [minNormal, overflow), to the nearest fp16
// (ties to even): rebias the exponent (127 to 15) and round 23 mantissa bits to 10, a carry
// running into the exponent.
func normalF16(u, a uint32) uint16 {
	return uint16(u>>16)&0x8000 | uint16((a-0x38000000+0xfff+(a>>13&1))>>13)
}

// f32ToF16 is float16.Fromfloat32 on bits, the same result for every input (round to nearest
// even, overflow to ±Inf, NaNs quieted keeping sign and top payload bits; the tests check it
// against Fromfloat32), with the common case, an fp16 normal, one add and shift: converting
// element by element through Fromfloat32 was most of an F32 checkpoint's load time.
func f32ToF16(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a >= 0x7f800000: // Inf or NaN
		if a == 0x7f800000 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(a&0x7fffff>>13)
	case a >= overflow:
		return sign | 0x7c00
	case a >= minNormal:
		return normalF16(u, a)
	case a >= 0x33000000: // an fp16 subnormal (or 2^-14 by rounding up): 24 bits to 24-s
		x := a&0x7fffff | 0x800000
		s := 126 - a>>23 // 14..24
		return sign | uint16((x+(1<<(s-1))-1+(x>>s&1))>>s)
	}
	return sign // below half the least subnormal: ±0
}
