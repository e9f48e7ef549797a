package tensor

import (
	"fmt"
	"math"
)

// The FP8 storage types of docs/quantization.md. Their elements are raw bytes (Tensor.F8);
// the conversions here are the spec's, bit for bit: saturation to the largest finite value,
// round to nearest with ties to even, every NaN to 0x7F.

const (
	// E4M3Max is the largest finite f8e4m3 value (torch.float8_e4m3fn: no infinities).
	E4M3Max = 448
	// E5M2Max is the largest finite f8e5m2 value.
	E5M2Max = 57344
	// fp8NaN is the NaN every conversion produces, whatever the sign of its input.
	fp8NaN = 0x7F
)

// E4M3FromFloat32 is the spec's e4m3(v): v clamped to [-448, 448] (±inf included), rounded to
// the nearest f8e4m3 value, ties to even; NaN is 0x7F.
func E4M3FromFloat32(v float32) uint8 { return fp8FromFloat32(v, 4, 3, E4M3Max) }

// E5M2FromFloat32 is e5m2(v): v clamped to [-57344, 57344], rounded to nearest even; NaN is 0x7F.
func E5M2FromFloat32(v float32) uint8 { return fp8FromFloat32(v, 5, 2, E5M2Max) }

// fp8FromFloat32 rounds v to a sign-exponent-mantissa byte with ebits exponent bits (bias
// 2^(ebits-1) - 1) and mbits mantissa bits, saturating at max. Every step is exact in float64:
// v is a float32, and the scalings are powers of two.
func fp8FromFloat32(v float32, ebits, mbits int, max float64) uint8 {
	if v != v {
		return fp8NaN
	}
	sign := uint8(math.Float32bits(v)>>24) & 0x80
	a := math.Abs(float64(v))
	bias := 1<<(ebits-1) - 1
	if a >= max {
		return sign | encodeFP8(max, bias, mbits)
	}
	return sign | encodeFP8(a, bias, mbits)
}

// encodeFP8 encodes a in [0, max]: subnormal below 2^(1-bias), in steps of 2^(1-bias-mbits);
// normal above, in steps of 2^(e-mbits) for a in [2^e, 2^(e+1)). A rounding up to the next
// power of two carries into the exponent through the integer add, as the bit layout is ordered.
func encodeFP8(a float64, bias, mbits int) uint8 {
	minNormal := math.Ldexp(1, 1-bias)
	if a < minNormal {
		return uint8(math.RoundToEven(math.Ldexp(a, bias-1+mbits)))
	}
	_, exp := math.Frexp(a) // a = f 2^exp, f in [0.5, 1): a in [2^(exp-1), 2^exp)
	e := exp - 1
	q := int(math.RoundToEven(math.Ldexp(a, mbits-e))) // in [2^mbits, 2^(mbits+1)]
	return uint8((e+bias)<<mbits + q - 1<<mbits)
}

// E4M3ToFloat32 decodes an f8e4m3 byte exactly; 0x7F and 0xFF are NaN.
func E4M3ToFloat32(b uint8) float32 {
	if b&0x7F == 0x7F {
		return float32(math.NaN())
	}
	return decodeFP8(b, 4, 3)
}

// E5M2ToFloat32 decodes an f8e5m2 byte exactly: exponent field 31 is ±inf (mantissa 0) or NaN.
func E5M2ToFloat32(b uint8) float32 {
	if b&0x7C == 0x7C {
		if b&0x03 != 0 {
			return float32(math.NaN())
		}
		return float32(math.Inf(1 - 2*int(b>>7)))
	}
	return decodeFP8(b, 5, 2)
}

func decodeFP8(b uint8, ebits, mbits int) float32 {
	bias := 1<<(ebits-1) - 1
	e := int(b>>mbits) & (1<<ebits - 1)
	m := float64(int(b) & (1<<mbits - 1))
	var v float64
	if e == 0 {
		v = math.Ldexp(m, 1-bias-mbits)
	} else {
		v = math.Ldexp(m+float64(int(1)<<mbits), e-bias-mbits)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// IsFP8 reports whether d is one of the FP8 storage types.
func (d DType) IsFP8() bool { return d == F8E4M3 || d == F8E5M2 }

// FP8FromFloat32 converts v to dt's bytes by the spec; it panics unless dt is an FP8 type.
func FP8FromFloat32(dt DType, v float32) uint8 {
	switch dt {
	case F8E4M3:
		return E4M3FromFloat32(v)
	case F8E5M2:
		return E5M2FromFloat32(v)
	}
	panic(fmt.Sprintf("tensor: FP8FromFloat32(%v)", dt))
}

// FP8ToFloat32 decodes a byte of dt; it panics unless dt is an FP8 type.
func FP8ToFloat32(dt DType, b uint8) float32 {
	switch dt {
	case F8E4M3:
		return E4M3ToFloat32(b)
	case F8E5M2:
		return E5M2ToFloat32(b)
	}
	panic(fmt.Sprintf("tensor: FP8ToFloat32(%v)", dt))
}

// FromF8 wraps raw FP8 bytes of dt (F8E4M3 or F8E5M2) without copying them.
func FromF8(dt DType, shape []int, data []uint8) *Tensor {
	if !dt.IsFP8() {
		panic(fmt.Sprintf("tensor: FromF8 with dtype %v", dt))
	}
	checkLen("FromF8", shape, len(data))
	return &Tensor{DType: dt, Shape: cloneShape(shape), F8: data}
}
