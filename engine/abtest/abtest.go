// Package abtest judges a candidate build of the kernels against a baseline on the same golden
// cases, as a reviewer of a kernel change needs it: for every case, the error each side makes
// against the golden (its verdict and the worst fraction of a limit it uses) and the time each
// takes, then a verdict per case (an accuracy regression, a speed change beyond the noise) and
// one summary with an exit status. The caller runs the cases (interleaving the two sides so that
// clock and thermal drift cancel); this package only judges and renders.
package abtest

import (
	"fmt"
	"math"
	"sort"
)

// Status is how one side's run of a case ended.
type Status string

const (
	Pass        Status = "pass"        // every output within its tolerance
	Fail        Status = "fail"        // an output outside its tolerance
	Unsupported Status = "unsupported" // the backend does not implement the call
	Errored     Status = "error"       // the run failed (a refused argument, a fault)
	Hang        Status = "hang"        // a kernel did not finish within the deadline
)

// Measurement is one side's run of one case.
type Measurement struct {
	Status Status `json:"status"`
	// Budget is the largest fraction of a limit any check of any output used (1 = at the
	// limit), for Pass and Fail.
	Budget float64 `json:"budget"`
	// Worst names that check, e.g. "out allclose".
	Worst string `json:"worst,omitempty"`
	// Error is the run's error, for Unsupported, Errored and Hang.
	Error string `json:"error,omitempty"`
	// TimesMS are the timed runs in milliseconds, in the order they ran; empty when untimed.
	// Where both sides have as many, the i-th of each ran back to back (paired).
	TimesMS []float64 `json:"times_ms,omitempty"`
}

// Case is one golden case run on both sides.
type Case struct {
	ID        string      `json:"id"`
	Baseline  Measurement `json:"baseline"`
	Candidate Measurement `json:"candidate"`
	// Untimed says why a case both sides ran has no times (a hang while timing it, or an
	// external adapter that failed to time it).
	Untimed string `json:"untimed,omitempty"`
}

// Options are the thresholds of the verdicts.
type Options struct {
	// BudgetMargin: with both sides passing, a candidate that uses more than this much more
	// of a limit (an absolute fraction: 0.10 is 10 points of the budget) is an accuracy
	// regression. It must be >= 0.
	BudgetMargin float64 `json:"budget_margin"`
	// MaxSlowdown: a case whose candidate is slower than this ratio of the baseline's time,
	// beyond the noise, fails the comparison (1.10: 10% slower); 0 turns the check off.
	MaxSlowdown float64 `json:"max_slowdown"`
	// MinEffect is the smallest relative change called faster or slower, whatever the noise
	// says (0.05: 5%). Two instances of one build differ systematically by a few percent on
	// kernels of microseconds (placement, the timer's own cost), which the spread of repeated
	// runs does not show. It must be >= 0.
	MinEffect float64 `json:"min_effect"`
}

// Accuracy is the accuracy verdict of one case.
type Accuracy string

const (
	AccuracySame      Accuracy = "same"       // both pass, the budget within the margin (or both fail)
	AccuracyRegressed Accuracy = "regression" // passed and no longer passes, or the budget grew past the margin
	AccuracyFixed     Accuracy = "fixed"      // failed or errored, now passes
	AccuracyNew       Accuracy = "new"        // unsupported before, passes now
	AccuracyStillBad  Accuracy = "still failing"
)

// Speed is the speed verdict of one case.
type Speed string

const (
	SpeedFaster Speed = "faster"
	SpeedSlower Speed = "slower"
	SpeedSame   Speed = "within noise"
	SpeedNone   Speed = "untimed"
)

// Outcome is the verdict of one case.
type Outcome struct {
	Case
	Accuracy Accuracy `json:"accuracy"`
	// Why says what the accuracy verdict rests on, e.g. "budget 31% -> 58% (+27 points)".
	Why string `json:"why"`
	// BaselineMS and CandidateMS are the medians; Ratio is candidate / baseline (the median of
	// the per-pair ratios when paired), so < 1 is faster.
	BaselineMS  float64 `json:"baseline_ms,omitempty"`
	CandidateMS float64 `json:"candidate_ms,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
	// Noise is the relative noise of Ratio: half the interquartile range of the per-pair
	// ratios, or, unpaired, the larger relative half-interquartile range of the two sides.
	Noise float64 `json:"noise,omitempty"`
	Speed Speed   `json:"speed"`
	// TooSlow: slower than Options.MaxSlowdown, and slower beyond the noise and MinEffect.
	TooSlow bool `json:"too_slow"`
}

// Summary counts the outcomes.
type Summary struct {
	Cases       int `json:"cases"`
	Regressions int `json:"accuracy_regressions"`
	Fixed       int `json:"fixed"`
	StillBad    int `json:"still_failing"`
	Faster      int `json:"faster"`
	Slower      int `json:"slower"`
	WithinNoise int `json:"within_noise"`
	TooSlow     int `json:"too_slow"`
	// GeoMeanRatio is the geometric mean of the timed cases' ratios (candidate / baseline).
	GeoMeanRatio float64 `json:"geomean_ratio,omitempty"`
	// Accepted is false on an accuracy regression or a case too slow.
	Accepted bool   `json:"accepted"`
	Line     string `json:"line"`
}

// Exit statuses of a comparison.
const (
	ExitAccepted   = 0
	ExitRegression = 1 // an accuracy regression (whatever the speed)
	ExitSlowdown   = 3 // no accuracy regression, but a case slower than allowed
)

// Report is the whole comparison.
type Report struct {
	Baseline  string    `json:"baseline"`
	Candidate string    `json:"candidate"`
	Options   Options   `json:"options"`
	Outcomes  []Outcome `json:"cases"`
	Summary   Summary   `json:"summary"`
}

// ExitCode is the status a command should exit with.
func (r *Report) ExitCode() int {
	switch {
	case r.Summary.Regressions > 0:
		return ExitRegression
	case r.Summary.TooSlow > 0:
		return ExitSlowdown
	}
	return ExitAccepted
}

// Judge gives every case its verdicts and sums them up. Outcomes are ordered with accuracy
// regressions first, then cases too slow, then by case ID.
func Judge(baseline, candidate string, cases []Case, o Options) (*Report, error) {
	if o.BudgetMargin < 0 || math.IsNaN(o.BudgetMargin) {
		return nil, fmt.Errorf("abtest: budget margin = %v: must be >= 0", o.BudgetMargin)
	}
	if o.MinEffect < 0 || math.IsNaN(o.MinEffect) {
		return nil, fmt.Errorf("abtest: min effect = %v: must be >= 0", o.MinEffect)
	}
	if o.MaxSlowdown != 0 && !(o.MaxSlowdown >= 1) {
		return nil, fmt.Errorf("abtest: max slowdown = %v: must be >= 1 (a ratio of times), or 0 for no limit", o.MaxSlowdown)
	}
	r := &Report{Baseline: baseline, Candidate: candidate, Options: o}
	for _, c := range cases {
		out := Outcome{Case: c}
		out.Accuracy, out.Why = accuracy(c.Baseline, c.Candidate, o.BudgetMargin)
		speed(&out, o)
		r.Outcomes = append(r.Outcomes, out)
	}
	sort.SliceStable(r.Outcomes, func(i, j int) bool {
		a, b := r.Outcomes[i], r.Outcomes[j]
		if ra, rb := a.Accuracy == AccuracyRegressed, b.Accuracy == AccuracyRegressed; ra != rb {
			return ra
		}
		if a.TooSlow != b.TooSlow {
			return a.TooSlow
		}
		return a.ID < b.ID
	})
	r.summarise()
	return r, nil
}

func accuracy(b, c Measurement, margin float64) (Accuracy, string) {
	pct := func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }
	switch {
	case b.Status == Pass && c.Status == Pass:
		grew := c.Budget - b.Budget
		why := fmt.Sprintf("budget %s -> %s (%+.0f points)", pct(b.Budget), pct(c.Budget), 100*grew)
		if grew > margin {
			return AccuracyRegressed, why + fmt.Sprintf(", past the %.0f-point margin", 100*margin)
		}
		return AccuracySame, why
	case b.Status == Pass:
		return AccuracyRegressed, "passed, now " + describe(c)
	case c.Status == Pass && b.Status == Unsupported:
		return AccuracyNew, "unsupported before, passes now (" + pct(c.Budget) + ")"
	case c.Status == Pass:
		return AccuracyFixed, describe(b) + " before, passes now (" + pct(c.Budget) + ")"
	case b.Status == Unsupported && c.Status == Unsupported:
		return AccuracySame, "unsupported on both"
	default:
		return AccuracyStillBad, describe(b) + " before, " + describe(c) + " now"
	}
}

func describe(m Measurement) string {
	switch m.Status {
	case Fail:
		if m.Budget <= 1 { // every limit met, and yet failing: greedy tokens
			return "fails (" + m.Worst + ")"
		}
		return fmt.Sprintf("fails (%s at %.0f%% of its limit)", m.Worst, 100*m.Budget)
	case Unsupported:
		return "unsupported (" + m.Error + ")"
	case Errored:
		return "errors (" + m.Error + ")"
	case Hang:
		return "hangs (" + m.Error + ")"
	}
	return string(m.Status)
}

func speed(out *Outcome, o Options) {
	b, c := out.Baseline.TimesMS, out.Candidate.TimesMS
	if len(b) == 0 || len(c) == 0 {
		out.Speed = SpeedNone
		return
	}
	out.BaselineMS, out.CandidateMS = median(b), median(c)
	if len(b) == len(c) {
		ratios := make([]float64, len(b))
		for i := range b {
			ratios[i] = c[i] / b[i]
		}
		out.Ratio = median(ratios)
		out.Noise = halfIQR(ratios) / out.Ratio
	} else {
		out.Ratio = out.CandidateMS / out.BaselineMS
		out.Noise = math.Max(halfIQR(b)/out.BaselineMS, halfIQR(c)/out.CandidateMS)
	}
	threshold := math.Max(out.Noise, o.MinEffect)
	switch {
	case out.Ratio-1 > threshold:
		out.Speed = SpeedSlower
	case 1-out.Ratio > threshold:
		out.Speed = SpeedFaster
	default:
		out.Speed = SpeedSame
	}
	out.TooSlow = o.MaxSlowdown > 0 && out.Speed == SpeedSlower && out.Ratio > o.MaxSlowdown
}

func (r *Report) summarise() {
	s := &r.Summary
	logSum, timed := 0.0, 0
	for _, o := range r.Outcomes {
		s.Cases++
		switch o.Accuracy {
		case AccuracyRegressed:
			s.Regressions++
		case AccuracyFixed, AccuracyNew:
			s.Fixed++
		case AccuracyStillBad:
			s.StillBad++
		}
		switch o.Speed {
		case SpeedFaster:
			s.Faster++
		case SpeedSlower:
			s.Slower++
		case SpeedSame:
			s.WithinNoise++
		}
		if o.Speed != SpeedNone {
			logSum += math.Log(o.Ratio)
			timed++
		}
		if o.TooSlow {
			s.TooSlow++
		}
	}
	speedPart := "untimed"
	if timed > 0 {
		s.GeoMeanRatio = math.Exp(logSum / float64(timed))
		speedPart = fmt.Sprintf("time %.3fx the baseline's (geometric mean; %d faster, %d slower, %d within noise)",
			s.GeoMeanRatio, s.Faster, s.Slower, s.WithinNoise)
	}
	s.Accepted = s.Regressions == 0 && s.TooSlow == 0
	verdict := "ACCEPTED"
	switch {
	case s.Regressions > 0:
		verdict = "REJECTED: accuracy regression"
	case s.TooSlow > 0:
		verdict = fmt.Sprintf("REJECTED: slower than %.2fx the baseline", r.Options.MaxSlowdown)
	}
	s.Line = fmt.Sprintf("%s against %s: %d cases, %d accuracy regressions (%d fixed, %d still failing), %s, %d too slow: %s",
		r.Candidate, r.Baseline, s.Cases, s.Regressions, s.Fixed, s.StillBad, speedPart, s.TooSlow, verdict)
}

// median of xs (not modified).
func median(xs []float64) float64 { return quantile(xs, 0.5) }

// halfIQR is half the interquartile range of xs.
func halfIQR(xs []float64) float64 { return (quantile(xs, 0.75) - quantile(xs, 0.25)) / 2 }

// quantile by linear interpolation between order statistics.
func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}
