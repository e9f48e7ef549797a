package bench

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/model"
)

// BatchOptions steer a batched-decode throughput timing: Batch sequences of PromptLen tokens
// each (different tokens), prefilled one by one, then DecodeSteps steps of one token for every
// sequence in one pass.
type BatchOptions struct {
	Batch       int
	PromptLen   int
	DecodeSteps int
	Warmup      int // untimed rounds (prefills + decode steps) before timing
	Repeats     int // timed rounds
	Seed        uint64
}

// BatchResult is one batch size's decode throughput, device time by events, medians.
type BatchResult struct {
	Batch int
	// StepMs is one decode step of the whole batch, each between its own events and
	// synchronised; LoopMsPerStep is a round's steps issued back to back, events around the
	// loop, over the steps (what a serving loop sees).
	StepMs, LoopMsPerStep float64
	// TokensPerSec is Batch tokens per LoopMsPerStep.
	TokensPerSec  float64
	ReplayedSteps int // steps replayed from the batch's graph during the timed rounds
	PromptIDs     [][]int32
	DecodeIDs     [][]int32 // [step][sequence]
}

// TimeBatch times o.Batch sequences of m decoded together (model.Batch) with the profiler's
// device timers. The tokens are BenchTokens, so a peer can be fed the very same ids.
func TimeBatch(p Profiler, m *model.Model, o BatchOptions) (*BatchResult, error) {
	if o.Batch < 1 || o.Batch > model.MaxBatch || o.PromptLen < 1 || o.DecodeSteps < 1 || o.Repeats < 1 || o.Warmup < 0 {
		return nil, fmt.Errorf("bench: batch options %+v: batch in 1..%d, prompt, decode steps and repeats >= 1", o, model.MaxBatch)
	}
	r := &BatchResult{Batch: o.Batch}
	for i := 0; i < o.Batch; i++ {
		r.PromptIDs = append(r.PromptIDs, BenchTokens(o.PromptLen, m.Cfg.Vocab, o.Seed+uint64(i)))
	}
	all := BenchTokens(o.DecodeSteps*o.Batch, m.Cfg.Vocab, o.Seed+uint64(o.Batch))
	for s := 0; s < o.DecodeSteps; s++ {
		r.DecodeIDs = append(r.DecodeIDs, all[s*o.Batch:(s+1)*o.Batch])
	}
	b, err := m.NewBatch(o.Batch, o.PromptLen+o.DecodeSteps)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	timer, err := p.NewTimer()
	if err != nil {
		return nil, err
	}
	defer timer.Close()
	timed := func(f func() error) (float64, error) { return timeMs(timer, f) }
	prefill := func() error {
		for i, ids := range r.PromptIDs {
			if err := b.Prefill(i, ids); err != nil {
				return fmt.Errorf("prefill of sequence %d: %w", i, err)
			}
		}
		return nil
	}
	var steps, loops []float64
	replays := 0
	for rep := 0; rep < o.Warmup+o.Repeats; rep++ {
		timedRound := rep >= o.Warmup
		if err := prefill(); err != nil {
			return nil, err
		}
		before := b.GraphReplays()
		for _, ids := range r.DecodeIDs {
			ms, err := timed(func() error { return b.Decode(ids) })
			if err != nil {
				return nil, fmt.Errorf("batched decode: %w", err)
			}
			if timedRound {
				steps = append(steps, ms)
			}
		}
		if err := prefill(); err != nil {
			return nil, err
		}
		ms, err := timed(func() error {
			for _, ids := range r.DecodeIDs {
				if err := b.Decode(ids); err != nil {
					return fmt.Errorf("batched decode: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if timedRound {
			loops = append(loops, ms/float64(o.DecodeSteps))
			replays += b.GraphReplays() - before
		}
	}
	r.ReplayedSteps = replays
	r.StepMs, r.LoopMsPerStep = medianOf(steps), medianOf(loops)
	r.TokensPerSec = float64(o.Batch) * 1000 / r.LoopMsPerStep
	return r, nil
}
