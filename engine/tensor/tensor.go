package tensor

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/x448/float16"
)

// Tensor is a dense C-order host tensor. Exactly one data slice, the one matching DType, is
// set; the others stay nil so that reading the wrong one fails loudly rather than yielding
// zeros. A 0-d tensor has an empty Shape and one element.
type Tensor struct {
	DType DType
	Shape []int
	F16   []float16.Float16
	BF16  []BFloat16
	F32   []float32
	I32   []int32
	// F8 holds the raw bytes of the FP8 types (F8E4M3, F8E5M2) and of U8.
	F8 []uint8
}

// NumElements is the product of the dims (1 for a 0-d shape). It panics on a negative dim or
// on overflow: shapes reaching it are either built by code or already validated (the .npy
// decoder and the manifest parser check theirs), so a bad one is a bug upstream.
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %s", ShapeString(shape)))
		}
		if d != 0 && n > math.MaxInt/d {
			panic(fmt.Sprintf("tensor: shape %s overflows int", ShapeString(shape)))
		}
		n *= d
	}
	return n
}

// New returns a zeroed tensor. It panics on a negative dim or Invalid dtype: both are bugs
// in the caller, not conditions to handle.
func New(dt DType, shape ...int) *Tensor {
	n := NumElements(shape)
	t := &Tensor{DType: dt, Shape: slices.Clone(shape)}
	if t.Shape == nil {
		t.Shape = []int{}
	}
	switch dt {
	case F16:
		t.F16 = make([]float16.Float16, n)
	case BF16:
		t.BF16 = make([]BFloat16, n)
	case F32:
		t.F32 = make([]float32, n)
	case I32:
		t.I32 = make([]int32, n)
	case F8E4M3, F8E5M2, U8:
		t.F8 = make([]uint8, n)
	default:
		panic(fmt.Sprintf("tensor: New with dtype %v", dt))
	}
	return t
}

// FromF16 wraps data without copying it, so the caller must not keep mutating it unless it
// means to mutate the tensor. It panics if len(data) does not match the shape.
func FromF16(shape []int, data []float16.Float16) *Tensor {
	checkLen("FromF16", shape, len(data))
	return &Tensor{DType: F16, Shape: cloneShape(shape), F16: data}
}

// FromF32 is FromF16 for float32 data.
func FromF32(shape []int, data []float32) *Tensor {
	checkLen("FromF32", shape, len(data))
	return &Tensor{DType: F32, Shape: cloneShape(shape), F32: data}
}

// FromI32 is FromF16 for int32 data.
func FromI32(shape []int, data []int32) *Tensor {
	checkLen("FromI32", shape, len(data))
	return &Tensor{DType: I32, Shape: cloneShape(shape), I32: data}
}

func checkLen(fn string, shape []int, n int) {
	if want := NumElements(shape); want != n {
		panic(fmt.Sprintf("tensor: %s: shape %s needs %d elements, got %d", fn, ShapeString(shape), want, n))
	}
}

// cloneShape copies so that a tensor never aliases a caller's shape slice, and normalises nil
// to empty so 0-d tensors compare and print the same however they were built.
func cloneShape(shape []int) []int {
	if shape == nil {
		return []int{}
	}
	return slices.Clone(shape)
}

// Len is the number of elements actually held, which for a well-formed tensor equals
// NumElements(t.Shape).
func (t *Tensor) Len() int {
	switch t.DType {
	case F16:
		return len(t.F16)
	case BF16:
		return len(t.BF16)
	case F32:
		return len(t.F32)
	case I32:
		return len(t.I32)
	case F8E4M3, F8E5M2, U8:
		return len(t.F8)
	}
	return 0
}

// Bytes is the size of the element data, as a device allocation would need it.
func (t *Tensor) Bytes() int64 {
	return int64(t.Len()) * int64(t.DType.Size())
}

// Clone is a deep copy.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{
		DType: t.DType,
		Shape: cloneShape(t.Shape),
		F16:   slices.Clone(t.F16),
		BF16:  slices.Clone(t.BF16),
		F32:   slices.Clone(t.F32),
		I32:   slices.Clone(t.I32),
		F8:    slices.Clone(t.F8),
	}
}

// Float32 returns the elements in a new slice. Widening f16 and bf16 is exact; i32 values beyond 2^24
// lose precision, which is acceptable for the comparisons this feeds.
func (t *Tensor) Float32() []float32 {
	out := make([]float32, t.Len())
	switch t.DType {
	case F16:
		for i, v := range t.F16 {
			out[i] = v.Float32()
		}
	case BF16:
		for i, v := range t.BF16 {
			out[i] = v.Float32()
		}
	case F32:
		copy(out, t.F32)
	case I32:
		for i, v := range t.I32 {
			out[i] = float32(v)
		}
	case F8E4M3, F8E5M2:
		for i, v := range t.F8 {
			out[i] = FP8ToFloat32(t.DType, v)
		}
	case U8:
		for i, v := range t.F8 {
			out[i] = float32(v)
		}
	}
	return out
}

// Float64 returns the elements in a new slice; every dtype widens to float64 exactly.
func (t *Tensor) Float64() []float64 {
	out := make([]float64, t.Len())
	switch t.DType {
	case F16:
		for i, v := range t.F16 {
			out[i] = float64(v.Float32())
		}
	case BF16:
		for i, v := range t.BF16 {
			out[i] = float64(v.Float32())
		}
	case F32:
		for i, v := range t.F32 {
			out[i] = float64(v)
		}
	case I32:
		for i, v := range t.I32 {
			out[i] = float64(v)
		}
	case F8E4M3, F8E5M2:
		for i, v := range t.F8 {
			out[i] = float64(FP8ToFloat32(t.DType, v))
		}
	case U8:
		for i, v := range t.F8 {
			out[i] = float64(v)
		}
	}
	return out
}

func (t *Tensor) String() string {
	return t.DType.String() + ShapeString(t.Shape)
}

// ShapeString formats a shape compactly, e.g. "[4,896]", "[]" for 0-d.
func ShapeString(shape []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteByte(']')
	return b.String()
}

// SameShape treats nil and empty as the same (0-d) shape.
func SameShape(a, b []int) bool {
	return slices.Equal(a, b)
}

// Index converts a flat C-order offset to a multi-index, for reporting where a mismatch
// occurred. It panics if flat is out of range.
func (t *Tensor) Index(flat int) []int {
	n := NumElements(t.Shape)
	if flat < 0 || flat >= n {
		panic(fmt.Sprintf("tensor: Index(%d) out of range for %v", flat, t))
	}
	idx := make([]int, len(t.Shape))
	for i := len(t.Shape) - 1; i >= 0; i-- {
		idx[i] = flat % t.Shape[i]
		flat /= t.Shape[i]
	}
	return idx
}
