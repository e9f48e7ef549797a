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
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want f16, bf16, f32 or i32)", s)
}
