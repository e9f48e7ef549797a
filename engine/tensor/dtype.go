package tensor

import "fmt"

// DType is the element type of a Tensor. The zero value is Invalid so that a forgotten
// assignment is caught instead of silently meaning some real type.
type DType uint8

const (
	Invalid DType = iota
	F16
	F32
	I32
	// BF16 is bfloat16 (BFloat16), appended after I32 so that the existing values keep
	// their numbers.
	BF16
	// F8E4M3 and F8E5M2 are the FP8 storage types of docs/quantization.md (torch's
	// float8_e4m3fn and float8_e5m2), one byte each in Tensor.F8.
	F8E4M3
	F8E5M2
	// U8 is a byte array: what a '|u1' .npy file decodes to before its manifest says which FP8
	// type it holds (golden.Set.Tensor relabels it).
	U8
)

func (d DType) String() string {
	switch d {
	case F16:
		return "f16"
	case F32:
		return "f32"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
	case F8E4M3:
		return "f8e4m3"
	case F8E5M2:
		return "f8e5m2"
	case U8:
		return "u8"
	}
	return "invalid"
}

// Size is the number of bytes per element; 0 for Invalid.
func (d DType) Size() int {
	switch d {
	case F16, BF16:
		return 2
	case F32, I32:
		return 4
	case F8E4M3, F8E5M2, U8:
		return 1
	}
	return 0
}

// ParseDType accepts exactly the spellings the golden manifests use; aliases such as "float16"
// are refused so that one dtype has one name across Python, manifests and Go.
func ParseDType(s string) (DType, error) {
	switch s {
	case "f16":
		return F16, nil
	case "f32":
		return F32, nil
	case "i32":
		return I32, nil
	case "bf16":
		return BF16, nil
	case "f8e4m3":
		return F8E4M3, nil
	case "f8e5m2":
		return F8E5M2, nil
	case "u8":
		return U8, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want f16, bf16, f32, i32, f8e4m3, f8e5m2 or u8)", s)
}
