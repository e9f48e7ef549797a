package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// goRunner runs Go-side mutants: each worker owns one copy of the repository and, per
// mutant, plants the edit, compiles the test binaries of the mutant's suites once (`go test
// -c`, which Go's build cache makes cheap: only the mutated package and its dependents are
// compiled again, and -trimpath keeps the cache keys independent of the copy's path), restores
// the file and runs the binaries on the CPU backend.
type goRunner struct {
	opts
	trees []string // one working copy per worker
}

func (g *goRunner) goEnv(tree string) []string {
	return []string{
		"TOUCHSTONE_BACKEND=cpu",
		"TOUCHSTONE_GOLDEN=" + filepath.Join(tree, "golden"),
		"TOUCHSTONE_REQUIRE_GPU=",
		// The defaults, whatever the caller's shell says: results must not depend on it.
		"TOUCHSTONE_GRAPHS=1",
		"TOUCHSTONE_UNSUPPORTED=skip",
	}
}

// run plants, builds and runs every mutant and returns their outcomes in order.
func (g *goRunner) run(ctx context.Context, ms []Mutant) ([]Outcome, error) {
	base := filepath.Join(g.work, "w0")
	g.progress("snapshot of %s in %s", g.repo, base)
	if err := copyTree(g.repo, base, skipInCopy); err != nil {
		return nil, fmt.Errorf("copying the repository: %w", err)
	}
	outs, todo := g.triage(base, ms)
	workers := min(g.jobs, max(1, len(todo)))
	g.trees = []string{base}
	for k := 1; k < workers; k++ {
		t := filepath.Join(g.work, fmt.Sprintf("w%d", k))
		if err := copyTree(base, t, nil); err != nil {
			return nil, err
		}
		g.trees = append(g.trees, t)
	}
	if len(todo) == 0 {
		return outs, nil
	}
	if g.baseline {
		if err := g.runBaseline(ctx, ms, todo); err != nil {
			return nil, err
		}
	}

	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func(tree string) {
			defer wg.Done()
			for i := range next {
				o := g.runOne(ctx, tree, ms[i])
				mu.Lock()
				outs[i] = o
				done++
				g.progress("[%d/%d] %s", done, len(todo), oneLine(o))
				mu.Unlock()
			}
		}(g.trees[k])
	}
	for _, i := range todo {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return outs, ctx.Err()
}

// runBaseline builds the unmutated suites and runs each under the committed-tier filter:
// a mutant is only caught by a spec that passes without it.
func (g *goRunner) runBaseline(ctx context.Context, ms []Mutant, todo []int) error {
	var suites []string
	for _, i := range todo {
		for _, s := range ms[i].suites() {
			if !slices.Contains(suites, s) {
				suites = append(suites, s)
			}
		}
	}
	tree := g.trees[0]
	start := time.Now()
	if out, err := g.build(ctx, tree, suites); err != nil {
		return fmt.Errorf("baseline: the unmutated suites do not build:\n%s", out)
	}
	results := make([]suiteResult, len(suites))
	errs := make([]error, len(suites))
	var wg sync.WaitGroup
	sem := make(chan struct{}, g.jobs)
	for k, s := range suites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[k], errs[k] = g.suite(tree, s, labelFilter("", false), "").run(ctx)
		}()
	}
	wg.Wait()
	var bad []string
	for k, s := range suites {
		if errs[k] != nil {
			return fmt.Errorf("baseline: %w", errs[k])
		}
		bad = append(bad, results[k].baselineProblems(s)...)
	}
	if len(bad) > 0 {
		return fmt.Errorf("baseline: the unmutated tree already fails, so no mutant result would mean anything:\n  %s", strings.Join(bad, "\n  "))
	}
	g.progress("baseline: %s pass unmutated (%.0fs)", strings.Join(suites, ", "), time.Since(start).Seconds())
	return nil
}

// binDir is where a tree's test binaries go.
func binDir(tree string) string { return filepath.Join(tree, ".mutate-bin") }

// build compiles the test binaries of suites in tree into binDir(tree).
func (g *goRunner) build(ctx context.Context, tree string, suites []string) (string, error) {
	bin := binDir(tree)
	if err := os.RemoveAll(bin); err != nil {
		return "", err
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	// -vet=off: vet is `make test`'s job, and it would only slow every mutant down.
	args := []string{"test", "-c", "-vet=off", "-trimpath", "-o", bin + string(filepath.Separator)}
	for _, s := range suites {
		args = append(args, "./suites/"+s)
	}
	cmd := exec.CommandContext(ctx, g.goCmd, args...)
	cmd.Dir = tree
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (g *goRunner) suite(tree, s, filter, focus string) suiteRun {
	return suiteRun{
		Suite:   s,
		Binary:  filepath.Join(binDir(tree), s+".test"),
		Dir:     suiteDir(tree, s),
		Env:     g.goEnv(tree),
		Filter:  filter,
		Focus:   focus,
		Report:  filepath.Join(binDir(tree), s+".json"),
		Log:     filepath.Join(binDir(tree), s+".log"),
		Timeout: g.timeout,
	}
}

// runOne plants m in tree, builds, restores the source and runs the suites.
func (g *goRunner) runOne(ctx context.Context, tree string, m Mutant) (o Outcome) {
	start := time.Now()
	o = outcomeOf(m)
	defer func() { o.Seconds = time.Since(start).Seconds() }()
	restore, err := plant(tree, m)
	if err != nil {
		o.Status, o.Detail = NotApplicable, err.Error()
		return o
	}
	out, err := g.build(ctx, tree, m.suites())
	if rerr := restore(); rerr != nil {
		o.Status, o.Detail = Errored, "restoring "+m.File+": "+rerr.Error()
		return o
	}
	if err != nil {
		o.Status, o.Detail = BuildFailed, firstLines(out, 6)
		return o
	}
	var results []suiteResult
	for _, s := range m.suites() {
		r, err := g.suite(tree, s, m.filter(), m.Focus).run(ctx)
		if err != nil {
			o.Status, o.Detail = Errored, err.Error()
			return o
		}
		results = append(results, r)
	}
	judge(&o, m, results)
	return o
}

// judge turns the suite results of a mutant into its outcome.
func judge(o *Outcome, m Mutant, results []suiteResult) {
	ran, ranSlow := 0, 0
	for _, r := range results {
		ran += r.Ran
		ranSlow += r.RanSlow
		for _, c := range []string{r.Crash, r.Hazards} {
			if c != "" {
				o.CaughtBy = append(o.CaughtBy, c)
			}
		}
		o.CaughtBy = append(o.CaughtBy, r.Failed...)
		if m.modelLevel() {
			o.FirstTaps = append(o.FirstTaps, r.FirstTaps...)
		}
	}
	sort.SliceStable(o.CaughtBy, func(a, b int) bool { return specRank(o.CaughtBy[a]) < specRank(o.CaughtBy[b]) })
	switch {
	case len(o.CaughtBy) > 0:
		o.Status = Caught
	case ran == 0:
		o.Status, o.Detail = Errored, fmt.Sprintf("label filter %q%s selected no spec of %v", m.filter(), focusNote(m), m.suites())
	case m.FullTier && ranSlow == 0:
		// The committed tier cannot see this bug by design: without the full-tier sets the
		// mutant was not tested, which is not a survival.
		o.Status, o.Detail = Errored, fmt.Sprintf("no full-tier spec ran (filter %q%s): generate its sets on the host first (`gen-golden kernels --tier full --op ...` or `make golden-full`)", m.filter(), focusNote(m))
	default:
		o.Status = Survived
		o.Detail = fmt.Sprintf("%d specs of %v passed with the mutant planted (filter %q%s)", ran, m.suites(), m.filter(), focusNote(m))
	}
}

// focusNote names a mutant's focus for its outcome's detail ("" without one).
func focusNote(m Mutant) string {
	if m.Focus == "" {
		return ""
	}
	return fmt.Sprintf(", focus %q", m.Focus)
}

// specRank orders the specs that caught a mutant for the report: conformance specs (a kernel
// case, every tap of a model) say most about the bug, a tightness spec (a deliberately broken
// variant that must fail at one given tap) least: it fails whenever a mutant breaks something
// earlier. Ginkgo runs top-level containers in a shuffled order, so the run's order says nothing.
func specRank(spec string) int {
	switch {
	case strings.Contains(spec, "tight"):
		return 2
	case strings.Contains(spec, "conformance") || strings.Contains(spec, "seeded sampling"):
		return 0
	}
	return 1
}

// firstLines returns the first n non-blank lines of s, joined by " | ".
func firstLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " | ")
}

// oneLine is a progress line for an outcome.
func oneLine(o Outcome) string {
	s := fmt.Sprintf("%s: %s (%.1fs)", o.ID, o.Status, o.Seconds)
	switch {
	case o.Status == Caught && len(o.CaughtBy) > 0:
		s += fmt.Sprintf(" by %d specs, first %s", len(o.CaughtBy), o.CaughtBy[0])
		if len(o.FirstTaps) > 0 {
			s += "; first failing tap " + strings.Join(o.FirstTaps, ", ")
		}
	case o.Detail != "":
		s += ": " + o.Detail
	}
	return s
}
