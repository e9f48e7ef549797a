package tensor

import "testing"

func TestDTypeStringSize(t *testing.T) {
	for _, tc := range []struct {
		dt   DType
		name string
		size int
	}{
		{F16, "f16", 2}, {BF16, "bf16", 2}, {F32, "f32", 4}, {I32, "i32", 4}, {Invalid, "invalid", 0}, {DType(99), "invalid", 0},
	} {
		if got := tc.dt.String(); got != tc.name {
			t.Errorf("DType(%d).String() = %q, want %q", tc.dt, got, tc.name)
		}
		if got := tc.dt.Size(); got != tc.size {
			t.Errorf("%v.Size() = %d, want %d", tc.dt, got, tc.size)
		}
	}
}

func TestParseDType(t *testing.T) {
	for _, dt := range []DType{F16, BF16, F32, I32} {
		got, err := ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", dt.String(), got, err, dt)
		}
	}
	for _, s := range []string{"", "invalid", "F16", "float16", "half", "<f2", "f64", "i64", " f16", "BF16", "bfloat16", "<u2"} {
		if got, err := ParseDType(s); err == nil {
			t.Errorf("ParseDType(%q) = %v, want an error", s, got)
		}
	}
}
