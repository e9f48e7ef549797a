// Package bench times kernels on a device with its own event timers: warm-up launches,
// then many timed launches each preceded by an L2 flush, reported as the median. Results
// are expressed against the device's measured copy bandwidth, so "80%" means 80% of what a
// plain device-to-device copy achieves on the same GPU.
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Profiler is a backend that can time work on its device.
type Profiler interface {
	backend.Backend
	NewTimer() (backend.Timer, error)
	// CopyBandwidthGBps is the measured device-to-device copy bandwidth, counting bytes
	// read plus bytes written.
	CopyBandwidthGBps() (float64, error)
}

// Case is one benchmark: an op, its parameters and random inputs, and the work it must do.
type Case struct {
	Name   string
	Op     string
	Params string
	Inputs []conformance.InputSpec
	// Bytes is the least traffic the op needs: every input element it must read plus every
	// output element it writes, once. GB/s is Bytes over the median time.
	Bytes int64
	// Flops is the arithmetic of compute-bound ops (GEMM, attention prefill, FFN); 0 for
	// memory-bound ones.
	Flops int64
	// Tiled runs gemm_w4a16 on the weight in the backend's own layout (conformance.PrepareTiled:
	// tiled once before timing, as a model's is at load time).
	Tiled bool
}

// Result is one timed case.
type Result struct {
	Case     Case
	Times    []float64 // milliseconds, one per repeat
	MedianMs float64
	MinMs    float64
	GBps     float64
	// CopyPct is GBps as a percentage of the measured copy bandwidth.
	CopyPct float64
	TFLOPs  float64
}

// Options steer a run.
type Options struct {
	Warmup  int
	Repeats int
	Seed    uint64
	// FlushBytes sizes the L2 flush before each timed launch; 0 means the package's FlushBytes. Only a
	// test of the timing paths on the cpu backend, where there is no L2 to evict, sets it.
	FlushBytes int
}

// ErrGuards refuses to time a backend whose guard regions are on: every op would include the
// guards' copy back to the host.
var ErrGuards = errors.New("bench: guard regions are on (TOUCHSTONE_GUARDS=1); timings would include their checks: set TOUCHSTONE_GUARDS=0")

// FlushBytes is larger than any current GPU's L2 (50 MB on H100, 60 MB on H200), so a
// residual add over two buffers of half of it evicts whatever the previous launch left in L2.
// An external adapter that times its own ops is asked for the same flush.
const FlushBytes = 256 << 20

// Runner times cases on one profiler, reusing its L2 flush buffers.
type Runner struct {
	p       Profiler
	copyBW  float64
	flushA  backend.Buffer
	flushB  backend.Buffer
	options Options
}

// NewRunner measures the copy bandwidth and allocates the flush buffers.
func NewRunner(p Profiler, o Options) (*Runner, error) {
	if o.Warmup < 1 || o.Repeats < 1 {
		return nil, fmt.Errorf("bench: warmup %d and repeats %d must be >= 1", o.Warmup, o.Repeats)
	}
	if g, ok := p.(interface{ GuardsEnabled() bool }); ok && g.GuardsEnabled() {
		return nil, ErrGuards
	}
	bw, err := p.CopyBandwidthGBps()
	if err != nil {
		return nil, fmt.Errorf("bench: copy bandwidth: %w", err)
	}
	n := FlushBytes / 2
	if o.FlushBytes > 0 {
		n = o.FlushBytes / 2
	}
	a, err := p.Alloc(tensor.F16, n)
	if err != nil {
		return nil, err
	}
	b, err := p.Alloc(tensor.F16, n)
	if err != nil {
		a.Free()
		return nil, err
	}
	return &Runner{p: p, copyBW: bw, flushA: a, flushB: b, options: o}, nil
}

// CopyBandwidthGBps is the bandwidth results are measured against.
func (r *Runner) CopyBandwidthGBps() float64 { return r.copyBW }

// Close frees the flush buffers.
func (r *Runner) Close() {
	r.flushA.Free()
	r.flushB.Free()
}

func (r *Runner) flush() error { return r.p.ResidualAdd(r.flushA, r.flushA, r.flushB) }

// TimeOnce flushes L2, then times one launch with timer (from this runner's profiler): one
// repeat, for callers that interleave several runners (touchstone compare).
func (r *Runner) TimeOnce(launch func() error, timer backend.Timer) (ms float64, err error) {
	if err := r.flush(); err != nil {
		return 0, err
	}
	if err := timer.Start(); err != nil {
		return 0, err
	}
	if err := launch(); err != nil {
		return 0, err
	}
	d, err := timer.Stop()
	if err != nil {
		return 0, err
	}
	return float64(d) / float64(time.Millisecond), nil
}

// Profiler is the backend the runner times on.
func (r *Runner) Profiler() Profiler { return r.p }

// Run times one case.
func (r *Runner) Run(c Case) (*Result, error) {
	launch, free, err := r.prepare(c)
	if err != nil {
		return nil, err
	}
	defer free()
	timer, err := r.p.NewTimer()
	if err != nil {
		return nil, err
	}
	defer timer.Close()
	for i := 0; i < r.options.Warmup; i++ {
		if err := launch(); err != nil {
			return nil, fmt.Errorf("bench %s: %w", c.Name, err)
		}
	}
	res := &Result{Case: c}
	for i := 0; i < r.options.Repeats; i++ {
		ms, err := r.TimeOnce(launch, timer)
		if err != nil {
			return nil, fmt.Errorf("bench %s: %w", c.Name, err)
		}
		res.Times = append(res.Times, ms)
	}
	res.summarise(r.copyBW)
	return res, nil
}

// prepare uploads a case's inputs and returns its launch and the release of its buffers.
func (r *Runner) prepare(c Case) (func() error, func(), error) {
	if c.Op == SampleOp {
		return prepareSample(r.p, c, r.options.Seed)
	}
	prepare := conformance.Prepare
	if c.Tiled {
		prepare = conformance.PrepareTiled
	}
	prep, err := prepare(r.p, c.Op, c.source(r.options.Seed))
	if err != nil {
		return nil, nil, fmt.Errorf("bench %s: %w", c.Name, err)
	}
	return prep.Launch, prep.Free, nil
}

// source is the case's params and its random inputs drawn from seed: the same data on every
// backend that times the case.
func (c Case) source(seed uint64) conformance.Memory {
	return conformance.Memory{Params: json.RawMessage(c.Params), Tensors: conformance.RandomInputs(seed, c.Inputs)}
}

func (res *Result) summarise(copyBW float64) {
	sorted := slices.Clone(res.Times)
	slices.Sort(sorted)
	res.MinMs = sorted[0]
	res.MedianMs = Median(sorted)
	seconds := res.MedianMs / 1e3
	if res.Case.Bytes > 0 && seconds > 0 {
		res.GBps = float64(res.Case.Bytes) / seconds / 1e9
		if copyBW > 0 {
			res.CopyPct = 100 * res.GBps / copyBW
		}
	}
	if res.Case.Flops > 0 && seconds > 0 {
		res.TFLOPs = float64(res.Case.Flops) / seconds / 1e12
	}
}

// Median of sorted values.
func Median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
