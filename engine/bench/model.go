package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// ModelOptions steer a whole-model timing: a prompt of PromptLen tokens, then DecodeSteps
// single-token steps through the KV cache.
type ModelOptions struct {
	PromptLen   int
	DecodeSteps int
	Warmup      int // untimed prefill + decode rounds before timing
	Repeats     int // timed prefills; every decode step of every repeat is one decode sample
	Seed        uint64
}

// ModelResult is one model's timings, medians over the timed runs, device time by events.
type ModelResult struct {
	PrefillMs    float64 // one prefill of PromptLen tokens (logits of the last position)
	DecodeStepMs float64 // one decode step (one token's forward, its logits on the device)
	// DecodeOpByOpMs is DecodeStepMs with every op issued from the host one by one, where
	// the model replays decode steps from a graph by default (0 without graphs).
	DecodeOpByOpMs float64
	ReplayedSteps  int       // decode steps replayed from a graph during the timed rounds
	TokensPerSec   float64   // 1000 / DecodeStepMs
	PrefillTimes   []float64 // every timed prefill, ms
	DecodeTimes    []float64 // every timed decode step, ms
	PromptIDs      []int32
	DecodeIDs      []int32
	CacheLen       int
}

// BenchTokens is a deterministic token sequence in [0, vocab) for timing runs: a 64-bit
// LCG (Knuth's MMIX constants) keyed by seed, so the PyTorch peer can be fed the very same
// ids. Real token statistics do not matter for timing; distinct rows do (no cache effects
// from repeating one embedding row).
func BenchTokens(n, vocab int, seed uint64) []int32 {
	ids := make([]int32, n)
	s := seed
	for i := range ids {
		s = s*6364136223846793005 + 1442695040888963407
		ids[i] = int32((s >> 33) % uint64(vocab))
	}
	return ids
}

// TimeModel times m's prefill and decode with the profiler's device timers. m must have a
// cache of at least PromptLen + DecodeSteps positions.
func TimeModel(p Profiler, m *model.Model, o ModelOptions) (*ModelResult, error) {
	if o.PromptLen < 1 || o.DecodeSteps < 1 || o.Repeats < 1 || o.Warmup < 0 {
		return nil, fmt.Errorf("bench: model options %+v: prompt, decode steps and repeats must be >= 1", o)
	}
	if need := o.PromptLen + o.DecodeSteps; m.MaxLen < need {
		return nil, fmt.Errorf("bench: cache of %d positions, the run needs %d", m.MaxLen, need)
	}
	r := &ModelResult{
		PromptIDs: BenchTokens(o.PromptLen, m.Cfg.Vocab, o.Seed),
		DecodeIDs: BenchTokens(o.DecodeSteps, m.Cfg.Vocab, o.Seed+1),
		CacheLen:  m.MaxLen,
	}
	timer, err := p.NewTimer()
	if err != nil {
		return nil, err
	}
	defer timer.Close()
	timed := func(f func() error) (float64, error) { return timeMs(timer, f) }
	// rounds runs warm-up and timed rounds of one prefill and the decode steps, appending
	// the timed ones' times.
	rounds := func(prefill, decode *[]float64) error {
		for rep := 0; rep < o.Warmup+o.Repeats; rep++ {
			ms, err := timed(func() error { return m.PrefillOnDevice(r.PromptIDs) })
			if err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
			if rep >= o.Warmup && prefill != nil {
				*prefill = append(*prefill, ms)
			}
			for _, id := range r.DecodeIDs {
				ms, err := timed(func() error { return m.DecodeOnDevice(id) })
				if err != nil {
					return fmt.Errorf("decode at position %d: %w", m.Pos(), err)
				}
				if rep >= o.Warmup {
					*decode = append(*decode, ms)
				}
			}
		}
		return nil
	}
	if m.UseGraphs(false) {
		var opByOp []float64
		if err := rounds(nil, &opByOp); err != nil {
			return nil, fmt.Errorf("op by op: %w", err)
		}
		r.DecodeOpByOpMs = medianOf(opByOp)
		m.UseGraphs(true)
	}
	replays := m.GraphReplays()
	if err := rounds(&r.PrefillTimes, &r.DecodeTimes); err != nil {
		return nil, err
	}
	r.ReplayedSteps = m.GraphReplays() - replays
	r.PrefillMs, r.DecodeStepMs = medianOf(r.PrefillTimes), medianOf(r.DecodeTimes)
	r.TokensPerSec = 1000 / r.DecodeStepMs
	return r, nil
}

// timeMs runs f between the timer's events and returns the device milliseconds it took.
func timeMs(timer backend.Timer, f func() error) (float64, error) {
	if err := timer.Start(); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	d, err := timer.Stop()
	return float64(d) / float64(time.Millisecond), err
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Median(s)
}
