package compare

import (
	"fmt"
	"math"
	"regexp"
	"strings"
)

// TapResult is one tap of a model pass compared with its reference.
type TapResult struct {
	Name string // canonical golden name: prefill.layers.0.q_rope, decode.3.logits
	// Tol is the tolerance the tap was judged by (CalibratedTap), Floor the static taps:
	// entry it derives from.
	Tol, Floor Tolerance
	Result     *Result
}

var tapPrefix = regexp.MustCompile(`^(prefill\.|decode\.\d+\.)?(layers\.\d+\.)?`)

// TapKind is the tolerances.yaml key of a tap name: "prefill.layers.3.q_rope" -> "q_rope",
// "decode.0.logits" -> "logits".
func TapKind(name string) string { return tapPrefix.ReplaceAllString(name, "") }

// Tap returns the static tolerance of a tap by its kind: the floor of the limits
// CalibratedTap derives.
func (t *Tolerances) Tap(name string) (Tolerance, error) {
	kind := TapKind(name)
	tol, ok := t.Taps[kind]
	if !ok {
		return Tolerance{}, fmt.Errorf("%s: no tolerance for tap %q: add taps.%s with a rationale", t.path, name, kind)
	}
	return tol, nil
}

// FirstFailure returns the index of the first tap (in forward order) out of tolerance, or -1.
func FirstFailure(rows []TapResult) int {
	for i, r := range rows {
		if !r.Result.Pass() {
			return i
		}
	}
	return -1
}

// LayerDiffTable formats rows, which must be in forward order, as the layer-diff report: one
// line per tap with its headline metrics (allclose is the worst element's error over its
// atol + atol_rms·rms(row) + rtol·|want| allowance), the share of its budget used, and the
// limits that the set's calibration raised above the static floor; the first tap out of
// tolerance is marked ">>", the taps after it "!" where they fail too (they inherit the error,
// so the first one is where to look).
func LayerDiffTable(rows []TapResult) string {
	var b strings.Builder
	first := FirstFailure(rows)
	fmt.Fprintf(&b, "   %-34s %10s %10s %10s %10s %8s  %-11s %s\n", "tap", "allclose", "nmse", "1-cosine", "kl", "budget", "worst check", "calibrated limits (above the floor)")
	for i, r := range rows {
		mark := "  "
		switch {
		case i == first:
			mark = ">>"
		case !r.Result.Pass():
			mark = " !"
		}
		vals := map[string]float64{}
		worst, wb := "", -1.0
		for _, c := range r.Result.Checks {
			vals[c.Metric] = c.Value
			if c.Budget > wb {
				worst, wb = c.Metric, c.Budget
			}
		}
		col := func(m string, f func(float64) float64) string {
			v, ok := vals[m]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.3g", f(v))
		}
		id := func(v float64) float64 { return v }
		line := fmt.Sprintf("%s %-34s %10s %10s %10s %10s %7.1f%%  %-11s %s", mark, r.Name,
			col("allclose", id), col("nmse", id), col("cosine", func(v float64) float64 { return 1 - v }), col("kl", id),
			100*math.Min(wb, 1e6), worst, r.RaisedLimits())
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	if first >= 0 {
		fmt.Fprintf(&b, "first tap out of tolerance: %s (%s)\n%s", rows[first].Name, rows[first].Tol.Why, rows[first].Result.Table())
	} else {
		fmt.Fprintf(&b, "all %d taps within tolerance\n", len(rows))
	}
	return b.String()
}
