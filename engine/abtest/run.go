package abtest

import (
	"errors"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// Side is one build under comparison.
type Side struct {
	Name    string
	Backend backend.Backend
	// Timer, when set, times this side (a bench.Runner on a GPU backend with guards off);
	// a case is timed only when both sides have one.
	Timer *bench.Runner
	// Unfused runs each fused op's unfused composition instead of the op (a fused kernel
	// against the ops it replaces, on one backend).
	Unfused bool
}

// RunOptions steer the runs.
type RunOptions struct {
	Warmup, Repeats int
}

// RunKernelSets runs every kernel set on both sides: each side's error against the golden,
// then, where both sides can be timed and both ran, Repeats timed launches of each,
// alternating which side goes first so that drift and order effects hit both alike.
func RunKernelSets(base, cand Side, sets []*golden.Set, tols *compare.Tolerances, o RunOptions) ([]Case, error) {
	timed := base.Timer != nil && cand.Timer != nil
	if timed && (o.Warmup < 1 || o.Repeats < 1) {
		return nil, fmt.Errorf("abtest: warmup %d and repeats %d must be >= 1", o.Warmup, o.Repeats)
	}
	var cases []Case
	for _, s := range sets {
		c := Case{ID: s.ID(), Baseline: measure(base, s, tols), Candidate: measure(cand, s, tols)}
		if timed && ran(c.Baseline) && ran(c.Candidate) {
			tb, tc, err := timePair(base, cand, s, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.ID(), err)
			}
			c.Baseline.TimesMS, c.Candidate.TimesMS = tb, tc
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func ran(m Measurement) bool { return m.Status == Pass || m.Status == Fail }

// measure checks one set on a side and condenses the verdicts.
func measure(side Side, s *golden.Set, tols *compare.Tolerances) Measurement {
	check := conformance.Check
	if side.Unfused {
		check = conformance.CheckUnfused
	}
	verdicts, err := check(side.Backend, s, tols)
	switch {
	case errors.Is(err, backend.ErrUnsupported):
		return Measurement{Status: Unsupported, Error: err.Error()}
	case err != nil:
		return Measurement{Status: Errored, Error: err.Error()}
	}
	m := Measurement{Status: Pass}
	for _, v := range verdicts {
		if !v.Pass() {
			m.Status = Fail
		}
		m.noteWorst(v.Output, v.Result.Checks)
	}
	return m
}

// noteWorst keeps the check using the largest share of its limit, named "<what> <metric>".
func (m *Measurement) noteWorst(what string, checks []compare.Check) {
	for _, c := range checks {
		if c.Budget > m.Budget || m.Worst == "" {
			m.Budget, m.Worst = c.Budget, what+" "+c.Metric
		}
	}
}

// timePair prepares the set on both sides and times them alternately.
func timePair(base, cand Side, s *golden.Set, o RunOptions) (tb, tc []float64, err error) {
	type prepared struct {
		r     *bench.Runner
		p     *conformance.Prepared
		timer backend.Timer
		times []float64
	}
	var sides [2]*prepared
	defer func() {
		for _, p := range sides {
			if p != nil {
				p.p.Free()
				p.timer.Close()
			}
		}
	}()
	for i, side := range []Side{base, cand} {
		r := side.Timer
		prep := conformance.Prepare
		if side.Unfused {
			prep = conformance.PrepareUnfused
		}
		p, err := prep(r.Profiler(), s.Manifest.Op, s)
		if err != nil {
			return nil, nil, err
		}
		timer, err := r.Profiler().NewTimer()
		if err != nil {
			p.Free()
			return nil, nil, err
		}
		sides[i] = &prepared{r: r, p: p, timer: timer}
		for w := 0; w < o.Warmup; w++ {
			if err := p.Launch(); err != nil {
				return nil, nil, err
			}
		}
	}
	for i := 0; i < o.Repeats; i++ {
		order := []*prepared{sides[0], sides[1]}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, p := range order {
			ms, err := p.r.TimeOnce(p.p.Launch, p.timer)
			if err != nil {
				return nil, nil, err
			}
			p.times = append(p.times, ms)
		}
	}
	return sides[0].times, sides[1].times, nil
}

// RunModelSets runs every model set on both sides: each tap of prefill and the stored decode
// steps against its limit (the worst budget names the tap), then greedy generation against the
// reference's tokens. Model sets are not timed here (touchstone bench-model times models).
func RunModelSets(base, cand Side, sets []*golden.Set, tols *compare.Tolerances) []Case {
	var cases []Case
	for _, s := range sets {
		cases = append(cases, Case{ID: s.ID(), Baseline: measureModel(base.Backend, s, tols), Candidate: measureModel(cand.Backend, s, tols)})
	}
	return cases
}

func measureModel(b backend.Backend, s *golden.Set, tols *compare.Tolerances) Measurement {
	failed := func(err error) Measurement {
		if errors.Is(err, backend.ErrUnsupported) {
			return Measurement{Status: Unsupported, Error: err.Error()}
		}
		return Measurement{Status: Errored, Error: err.Error()}
	}
	m, p, err := model.LoadSet(b, s)
	if err != nil {
		return failed(err)
	}
	defer m.Close()
	rows, err := model.CompareTaps(m, s, p, tols)
	if err != nil {
		return failed(err)
	}
	out := Measurement{Status: Pass}
	for _, r := range rows {
		out.noteWorst(r.Name, r.Result.Checks)
	}
	if first := compare.FirstFailure(rows); first >= 0 {
		out.Status = Fail
		out.Worst += "; first failing tap " + rows[first].Name
		return out
	}
	if _, err := model.Greedy(m, s, p); err != nil {
		out.Status, out.Worst = Fail, err.Error()
	}
	return out
}
