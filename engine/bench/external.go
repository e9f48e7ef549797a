package bench

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
)

// External times cases on an external backend whose adapter times its own ops
// (backend.OpTimer, docs/external-backends.md): the same random inputs as a Runner's, the
// adapter's device events, its L2 flush of FlushBytes before each timed launch, and its own
// measure of copy bandwidth.
type External struct {
	b       backend.Backend
	t       backend.OpTimer
	copyBW  float64
	options Options
}

// NewExternal asks the adapter for its copy bandwidth; an adapter that offers no timing is
// refused.
func NewExternal(b backend.Backend, o Options) (*External, error) {
	if o.Warmup < 1 || o.Repeats < 1 {
		return nil, fmt.Errorf("bench: warmup %d and repeats %d must be >= 1", o.Warmup, o.Repeats)
	}
	t, ok := b.(backend.OpTimer)
	if !ok {
		return nil, fmt.Errorf("bench: %s is not an external backend", b.Info().Backend)
	}
	if _, ok := t.TimingDevice(); !ok {
		return nil, fmt.Errorf("bench: the adapter %s does not time its ops (its handshake offers no timing)", b.Info().Name)
	}
	bw, err := t.CopyBandwidthGBps()
	if err != nil {
		return nil, fmt.Errorf("bench: copy bandwidth: %w", err)
	}
	return &External{b: b, t: t, copyBW: bw, options: o}, nil
}

// CopyBandwidthGBps is the adapter's measure of its device's copy bandwidth.
func (e *External) CopyBandwidthGBps() float64 { return e.copyBW }

// Run has the adapter time one case.
func (e *External) Run(c Case) (*Result, error) {
	if c.Op == SampleOp {
		return nil, fmt.Errorf("bench %s: an external backend times golden ops, not touchstone's sampler: %w", c.Name, backend.ErrUnsupported)
	}
	if c.Tiled {
		return nil, fmt.Errorf("bench %s: the tiled 4-bit layout is the CUDA library's own, not an adapter's: %w", c.Name, backend.ErrUnsupported)
	}
	prep, err := conformance.Prepare(e.b, c.Op, c.source(e.options.Seed))
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", c.Name, err)
	}
	defer prep.Free()
	times, err := prep.Time(backend.TimeRequest{Warmup: e.options.Warmup, Repeats: e.options.Repeats, FlushBytes: FlushBytes})
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", c.Name, err)
	}
	res := &Result{Case: c, Times: times}
	res.summarise(e.copyBW)
	return res, nil
}
