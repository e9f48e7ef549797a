package abtest

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func pass(budget float64, times ...float64) Measurement {
	return Measurement{Status: Pass, Budget: budget, Worst: "out allclose", TimesMS: times}
}

func TestAccuracyVerdicts(t *testing.T) {
	fail := Measurement{Status: Fail, Budget: 3.2, Worst: "out nmse"}
	unsup := Measurement{Status: Unsupported, Error: "head_dim 100"}
	errd := Measurement{Status: Errored, Error: "attention_decode: cache_lens[1] = 17"}
	for _, tc := range []struct {
		name string
		b, c Measurement
		want Accuracy
		why  string
	}{
		{"both pass, budget within the margin", pass(0.30), pass(0.38), AccuracySame, "budget 30% -> 38% (+8 points)"},
		{"budget past the margin", pass(0.30), pass(0.45), AccuracyRegressed, "past the 10-point margin"},
		{"budget shrank", pass(0.60), pass(0.10), AccuracySame, "(-50 points)"},
		{"passed, now fails", pass(0.30), fail, AccuracyRegressed, "passed, now fails (out nmse at 320% of its limit)"},
		{"passed, now errors", pass(0.30), errd, AccuracyRegressed, "now errors (attention_decode: cache_lens[1] = 17)"},
		{"passed, now unsupported", pass(0.30), unsup, AccuracyRegressed, "now unsupported (head_dim 100)"},
		{"fixed", fail, pass(0.5), AccuracyFixed, "fails (out nmse at 320% of its limit) before, passes now (50%)"},
		{"newly supported", unsup, pass(0.2), AccuracyNew, "unsupported before"},
		{"unsupported on both", unsup, unsup, AccuracySame, "unsupported on both"},
		{"fails on both", fail, fail, AccuracyStillBad, "before, fails"},
		{"errored, now fails", errd, fail, AccuracyStillBad, "errors"},
	} {
		r, err := Judge("base", "cand", []Case{{ID: "x", Baseline: tc.b, Candidate: tc.c}}, Options{BudgetMargin: 0.10})
		if err != nil {
			t.Fatal(err)
		}
		o := r.Outcomes[0]
		if o.Accuracy != tc.want || !strings.Contains(o.Why, tc.why) {
			t.Errorf("%s: got %s (%s), want %s containing %q", tc.name, o.Accuracy, o.Why, tc.want, tc.why)
		}
		wantExit := ExitAccepted
		if tc.want == AccuracyRegressed {
			wantExit = ExitRegression
		}
		if r.ExitCode() != wantExit || r.Summary.Accepted != (wantExit == ExitAccepted) {
			t.Errorf("%s: exit %d accepted %v, want exit %d", tc.name, r.ExitCode(), r.Summary.Accepted, wantExit)
		}
	}
}

func TestSpeedVerdicts(t *testing.T) {
	base := []float64{1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99}
	scaled := func(f float64) []float64 {
		out := make([]float64, len(base))
		for i, v := range base {
			out[i] = v * f
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		c       []float64
		want    Speed
		tooSlow bool
		ratio   float64
	}{
		{"20% faster", scaled(0.8), SpeedFaster, false, 0.8},
		{"5% slower, under the limit", scaled(1.05), SpeedSlower, false, 1.05},
		{"25% slower, past the limit", scaled(1.25), SpeedSlower, true, 1.25},
		{"the same", base, SpeedSame, false, 1},
	} {
		r, err := Judge("b", "c", []Case{{ID: "k", Baseline: pass(0.3, base...), Candidate: pass(0.3, tc.c...)}},
			Options{BudgetMargin: 0.1, MaxSlowdown: 1.10})
		if err != nil {
			t.Fatal(err)
		}
		o := r.Outcomes[0]
		if o.Speed != tc.want || o.TooSlow != tc.tooSlow || math.Abs(o.Ratio-tc.ratio) > 1e-9 {
			t.Errorf("%s: speed %s too slow %v ratio %v, want %s %v %v", tc.name, o.Speed, o.TooSlow, o.Ratio, tc.want, tc.tooSlow, tc.ratio)
		}
		if want := map[bool]int{true: ExitSlowdown, false: ExitAccepted}[tc.tooSlow]; r.ExitCode() != want {
			t.Errorf("%s: exit %d, want %d", tc.name, r.ExitCode(), want)
		}
	}
}

// A change smaller than MinEffect is within noise even where the spread is smaller still.
func TestMinEffect(t *testing.T) {
	b := []float64{1, 1, 1, 1}
	c := []float64{1.03, 1.03, 1.03, 1.03}
	for _, tc := range []struct {
		min  float64
		want Speed
	}{{0, SpeedSlower}, {0.05, SpeedSame}} {
		r, err := Judge("b", "c", []Case{{ID: "k", Baseline: pass(0.3, b...), Candidate: pass(0.3, c...)}}, Options{MinEffect: tc.min, MaxSlowdown: 1.01})
		if err != nil {
			t.Fatal(err)
		}
		if o := r.Outcomes[0]; o.Speed != tc.want || o.TooSlow != (tc.want == SpeedSlower) {
			t.Errorf("min effect %v: %s too slow %v, want %s", tc.min, o.Speed, o.TooSlow, tc.want)
		}
	}
}

// Drift that hits both sides of a pair alike cancels in the paired ratio; the noise is that of
// the ratios, not of the raw times.
func TestPairedTimingsCancelDrift(t *testing.T) {
	var b, c []float64
	for i := 0; i < 20; i++ {
		drift := 1 + 0.05*float64(i) // the clock slows down over the run
		b = append(b, 1.0*drift)
		c = append(c, 0.97*drift)
	}
	r, err := Judge("b", "c", []Case{{ID: "k", Baseline: pass(0.3, b...), Candidate: pass(0.3, c...)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Outcomes[0]
	if o.Speed != SpeedFaster || math.Abs(o.Ratio-0.97) > 1e-9 || o.Noise > 1e-9 {
		t.Errorf("got %s ratio %v noise %v, want faster 0.97 with no noise", o.Speed, o.Ratio, o.Noise)
	}
	// Unpaired, the same samples' spread hides the 3%.
	r, _ = Judge("b", "c", []Case{{ID: "k", Baseline: pass(0.3, b...), Candidate: pass(0.3, c[:19]...)}}, Options{})
	if o := r.Outcomes[0]; o.Speed != SpeedSame {
		t.Errorf("unpaired: got %s ratio %v noise %v, want within noise", o.Speed, o.Ratio, o.Noise)
	}
}

func TestSummaryAndRendering(t *testing.T) {
	cases := []Case{
		{ID: "a/ok", Baseline: pass(0.3, 1, 1, 1), Candidate: pass(0.3, 0.5, 0.5, 0.5)},
		{ID: "b/regressed", Baseline: pass(0.3, 1, 1, 1), Candidate: Measurement{Status: Fail, Budget: 2, Worst: "out allclose", TimesMS: []float64{2, 2, 2}}},
		{ID: "c/untimed", Baseline: pass(0.3), Candidate: pass(0.3)},
	}
	r, err := Judge("cuda:main", "cuda:branch", cases, Options{BudgetMargin: 0.05, MaxSlowdown: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcomes[0].ID != "b/regressed" {
		t.Errorf("regressions come first: %s", r.Outcomes[0].ID)
	}
	s := r.Summary
	if s.Cases != 3 || s.Regressions != 1 || s.Faster != 1 || s.Slower != 1 || s.TooSlow != 1 || s.Accepted || math.Abs(s.GeoMeanRatio-1) > 1e-9 {
		t.Errorf("summary %+v", s)
	}
	if r.ExitCode() != ExitRegression {
		t.Errorf("exit %d, want %d (a regression outranks a slowdown)", r.ExitCode(), ExitRegression)
	}
	md := r.Markdown()
	for _, want := range []string{"REJECTED: accuracy regression", "| b/regressed | pass 30% | fail 200% | **regression**: passed, now fails", "**too slow**", "| c/untimed |", "cuda:branch against cuda:main"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil || back.Summary.Regressions != 1 || len(back.Outcomes) != 3 || len(back.Outcomes[1].Candidate.TimesMS) != 3 {
		t.Errorf("json round trip: %v %+v", err, back.Summary)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{BudgetMargin: -0.1}, {BudgetMargin: math.NaN()}, {MaxSlowdown: 0.9}, {MaxSlowdown: math.NaN()}, {MinEffect: -0.01}} {
		if _, err := Judge("b", "c", nil, o); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}
