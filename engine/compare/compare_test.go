package compare

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func f32(vals ...float32) *tensor.Tensor { return tensor.FromF32([]int{len(vals)}, vals) }

func ptr(v float64) *float64 { return &v }

func checkOf(t *testing.T, r *Result, metric string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Metric == metric {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", metric, r.Checks)
	return Check{}
}

func TestIdenticalTensorsUseNoBudget(t *testing.T) {
	x := f32(1, -2, 3.5, 0)
	r, err := Compare(x, x, Tolerance{MaxAbs: ptr(0), Atol: ptr(0), Rtol: ptr(0), NMSE: ptr(0), MinCosine: ptr(1), Why: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass() || r.MaxBudget() != 0 {
		t.Fatalf("identical tensors: pass=%v budget=%v\n%s", r.Pass(), r.MaxBudget(), r.Table())
	}
}

func TestMetricsValues(t *testing.T) {
	got, want := f32(1.1, 2, -3), f32(1, 2, -3.3)
	r, err := Compare(got, want, Tolerance{MaxAbs: ptr(1), NMSE: ptr(1), MinCosine: ptr(0.5), Atol: ptr(0.15), Rtol: ptr(0), Why: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkOf(t, r, "max_abs"); math.Abs(c.Value-0.3) > 1e-6 {
		t.Errorf("max_abs = %v, want 0.3", c.Value)
	}
	wantNMSE := (0.01 + 0.09) / (1 + 4 + 3.3*3.3)
	if c := checkOf(t, r, "nmse"); math.Abs(c.Value-wantNMSE) > 1e-6 {
		t.Errorf("nmse = %v, want %v", c.Value, wantNMSE)
	}
	dot := 1.1*1 + 2*2 + 3*3.3
	wantCos := dot / (math.Sqrt(1.21+4+9) * math.Sqrt(1+4+3.3*3.3))
	if c := checkOf(t, r, "cosine"); math.Abs(c.Value-wantCos) > 1e-6 {
		t.Errorf("cosine = %v, want %v", c.Value, wantCos)
	}
	// |err| = 0.1, 0, 0.3 against atol 0.15: the worst element uses twice its allowance.
	if c := checkOf(t, r, "allclose"); math.Abs(c.Value-2) > 1e-6 || c.Pass {
		t.Errorf("allclose worst excess = %v pass=%v, want 2 failing", c.Value, c.Pass)
	}
	if r.Worst[0].Index[0] != 2 {
		t.Errorf("worst element index = %v, want [2]", r.Worst[0].Index)
	}
}

func TestAllcloseUsesRelativeTerm(t *testing.T) {
	// |err| = 1 on a value of 1000 is within rtol 1e-3 and must pass with atol 0.
	r, err := Compare(f32(1001), f32(1000), Tolerance{Atol: ptr(0), Rtol: ptr(1e-3), Why: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass() {
		t.Fatalf("relative error at the limit failed:\n%s", r.Table())
	}
	r, _ = Compare(f32(1001.5), f32(1000), Tolerance{Atol: ptr(0), Rtol: ptr(1e-3), Why: "t"})
	if r.Pass() {
		t.Fatal("1.5e-3 relative error passed rtol 1e-3")
	}
}

// The reference's per-element allowance widens allclose at its elements only, and is refused
// where it cannot apply.
func TestCompareAllowing(t *testing.T) {
	tol := Tolerance{Atol: ptr(0.1), Rtol: ptr(0), Why: "t"}
	got, want := f32(1.3, 2.05, 3), f32(1, 2, 3)
	if r, _ := Compare(got, want, tol); r.Pass() {
		t.Fatal("an error of 0.3 passed atol 0.1")
	}
	r, err := CompareAllowing(got, want, f32(0.25, 0, 0), tol)
	if err != nil || !r.Pass() {
		t.Fatalf("allowance 0.25 at element 0: %v\n%s", err, r.Table())
	}
	// The allowance of one element does not carry to another.
	if r, _ := CompareAllowing(f32(1, 2.3, 3), want, f32(0.25, 0, 0), tol); r.Pass() {
		t.Fatal("element 0's allowance excused element 1")
	}
	for name, tc := range map[string]struct {
		allowance *tensor.Tensor
		tol       Tolerance
		want      string
	}{
		"shape":       {f32(0, 0), tol, "allowance shape"},
		"negative":    {f32(0, -1, 0), tol, "allowance element 1 is -1"},
		"nan":         {f32(0, float32(math.NaN()), 0), tol, "allowance element 1 is NaN"},
		"no allclose": {f32(0, 0, 0), Tolerance{NMSE: ptr(1), Why: "t"}, "needs an allclose tolerance"},
	} {
		if _, err := CompareAllowing(got, want, tc.allowance, tc.tol); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMismatchFractionAllowance(t *testing.T) {
	got, want := f32(0, 0, 0, 5), f32(0, 0, 0, 0)
	tol := Tolerance{Atol: ptr(0.1), Rtol: ptr(0), MaxMismatch: 0.25, Why: "t"}
	if r, _ := Compare(got, want, tol); !r.Pass() || checkOf(t, r, "allclose").Value != 0.25 {
		t.Fatalf("1 of 4 mismatching with max_mismatch 0.25 failed:\n%s", r.Table())
	}
	tol.MaxMismatch = 0.2
	if r, _ := Compare(got, want, tol); r.Pass() {
		t.Fatal("1 of 4 mismatching with max_mismatch 0.2 passed")
	}
}

func TestNaNAnywhereFails(t *testing.T) {
	nan := float32(math.NaN())
	for _, tc := range []struct{ got, want *tensor.Tensor }{
		{f32(1, nan), f32(1, 2)},
		{f32(1, 2), f32(1, nan)},
		{f32(nan), f32(nan)},
	} {
		r, err := Compare(tc.got, tc.want, Tolerance{MaxAbs: ptr(math.Inf(1)), Why: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Pass() || checkOf(t, r, "nan").Pass {
			t.Errorf("NaN passed: got %v want %v", tc.got.F32, tc.want.F32)
		}
	}
}

func TestInfinitiesMustMatchInSignAndPlace(t *testing.T) {
	inf := float32(math.Inf(1))
	tol := Tolerance{MaxAbs: ptr(1e-6), Why: "t"}
	if r, _ := Compare(f32(inf, -inf, 1), f32(inf, -inf, 1), tol); !r.Pass() {
		t.Fatalf("matching infinities failed:\n%s", r.Table())
	}
	for _, got := range []*tensor.Tensor{f32(-inf, -inf, 1), f32(1, -inf, inf), f32(3e38, -inf, 1)} {
		if r, _ := Compare(got, f32(inf, -inf, 1), tol); r.Pass() || checkOf(t, r, "inf").Pass {
			t.Errorf("mismatched infinity passed: %v", got.F32)
		}
	}
}

func TestF16AgainstF32Reference(t *testing.T) {
	got := tensor.New(tensor.F16, 2)
	got.F16[0], got.F16[1] = float16From(0.333), float16From(-1)
	r, err := Compare(got, f32(1.0/3, -1), Tolerance{Atol: ptr(0), Rtol: ptr(1e-3), Why: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass() {
		t.Fatalf("fp16 rounding of 1/3 failed rtol 1e-3:\n%s", r.Table())
	}
}

func TestShapeMismatchIsAnError(t *testing.T) {
	if _, err := Compare(f32(1, 2), tensor.FromF32([]int{1, 2}, []float32{1, 2}), Tolerance{MaxAbs: ptr(0), Why: "t"}); err == nil {
		t.Fatal("comparing [2] with [1,2] did not fail")
	}
}

func TestBudgetAndHeadroom(t *testing.T) {
	r, _ := Compare(f32(1.5), f32(1), Tolerance{MaxAbs: ptr(2), MinCosine: ptr(0.9), Why: "t"})
	if c := checkOf(t, r, "max_abs"); c.Budget != 0.25 || c.Headroom() != 0.75 {
		t.Errorf("max_abs budget %v headroom %v, want 0.25 and 0.75", c.Budget, c.Headroom())
	}
	if c := checkOf(t, r, "cosine"); c.Value != 1 || c.Budget != 0 {
		t.Errorf("parallel vectors: cosine %v budget %v", c.Value, c.Budget)
	}
}

func TestTableNamesMetricsLimitsAndWorstElements(t *testing.T) {
	got := tensor.FromF32([]int{2, 2}, []float32{0, 0, 0, 9})
	want := tensor.FromF32([]int{2, 2}, []float32{0, 0, 0, 1})
	r, _ := Compare(got, want, Tolerance{Atol: ptr(0.01), Rtol: ptr(0), NMSE: ptr(1e-3), Why: "t"})
	table := r.Table()
	for _, s := range []string{"allclose", "nmse", "FAIL", "[1,1]", "got 9", "want 1"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
}

func TestWorstListKeepsTheLargest(t *testing.T) {
	vals := make([]float32, 100)
	for i := range vals {
		vals[i] = float32(i)
	}
	r, _ := Compare(tensor.FromF32([]int{100}, vals), tensor.New(tensor.F32, 100), Tolerance{MaxAbs: ptr(1000), Why: "t"})
	if len(r.Worst) != WorstCount {
		t.Fatalf("kept %d worst elements", len(r.Worst))
	}
	for i, e := range r.Worst {
		if e.Index[0] != 99-i {
			t.Errorf("worst[%d] index %v, want %d", i, e.Index, 99-i)
		}
	}
}

func TestKLAndTopK(t *testing.T) {
	p := []float64{2, 1, 0, -1}
	if kl := KL(p, p); kl != 0 {
		t.Errorf("KL(p||p) = %v", kl)
	}
	// Shifting logits does not change the distribution.
	if kl := KL(p, []float64{12, 11, 10, 9}); kl > 1e-12 {
		t.Errorf("KL of shifted logits = %v", kl)
	}
	// Analytic: softmax([0, 0]) vs softmax([log 3, 0]) = (1/2,1/2) vs (3/4,1/4).
	want := 0.5*math.Log(0.5/0.75) + 0.5*math.Log(0.5/0.25)
	if kl := KL([]float64{0, 0}, []float64{math.Log(3), 0}); math.Abs(kl-want) > 1e-12 {
		t.Errorf("KL = %v, want %v", kl, want)
	}
	if got := TopK([]float64{1, 5, 5, 3}, 3); got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("TopK = %v, want [1 2 3] (ties to the lower index)", got)
	}
	if o := TopKAgreement([]float64{4, 3, 2, 1}, []float64{4, 3, 1, 2}, 3, 0); math.Abs(o-2.0/3) > 1e-12 {
		t.Errorf("top-3 overlap = %v, want 2/3", o)
	}
	logits := tensor.FromF32([]int{2, 4}, []float32{4, 3, 2, 1, 1, 2, 3, 4})
	swapped := tensor.FromF32([]int{2, 4}, []float32{3, 4, 2, 1, 1, 2, 3, 4})
	top1 := []TopKLimit{{K: 1, Min: 1}}
	r, _ := Compare(swapped, logits, Tolerance{MaxKL: ptr(1), TopK: top1, Why: "t"})
	if c := checkOf(t, r, "top1"); c.Value != 0.5 || c.Pass {
		t.Errorf("top1 agreement = %v pass=%v, want 0.5 failing", c.Value, c.Pass)
	}
}

// A tie margin forgives a swap only where the reference itself nearly ties: the swapped
// row's reference top-2 gap must be under the margin, and a wider gap still fails.
func TestTopKTieMargin(t *testing.T) {
	want := []float64{4, 3.99, 2, 1}
	got := []float64{3.98, 4, 2, 1} // argmax 1: the reference's value there is 0.01 below its max
	for _, c := range []struct {
		margin, agree float64
	}{{0, 0}, {0.005, 0}, {0.02, 1}} {
		if a := TopKAgreement(got, want, 1, c.margin); a != c.agree {
			t.Errorf("top-1 agreement with tie margin %v = %v, want %v", c.margin, a, c.agree)
		}
	}
	// top-2 of got is {1, 0}: both in the reference's top 2, whatever the margin.
	if a := TopKAgreement(got, want, 2, 0); a != 1 {
		t.Errorf("top-2 agreement = %v, want 1", a)
	}
	// An index far below the reference's k-th value never counts.
	if a := TopKAgreement([]float64{0, 0, 0, 9}, want, 1, 0.5); a != 0 {
		t.Errorf("top-1 agreement of a wrong argmax = %v, want 0", a)
	}
	logits := tensor.FromF32([]int{2, 4}, []float32{4, 3.99, 2, 1, 1, 2, 3, 4})
	swapped := tensor.FromF32([]int{2, 4}, []float32{3.98, 4, 2, 1, 1, 2, 3, 4})
	r, _ := Compare(swapped, logits, Tolerance{TopK: []TopKLimit{{K: 1, Min: 1, TieMargin: 0.02}}, Why: "t"})
	if c := checkOf(t, r, "top1"); c.Value != 1 || !c.Pass {
		t.Errorf("top1 agreement with a near tie = %v pass=%v, want 1 passing", c.Value, c.Pass)
	}
}

func TestParseTolerances(t *testing.T) {
	good := `version: 1
kernels:
  rmsnorm:
    f16: {atol: 1.0e-6, rtol: 1.0e-3, nmse: 2.0e-7, why: "fp16 rounding"}
taps:
  logits: {max_kl: 1.0e-4, top_k: [{k: 1, min: 1}, {k: 5, min: 0.8}], why: "logits"}
`
	tols, err := ParseTolerances([]byte(good), "tolerances.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tol, err := tols.Kernel("rmsnorm", tensor.F16)
	if err != nil || *tol.Rtol != 1e-3 {
		t.Fatalf("Kernel(rmsnorm, f16) = %+v, %v", tol, err)
	}
	if _, err := tols.Kernel("rmsnorm", tensor.F32); err == nil || !strings.Contains(err.Error(), "rmsnorm") {
		t.Errorf("missing dtype entry: %v", err)
	}
	if _, err := tols.Kernel("rope", tensor.F16); err == nil || !strings.Contains(err.Error(), "rope") {
		t.Errorf("missing op entry: %v", err)
	}

	for name, bad := range map[string]string{
		"misspelt limit":  "version: 1\nkernels:\n  rmsnorm:\n    f16: {rtoll: 1, why: x}\n",
		"no rationale":    "version: 1\nkernels:\n  rmsnorm:\n    f16: {max_abs: 1}\n",
		"no limit":        "version: 1\nkernels:\n  rmsnorm:\n    f16: {why: x}\n",
		"negative limit":  "version: 1\nkernels:\n  rmsnorm:\n    f16: {max_abs: -1, why: x}\n",
		"atol alone":      "version: 1\nkernels:\n  rmsnorm:\n    f16: {atol: 1, why: x}\n",
		"bad dtype":       "version: 1\nkernels:\n  rmsnorm:\n    f64: {max_abs: 1, why: x}\n",
		"bad cosine":      "version: 1\nkernels:\n  rmsnorm:\n    f16: {min_cosine: 1.5, why: x}\n",
		"unknown version": "version: 2\nkernels: {}\n",
		"bad tie margin":  "version: 1\ntaps:\n  logits: {top_k: [{k: 1, min: 1, tie_margin: -0.1}], why: x}\n",
		"not yaml":        "version: [\n",
	} {
		if _, err := ParseTolerances([]byte(bad), "tolerances.yaml"); err == nil {
			t.Errorf("%s: parsed without error", name)
		} else if !strings.Contains(err.Error(), "tolerances.yaml") {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
}

func FuzzParseTolerances(f *testing.F) {
	f.Add([]byte("version: 1\nkernels:\n  gemm:\n    f16: {atol: 1.0e-4, rtol: 1.0e-3, why: x}\n"))
	f.Add([]byte("version: 1\ntaps:\n  logits: {max_kl: 1, top_k: [{k: 5, min: 0.5}], why: x}\n"))
	f.Add([]byte("version: 1\nkernels: {a: {f16: {max_abs: .nan, why: x}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tols, err := ParseTolerances(data, "fuzz.yaml")
		if err != nil {
			return
		}
		for op, byType := range tols.Kernels {
			for dt := range byType {
				d, _ := tensor.ParseDType(dt)
				if _, err := tols.Kernel(op, d); err != nil {
					t.Fatalf("validated entry %s/%s not found: %v", op, dt, err)
				}
			}
		}
	})
}

func float16From(v float32) float16.Float16 { return float16.Fromfloat32(v) }

// TopK's one-pass selection ranks as a stable sort by value, largest first, would.
func TestTopKMatchesAStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(300)
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(r.IntN(20)) // many ties
			if r.IntN(50) == 0 {
				x[i] = math.NaN()
			}
		}
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		rank := func(v float64) float64 {
			if math.IsNaN(v) {
				return math.Inf(-1)
			}
			return v
		}
		sort.SliceStable(idx, func(a, b int) bool {
			va, vb := rank(x[idx[a]]), rank(x[idx[b]])
			if va != vb {
				return va > vb
			}
			return math.IsNaN(x[idx[b]]) && !math.IsNaN(x[idx[a]])
		})
		for _, k := range []int{0, 1, 5, 64, 65, n, n + 3} {
			want := idx[:min(k, n)]
			if got := TopK(x, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d k=%d: TopK = %v, stable sort gives %v (x = %v)", trial, k, got, want, x)
			}
		}
	}
}

// Integer outputs (moe_router's expert ids) are judged by equality alone: max_abs 0 passes
// equal ids and fails one different id; any other tolerance, or a float reference, is refused.
func TestIntegerOutputsCompareForEquality(t *testing.T) {
	ids := func(v ...int32) *tensor.Tensor { return tensor.FromI32([]int{len(v)}, v) }
	exact := Tolerance{MaxAbs: ptr(0), Why: "t"}
	r, err := Compare(ids(3, 0, 7), ids(3, 0, 7), exact)
	if err != nil || !r.Pass() {
		t.Fatalf("equal ids: %v, %v", r, err)
	}
	r, err = Compare(ids(3, 1, 7), ids(3, 0, 7), exact)
	if err != nil || r.Pass() {
		t.Fatalf("one id off: pass %v, %v", r.Pass(), err)
	}
	for _, bad := range []struct {
		got, want *tensor.Tensor
		tol       Tolerance
	}{
		{ids(1), ids(1), Tolerance{MaxAbs: ptr(1), Why: "t"}},
		{ids(1), ids(1), Tolerance{MaxAbs: ptr(0), NMSE: ptr(1e-6), Why: "t"}},
		{ids(1), f32(1), exact},
	} {
		if _, err := Compare(bad.got, bad.want, bad.tol); err == nil || !strings.Contains(err.Error(), "integer tensors") {
			t.Errorf("%v vs %v under %+v: err %v, want the integer refusal", bad.got.DType, bad.want.DType, bad.tol, err)
		}
	}
}
