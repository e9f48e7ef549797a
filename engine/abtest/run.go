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
	// Timer, when set, times this side (a bench.Runner on a GPU backend with guards off).
	Timer *bench.Runner
	// Adapter, when set, is an external backend that times its ops on its own device
	// (backend.OpTimer): this side's kernel sets are timed by its adapter. A case is timed
	// only when both sides have a Timer or an Adapter.
	Adapter backend.OpTimer
	// Unfused runs each fused op's unfused composition instead of the op (a fused kernel
	// against the ops it replaces, on one backend).
	Unfused bool
}

// RunOptions steer the runs.
type RunOptions struct {
	Warmup, Repeats int
	// Resume is the first set's case with only its baseline measured, by an earlier process
	// whose baseline hung (Stopped.Partial): the run measures its candidate and goes on.
	Resume *Case
	// Observe, when set, is told where the run is before each side's check and each timing:
	// a call that never returns cannot stop the run from inside, so the caller's handler of
	// such a hang (cuda.OnStuck) turns the last position into a Stopped (Position.Hung).
	Observe func(*Position)
}

// Position is a point of a run: the cases finished, and the side and phase of the case at
// Index about to run.
type Position struct {
	done         []Case
	index        int
	c            Case
	side, during string
}

// Hung returns the cases finished and the Stopped of a hang err at p, as if the call in
// progress had returned err.
func (p *Position) Hung(err error) ([]Case, *Stopped) { return p.stop(failed(err)) }

// stop is Hung for the measurement m of the hung side (its Error for a timing).
func (p *Position) stop(m Measurement) ([]Case, *Stopped) {
	c := p.c
	stop := &Stopped{Next: p.index + 1, Case: c.ID, Side: p.side, During: p.during, Message: m.Error}
	switch {
	case p.during == "timing":
		// Both ran their checks, so neither verdict changes; the case stays untimed.
		c.Untimed = "hung while timed: " + m.Error
	case p.side == "baseline":
		c.Baseline = m
		stop.Next, stop.Partial = p.index, &c
		return p.done, stop
	default:
		c.Candidate = m
	}
	return append(p.done[:len(p.done):len(p.done)], c), stop
}

// Stopped is the error of a run that stopped at a hang: a kernel of one side did not finish
// within its deadline (Status Hang). The hung kernel keeps the GPU busy, which both sides may
// share, and its backend refuses every later call, so the sets after it, and the candidate's
// run of the case when the baseline hung, must run in a new process. The cases returned with
// it are complete.
type Stopped struct {
	// Next is the index in the sets of the first set not finished.
	Next int
	// Partial is set when the baseline hung: that case with only its baseline measured (pass
	// it as RunOptions.Resume with the sets from Next).
	Partial *Case
	// Case is the ID of the case that hung, Side "baseline" or "candidate", and During
	// "check" or "timing".
	Case, Side, During string
	// Message is the hang's error, naming the wait and the kernels last launched.
	Message string
}

func (e *Stopped) Error() string {
	return fmt.Sprintf("abtest: the %s hung during the %s of %s; the sets from %d on need a new process", e.Side, e.During, e.Case, e.Next)
}

// RunKernelSets runs every kernel set on both sides: each side's error against the golden,
// then, where both sides can be timed and both ran, Repeats timed launches of each,
// alternating which side goes first so that drift and order effects hit both alike. At a
// hang it returns the cases finished and a *Stopped.
func RunKernelSets(base, cand Side, sets []*golden.Set, tols *compare.Tolerances, o RunOptions) ([]Case, error) {
	return runSets(base, cand, sets, o, func(side Side, s *golden.Set) Measurement { return measure(side, s, tols) }, timePair)
}

// runSets measures every set on both sides, then, where both sides can be timed and both ran,
// times the pair with timeIt.
func runSets(base, cand Side, sets []*golden.Set, o RunOptions, measureIt func(Side, *golden.Set) Measurement,
	timeIt func(base, cand Side, s *golden.Set, o RunOptions) (tb, tc []float64, err error)) ([]Case, error) {
	timed := base.canTime() && cand.canTime()
	if timed && (o.Warmup < 1 || o.Repeats < 1) {
		return nil, fmt.Errorf("abtest: warmup %d and repeats %d must be >= 1", o.Warmup, o.Repeats)
	}
	var cases []Case
	// at is the position before a call, told to o.Observe; a hang returned there stops the run
	at := func(i int, c Case, side, during string) *Position {
		p := &Position{done: cases[:len(cases):len(cases)], index: i, c: c, side: side, during: during}
		if o.Observe != nil {
			o.Observe(p)
		}
		return p
	}
	for i, s := range sets {
		c := Case{ID: s.ID()}
		if i == 0 && o.Resume != nil {
			if o.Resume.ID != c.ID {
				return nil, fmt.Errorf("abtest: resuming case %s, but the first set is %s", o.Resume.ID, c.ID)
			}
			c.Baseline = o.Resume.Baseline
		} else {
			p := at(i, c, "baseline", "check")
			if c.Baseline = measureIt(base, s); c.Baseline.Status == Hang {
				done, stop := p.stop(c.Baseline)
				return done, stop
			}
		}
		p := at(i, c, "candidate", "check")
		if c.Candidate = measureIt(cand, s); c.Candidate.Status == Hang {
			done, stop := p.stop(c.Candidate)
			return done, stop
		}
		// Timed only when both ran in this process: after a resume the baseline's backend is
		// a new one, which is as good a timer as any.
		if timed && ran(c.Baseline) && ran(c.Candidate) {
			p := at(i, c, "baseline or candidate", "timing")
			tb, tc, err := timeIt(base, cand, s, o)
			if errors.Is(err, backend.ErrHang) {
				done, stop := p.stop(Measurement{Error: err.Error()})
				return done, stop
			}
			switch {
			case err != nil && (base.Adapter != nil || cand.Adapter != nil):
				// An external adapter that fails to time a case it ran: that case goes
				// untimed, saying why, and the comparison goes on.
				c.Untimed = "timing failed: " + err.Error()
			case err != nil:
				return nil, fmt.Errorf("%s: %w", s.ID(), err)
			default:
				c.Baseline.TimesMS, c.Candidate.TimesMS = tb, tc
			}
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func ran(m Measurement) bool { return m.Status == Pass || m.Status == Fail }

// failed is the measurement of a run that did not finish with err.
func failed(err error) Measurement {
	switch {
	case errors.Is(err, backend.ErrUnsupported):
		return Measurement{Status: Unsupported, Error: err.Error()}
	case errors.Is(err, backend.ErrHang):
		return Measurement{Status: Hang, Error: err.Error()}
	}
	return Measurement{Status: Errored, Error: err.Error()}
}

// measure checks one set on a side and condenses the verdicts.
func measure(side Side, s *golden.Set, tols *compare.Tolerances) Measurement {
	check := conformance.Check
	if side.Unfused {
		check = conformance.CheckUnfused
	}
	verdicts, err := check(side.Backend, s, tols)
	if err != nil {
		return failed(err)
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

func (s Side) canTime() bool { return s.Timer != nil || s.Adapter != nil }

// timePair prepares the set on both sides and times them alternately.
func timePair(base, cand Side, s *golden.Set, o RunOptions) (tb, tc []float64, err error) {
	var blocks [2]blockTimer
	for i, side := range []Side{base, cand} {
		prep := conformance.Prepare
		if side.Unfused {
			prep = conformance.PrepareUnfused
		}
		on := side.Backend
		if side.Adapter == nil {
			on = side.Timer.Profiler()
		}
		p, err := prep(on, s.Manifest.Op, s)
		if err != nil {
			return nil, nil, err
		}
		defer p.Free()
		if side.Adapter != nil {
			if !p.TimedByAdapter() {
				return nil, nil, fmt.Errorf("%s: %s cannot time this case itself", s.ID(), side.Name)
			}
			blocks[i] = func(warmup, n int) ([]float64, error) {
				return p.Time(backend.TimeRequest{Warmup: warmup, Repeats: n, FlushBytes: bench.FlushBytes})
			}
			continue
		}
		block, release, err := runnerBlocks(side.Timer, p.Launch)
		if err != nil {
			return nil, nil, err
		}
		defer release()
		blocks[i] = block
	}
	return interleave(blocks, base.Adapter != nil || cand.Adapter != nil, o)
}

// blockTimer times n launches of one side's case after warmup untimed ones.
type blockTimer func(warmup, n int) ([]float64, error)

// runnerBlocks times launch on r's profiler, each launch after an L2 flush; release frees its
// timer.
func runnerBlocks(r *bench.Runner, launch func() error) (block blockTimer, release func(), err error) {
	t, err := r.Profiler().NewTimer()
	if err != nil {
		return nil, nil, err
	}
	return func(warmup, n int) ([]float64, error) {
		for w := 0; w < warmup; w++ {
			if err := launch(); err != nil {
				return nil, err
			}
		}
		var times []float64
		for k := 0; k < n; k++ {
			ms, err := r.TimeOnce(launch, t)
			if err != nil {
				return nil, err
			}
			times = append(times, ms)
		}
		return times, nil
	}, func() { t.Close() }, nil
}

// adapterRounds is how many blocks the repeats of a pair with an external side are split into:
// each block is one request to the adapter, which reloads the case's tensors onto its device,
// so one launch a block would cost a round trip and an upload a launch.
const adapterRounds = 5

// interleave warms each side up, then times Repeats launches of each, alternating which side
// goes first so that drift and order effects hit both alike: a launch at a time when both
// sides run in this process, in adapterRounds blocks when one is an external adapter (each
// block warmed up again: the adapter's upload leaves it cold).
func interleave(blocks [2]blockTimer, external bool, o RunOptions) (tb, tc []float64, err error) {
	size := 1
	if external {
		size = max(1, (o.Repeats+adapterRounds-1)/adapterRounds)
	}
	var times [2][]float64
	for round, done := 0, 0; done < o.Repeats; round++ {
		n := min(size, o.Repeats-done)
		for k := 0; k < 2; k++ {
			i := k ^ round%2
			warmup := 0
			switch {
			case round == 0:
				warmup = o.Warmup
			case external:
				warmup = min(o.Warmup, 2)
			}
			ts, err := blocks[i](warmup, n)
			if err != nil {
				return nil, nil, err
			}
			times[i] = append(times[i], ts...)
		}
		done += n
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
	var blocks [2]blockTimer
	for i, side := range []Side{base, cand} {
		if side.Timer == nil {
			return nil, nil, fmt.Errorf("%s: %s cannot time a model pass", s.ID(), side.Name)
		}
		m, p, err := model.LoadSet(side.Timer.Profiler(), s)
		if err != nil {
			return nil, nil, err
		}
		defer m.Close()
		launch, err := modelPass(m, s, p)
		if err != nil {
			return nil, nil, err
		}
		block, release, err := runnerBlocks(side.Timer, launch)
		if err != nil {
			return nil, nil, err
		}
		defer release()
		blocks[i] = block
	}
	return interleave(blocks, false, o)
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
