package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/backend"
	_ "github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
	_ "github.com/touchstone-llm/touchstone/engine/backend/exec" // TOUCHSTONE_BACKEND=exec:<command>
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/engine/sample"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	backendName := fs.String("backend", "", "cpu | cuda | auto | exec:<command> (default: $TOUCHSTONE_BACKEND, else auto)")
	tier := fs.String("tier", "all", "golden tier to run: committed | full | all")
	var ops multiFlag
	fs.Var(&ops, "op", "run only this op (repeatable)")
	kindFlag := fs.String("kind", "all", "what to check: kernels, models, sampling or all; a comma list selects several (-op selects kernels only)")
	verbose := fs.Bool("v", false, "print every metric of every output, not just the one closest to its limit")
	unsupportedFlag := fs.String("unsupported", "", "skip | fail: what a case the backend does not implement counts as; fail applies to ops the backend claims (default: $"+conformance.EnvUnsupported+", else skip)")
	inconclusiveFlag := fs.String("inconclusive", "", "skip | fail: what a token check that decides too few of its steps counts as (default: $"+conformance.EnvInconclusive+", else skip)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	policy, err := unsupportedPolicy(*unsupportedFlag)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	iPolicy, err := inconclusivePolicy(*inconclusiveFlag)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	resumeAt, carried, err := resumePoint(os.Getenv(envCheckResume))
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	if *backendName != "" {
		os.Setenv(backend.EnvBackend, *backendName)
	}
	for _, op := range ops {
		if !slices.Contains(backend.Ops, op) {
			fmt.Fprintf(stderr, "touchstone: unknown op %q (ops: %v)\n", op, backend.Ops)
			return 2
		}
	}
	kinds, err := checkKinds(*kindFlag, len(ops) > 0)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	if *tier != "all" && *tier != "committed" && *tier != "full" {
		fmt.Fprintf(stderr, "touchstone: -tier %q: want committed, full or all\n", *tier)
		return 2
	}

	root, err := goldenRoot(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	sets, discoverErr := golden.Discover(root)
	sel, err := selectBackend()
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	defer sel.Backend.Close()
	info := sel.Backend.Info()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if resumeAt > 0 {
		// the rows of the cases before resumeAt were printed by the process that hung
		fmt.Fprintf(tw, "(a new process after the hang: %s, from case %d on)\n", info.Name, resumeAt+1)
		goto cases
	}
	fmt.Fprintf(stdout, "backend %s: %s\n", info.Backend, info.Name)
	if sel.Fallback != "" {
		fmt.Fprintf(stdout, "(auto fell back to cpu: %s)\n", sel.Fallback)
		var nf *cuda.NotFoundError
		if *verbose && errors.As(sel.FallbackErr, &nf) {
			fmt.Fprintf(stdout, "(searched: %s)\n", strings.Join(nf.Tried, ", "))
		}
	}
	fmt.Fprintf(stdout, "golden  %s\n\n", root)

	fmt.Fprintln(tw, "OP\tCASE\tOUTPUT\tMETRIC\tVALUE\tLIMIT\tHEADROOM\tSTATUS")
cases:
	passed, failed, errored, unsupported, inconclusiveSets := carried.passed, carried.failed, carried.errored, carried.unsupported, carried.inconclusive
	// ordinal counts the cases in the order every run visits them; next says whether the case
	// it numbers is this process's to run (resumeAt: after a hang, check continues in a new
	// process from the case after it).
	ordinal := -1
	next := func() bool {
		ordinal++
		return ordinal >= resumeAt
	}
	// count adds a model or batch set's verdict to the summary.
	count := func(o outcome) {
		switch o {
		case outcomePass:
			passed++
		case outcomeInconclusive:
			inconclusiveSets++
		default:
			failed++
		}
	}
	// notRun prints the row of a case that did not run, with the reason under it:
	// UNSUPPORTED (neither passed nor failed), FAIL when the policy makes an unsupported
	// call a failure, else ERROR.
	notRun := func(op, name string, err error) {
		// A kernel that never finished: a failure of its own kind (HANG). The first report of
		// it, not the later refusals (*cuda.PoisonedError): those are errors of cases that
		// could not run, and only show where a new process could not be started.
		hang := errors.Is(err, backend.ErrHang) && !errors.As(err, new(*cuda.PoisonedError))
		status := "ERROR"
		switch {
		case hang:
			status, failed = "HANG", failed+1
		case policy.Skips(err):
			status, unsupported = "UNSUPPORTED", unsupported+1
		case errors.Is(err, backend.ErrUnsupported):
			status, failed = "FAIL (unsupported)", failed+1
		default:
			errored++
		}
		fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t%s\n", op, name, status)
		tw.Flush()
		fmt.Fprintf(stdout, "    %v\n", err)
		if hang {
			// the backend refuses every later call: the rest runs in a new process
			// (checkresume.go)
			resume := fmt.Sprintf("%d:%d:%d:%d:%d:%d", ordinal+1, passed, failed, errored, unsupported, inconclusiveSets)
			if rerr := reexec(envCheckResume, resume); rerr != nil {
				fmt.Fprintf(stdout, "    (could not continue in a new process: %v; the later cases are not run)\n", rerr)
			}
		}
	}
	// running is the case in progress. A call that never returns leaves this goroutine blocked
	// for good; the CUDA backend's monitor then hands the hang to this handler, which prints
	// the case's HANG row and continues in a new process as notRun does for a hang reported.
	var running atomic.Pointer[[2]string]
	cuda.OnStuck(func(err error) {
		if c := running.Load(); c != nil {
			notRun(c[0], c[1], err) // execs a new process
		}
		tw.Flush()
		os.Exit(1)
	})
	for _, s := range sets {
		m := s.Manifest
		if m.Kind != golden.KindKernel || !kinds[golden.KindKernel] || (*tier != "all" && m.Tier != *tier) || (len(ops) > 0 && !slices.Contains(ops, m.Op)) || !next() {
			continue
		}
		name := m.Case
		if m.Tier != "committed" {
			name += " [" + m.Tier + "]"
		}
		running.Store(&[2]string{m.Op, name})
		verdicts, err := conformance.Check(sel.Backend, s, tols)
		if err != nil {
			notRun(m.Op, name, err)
			continue
		}
		casePass := true
		for _, v := range verdicts {
			checks := v.Result.Checks
			if !*verbose {
				checks = []compare.Check{binding(v.Result)}
				checks = append(checks, v.Result.Failed()...)
				checks = dedupe(checks)
			}
			for _, c := range checks {
				status := "PASS"
				if !c.Pass {
					status = "FAIL"
				}
				op := "<="
				if !c.Upper {
					op = ">="
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.6g\t%s %.6g\t%s\t%s\n",
					m.Op, name, v.Output, c.Metric, c.Value, op, c.Limit, headroom(c), status)
			}
			if !v.Pass() {
				casePass = false
			}
		}
		if casePass {
			passed++
		} else {
			failed++
		}
	}
	// Model sets: one row per set, its worst tap against its limit, then the taps, greedy
	// and seeded verdicts under it (checkmodels.go).
	for _, s := range sets {
		m := s.Manifest
		if m.Kind != golden.KindModel || !kinds[golden.KindModel] || (*tier != "all" && m.Tier != *tier) || !next() {
			continue
		}
		name := filepath.Base(s.Dir)
		if m.Tier != "committed" {
			name += " [" + m.Tier + "]"
		}
		running.Store(&[2]string{"model", name})
		mdl, p, err := model.LoadSet(sel.Backend, s)
		if err != nil {
			notRun("model", name, err)
			continue
		}
		v, err := checkModelSet(mdl, s, p, tols)
		mdl.Close()
		if err != nil {
			notRun("model", name, err)
			continue
		}
		printModelRow(tw, stdout, name, v, iPolicy)
		count(v.outcome(iPolicy))
	}
	// Batch sets: ragged sequences decoded together, every tap per sequence, and the
	// batch-invariance verdict (checkbatches.go).
	for _, s := range sets {
		m := s.Manifest
		if m.Kind != golden.KindBatch || !kinds[golden.KindModel] || (*tier != "all" && m.Tier != *tier) || !next() {
			continue
		}
		name := filepath.Base(s.Dir)
		if m.Tier != "committed" {
			name += " [" + m.Tier + "]"
		}
		running.Store(&[2]string{"batch", name})
		var ms *golden.Set
		var p struct {
			ModelSet string `json:"model_set"`
		}
		if err := json.Unmarshal(m.Params, &p); err == nil {
			for _, c := range sets {
				if c.Manifest.Kind == golden.KindModel && c.Manifest.Model == p.ModelSet {
					ms = c
				}
			}
		}
		if ms == nil {
			notRun("batch", name, fmt.Errorf("%s: its model set %q is not present", s.ID(), p.ModelSet))
			continue
		}
		v, err := checkBatchSet(sel.Backend, s, ms, tols)
		if err != nil {
			notRun("batch", name, err)
			continue
		}
		printBatchRow(tw, stdout, name, v, iPolicy)
		count(v.outcome(iPolicy))
	}
	// Seeded sampling (docs/sampling.md): one row per sampling set, whose cases must all
	// draw the reference's tokens and Philox words.
	for _, s := range sets {
		if s.Manifest.Kind != golden.KindSampling || !kinds[golden.KindSampling] || (*tier != "all" && s.Manifest.Tier != *tier) || !next() {
			continue
		}
		running.Store(&[2]string{"sample", s.Manifest.Case})
		rep, err := sample.CheckSet(sel.Backend, s)
		if err != nil {
			notRun("sample", s.Manifest.Case, err)
			continue
		}
		status := "PASS"
		if len(rep.Failures) > 0 {
			status, failed = "FAIL", failed+1
		} else {
			passed++
		}
		fmt.Fprintf(tw, "sample\t%s\ttokens\tmismatches\t%d of %d cases, %d words\t<= 0\t\t%s\n", s.Manifest.Case, len(rep.Failures), rep.Cases, rep.Words, status)
		if len(rep.Failures) > 0 {
			tw.Flush()
			for _, f := range rep.Failures {
				fmt.Fprintf(stdout, "    %s\n", f)
			}
		}
	}
	tw.Flush()
	// Unsupported and inconclusive are always counted, even at 0, so a run that skipped cases
	// or decided too few tokens says so.
	fmt.Fprintf(stdout, "\n%d passed, %d failed, %d unsupported, %d inconclusive", passed, failed, unsupported, inconclusiveSets)
	if errored > 0 {
		fmt.Fprintf(stdout, ", %d errors", errored)
	}
	fmt.Fprintln(stdout)
	if discoverErr != nil {
		fmt.Fprintln(stdout, "golden discovery problems:\n", discoverErr)
		return 1
	}
	if failed+errored > 0 || passed == 0 {
		return 1
	}
	return 0
}

// checkKinds parses -kind into the set kinds to run. With -op and the default, kernels only:
// an op names a kernel.
func checkKinds(flagValue string, opsGiven bool) (map[string]bool, error) {
	kinds := map[string]bool{}
	for _, k := range strings.Split(flagValue, ",") {
		switch strings.TrimSpace(k) {
		case "all":
			kinds[golden.KindKernel] = true
			kinds[golden.KindModel] = !opsGiven
			kinds[golden.KindSampling] = !opsGiven
		case "kernels":
			kinds[golden.KindKernel] = true
		case "models":
			kinds[golden.KindModel] = true
		case "sampling":
			kinds[golden.KindSampling] = true
		default:
			return nil, fmt.Errorf("-kind %q: want kernels, models, sampling or all (a comma list selects several)", flagValue)
		}
	}
	if opsGiven && (kinds[golden.KindModel] || kinds[golden.KindSampling]) && !kinds[golden.KindKernel] {
		return nil, fmt.Errorf("-op selects kernel sets, and -kind %q has none", flagValue)
	}
	return kinds, nil
}

// binding is the check closest to (or furthest past) its limit: the one that decides how
// much headroom the case has.
func binding(r *compare.Result) compare.Check {
	best := r.Checks[0]
	for _, c := range r.Checks[1:] {
		if c.Budget >= best.Budget {
			best = c
		}
	}
	return best
}

func dedupe(checks []compare.Check) []compare.Check {
	var out []compare.Check
	seen := map[string]bool{}
	for _, c := range checks {
		if !seen[c.Metric] {
			seen[c.Metric] = true
			out = append(out, c)
		}
	}
	return out
}

func headroom(c compare.Check) string {
	if math.IsInf(c.Budget, 1) {
		return "-inf"
	}
	return fmt.Sprintf("%.0f%%", 100*c.Headroom())
}

// selectBackend opens the backend the environment asks for; tests swap in a wrapped one.
var selectBackend = backend.FromEnv

// policyFrom reads a skip|fail policy from flag -name when it is given, else from the
// environment variable env, so that dist/run's setting holds for "dist/run check" too.
func policyFrom[P any](name, flagValue, env string, parse func(string) (P, error)) (P, error) {
	if flagValue != "" {
		p, err := parse(flagValue)
		if err != nil {
			return p, fmt.Errorf("-%s %w", name, err)
		}
		return p, nil
	}
	p, err := parse(os.Getenv(env))
	if err != nil {
		return p, fmt.Errorf("%s=%w", env, err)
	}
	return p, nil
}

// inconclusivePolicy reads -inconclusive, or $TOUCHSTONE_INCONCLUSIVE.
func inconclusivePolicy(flagValue string) (conformance.InconclusivePolicy, error) {
	return policyFrom("inconclusive", flagValue, conformance.EnvInconclusive, conformance.ParseInconclusivePolicy)
}

// unsupportedPolicy reads -unsupported, or $TOUCHSTONE_UNSUPPORTED.
func unsupportedPolicy(flagValue string) (conformance.UnsupportedPolicy, error) {
	return policyFrom("unsupported", flagValue, conformance.EnvUnsupported, conformance.ParseUnsupportedPolicy)
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
