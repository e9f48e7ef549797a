package compare

import (
	"sort"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func steps(n int, mismatch float64) Tolerance {
	return Tolerance{MaxSteps: &n, MaxMismatch: mismatch, Why: "t"}
}

func e4m3(codes ...uint8) *tensor.Tensor {
	return tensor.FromF8(tensor.F8E4M3, []int{len(codes)}, codes)
}

// Ordered by value, the finite codes of both formats (and e5m2's infinities) sit one position
// apart, the two zeros on one position: what "one step" means is the number line itself.
func TestFP8PositionsAreTheNumberLine(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F8E4M3, tensor.F8E5M2} {
		var codes []uint8
		for c := 0; c < 256; c++ {
			if v := tensor.FP8ToFloat32(dt, uint8(c)); v == v {
				codes = append(codes, uint8(c))
			}
		}
		sort.SliceStable(codes, func(i, j int) bool {
			return tensor.FP8ToFloat32(dt, codes[i]) < tensor.FP8ToFloat32(dt, codes[j])
		})
		for i := 1; i < len(codes); i++ {
			a, b := codes[i-1], codes[i]
			va, vb := tensor.FP8ToFloat32(dt, a), tensor.FP8ToFloat32(dt, b)
			want := 1
			if va == vb { // -0 and +0
				want = 0
			}
			if d := fp8Position(b) - fp8Position(a); d != want {
				t.Fatalf("%s: %#02x (%g) to %#02x (%g): %d positions, want %d", dt, a, va, b, vb, d, want)
			}
		}
	}
}

func TestMaxStepsAllowsOneStepOnAShareOfCodes(t *testing.T) {
	// 0x38 = 1, 0x39 = 1.125, 0x3a = 1.25; 0xb8 = -1; 0x00 and 0x80 the two zeros; 0x7f NaN
	want := e4m3(0x38, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45)
	for _, tc := range []struct {
		name string
		got  *tensor.Tensor
		tol  Tolerance
		pass bool
		diff int
	}{
		{"identical", e4m3(0x38, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.1), true, 0},
		{"-0 for +0, NaN for NaN", e4m3(0x38, 0xb8, 0x80, 0xff, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(0, 0), true, 0},
		{"one code one step up", e4m3(0x39, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.1), true, 1},
		{"one code one step toward zero", e4m3(0x38, 0xb7, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.1), true, 1},
		{"a step where none may move", e4m3(0x39, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(0, 0), false, 1},
		{"two steps", e4m3(0x3a, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.5), false, 1},
		{"zero across the sign", e4m3(0x38, 0xb8, 0x01, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.1), true, 1},
		{"two codes where a tenth may move", e4m3(0x39, 0xb7, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.1), false, 2},
		{"a NaN for a number", e4m3(0x7f, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.5), false, 1},
		{"a number for a NaN", e4m3(0x38, 0xb8, 0x00, 0x7e, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), steps(1, 0.5), false, 1},
	} {
		r, err := Compare(tc.got, want, tc.tol)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Pass() != tc.pass || r.Mismatches != tc.diff {
			t.Errorf("%s: pass %v with %d codes differing, want %v with %d\n%s", tc.name, r.Pass(), r.Mismatches, tc.pass, tc.diff, r.Table())
		}
	}
	r, _ := Compare(e4m3(0x3a, 0xb8, 0x00, 0x7f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45), want, steps(1, 0.5))
	if c := checkOf(t, r, "steps"); c.Value != 2 || c.Budget != 2 {
		t.Errorf("steps check %+v, want value 2 (budget 2)", c)
	}
	if c := checkOf(t, r, "mismatch"); c.Value != 0.1 || c.Limit != 0.5 {
		t.Errorf("mismatch check %+v, want 0.1 of 0.5", c)
	}
	if tab := r.Table(); !strings.Contains(tab, "1 of 10 FP8 codes differ") || !strings.Contains(tab, "(2 steps)") {
		t.Errorf("table:\n%s", tab)
	}
}

func TestMaxStepsComparesCodesOfOneFormat(t *testing.T) {
	if _, err := Compare(f32(1, 2), f32(1, 2), steps(1, 0.1)); err == nil {
		t.Error("f32 under max_steps: no error")
	}
	e5 := tensor.FromF8(tensor.F8E5M2, []int{2}, []uint8{1, 2})
	if _, err := Compare(e5, e4m3(1, 2), steps(1, 0.1)); err == nil {
		t.Error("e5m2 against e4m3: no error")
	}
	if _, err := CompareAllowing(e4m3(1, 2), e4m3(1, 2), f32(0, 0), steps(1, 0.1)); err == nil {
		t.Error("an allowance under max_steps: no error")
	}
}

func TestMaxStepsValidation(t *testing.T) {
	one := 1
	for _, tc := range []struct {
		tol Tolerance
		err string
	}{
		{Tolerance{MaxSteps: &one, MaxMismatch: 1e-3, Why: "t"}, ""},
		{Tolerance{MaxSteps: new(int), Why: "t"}, ""},
		{Tolerance{MaxSteps: &one, Why: "t"}, "needs max_mismatch"},
		{Tolerance{MaxSteps: &one, MaxMismatch: 1e-3, Atol: ptr(0), Rtol: ptr(0), Why: "t"}, "no other limit"},
		{Tolerance{MaxSteps: &one, MaxMismatch: 1e-3, MinCosine: ptr(0.9), Why: "t"}, "no other limit"},
		{Tolerance{MaxSteps: &one, MaxMismatch: 1e-3, MaxAbs: ptr(0), Why: "t"}, "no other limit"},
		{Tolerance{MaxSteps: func() *int { v := -1; return &v }(), Why: "t"}, "must be >= 0"},
		{Tolerance{MaxMismatch: 1e-3, NMSE: ptr(1), Why: "t"}, "max_mismatch needs"},
	} {
		err := tc.tol.validate()
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", tc.tol, err, tc.err)
		}
	}
}

// kernels.<op>.<dtype>@<storage> is taken for a set stored in that dtype, the plain entry
// otherwise; a key's storage must be a 16-bit dtype.
func TestKernelForStorage(t *testing.T) {
	tols, err := ParseTolerances([]byte(`version: 1
kernels:
  op:
    f32: {atol: 0, rtol: 2.0e-3, why: "fp16"}
    f32@bf16: {atol: 0, rtol: 1.6e-2, why: "bf16"}
    f8e4m3: {max_steps: 1, max_mismatch: 1.0e-3, why: "codes"}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dt, storage tensor.DType
		why         string
	}{
		{tensor.F32, tensor.BF16, "bf16"},
		{tensor.F32, tensor.F16, "fp16"},
		{tensor.F32, tensor.Invalid, "fp16"},
		{tensor.F8E4M3, tensor.BF16, "codes"},
	} {
		tol, err := tols.KernelFor("op", tc.dt, tc.storage)
		if err != nil || tol.Why != tc.why {
			t.Errorf("%s in a %s set: %q, %v; want %q", tc.dt, tc.storage, tol.Why, err, tc.why)
		}
	}
	if _, err := tols.KernelFor("op", tensor.F16, tensor.F16); err == nil {
		t.Error("no f16 entry: no error")
	}
	for _, key := range []string{"f32@f32", "f32@fp8", "f33@bf16"} {
		yaml := "version: 1\nkernels:\n  op:\n    " + key + ": {max_abs: 0, why: \"t\"}\n"
		if _, err := ParseTolerances([]byte(yaml), "t.yaml"); err == nil {
			t.Errorf("key %s: no error", key)
		}
	}
}

// kernels.<op>.<output>:<dtype> is taken for that output alone, before the storage and plain
// entries; its output must be a golden name and its dtype a dtype.
func TestKernelForOutput(t *testing.T) {
	tols, err := ParseTolerances([]byte(`version: 1
kernels:
  op:
    bf16: {atol: 0, rtol: 4.0e-3, why: "sum"}
    out:bf16: {atol: 0, rtol: 1.6e-2, why: "out"}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for output, why := range map[string]string{"out": "out", "sum": "sum"} {
		tol, err := tols.KernelForOutput("op", output, tensor.BF16, tensor.BF16)
		if err != nil || tol.Why != why {
			t.Errorf("output %s: %q, %v; want %q", output, tol.Why, err, why)
		}
	}
	if _, err := tols.KernelForOutput("op", "out", tensor.F16, tensor.F16); err == nil {
		t.Error("out of f16, no f16 entry: no error")
	}
	for _, key := range []string{":bf16", "Out:bf16", "out:f33", "o-ut:bf16"} {
		yaml := "version: 1\nkernels:\n  op:\n    " + key + ": {max_abs: 0, why: \"t\"}\n"
		if _, err := ParseTolerances([]byte(yaml), "t.yaml"); err == nil {
			t.Errorf("key %s: no error", key)
		}
	}
}
