package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// cudaRunner runs CUDA-side mutants on a GPU host, with no Go toolchain: the suites are the
// precompiled binaries of `make bundle` (dist/bin/*.test), and each mutant is its own copy of
// cuda/ built with `make -C cuda`. The unmutated library is built first in a base copy; each
// mutant's copy starts from its objects and dependency files (modification times kept), so
// make compiles only the objects that include the mutated file. With compileOnly (no GPU:
// CI machines, a workstation) each mutant is compiled and nothing is run.
type cudaRunner struct {
	opts
	mu sync.Mutex // serialises progress counters
}

// makeArgs are the make arguments every build shares. BUILD is relative to cuda/, so the
// dependency files name the same targets in every copy.
func (c *cudaRunner) makeArgs(dir string, jobs int) []string {
	args := []string{"-C", dir, fmt.Sprintf("-j%d", jobs), "BUILD=build"}
	if c.nvcc != "" {
		args = append(args, "NVCC="+c.nvcc)
	}
	if c.arch != "" {
		args = append(args, "CUDA_ARCH="+c.arch)
	}
	if c.compileOnly {
		args = append(args, "compile-check")
	}
	return args
}

func (c *cudaRunner) make(ctx context.Context, dir string, jobs int) (string, error) {
	cmd := exec.CommandContext(ctx, "make", c.makeArgs(dir, jobs)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func libPath(root string) string {
	return filepath.Join(root, "cuda", "build", "libtouchstone_cuda.so")
}

func (c *cudaRunner) run(ctx context.Context, ms []Mutant) ([]Outcome, error) {
	base := filepath.Join(c.work, "base")
	c.progress("snapshot of %s/cuda in %s", c.repo, base)
	if err := copyTree(filepath.Join(c.repo, "cuda"), filepath.Join(base, "cuda"), []string{"build"}); err != nil {
		return nil, fmt.Errorf("copying cuda/: %w", err)
	}
	outs, todo := c.triage(base, ms)
	if len(todo) == 0 {
		return outs, nil
	}
	cores := runtime.NumCPU()
	start := time.Now()
	c.progress("building the unmutated library (make -j%d)", cores)
	if out, err := c.make(ctx, filepath.Join(base, "cuda"), cores); err != nil {
		return nil, fmt.Errorf("the unmutated cuda/ does not build:\n%s", lastLines(out, 20))
	}
	c.progress("built in %.0fs", time.Since(start).Seconds())
	if !c.compileOnly && c.baseline {
		if err := c.runBaseline(ctx, ms, todo, libPath(base)); err != nil {
			return nil, err
		}
	}

	// Builds run c.jobs at once, each with a share of the cores; a built mutant goes on to
	// the GPU slots (c.gpus runs at once, slot k on device k).
	perBuild := max(1, cores/c.jobs)
	built := make(chan int)
	buildQ := make(chan int)
	var bwg, rwg sync.WaitGroup
	done := 0
	finish := func(i int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		done++
		c.progress("[%d/%d] %s", done, len(todo), oneLine(outs[i]))
	}
	for k := 0; k < c.jobs; k++ {
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			for i := range buildQ {
				t0 := time.Now()
				outs[i] = c.buildOne(ctx, base, ms[i], perBuild)
				outs[i].Seconds = time.Since(t0).Seconds()
				if outs[i].Status != "" || c.compileOnly {
					if outs[i].Status == "" {
						outs[i].Status = Built
					}
					finish(i)
					continue
				}
				built <- i
			}
		}()
	}
	for slot := 0; slot < c.gpus; slot++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for i := range built {
				t0 := time.Now()
				c.runOne(ctx, &outs[i], ms[i], slot)
				outs[i].Seconds += time.Since(t0).Seconds()
				finish(i)
			}
		}()
	}
	for _, i := range todo {
		if ctx.Err() != nil {
			break
		}
		buildQ <- i
	}
	close(buildQ)
	bwg.Wait()
	close(built)
	rwg.Wait()
	if !c.keep {
		for _, i := range todo {
			os.RemoveAll(filepath.Join(c.work, ms[i].ID))
		}
	}
	return outs, ctx.Err()
}

// buildOne copies the base build, plants m and rebuilds; it returns an outcome with an empty
// status when the library (or, compiling only, the objects) built.
func (c *cudaRunner) buildOne(ctx context.Context, base string, m Mutant, jobs int) Outcome {
	o := outcomeOf(m)
	dir := filepath.Join(c.work, m.ID)
	os.RemoveAll(dir)
	if err := copyTree(base, dir, nil); err != nil {
		o.Status, o.Detail = Errored, err.Error()
		return o
	}
	// The copied objects keep the base build's times; the planted file is written now, after
	// the base build ended, so make sees it as newer than every object that includes it.
	planted := time.Now()
	if _, err := plant(dir, m); err != nil {
		o.Status, o.Detail = NotApplicable, err.Error()
		return o
	}
	out, err := c.make(ctx, filepath.Join(dir, "cuda"), jobs)
	if err != nil {
		o.Status, o.Detail = BuildFailed, firstErrorLines(out, 6)
		return o
	}
	// A file no object depends on would be a mutant nothing compiles: it would survive
	// without testing anything.
	if rebuilt := newerObjects(filepath.Join(dir, "cuda", "build", "obj"), planted); len(rebuilt) == 0 {
		o.Status, o.Detail = Errored, "make rebuilt no object: nothing includes "+m.File
		return o
	}
	return o
}

// newerObjects lists the object files under dir modified after t.
func newerObjects(dir string, t time.Time) []string {
	var res []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".o") {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(t) {
			res = append(res, p)
		}
		return nil
	})
	return res
}

func (c *cudaRunner) suite(s, filter, focus, sanitizer, lib, tag string, slot int) suiteRun {
	env := []string{
		"TOUCHSTONE_BACKEND=cuda",
		"TOUCHSTONE_REQUIRE_GPU=1",
		"TOUCHSTONE_CUDA_LIB=" + lib,
		"TOUCHSTONE_GOLDEN=" + filepath.Join(c.repo, "golden"),
		// As dist/run: guard regions catch out-of-bounds writes, and a refused call fails.
		"TOUCHSTONE_GUARDS=1",
		"TOUCHSTONE_UNSUPPORTED=fail",
		"TOUCHSTONE_GRAPHS=1",
		// A mutant that hangs a kernel is a HANG verdict (caught), reached at the deadline: no
		// legitimate wait of the committed tier comes near 20 s (60 s under a sanitizer).
		"TOUCHSTONE_DEADLINE=" + map[bool]string{false: "20", true: "60"}[sanitizer != ""],
	}
	if c.gpus > 1 {
		env = append(env, fmt.Sprintf("TOUCHSTONE_DEVICE=%d", slot))
	}
	if sanitizer != "" {
		// As dist/run sanitize: the sanitizer's own allocations change the device memory in use.
		filter = "(" + filter + ") && !device-memory"
	}
	if sanitizer == "racecheck" {
		// As dist/run sanitize: under racecheck, cuBLAS's Hopper GEMMs corrupt the context, so
		// specs running a GEMM (the fused ops' unfused compositions among them) are left out.
		filter = "(" + filter + ") && !op:gemm && !op:swiglu_ffn && !op:gemm_swiglu && !op:rmsnorm_gemm && !op:swiglu_gemm && !op:gpt_ffn && !unfused"
	}
	reports := filepath.Join(c.work, "reports")
	os.MkdirAll(reports, 0o755)
	return suiteRun{
		Suite:     s,
		Binary:    filepath.Join(c.dist, "bin", s+".test"),
		Dir:       c.repo,
		Env:       env,
		Filter:    filter,
		Focus:     focus,
		Report:    filepath.Join(reports, tag+"-"+s+".json"),
		Log:       filepath.Join(reports, tag+"-"+s+".log"),
		Timeout:   c.timeout,
		Sanitizer: sanitizer,
	}
}

// baselineRun is one run of the unmutated library: a suite, its filter and sanitizer.
type baselineRun struct{ suite, filter, sanitizer string }

// runBaseline runs the committed tier of every suite the mutants use with the unmutated
// library, and, for each mutant run under a sanitizer, its suites under that sanitizer with
// its filter: a hazard already there would otherwise kill the mutant. A mutant's focus only
// narrows specs the plain committed run covers, so it needs no run of its own.
func (c *cudaRunner) runBaseline(ctx context.Context, ms []Mutant, todo []int, lib string) error {
	var runs []baselineRun
	for _, i := range todo {
		for _, s := range ms[i].suites() {
			// The committed tier plain, and a mutant's own filter where it differs in more than
			// its labels: under a sanitizer, or over the full tier.
			own := ms[i].Sanitizer != "" || ms[i].FullTier
			for _, b := range []baselineRun{{s, labelFilter("", false), ""}, {s, ms[i].filter(), ms[i].Sanitizer}} {
				if (own || b.filter == labelFilter("", false)) && !slices.Contains(runs, b) {
					runs = append(runs, b)
				}
			}
		}
	}
	start := time.Now()
	var bad, names []string
	for k, b := range runs {
		r, err := c.suite(b.suite, b.filter, "", b.sanitizer, lib, fmt.Sprintf("baseline%d", k), 0).run(ctx)
		name := b.suite
		if b.sanitizer != "" || b.filter != labelFilter("", false) {
			name += " (" + strings.TrimSpace(b.sanitizer+" "+b.filter) + ")"
		}
		names = append(names, name)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		bad = append(bad, r.baselineProblems(name)...)
	}
	if len(bad) > 0 {
		return fmt.Errorf("baseline: the unmutated library already fails, so no mutant result would mean anything:\n  %s", strings.Join(bad, "\n  "))
	}
	c.progress("baseline: %s pass with the unmutated library (%.0fs)", strings.Join(names, ", "), time.Since(start).Seconds())
	return nil
}

func (c *cudaRunner) runOne(ctx context.Context, o *Outcome, m Mutant, slot int) {
	lib := libPath(filepath.Join(c.work, m.ID))
	var results []suiteResult
	for _, s := range m.suites() {
		r, err := c.suite(s, m.filter(), m.Focus, m.Sanitizer, lib, m.ID, slot).run(ctx)
		if err != nil {
			o.Status, o.Detail = Errored, err.Error()
			return
		}
		results = append(results, r)
	}
	judge(o, m, results)
}

// firstErrorLines picks the compiler's error lines out of make's output (else its last lines).
func firstErrorLines(out string, n int) string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "error") && len(errs) < n {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		return lastLines(out, n)
	}
	return strings.Join(errs, " | ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
