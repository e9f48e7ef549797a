package compare

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Check is one metric held against its limit.
type Check struct {
	Metric string // "max_abs", "allclose", "nmse", "cosine", "kl", "top5", "nan", "inf", "steps", "mismatch"
	// Value is the measured value. For allclose it is the worst element's
	// |got-want| / (atol + atol_rms·rms(row) + rtol·|want|) against a limit of 1 when no
	// mismatch is allowed, else the fraction of elements outside that allowance against
	// max_mismatch.
	Value float64
	Limit float64 // the tolerance's limit
	// Upper is true when Value must not exceed Limit, false when it must reach it.
	Upper bool
	Pass  bool
	// Budget is the share of the allowed error used: 0 is a perfect match, 1 is exactly at
	// the limit, above 1 fails. For lower bounds (cosine, top-k) it is measured on the
	// distance from a perfect score: (1-value)/(1-limit).
	Budget float64
}

// Headroom is how much of the budget is left, 1 - Budget.
func (c Check) Headroom() float64 { return 1 - c.Budget }

// Element is one compared value, for the worst-elements list of a report.
type Element struct {
	Index  []int
	Got    float64
	Want   float64
	AbsErr float64
	// Excess is AbsErr over the element's allclose allowance
	// (atol + atol_rms·rms(row) + rtol·|want|); above 1 means the element fails allclose.
	// Without allclose it is AbsErr.
	Excess float64

	flat int
}

// Result is the outcome of comparing one tensor with its reference.
type Result struct {
	Shape  []int
	N      int
	Checks []Check
	// Worst holds the elements with the largest allclose excess (or absolute error when
	// the tolerance sets no allclose), NaN and infinity mismatches first.
	Worst []Element

	// Mismatches counts the elements outside the allclose allowance (0 without allclose), or
	// under max_steps the codes that differ from the reference's.
	Mismatches int

	allowance bool // Excess is relative to an allclose allowance
	codes     bool // compared as FP8 codes (max_steps): Excess is the distance in steps
}

// Pass reports whether every check passed.
func (r *Result) Pass() bool {
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return true
}

// Failed returns the checks that failed.
func (r *Result) Failed() []Check {
	var f []Check
	for _, c := range r.Checks {
		if !c.Pass {
			f = append(f, c)
		}
	}
	return f
}

// MaxBudget is the largest budget share used by any check: the headline of a report.
func (r *Result) MaxBudget() float64 {
	m := 0.0
	for _, c := range r.Checks {
		m = math.Max(m, c.Budget)
	}
	return m
}

// WorstCount is how many elements a Result keeps for its report.
const WorstCount = 5

// Compare measures got against want under tol. It is an error, not a failed check, when
// the two cannot be compared at all (shape or dtype family differ), since that is a bug
// in the caller or a stale golden set rather than a numerical difference.
func Compare(got, want *tensor.Tensor, tol Tolerance) (*Result, error) {
	return CompareAllowing(got, want, nil, tol)
}

// CompareAllowing is Compare with a per-element allowance from the reference added to each
// element's allclose allowance (atol + atol_rms·rms(row) + rtol·|want| + allowance[i]): what
// the reference knows a correct kernel may differ by at that element, such as a once-rounded
// intermediate on the other side of a rounding boundary (golden.RoleAllowance). nil adds
// nothing. It widens allclose only: nmse and cosine judge the whole tensor as before.
func CompareAllowing(got, want, allowance *tensor.Tensor, tol Tolerance) (*Result, error) {
	if got == nil || want == nil {
		return nil, fmt.Errorf("compare: nil tensor")
	}
	var extra []float64
	if allowance != nil {
		if tol.Atol == nil {
			return nil, fmt.Errorf("compare: a per-element allowance needs an allclose tolerance (atol, rtol)")
		}
		if !tensor.SameShape(allowance.Shape, want.Shape) {
			return nil, fmt.Errorf("compare: allowance shape %s, reference has %s", tensor.ShapeString(allowance.Shape), tensor.ShapeString(want.Shape))
		}
		extra = allowance.Float64()
		for i, v := range extra {
			if !(v >= 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("compare: allowance element %d is %v: want finite and >= 0", i, v)
			}
		}
	}
	if !tensor.SameShape(got.Shape, want.Shape) {
		return nil, fmt.Errorf("compare: shape %s, reference has %s", tensor.ShapeString(got.Shape), tensor.ShapeString(want.Shape))
	}
	if (got.DType == tensor.I32 || want.DType == tensor.I32) && (got.DType != want.DType || !tol.exact() || allowance != nil) {
		// Indices (moe_router's chosen experts) are right or wrong: only max_abs 0 judges them.
		return nil, fmt.Errorf("compare: integer tensors (%s vs %s) are compared for equality (max_abs 0 alone), not with tolerances", got.DType, want.DType)
	}
	if tol.MaxSteps != nil {
		if allowance != nil {
			return nil, fmt.Errorf("compare: max_steps takes no per-element allowance")
		}
		return compareCodes(got, want, tol)
	}
	g, w := got.Float64(), want.Float64()
	r := &Result{Shape: got.Shape, N: len(g)}

	var nan, infBad int
	var maxAbs, errSq, refSq, dot, gSq, wSq float64
	var mismatches int
	allclose := tol.Atol != nil
	var rowRMS []float64 // rms of each reference row, when the allowance scales with it
	rowLen := 1
	if tol.AtolRMS != nil {
		rowLen, rowRMS = RowRMS(w, got.Shape)
	}
	r.allowance = allclose
	worst := worstList{keep: WorstCount}
	// An exact tolerance (max_abs 0 and nothing else: a copy, a quantisation, whose output is
	// an exact function of its inputs) holds a NaN where the reference has one: the spec
	// defines it (docs/quantization.md), and only its place can be wrong.
	exact := tol.exact()
	for i := range g {
		a, b := g[i], w[i]
		e := Element{Got: a, Want: b, flat: i}
		switch {
		case exact && math.IsNaN(a) && math.IsNaN(b):
			continue
		case math.IsNaN(a) || math.IsNaN(b):
			nan++
			e.AbsErr, e.Excess = math.NaN(), math.Inf(1)
			worst.offer(e)
			continue
		case math.IsInf(a, 0) || math.IsInf(b, 0):
			if a != b {
				infBad++
				e.AbsErr, e.Excess = math.Inf(1), math.Inf(1)
				worst.offer(e)
			}
			continue // matching infinities in sign and place agree exactly
		}
		d := math.Abs(a - b)
		e.AbsErr = d
		maxAbs = math.Max(maxAbs, d)
		errSq += d * d
		refSq += b * b
		dot += a * b
		gSq += a * a
		wSq += b * b
		if allclose {
			allow := *tol.Atol + *tol.Rtol*math.Abs(b)
			if rowRMS != nil {
				allow += *tol.AtolRMS * rowRMS[i/rowLen]
			}
			if extra != nil {
				allow += extra[i]
			}
			switch {
			case allow > 0:
				e.Excess = d / allow
			case d > 0:
				e.Excess = math.Inf(1)
			}
			if d > allow {
				mismatches++
			}
		} else {
			e.Excess = d
		}
		worst.offer(e)
	}

	r.Mismatches = mismatches
	r.Checks = append(r.Checks,
		upper("nan", float64(nan), 0),
		upper("inf", float64(infBad), 0))
	if tol.MaxAbs != nil {
		r.Checks = append(r.Checks, upper("max_abs", maxAbs, *tol.MaxAbs))
	}
	if allclose {
		frac := 0.0
		if len(g) > 0 {
			frac = float64(mismatches) / float64(len(g))
		}
		if tol.MaxMismatch == 0 {
			// With no mismatch allowed, report the worst element's share of its own
			// allowance, so a pass still shows how close the nearest element came.
			excess := 0.0
			if len(worst.elems) > 0 {
				excess = worst.elems[0].Excess
			}
			c := upper("allclose", excess, 1)
			c.Pass = mismatches == 0
			r.Checks = append(r.Checks, c)
		} else {
			r.Checks = append(r.Checks, upper("allclose", frac, tol.MaxMismatch))
		}
	}
	if tol.NMSE != nil {
		r.Checks = append(r.Checks, upper("nmse", ratio(errSq, refSq), *tol.NMSE))
	}
	if tol.MinCosine != nil {
		r.Checks = append(r.Checks, lower("cosine", cosine(dot, gSq, wSq), *tol.MinCosine))
	}
	if tol.MaxKL != nil || len(tol.TopK) > 0 {
		r.Checks = append(r.Checks, logitChecks(g, w, got.Shape, tol)...)
	}

	for _, e := range worst.elems {
		e.Index = got.Index(e.flat)
		r.Worst = append(r.Worst, e)
	}
	return r, nil
}

// compareCodes is Compare under max_steps: got and want are FP8 codes of one format, each
// element's distance the number of representable values between them (fp8Position), NaN
// meeting NaN in place. Checks: nan (a NaN on one side only), steps (the largest distance, at
// most MaxSteps) and mismatch (the share of codes that differ at all, at most MaxMismatch).
func compareCodes(got, want *tensor.Tensor, tol Tolerance) (*Result, error) {
	if !got.DType.IsFP8() || got.DType != want.DType {
		return nil, fmt.Errorf("compare: max_steps compares FP8 codes of one format: got %s, reference %s", got.DType, want.DType)
	}
	r := &Result{Shape: got.Shape, N: len(got.F8)}
	worst := worstList{keep: WorstCount}
	nan, steps, differ := 0, 0, 0
	for i, a := range got.F8 {
		b := want.F8[i]
		va, vb := tensor.FP8ToFloat32(got.DType, a), tensor.FP8ToFloat32(want.DType, b)
		e := Element{Got: float64(va), Want: float64(vb), flat: i}
		switch an, bn := va != va, vb != vb; {
		case an && bn:
			continue
		case an || bn:
			nan++
			differ++
			e.AbsErr, e.Excess = math.NaN(), math.Inf(1)
			worst.offer(e)
			continue
		}
		d := fp8Position(a) - fp8Position(b)
		if d < 0 {
			d = -d
		}
		if d == 0 {
			continue
		}
		differ++
		steps = max(steps, d)
		e.AbsErr, e.Excess = math.Abs(e.Got-e.Want), float64(d)
		worst.offer(e)
	}
	r.Mismatches = differ
	frac := 0.0
	if r.N > 0 {
		frac = float64(differ) / float64(r.N)
	}
	r.Checks = append(r.Checks, upper("nan", float64(nan), 0), upper("steps", float64(steps), float64(*tol.MaxSteps)),
		upper("mismatch", frac, tol.MaxMismatch))
	for _, e := range worst.elems {
		e.Index = got.Index(e.flat)
		r.Worst = append(r.Worst, e)
	}
	r.codes = true
	return r, nil
}

// fp8Position is a finite or infinite FP8 code's position on its format's number line: the
// magnitude bits count the representable values up from zero in both formats (sign-magnitude
// layout, e5m2's infinity one past its largest finite value), negated for a negative code, so
// +0 and -0 are one position and neighbours differ by one.
func fp8Position(b uint8) int {
	m := int(b & 0x7F)
	if b&0x80 != 0 {
		return -m
	}
	return m
}

// RowRMS returns the length of the rows of a tensor of shape (its last dimension; the whole
// tensor for a scalar) and the root mean square of each row of v over its finite entries (0 for
// a row without any).
func RowRMS(v []float64, shape []int) (rowLen int, rms []float64) {
	rowLen = 1
	if len(shape) > 0 {
		rowLen = shape[len(shape)-1]
	}
	if rowLen == 0 {
		return 1, nil
	}
	rms = make([]float64, len(v)/rowLen)
	for r := range rms {
		var sq float64
		n := 0
		for _, x := range v[r*rowLen : (r+1)*rowLen] {
			if !math.IsInf(x, 0) && !math.IsNaN(x) {
				sq += x * x
				n++
			}
		}
		if n > 0 {
			rms[r] = math.Sqrt(sq / float64(n))
		}
	}
	return rowLen, rms
}

// worstList keeps the elements with the largest Excess seen so far, largest first, in
// O(keep) memory however large the tensor.
type worstList struct {
	keep  int
	elems []Element
}

func (l *worstList) offer(e Element) {
	if len(l.elems) == l.keep && !(e.Excess > l.elems[len(l.elems)-1].Excess) {
		return
	}
	i := sort.Search(len(l.elems), func(i int) bool { return l.elems[i].Excess < e.Excess })
	l.elems = append(l.elems, Element{})
	copy(l.elems[i+1:], l.elems[i:])
	l.elems[i] = e
	if len(l.elems) > l.keep {
		l.elems = l.elems[:l.keep]
	}
}

func ratio(num, den float64) float64 {
	switch {
	case num == 0:
		return 0
	case den == 0:
		return math.Inf(1)
	}
	return num / den
}

func cosine(dot, aSq, bSq float64) float64 {
	if aSq == 0 && bSq == 0 {
		return 1
	}
	if aSq == 0 || bSq == 0 {
		return 0
	}
	return dot / (math.Sqrt(aSq) * math.Sqrt(bSq))
}

// upper checks value <= limit.
func upper(metric string, value, limit float64) Check {
	c := Check{Metric: metric, Value: value, Limit: limit, Upper: true, Pass: value <= limit}
	c.Budget = ratio(value, limit)
	if math.IsNaN(value) {
		c.Pass, c.Budget = false, math.Inf(1)
	}
	return c
}

// lower checks value >= limit for scores whose perfect value is 1.
func lower(metric string, value, limit float64) Check {
	c := Check{Metric: metric, Value: value, Limit: limit, Pass: value >= limit}
	c.Budget = ratio(math.Max(0, 1-value), 1-limit)
	if math.IsNaN(value) {
		c.Pass, c.Budget = false, math.Inf(1)
	}
	return c
}

// Table formats the checks and worst elements as an aligned text block.
func (r *Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-9s %14s %14s %8s  %s\n", "metric", "value", "limit", "budget", "")
	for _, c := range r.Checks {
		verdict := "ok"
		if !c.Pass {
			verdict = "FAIL"
		}
		op := "<="
		if !c.Upper {
			op = ">="
		}
		fmt.Fprintf(&b, "  %-9s %14.6g %s%12.6g %7.1f%%  %s\n", c.Metric, c.Value, op, c.Limit, 100*c.Budget, verdict)
	}
	switch {
	case r.Mismatches > 0 && r.codes:
		fmt.Fprintf(&b, "  %d of %d FP8 codes differ from the reference's\n", r.Mismatches, r.N)
	case r.Mismatches > 0:
		fmt.Fprintf(&b, "  %d of %d elements outside atol + atol_rms·rms(row) + rtol·|want|\n", r.Mismatches, r.N)
	}
	if len(r.Worst) > 0 {
		fmt.Fprintf(&b, "  worst elements of %s (%d compared):\n", tensor.ShapeString(r.Shape), r.N)
		for _, e := range r.Worst {
			fmt.Fprintf(&b, "    %-16s got %-14.7g want %-14.7g |err| %.3g", tensor.ShapeString(e.Index), e.Got, e.Want, e.AbsErr)
			switch {
			case r.codes && !math.IsInf(e.Excess, 1):
				fmt.Fprintf(&b, " (%g steps)", e.Excess)
			case r.allowance && !math.IsInf(e.Excess, 1):
				fmt.Fprintf(&b, " (%.2fx allowance)", e.Excess)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}
