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
	return runSets(base, cand, sets, o, func(side Side, s *golden.Set) Measurement { return measure(side, s, tols) }, timePair)
}

// runSets measures every set on both sides, then, where both sides can be timed and both ran,
// times the pair with timeIt.
func runSets(base, cand Side, sets []*golden.Set, o RunOptions, measureIt func(Side, *golden.Set) Measurement,
	timeIt func(base, cand Side, s *golden.Set, o RunOptions) (tb, tc []float64, err error)) ([]Case, error) {
	timed := base.Timer != nil && cand.Timer != nil
	if timed && (o.Warmup < 1 || o.Repeats < 1) {
		return nil, fmt.Errorf("abtest: warmup %d and repeats %d must be >= 1", o.Warmup, o.Repeats)
	}
	var cases []Case
	for _, s := range sets {
		c := Case{ID: s.ID(), Baseline: measureIt(base, s), Candidate: measureIt(cand, s)}
		if timed && ran(c.Baseline) && ran(c.Candidate) {
			tb, tc, err := timeIt(base, cand, s, o)
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
	var launches [2]func() error
	for i, side := range []Side{base, cand} {
		prep := conformance.Prepare
		if side.Unfused {
			prep = conformance.PrepareUnfused
		}
		p, err := prep(side.Timer.Profiler(), s.Manifest.Op, s)
		if err != nil {
			return nil, nil, err
		}
		defer p.Free()
		launches[i] = p.Launch
	}
	return interleave(base, cand, launches, o)
}

// interleave warms each side's launch up, then times Repeats launches of each, alternating
// which side goes first so that drift and order effects hit both alike.
func interleave(base, cand Side, launches [2]func() error, o RunOptions) (tb, tc []float64, err error) {
	runners := [2]*bench.Runner{base.Timer, cand.Timer}
	var timers [2]backend.Timer
	for i, r := range runners {
		t, err := r.Profiler().NewTimer()
		if err != nil {
			return nil, nil, err
		}
		defer t.Close()
		timers[i] = t
		for w := 0; w < o.Warmup; w++ {
			if err := launches[i](); err != nil {
				return nil, nil, err
			}
		}
	}
	var times [2][]float64
	for rep := 0; rep < o.Repeats; rep++ {
		for k := 0; k < 2; k++ {
			i := k ^ rep%2
			ms, err := runners[i].TimeOnce(launches[i], timers[i])
			if err != nil {
				return nil, nil, err
			}
			times[i] = append(times[i], ms)
		}
	}
	return times[0], times[1], nil
}

// RunModelSets runs every model set on both sides: each tap of prefill and the stored decode
// steps against its limit (the worst budget names the tap), then greedy generation against the
// reference's tokens. Where both sides can be timed and both ran, each side's whole greedy
// pass is timed (modelPass), the two alternating as kernel sets do.
func RunModelSets(base, cand Side, sets []*golden.Set, tols *compare.Tolerances, o RunOptions) ([]Case, error) {
	return runSets(base, cand, sets, o, func(side Side, s *golden.Set) Measurement { return measureModel(side.Backend, s, tols) }, timeModelPair)
}

// timeModelPair loads the set's model on both sides' timing backends and times modelPass on
// each alternately.
func timeModelPair(base, cand Side, s *golden.Set, o RunOptions) (tb, tc []float64, err error) {
	var launches [2]func() error
	for i, side := range []Side{base, cand} {
		m, p, err := model.LoadSet(side.Timer.Profiler(), s)
		if err != nil {
			return nil, nil, err
		}
		defer m.Close()
		launch, err := modelPass(m, s, p)
		if err != nil {
			return nil, nil, err
		}
		launches[i] = launch
	}
	return interleave(base, cand, launches, o)
}

// modelPass is the set's greedy generation as the device sees it: the prefill (which empties
// the cache first) of the prompt, then one decode step for each reference token but the last (the
// steps Greedy runs), every logit left on the device. Feeding the reference's tokens keeps the
// work identical on both sides whatever either would pick. One timed run is the whole pass,
// host gaps between ops included, as a caller of the model would see it.
func modelPass(m *model.Model, s *golden.Set, p *model.SetParams) (func() error, error) {
	toks, err := s.Tensor("greedy_tokens")
	if err != nil {
		return nil, err
	}
	steps := p.GreedyTokens - 1
	if steps < 0 || len(toks.I32) < steps {
		return nil, fmt.Errorf("%s: %d greedy tokens stored, params.greedy_tokens %d", s.ID(), len(toks.I32), p.GreedyTokens)
	}
	decode := toks.I32[:steps]
	return func() error {
		if err := m.PrefillOnDevice(p.PromptIDs); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		for _, id := range decode {
			if err := m.DecodeOnDevice(id); err != nil {
				return fmt.Errorf("decode at position %d: %w", m.Pos(), err)
			}
		}
		return nil
	}, nil
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
