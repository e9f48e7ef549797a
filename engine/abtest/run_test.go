package abtest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/touchstone-llm/touchstone/engine/bench"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

// tanhForErf is the cpu backend with the tanh approximation where the exact (erf) GELU is
// asked for: a realistic slip, up to ~1e-3 off, that gelu's tolerance rejects.
type tanhForErf struct{ *cpu.Backend }

func (g tanhForErf) GELU(out, x backend.Buffer) error { return g.Backend.GELUTanh(out, x) }

func committedSets(t *testing.T, op string) ([]*golden.Set, *compare.Tolerances) {
	t.Helper()
	root := filepath.Join("..", "..", "golden")
	all, err := golden.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	var sets []*golden.Set
	for _, s := range all {
		if s.Manifest.Kind == golden.KindKernel && s.Manifest.Op == op && s.Manifest.Tier == "committed" {
			sets = append(sets, s)
		}
	}
	if len(sets) == 0 {
		t.Fatalf("no committed %s sets under %s", op, root)
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return sets, tols
}

func TestRunKernelSetsAcceptsTheSameBuild(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	cases, err := RunKernelSets(Side{Name: "cpu", Backend: cpu.New()}, Side{Name: "cpu", Backend: cpu.New()}, sets, tols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Judge("cpu", "cpu", cases, Options{BudgetMargin: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode() != ExitAccepted || r.Summary.Cases != len(sets) || r.Summary.Regressions != 0 {
		t.Fatalf("%s", r.Markdown())
	}
	for _, o := range r.Outcomes {
		if o.Baseline.Status != Pass || o.Baseline.Budget != o.Candidate.Budget || o.Speed != SpeedNone {
			t.Errorf("%s: %+v", o.ID, o)
		}
	}
}

func TestRunKernelSetsRejectsAWrongCandidate(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	cases, err := RunKernelSets(Side{Name: "cpu", Backend: cpu.New()}, Side{Name: "cpu+tanh-gelu", Backend: tanhForErf{cpu.New()}}, sets, tols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Judge("cpu", "cpu+tanh-gelu", cases, Options{BudgetMargin: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode() != ExitRegression || r.Summary.Regressions == 0 {
		t.Fatalf("the tanh GELU passed as the erf GELU:\n%s", r.Markdown())
	}
}

// wrongTheta is the cpu backend with RoPE at 100x the model's base: a loader that misreads
// rope_theta.
type wrongTheta struct{ *cpu.Backend }

func (w wrongTheta) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.FreqBase *= 100
	return w.Backend.RoPE(out, x, positions, cfg)
}

func TestRunModelSets(t *testing.T) {
	root := filepath.Join("..", "..", "golden")
	set, err := golden.Load(filepath.Join(root, "models", "qwen2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := RunModelSets(Side{Name: "cpu", Backend: cpu.New()}, Side{Name: "theta", Backend: wrongTheta{cpu.New()}}, []*golden.Set{set}, tols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Judge("cpu", "theta", cases, Options{BudgetMargin: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Outcomes[0]
	if o.Baseline.Status != Pass || o.Accuracy != AccuracyRegressed || !strings.Contains(o.Why, "first failing tap prefill.layers.0.") {
		t.Fatalf("%+v\n%s", o, r.Markdown())
	}
}

// wallClock is the cpu backend as a bench.Profiler: wall-clock timers (the cpu backend's work
// is synchronous), so the timed paths of RunKernelSets and RunModelSets run in CI.
type wallClock struct{ *cpu.Backend }

type wallTimer struct{ start time.Time }

func (t *wallTimer) Start() error                     { t.start = time.Now(); return nil }
func (t *wallTimer) Stop() (time.Duration, error)     { return time.Since(t.start), nil }
func (t *wallTimer) Close() error                     { return nil }
func (wallClock) NewTimer() (backend.Timer, error)    { return &wallTimer{}, nil }
func (wallClock) CopyBandwidthGBps() (float64, error) { return 1, nil }

func timedSide(t *testing.T, name string) Side {
	t.Helper()
	p := wallClock{cpu.New()}
	r, err := bench.NewRunner(p, bench.Options{Warmup: 1, Repeats: 3, FlushBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return Side{Name: name, Backend: p, Timer: r}
}

// Timed model sets: each side's whole greedy pass, Repeats times, interleaved; the wall-clock
// times are real work (a prefill of the prompt and its decode steps), never zero.
func TestRunModelSetsTimesTheGreedyPass(t *testing.T) {
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", "gpt2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	tols, err := compare.LoadTolerances(filepath.Join("..", "..", "golden", "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := RunModelSets(timedSide(t, "a"), timedSide(t, "b"), []*golden.Set{set}, tols, RunOptions{Warmup: 1, Repeats: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Measurement{cases[0].Baseline, cases[0].Candidate} {
		if m.Status != Pass || len(m.TimesMS) != 3 || slices.Min(m.TimesMS) <= 0 {
			t.Fatalf("%+v", m)
		}
	}
	r, err := Judge("a", "b", cases, Options{BudgetMargin: 0.1, MinEffect: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if o := r.Outcomes[0]; o.Speed == SpeedNone || o.BaselineMS <= 0 || r.ExitCode() != ExitAccepted {
		t.Fatalf("%+v\n%s", o, r.Markdown())
	}
	if _, err := RunModelSets(timedSide(t, "a"), timedSide(t, "b"), []*golden.Set{set}, tols, RunOptions{}); err == nil {
		t.Fatal("timed runs with 0 repeats were accepted")
	}
}

func TestRunKernelSetsTimesBothSides(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	cases, err := RunKernelSets(timedSide(t, "a"), timedSide(t, "b"), sets[:1], tols, RunOptions{Warmup: 1, Repeats: 3})
	if err != nil {
		t.Fatal(err)
	}
	if b, c := cases[0].Baseline.TimesMS, cases[0].Candidate.TimesMS; len(b) != 3 || len(c) != 3 || slices.Min(b) <= 0 || slices.Min(c) <= 0 {
		t.Fatalf("%+v", cases[0])
	}
}

// hangsOnCall is the cpu backend whose n-th GELU reports a hang, as the CUDA backend does when
// a wait passes its deadline.
type hangsOnCall struct {
	*cpu.Backend
	calls *int
	n     int
}

func (h hangsOnCall) GELU(out, x backend.Buffer) error {
	if *h.calls++; *h.calls == h.n {
		return fmt.Errorf("gelu: synchronize: %w", backend.ErrHang)
	}
	return h.Backend.GELU(out, x)
}

// A hang stops the run where it happened: the candidate's hang finishes its case, the
// baseline's leaves the case partial, and resuming from it measures the candidate only.
func TestRunStopsAtAHang(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	if len(sets) < 3 {
		t.Fatalf("%d gelu sets, want 3", len(sets))
	}
	calls := 0
	cases, err := RunKernelSets(Side{Backend: cpu.New()}, Side{Backend: hangsOnCall{cpu.New(), &calls, 2}}, sets, tols, RunOptions{})
	var stop *Stopped
	if !errors.As(err, &stop) || stop.Next != 2 || stop.Partial != nil || stop.Side != "candidate" || len(cases) != 2 ||
		cases[1].Candidate.Status != Hang || cases[0].Candidate.Status != Pass || !strings.Contains(stop.Message, "gelu: synchronize") {
		t.Fatalf("candidate hang: %v, %+v", err, cases)
	}
	calls = 0
	cases, err = RunKernelSets(Side{Backend: hangsOnCall{cpu.New(), &calls, 2}}, Side{Backend: cpu.New()}, sets, tols, RunOptions{})
	if !errors.As(err, &stop) || stop.Next != 1 || stop.Partial == nil || stop.Partial.Baseline.Status != Hang || len(cases) != 1 {
		t.Fatalf("baseline hang: %v, %+v", err, cases)
	}
	rest, err := RunKernelSets(Side{Backend: cpu.New()}, Side{Backend: cpu.New()}, sets[stop.Next:], tols, RunOptions{Resume: stop.Partial})
	if err != nil || len(rest) != len(sets)-1 || rest[0].Baseline.Status != Hang || rest[0].Candidate.Status != Pass {
		t.Fatalf("resumed: %v, %+v", err, rest)
	}
	if _, err := RunKernelSets(Side{Backend: cpu.New()}, Side{Backend: cpu.New()}, sets[stop.Next+1:], tols, RunOptions{Resume: stop.Partial}); err == nil {
		t.Fatal("a resume on the wrong set was accepted")
	}
}
