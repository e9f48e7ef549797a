package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/touchstone-llm/touchstone/engine/abtest"
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

const compareUsage = `usage: touchstone compare -baseline SIDE -candidate SIDE [flags]

Validates a candidate build of the kernels against a baseline on the same golden cases, in one
process on one GPU: each side's error against the golden and the budget it uses, each side's
time (L2 flushed, the two sides interleaved), and the verdicts: an accuracy regression (a case
that passed and no longer does, or whose budget grew by more than -budget-margin), a speed change
beyond the noise and -min-effect, a slowdown beyond -max-slowdown.

A SIDE is cpu, cuda (the default library: $TOUCHSTONE_CUDA_LIB or cuda/build),
cuda:PATH (a libtouchstone_cuda.so built elsewhere, e.g. main's build beside a branch's) or
exec:COMMAND (an external adapter, docs/external-backends.md: another library's kernels, timed
by the adapter on its own device when it offers timing), with +unfused to run each fused op's
unfused composition instead (-baseline cuda+unfused -candidate cuda: a fused kernel against the
ops it replaces; only ops that have one are compared).

Exit status: 0 accepted, 1 accuracy regression, 3 slowdown beyond -max-slowdown, 2 the
comparison could not run.

flags:
`

func runCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, compareUsage); fs.PrintDefaults() }
	dir := goldenFlag(fs)
	baseSpec := fs.String("baseline", "", "the baseline side: cpu | cuda | cuda:PATH | exec:COMMAND")
	candSpec := fs.String("candidate", "", "the candidate side: cpu | cuda | cuda:PATH | exec:COMMAND")
	tier := fs.String("tier", "committed", "golden tier: committed | full | all")
	kind := fs.String("kind", "kernels", "what to compare: kernels | models | all (model sets: every tap and the greedy tokens; timed, the whole greedy pass)")
	var ops, models multiFlag
	fs.Var(&ops, "op", "compare only this op's kernel sets (repeatable)")
	fs.Var(&models, "model", "compare only this model set (repeatable)")
	margin := fs.Float64("budget-margin", 0.10, "a passing case whose budget grows by more than this fraction of its limit is an accuracy regression")
	maxSlow := fs.Float64("max-slowdown", 0, "fail when a case's candidate takes more than this ratio of the baseline's time beyond the noise (e.g. 1.10); 0: no limit")
	minEffect := fs.Float64("min-effect", 0.05, "the smallest relative time change called faster or slower (two instances of one build differ by up to ~4% on microsecond kernels)")
	warmup := fs.Int("warmup", 5, "untimed launches of each side before timing")
	repeats := fs.Int("repeats", 30, "timed launches of each side per case (interleaved)")
	timing := fs.Bool("time", true, "time the cases where both sides are GPU builds with guards off or timing adapters")
	mdPath := fs.String("markdown", "", "also write the Markdown report to this file")
	jsonPath := fs.String("json", "", "write the JSON report to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "touchstone compare: "+format+"\n", a...)
		return 2
	}
	if *baseSpec == "" || *candSpec == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	for _, op := range ops {
		if !slices.Contains(backend.Ops, op) {
			return fail("-op %q: unknown op (ops: %v)", op, backend.Ops)
		}
	}
	if *tier != "all" && *tier != "committed" && *tier != "full" {
		return fail("-tier %q: want committed, full or all", *tier)
	}
	if *kind != "kernels" && *kind != "models" && *kind != "all" {
		return fail("-kind %q: want kernels, models or all", *kind)
	}
	opts := abtest.Options{BudgetMargin: *margin, MaxSlowdown: *maxSlow, MinEffect: *minEffect}
	if _, err := abtest.Judge("", "", nil, opts); err != nil {
		return fail("%v", err)
	}

	root, err := goldenRoot(*dir)
	if err != nil {
		return fail("%v", err)
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		return fail("%v", err)
	}
	all, err := golden.Discover(root)
	if err != nil {
		return fail("%v", err)
	}
	var kernelSets, modelSets []*golden.Set
	for _, s := range all {
		m := s.Manifest
		if *tier != "all" && m.Tier != *tier {
			continue
		}
		switch {
		case m.Kind == golden.KindKernel && *kind != "models" && (len(ops) == 0 || slices.Contains(ops, m.Op)):
			kernelSets = append(kernelSets, s)
		case m.Kind == golden.KindModel && *kind != "kernels" && (len(models) == 0 || slices.Contains(models, filepath.Base(s.Dir))):
			modelSets = append(modelSets, s)
		}
	}
	if len(kernelSets)+len(modelSets) == 0 {
		return fail("no %s golden set of kind %s matches (golden %s, ops %v, models %v)", *tier, *kind, root, []string(ops), []string(models))
	}

	if strings.HasSuffix(*baseSpec, unfusedSuffix) || strings.HasSuffix(*candSpec, unfusedSuffix) {
		if len(modelSets) > 0 && *kind != "kernels" {
			return fail("+unfused compares kernel sets only: use -kind kernels")
		}
		kernelSets = slices.DeleteFunc(kernelSets, func(s *golden.Set) bool { return !conformance.HasUnfused(s.Manifest.Op) })
		if len(kernelSets) == 0 {
			return fail("+unfused: no selected op has an unfused composition (fused ops: %v)", fusedOps())
		}
	}
	base, err := openSide(*baseSpec)
	if err != nil {
		return fail("-baseline %s: %v", *baseSpec, err)
	}
	defer base.Backend.Close()
	cand, err := openSide(*candSpec)
	if err != nil {
		return fail("-candidate %s: %v", *candSpec, err)
	}
	defer cand.Backend.Close()
	if *timing {
		note := attachTimers(&base, &cand, bench.Options{Warmup: *warmup, Repeats: *repeats})
		if note != "" {
			fmt.Fprintln(stderr, "touchstone compare: untimed:", note)
		}
		defer closeTimers(base, cand)
	}

	cases, err := runBothSides(base, cand, kernelSets, modelSets, tols, abtest.RunOptions{Warmup: *warmup, Repeats: *repeats}, stderr)
	if err != nil {
		return fail("%v", err)
	}
	report, err := abtest.Judge(base.Name, cand.Name, cases, opts)
	if err != nil {
		return fail("%v", err)
	}
	md := report.Markdown()
	fmt.Fprint(stdout, md)
	if *mdPath != "" {
		if err := os.WriteFile(*mdPath, []byte(md), 0o644); err != nil {
			return fail("%v", err)
		}
	}
	if *jsonPath != "" {
		data, err := report.JSON()
		if err == nil {
			err = os.WriteFile(*jsonPath, data, 0o644)
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	return report.ExitCode()
}

// runBothSides runs the kernel sets, then the model sets, from where an earlier process of
// this comparison stopped (compareresume.go). At a hang it continues in a new process and
// does not return, unless that cannot start.
func runBothSides(base, cand abtest.Side, kernelSets, modelSets []*golden.Set, tols *compare.Tolerances, ro abtest.RunOptions, stderr io.Writer) ([]abtest.Case, error) {
	progress, err := loadCompareProgress(len(kernelSets) + len(modelSets))
	if err != nil {
		return nil, err
	}
	cases := progress.Cases
	ro.Resume = progress.Partial
	offset := 0
	// continueAfter hands the run to a new process after the hang stop of the stage whose first
	// set has index base among all sets, with done the cases finished before it.
	continueAfter := func(stop *abtest.Stopped, base int, done []abtest.Case) error {
		fmt.Fprintf(stderr, "touchstone compare: HANG: the %s's %s of %s did not finish; the rest runs in a new process\n    %s\n", stop.Side, stop.During, stop.Case, stop.Message)
		return continueCompare(compareProgress{Sets: progress.Sets, Next: base + stop.Next, Cases: done, Partial: stop.Partial})
	}
	// A call that never returns leaves this goroutine blocked for good: the CUDA backend's
	// monitor hands the hang to this handler, which continues from the last position as a
	// hang reported would.
	var at atomic.Pointer[stuckPosition]
	ro.Observe = func(p *abtest.Position) { at.Store(&stuckPosition{p, offset + max(progress.Next-offset, 0), cases}) }
	cuda.OnStuck(func(err error) {
		if p := at.Load(); p != nil {
			done, stop := p.pos.Hung(err)
			err = continueAfter(stop, p.base, append(p.before[:len(p.before):len(p.before)], done...))
		}
		fmt.Fprintf(stderr, "touchstone compare: %v (could not continue in a new process)\n", err)
		os.Exit(2)
	})
	for _, stage := range []struct {
		sets []*golden.Set
		run  func(abtest.Side, abtest.Side, []*golden.Set, *compare.Tolerances, abtest.RunOptions) ([]abtest.Case, error)
	}{{kernelSets, abtest.RunKernelSets}, {modelSets, abtest.RunModelSets}} {
		from := max(progress.Next-offset, 0)
		if from < len(stage.sets) {
			got, err := stage.run(base, cand, stage.sets[from:], tols, ro)
			cases = append(cases, got...)
			var stop *abtest.Stopped
			if errors.As(err, &stop) {
				if rerr := continueAfter(stop, offset+from, cases); rerr != nil {
					return nil, fmt.Errorf("%w; could not continue in a new process: %v", err, rerr)
				}
			}
			if err != nil {
				return nil, err
			}
			ro.Resume = nil
		}
		offset += len(stage.sets)
	}
	return cases, nil
}

// stuckPosition is where runBothSides is: the stage's position, the index of its first set
// among all sets, and the cases of the stages before.
type stuckPosition struct {
	pos    *abtest.Position
	base   int
	before []abtest.Case
}

const unfusedSuffix = "+unfused"

func fusedOps() []string {
	var ops []string
	for _, op := range backend.Ops {
		if conformance.HasUnfused(op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// openSide opens a side from its spec.
func openSide(spec string) (abtest.Side, error) {
	spec, unfused := strings.CutSuffix(spec, unfusedSuffix)
	side, err := openBackendSide(spec)
	if err == nil && unfused {
		side.Unfused = true
		side.Name += " unfused"
	}
	return side, err
}

func openBackendSide(spec string) (abtest.Side, error) {
	opts, err := deviceOptions()
	if err != nil {
		return abtest.Side{}, err
	}
	var b backend.Backend
	switch {
	case spec == "cpu":
		b = cpu.New()
	case spec == "cuda":
		b, err = backend.Open("cuda", opts)
	case strings.HasPrefix(spec, "cuda:") && len(spec) > len("cuda:"):
		var cb *cuda.Backend
		if cb, err = cuda.OpenLibrary(strings.TrimPrefix(spec, "cuda:"), opts); err == nil {
			b = cb
		}
	case strings.HasPrefix(spec, backend.ExecPrefix) && strings.TrimSpace(spec[len(backend.ExecPrefix):]) != "":
		opts.Command = spec[len(backend.ExecPrefix):]
		b, err = backend.Open("exec", opts)
	default:
		return abtest.Side{}, errors.New("want cpu, cuda, cuda:PATH or exec:COMMAND, optionally +unfused")
	}
	if err != nil {
		return abtest.Side{}, err
	}
	if ex, ok := b.(interface{ Name() string }); ok && strings.HasPrefix(spec, backend.ExecPrefix) {
		// An adapter's command can be long: the report names it by its handshake's name, and
		// the device it times on.
		name := ex.Name()
		if t, ok := b.(backend.OpTimer); ok {
			if dev, ok := t.TimingDevice(); ok {
				name += " (timed on " + dev + ")"
			}
		}
		return abtest.Side{Name: name, Backend: b}, nil
	}
	info := b.Info()
	return abtest.Side{Name: fmt.Sprintf("%s (%s)", spec, info.Name), Backend: b}, nil
}

// deviceOptions reads TOUCHSTONE_DEVICE as backend.FromEnv does.
func deviceOptions() (backend.Options, error) {
	opts := backend.Options{Device: -1}
	if s := os.Getenv(backend.EnvDevice); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 {
			return opts, fmt.Errorf("%s=%q: want a device ordinal >= 0", backend.EnvDevice, s)
		}
		opts.Device = d
	}
	return opts, nil
}

// attachTimers gives both sides a bench runner or, for an external adapter that times its own
// ops, marks it as its own timer; or neither; the note says why not.
func attachTimers(base, cand *abtest.Side, o bench.Options) string {
	for _, s := range []*abtest.Side{base, cand} {
		if t, ok := s.Backend.(backend.OpTimer); ok {
			if _, ok := t.TimingDevice(); !ok {
				return s.Name + "'s adapter does not time its ops (its handshake offers no timing)"
			}
		}
	}
	var runners []*bench.Runner
	for _, s := range []*abtest.Side{base, cand} {
		if t, ok := s.Backend.(backend.OpTimer); ok {
			runners = append(runners, nil)
			s.Adapter = t
			continue
		}
		p, ok := s.Backend.(bench.Profiler)
		if !ok {
			closeRunners(runners)
			return s.Name + " cannot time its work on a device"
		}
		r, err := bench.NewRunner(p, o)
		if err != nil {
			closeRunners(runners)
			return s.Name + ": " + err.Error()
		}
		runners = append(runners, r)
	}
	base.Timer, cand.Timer = runners[0], runners[1]
	return ""
}

func closeTimers(sides ...abtest.Side) {
	for _, s := range sides {
		if s.Timer != nil {
			s.Timer.Close()
		}
	}
}

func closeRunners(rs []*bench.Runner) {
	for _, r := range rs {
		if r != nil {
			r.Close()
		}
	}
}
