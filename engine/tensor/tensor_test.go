package tensor

import (
	"math"
	"slices"
	"testing"

	"github.com/x448/float16"
)

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestNumElements(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		want  int
	}{
		{nil, 1}, {[]int{}, 1}, {[]int{7}, 7}, {[]int{4, 896}, 3584}, {[]int{2, 0, 5}, 0}, {[]int{2, 3, 4}, 24},
	} {
		if got := NumElements(tc.shape); got != tc.want {
			t.Errorf("NumElements(%v) = %d, want %d", tc.shape, got, tc.want)
		}
	}
	mustPanic(t, "NumElements negative", func() { NumElements([]int{2, -1}) })
	mustPanic(t, "NumElements overflow", func() { NumElements([]int{math.MaxInt / 2, 3}) })
}

func TestNew(t *testing.T) {
	for _, dt := range []DType{F16, F32, I32} {
		x := New(dt, 2, 3)
		if x.DType != dt || !SameShape(x.Shape, []int{2, 3}) || x.Len() != 6 || x.Bytes() != int64(6*dt.Size()) {
			t.Errorf("New(%v, 2, 3) = %v len %d bytes %d", dt, x, x.Len(), x.Bytes())
		}
		set := 0
		for _, n := range []int{len(x.F16), len(x.F32), len(x.I32)} {
			if n > 0 {
				set++
			}
		}
		if set != 1 {
			t.Errorf("New(%v) set %d data slices, want 1", dt, set)
		}
	}
	s := New(F32)
	if s.Len() != 1 || s.Shape == nil || len(s.Shape) != 0 || s.String() != "f32[]" {
		t.Errorf("0-d New = %v (len %d, shape %#v)", s, s.Len(), s.Shape)
	}
	dims := []int{2, 2}
	x := New(I32, dims...)
	dims[0] = 9
	if x.Shape[0] != 2 {
		t.Error("New aliases the caller's shape slice")
	}
	mustPanic(t, "New negative", func() { New(F32, 3, -1) })
	mustPanic(t, "New Invalid", func() { New(Invalid, 3) })
	mustPanic(t, "New unknown dtype", func() { New(DType(42), 3) })
}

func TestFrom(t *testing.T) {
	shape := []int{2, 2}
	h := FromF16(shape, []float16.Float16{1, 2, 3, 4})
	f := FromF32(shape, []float32{1, 2, 3, 4})
	i := FromI32(shape, []int32{1, 2, 3, 4})
	shape[0] = 7
	for _, x := range []*Tensor{h, f, i} {
		if !SameShape(x.Shape, []int{2, 2}) || x.Len() != 4 {
			t.Errorf("%v: shape aliased or wrong length %d", x, x.Len())
		}
	}
	if z := FromF32(nil, []float32{5}); z.Shape == nil || z.String() != "f32[]" {
		t.Errorf("FromF32(nil) = %v (shape %#v)", z, z.Shape)
	}
	mustPanic(t, "FromF16 mismatch", func() { FromF16([]int{3}, make([]float16.Float16, 2)) })
	mustPanic(t, "FromF32 mismatch", func() { FromF32([]int{2, 2}, make([]float32, 5)) })
	mustPanic(t, "FromI32 mismatch", func() { FromI32(nil, nil) })
	mustPanic(t, "FromI32 negative", func() { FromI32([]int{-1}, nil) })
}

func TestClone(t *testing.T) {
	a := FromF32([]int{3}, []float32{1, 2, 3})
	b := a.Clone()
	b.F32[0] = 9
	b.Shape[0] = 1
	if a.F32[0] != 1 || a.Shape[0] != 3 {
		t.Error("Clone shares data or shape with the original")
	}
	if b.F16 != nil || b.I32 != nil {
		t.Error("Clone set data slices the original did not have")
	}
}

func TestFloatViews(t *testing.T) {
	h := FromF16([]int{4}, []float16.Float16{
		float16.Fromfloat32(1.5), float16.Fromfloat32(-2), float16.Frombits(0x0001), float16.Inf(-1),
	})
	wantH := []float64{1.5, -2, math.Ldexp(1, -24), math.Inf(-1)}
	if got := h.Float64(); !slices.Equal(got, wantH) {
		t.Errorf("f16 Float64 = %v, want %v", got, wantH)
	}
	if got := h.Float32(); got[2] != float32(math.Ldexp(1, -24)) || !math.IsInf(float64(got[3]), -1) {
		t.Errorf("f16 Float32 = %v", got)
	}
	i := FromI32([]int{3}, []int32{-7, 0, math.MaxInt32})
	if got := i.Float64(); !slices.Equal(got, []float64{-7, 0, math.MaxInt32}) {
		t.Errorf("i32 Float64 = %v", got)
	}
	if got := i.Float32(); got[0] != -7 {
		t.Errorf("i32 Float32 = %v", got)
	}
	f := FromF32([]int{2}, []float32{0.1, -3})
	got := f.Float32()
	got[0] = 42
	if f.F32[0] != 0.1 {
		t.Error("Float32 returned the tensor's own slice")
	}
	if g := f.Float64(); g[0] != float64(float32(0.1)) {
		t.Errorf("f32 Float64 = %v", g)
	}
}

func TestStrings(t *testing.T) {
	if s := New(F16, 4, 896).String(); s != "f16[4,896]" {
		t.Errorf("String = %q", s)
	}
	for _, tc := range []struct {
		shape []int
		want  string
	}{{nil, "[]"}, {[]int{}, "[]"}, {[]int{5}, "[5]"}, {[]int{1, 2, 3}, "[1,2,3]"}} {
		if got := ShapeString(tc.shape); got != tc.want {
			t.Errorf("ShapeString(%v) = %q, want %q", tc.shape, got, tc.want)
		}
	}
}

func TestSameShape(t *testing.T) {
	if !SameShape(nil, []int{}) || !SameShape([]int{2, 3}, []int{2, 3}) {
		t.Error("SameShape false for equal shapes")
	}
	if SameShape([]int{2, 3}, []int{3, 2}) || SameShape([]int{6}, []int{6, 1}) || SameShape(nil, []int{1}) {
		t.Error("SameShape true for different shapes")
	}
}

func TestIndex(t *testing.T) {
	x := New(F32, 2, 3, 4)
	flat := 0
	for i := range 2 {
		for j := range 3 {
			for k := range 4 {
				if got := x.Index(flat); !slices.Equal(got, []int{i, j, k}) {
					t.Fatalf("Index(%d) = %v, want %v", flat, got, []int{i, j, k})
				}
				flat++
			}
		}
	}
	if got := New(I32).Index(0); len(got) != 0 {
		t.Errorf("0-d Index(0) = %v", got)
	}
	mustPanic(t, "Index past end", func() { x.Index(24) })
	mustPanic(t, "Index negative", func() { x.Index(-1) })
	mustPanic(t, "Index on empty", func() { New(F16, 0, 3).Index(0) })
}
