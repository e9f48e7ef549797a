package compare

import (
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

const calibratedTols = `version: 1
taps:
  ffn_act: {atol: 2.0e-3, rtol: 2.0e-3, nmse: 2.0e-5, min_cosine: 0.99998, why: "floor"}
  logits:  {atol: 1.0e-2, atol_rms: 1.0e-3, rtol: 2.0e-3, nmse: 2.0e-5, min_cosine: 0.99998, max_kl: 2.0e-4,
            top_k: [{k: 1, min: 1, tie_margin: 0.08}, {k: 5, min: 0.95}], why: "logits floor"}
  embed:   {max_abs: 0, why: "exact"}
tap_calibration: {factor: 4, why: "amplitude x4"}
`

func f64(v float64) *float64 { return &v }

func mustTols(t *testing.T, src string) *Tolerances {
	t.Helper()
	tols, err := ParseTolerances([]byte(src), "tolerances.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return tols
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestCalibratedTapDerivation(t *testing.T) {
	tols := mustTols(t, calibratedTols)

	// A deep-layer tap whose fp16 drift exceeds what the floor allows: nmse and 1-cos scale
	// with factor², atol_rms with factor; atol and rtol stay the floor's.
	deep := golden.TapError{NMSE: 1e-5, OneMinusCos: 5e-6, MaxErrRMS: 0.02}
	tol, err := tols.CalibratedTap("decode.3.layers.27.ffn_act", &deep, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	if !near(*tol.NMSE, 16*1e-5) || !near(*tol.MinCosine, 1-16*5e-6) || !near(*tol.AtolRMS, 4*0.02) ||
		*tol.Atol != 2e-3 || *tol.Rtol != 2e-3 {
		t.Errorf("deep tap: nmse %v min_cosine %v atol_rms %v atol %v rtol %v", *tol.NMSE, *tol.MinCosine, *tol.AtolRMS, *tol.Atol, *tol.Rtol)
	}
	if !strings.Contains(tol.Why, "floor; calibrated (x4") || !strings.Contains(tol.Why, "nmse 0.00016") {
		t.Errorf("why does not say what calibration raised: %q", tol.Why)
	}

	// A shallow tap with a tiny calibrated error: every limit stays at its floor (never tighter).
	shallow := golden.TapError{NMSE: 1e-8, OneMinusCos: 5e-9, MaxErrRMS: 1e-4}
	tol, err = tols.CalibratedTap("prefill.layers.0.ffn_act", &shallow, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	if *tol.NMSE != 2e-5 || *tol.MinCosine != 0.99998 || !near(*tol.AtolRMS, 4e-4) {
		t.Errorf("shallow tap: nmse %v min_cosine %v atol_rms %v", *tol.NMSE, *tol.MinCosine, *tol.AtolRMS)
	}
	// atol_rms has a floor of 0 where the entry sets none: a zero calibration adds nothing.
	tol, _ = tols.CalibratedTap("prefill.layers.0.ffn_act", &golden.TapError{}, tensor.F16)
	if *tol.AtolRMS != 0 || tol.Why != "floor" {
		t.Errorf("zero calibration: atol_rms %v why %q", *tol.AtolRMS, tol.Why)
	}

	// Logits: kl with factor², the atol_rms floor kept when larger, every top-k tie margin at
	// least 2·factor·max_abs (two logits each off by factor·max_abs swap a gap below that).
	logits := golden.TapError{NMSE: 1e-6, OneMinusCos: 5e-7, MaxErrRMS: 1e-4, MaxAbs: f64(0.02), KL: f64(3e-5)}
	tol, err = tols.CalibratedTap("decode.0.logits", &logits, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	if !near(*tol.MaxKL, 16*3e-5) || *tol.AtolRMS != 1e-3 || *tol.NMSE != 2e-5 {
		t.Errorf("logits: max_kl %v atol_rms %v nmse %v", *tol.MaxKL, *tol.AtolRMS, *tol.NMSE)
	}
	if len(tol.TopK) != 2 || !near(tol.TopK[0].TieMargin, 0.16) || !near(tol.TopK[1].TieMargin, 0.16) || tol.TopK[1].Min != 0.95 {
		t.Errorf("logits top_k: %+v", tol.TopK)
	}
	small := golden.TapError{MaxAbs: f64(0.005), KL: f64(0)}
	tol, _ = tols.CalibratedTap("prefill.logits", &small, tensor.F16)
	if tol.TopK[0].TieMargin != 0.08 || !near(tol.TopK[1].TieMargin, 0.04) {
		t.Errorf("tie margins keep their floors: %+v", tol.TopK)
	}

	// The shared floor entry is never modified by a derivation.
	floor, _ := tols.Tap("decode.0.logits")
	if *floor.MaxKL != 2e-4 || floor.TopK[1].TieMargin != 0 || *floor.AtolRMS != 1e-3 {
		t.Errorf("derivation leaked into the floor: %+v", floor)
	}

	// max_abs widens only where the calibration has one; an exact tap stays exact.
	tol, _ = tols.CalibratedTap("prefill.embed", &golden.TapError{NMSE: 1e-7}, tensor.F16)
	if *tol.MaxAbs != 0 {
		t.Errorf("embed max_abs %v", *tol.MaxAbs)
	}
}

func TestCalibratedTapErrors(t *testing.T) {
	tols := mustTols(t, calibratedTols)
	for name, tc := range map[string]struct {
		src, tap string
		cal      *golden.TapError
		want     string
	}{
		"no tap_calibration": {strings.Replace(calibratedTols, "tap_calibration: {factor: 4, why: \"amplitude x4\"}\n", "", 1),
			"prefill.layers.0.ffn_act", &golden.TapError{}, "no tap_calibration"},
		"no record":           {calibratedTols, "prefill.layers.0.ffn_act", nil, "no calibration record"},
		"unknown kind":        {calibratedTols, "prefill.layers.0.q", &golden.TapError{}, "taps.q"},
		"logits without kl":   {calibratedTols, "prefill.logits", &golden.TapError{MaxAbs: f64(0.1)}, "max_kl"},
		"logits without abs":  {calibratedTols, "prefill.logits", &golden.TapError{KL: f64(0)}, "top_k"},
		"cosine left nothing": {calibratedTols, "prefill.layers.0.ffn_act", &golden.TapError{OneMinusCos: 0.1}, "no cosine limit"},
	} {
		tt := tols
		if tc.src != calibratedTols {
			tt = mustTols(t, tc.src)
		}
		if _, err := tt.CalibratedTap(tc.tap, tc.cal, tensor.F16); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
	for name, bad := range map[string]string{
		"factor below 1": "version: 1\ntap_calibration: {factor: 0.5, why: x}\n",
		"factor absurd":  "version: 1\ntap_calibration: {factor: 40, why: x}\n",
		"no rationale":   "version: 1\ntap_calibration: {factor: 4}\n",
		"misspelt key":   "version: 1\ntap_calibration: {factr: 4, why: x}\n",
		"old tap_depth":  "version: 1\ntap_depth: {reference_layers: 2, why: x}\n",
	} {
		if _, err := ParseTolerances([]byte(bad), "t.yaml"); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// A calibrated tolerance is what Compare applies: a deep tap whose error the floor rejects
// passes under the derived limits, and the same error ten times larger (amplitude) fails.
func TestCalibratedTapInCompare(t *testing.T) {
	tols := mustTols(t, calibratedTols)
	want := make([]float32, 256)
	got := make([]float32, 256)
	for i := range want {
		want[i] = float32(math.Sin(float64(i)))
		got[i] = want[i] * (1 + 0.008*float32(math.Cos(float64(7*i)))) // nmse ~3e-5, rel err up to 8e-3
	}
	w, g := tensor.FromF32([]int{2, 128}, want), tensor.FromF32([]int{2, 128}, got)
	floor, _ := tols.Tap("prefill.layers.27.ffn_act")
	r, _ := Compare(g, w, floor)
	if r.Pass() {
		t.Fatalf("the floor should reject this error:\n%s", r.Table())
	}
	cal := golden.TapError{NMSE: 3.2e-5, OneMinusCos: 1.6e-5, MaxErrRMS: 0.012}
	tol, err := tols.CalibratedTap("prefill.layers.27.ffn_act", &cal, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ = Compare(g, w, tol); !r.Pass() {
		t.Errorf("calibrated limits reject the calibrated error:\n%s", r.Table())
	}
	for i := range got {
		got[i] = want[i] * (1 + 0.08*float32(math.Cos(float64(7*i))))
	}
	if r, _ = Compare(tensor.FromF32([]int{2, 128}, got), w, tol); r.Pass() {
		t.Errorf("ten times the calibrated error passes:\n%s", r.Table())
	}
}

func TestLayerDiffTableShowsDerivedLimits(t *testing.T) {
	tols := mustTols(t, calibratedTols)
	w := tensor.FromF32([]int{1, 4}, []float32{1, 2, 3, 4})
	row := func(name string, cal golden.TapError) TapResult {
		floor, _ := tols.Tap(name)
		tol, err := tols.CalibratedTap(name, &cal, tensor.F16)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := Compare(w, w, tol)
		return TapResult{Name: name, Tol: tol, Floor: floor, Result: r}
	}
	table := LayerDiffTable([]TapResult{
		row("prefill.layers.0.ffn_act", golden.TapError{}),
		row("prefill.layers.27.ffn_act", golden.TapError{NMSE: 1e-5, OneMinusCos: 5e-6, MaxErrRMS: 0.02}),
	})
	lines := strings.Split(table, "\n")
	if !strings.Contains(lines[0], "calibrated limits") || strings.Contains(lines[1], "nmse<=") ||
		!strings.Contains(lines[2], "nmse<=0.00016 1-cos<=8e-05 atol_rms=0.08") {
		t.Errorf("table:\n%s", table)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing space: %q", l)
		}
	}
}

// A near-flat decode row (one row: a single top-5 swap is 80% overlap, 400% of a 0.95
// budget): a swap of the reference's 5th and 6th logits, 0.01 apart, passes once the tie margin
// follows the calibrated logit error; a swap across a real gap still fails.
func TestCalibratedTopKTieMargin(t *testing.T) {
	tols := mustTols(t, `version: 1
taps:
  logits: {top_k: [{k: 5, min: 0.95}], why: "old top-5 entry without a tie margin"}
tap_calibration: {factor: 4, why: x}
`)
	want := []float32{3.0, 2.9, 2.8, 2.7, 2.60, 2.59, 1.0, 0.5}
	swapped := append([]float32(nil), want...)
	swapped[4], swapped[5] = 2.585, 2.595 // 6th now above 5th: both within 0.01 of their reference
	w, g := tensor.FromF32([]int{1, 8}, want), tensor.FromF32([]int{1, 8}, swapped)
	floor, _ := tols.Tap("decode.3.logits")
	if r, _ := Compare(g, w, floor); r.Pass() || r.MaxBudget() < 3.99 {
		t.Fatalf("floor without a tie margin should fail the swap at 400%%:\n%s", r.Table())
	}
	cal := golden.TapError{MaxAbs: f64(0.012), KL: f64(0)} // tie margin 2 x 4 x 0.012 = 0.096
	tol, err := tols.CalibratedTap("decode.3.logits", &cal, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := Compare(g, w, tol); !r.Pass() {
		t.Errorf("a near tie swapped within the calibrated error fails:\n%s", r.Table())
	}
	far := append([]float32(nil), want...)
	far[4], far[6] = 1.0, 2.6 // the 7th logit, 1.6 below the 5th, promoted into the top 5
	if r, _ := Compare(tensor.FromF32([]int{1, 8}, far), w, tol); r.Pass() {
		t.Errorf("a swap across a real gap passes:\n%s", r.Table())
	}
}

// TestTapFloorBF16: a bf16 set's floors are the fp16 floors scaled by tap_dtype_scale (amplitude
// by the factor, squared metrics by its square); without an entry a bf16 set is refused.
func TestTapFloorBF16(t *testing.T) {
	tols := mustTols(t, calibratedTols+`tap_dtype_scale:
  bf16: {factor: 8, why: "u ratio"}
`)
	fl, err := tols.TapFloor("logits", tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"atol", *fl.Atol, 8e-2}, {"rtol", *fl.Rtol, 1.6e-2}, {"atol_rms", *fl.AtolRMS, 8e-3},
		{"nmse", *fl.NMSE, 64 * 2e-5}, {"1 - min_cosine", 1 - *fl.MinCosine, 64 * 2e-5}, {"max_kl", *fl.MaxKL, 64 * 2e-4},
		{"tie_margin", fl.TopK[0].TieMargin, 0.64}, {"top1 min", fl.TopK[0].Min, 1},
	} {
		if !near(c.got, c.want) {
			t.Errorf("bf16 %s floor = %g, want %g", c.name, c.got, c.want)
		}
	}
	if same, _ := tols.TapFloor("logits", tensor.F16); *same.Rtol != 2e-3 {
		t.Errorf("fp16 floor changed: rtol %g", *same.Rtol)
	}
	if exact, _ := tols.TapFloor("embed", tensor.BF16); *exact.MaxAbs != 0 {
		t.Errorf("an exact floor (max_abs 0) must stay exact in bf16, got %g", *exact.MaxAbs)
	}
	// The calibrated limits then build on the scaled floor.
	tol, err := tols.CalibratedTap("decode.0.ffn_act", &golden.TapError{NMSE: 1e-9}, tensor.BF16)
	if err != nil || !near(*tol.NMSE, 64*2e-5) || !strings.Contains(tol.Why, "bf16 floor") {
		t.Errorf("CalibratedTap(bf16) = %+v, %v: want the scaled floor's nmse 1.28e-3", tol, err)
	}
	if _, err := mustTols(t, calibratedTols).TapFloor("logits", tensor.BF16); err == nil || !strings.Contains(err.Error(), "tap_dtype_scale.bf16") {
		t.Errorf("bf16 floor without tap_dtype_scale: err %v, want one naming tap_dtype_scale.bf16", err)
	}
	for _, bad := range []string{"  f16: {factor: 8, why: \"x\"}\n", "  bf16: {factor: 0.5, why: \"x\"}\n", "  bf16: {factor: 8}\n"} {
		if _, err := ParseTolerances([]byte(calibratedTols+"tap_dtype_scale:\n"+bad), "t.yaml"); err == nil {
			t.Errorf("tap_dtype_scale %q accepted", bad)
		}
	}
}
