package compare

import (
	"fmt"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// CalibratedTap returns the tolerance of a tap derived from its static taps: entry (the floor,
// scaled to the set's storage dtype dt by TapFloor) and cal, the error the set's calibration
// implementation (fp16 or bf16, as dt) makes at this tap
// (golden.Calibration), under tap_calibration's factor f:
//
//	nmse       = max(floor, f²·cal.nmse)          squared error: the square of the amplitude factor
//	min_cosine = min(floor, 1 − f²·cal.(1−cos))   1 − cos ≈ nmse/2 for small errors: also squared
//	atol_rms   = max(floor or 0, f·cal.max_err_rms)   allclose: |err| ≤ atol + atol_rms·rms(row) + rtol·|want|
//	max_kl     = max(floor, f²·cal.kl)            KL is quadratic in a small logit perturbation; for
//	                                              a model's logits cal.kl is its sequence's worst
//	                                              step (golden.Calibration.SequenceKL)
//	max_abs    = max(floor, f·cal.max_abs)        where the floor sets one and cal has one (logits)
//	tie_margin = max(floor, 2·f·cal.max_abs)      per top_k entry: two logits each off by f·max_abs
//	                                              can swap a pair whose reference gap is below twice that
//
// atol and rtol stay the floor's. Only limits the floor sets are derived (the floor says which
// metrics judge a tap kind), and none is ever tighter than its floor. The returned Why is the
// floor's followed by what calibration raised, so a failure report says where its limit came
// from.
func (t *Tolerances) CalibratedTap(name string, cal *golden.TapError, dt tensor.DType) (Tolerance, error) {
	floor, err := t.TapFloor(name, dt)
	if err != nil {
		return Tolerance{}, err
	}
	if t.TapCalibration == nil {
		return Tolerance{}, fmt.Errorf("%s: no tap_calibration: tap limits derive from a set's calibration under its factor; add tap_calibration with a rationale", t.path)
	}
	if cal == nil {
		return Tolerance{}, fmt.Errorf("tap %s: no calibration record", name)
	}
	f := t.TapCalibration.Factor
	tol := floor
	var raised []string
	up := func(metric string, floor, derived float64) *float64 {
		v := floor
		if derived > floor {
			v = derived
			raised = append(raised, fmt.Sprintf("%s %.3g", metric, v))
		}
		return &v
	}
	if floor.NMSE != nil {
		tol.NMSE = up("nmse", *floor.NMSE, f*f*cal.NMSE)
	}
	if floor.MinCosine != nil {
		c := 1 - f*f*cal.OneMinusCos
		if c <= 0 {
			return Tolerance{}, fmt.Errorf("tap %s: calibrated 1 - cosine %.3g leaves no cosine limit at factor %g", name, cal.OneMinusCos, f)
		}
		v := *floor.MinCosine
		if c < v {
			v = c
			raised = append(raised, fmt.Sprintf("min_cosine %.8g", v))
		}
		tol.MinCosine = &v
	}
	if floor.Atol != nil {
		base := 0.0
		if floor.AtolRMS != nil {
			base = *floor.AtolRMS
		}
		tol.AtolRMS = up("atol_rms", base, f*cal.MaxErrRMS)
	}
	logitsOnly := func(what string) error {
		return fmt.Errorf("tap %s: the tolerance sets %s, which derives from the logits' max_abs and kl, but the calibration records none for this tap", name, what)
	}
	if floor.MaxKL != nil {
		if cal.KL == nil {
			return Tolerance{}, logitsOnly("max_kl")
		}
		tol.MaxKL = up("max_kl", *floor.MaxKL, f*f**cal.KL)
	}
	if floor.MaxAbs != nil && cal.MaxAbs != nil {
		tol.MaxAbs = up("max_abs", *floor.MaxAbs, f**cal.MaxAbs)
	}
	if len(floor.TopK) > 0 {
		if cal.MaxAbs == nil {
			return Tolerance{}, logitsOnly("top_k")
		}
		tol.TopK = make([]TopKLimit, len(floor.TopK))
		for i, k := range floor.TopK {
			tol.TopK[i] = k
			if tie := 2 * f * *cal.MaxAbs; tie > k.TieMargin {
				tol.TopK[i].TieMargin = tie
				raised = append(raised, fmt.Sprintf("top%d tie_margin %.3g", k.K, tie))
			}
		}
	}
	if len(raised) > 0 {
		tol.Why = fmt.Sprintf("%s; calibrated (x%g the %s implementation's error): %s", floor.Why, f, dt, strings.Join(raised, ", "))
	}
	return tol, nil
}

// RaisedLimits lists the limits of r that calibration raised above the floor, as the
// layer-diff table shows them ("nmse<=0.00016 1-cos<=8e-05 atol_rms=0.08"; "" when the floor
// decides every limit).
func (r TapResult) RaisedLimits() string {
	var out []string
	differs := func(a, b *float64) bool { return a != nil && (b == nil || *a != *b) }
	if differs(r.Tol.NMSE, r.Floor.NMSE) {
		out = append(out, fmt.Sprintf("nmse<=%.3g", *r.Tol.NMSE))
	}
	if differs(r.Tol.MinCosine, r.Floor.MinCosine) {
		out = append(out, fmt.Sprintf("1-cos<=%.3g", 1-*r.Tol.MinCosine))
	}
	if differs(r.Tol.AtolRMS, r.Floor.AtolRMS) && *r.Tol.AtolRMS > 0 {
		out = append(out, fmt.Sprintf("atol_rms=%.3g", *r.Tol.AtolRMS))
	}
	if differs(r.Tol.MaxKL, r.Floor.MaxKL) {
		out = append(out, fmt.Sprintf("kl<=%.3g", *r.Tol.MaxKL))
	}
	if differs(r.Tol.MaxAbs, r.Floor.MaxAbs) {
		out = append(out, fmt.Sprintf("max_abs<=%.3g", *r.Tol.MaxAbs))
	}
	for i, k := range r.Tol.TopK {
		if i < len(r.Floor.TopK) && k.TieMargin != r.Floor.TopK[i].TieMargin {
			out = append(out, fmt.Sprintf("top%d_tie=%.3g", k.K, k.TieMargin))
		}
	}
	return strings.Join(out, " ")
}
