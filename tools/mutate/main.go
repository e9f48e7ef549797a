// Command mutate measures how well touchstone's suites catch bugs: it plants a catalogue of
// realistic bugs (catalogue.go), one at a time, in copies of the sources, rebuilds, runs the
// committed tier of the suites expected to catch each, and reports which mutants were caught,
// by which specs, and for model-level mutants the first failing tap.
//
//	go run ./tools/mutate                      the Go side on the CPU backend (make mutate-go, CI)
//	dist/bin/mutate -side cuda                 the CUDA side on a GPU host, no Go toolchain
//	go run ./tools/mutate -side cuda -compile-only -nvcc PATH   compile each CUDA mutant, run none
//	go run ./tools/mutate -list | -check       the catalogue; whether every mutant still applies
//	dist/bin/mutate -apply ID                  plant one mutant in this tree, to reproduce it by hand
//
// It exits 1 when a non-equivalent mutant survives or a mutant does not apply, build or run,
// and 2 on a usage error or when the unmutated tree already fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// opts are the settings both sides share.
type opts struct {
	repo, work, dist  string
	jobs, gpus        int
	timeout           time.Duration
	goCmd, nvcc, arch string
	compileOnly       bool
	baseline, keep    bool
	quiet             bool
}

func (o opts) progress(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "mutate: "+format+"\n", args...)
	}
}

func main() { os.Exit(realMain(os.Args[1:])) }

func realMain(args []string) int {
	fl := flag.NewFlagSet("mutate", flag.ContinueOnError)
	var o opts
	side := fl.String("side", "go", "which mutants: go (CPU backend, needs Go) or cuda (GPU host, needs make, nvcc and dist/); all with -list or -check")
	only := fl.String("only", "", "comma-separated regular expressions of mutant ids to run (default: all of the side)")
	list := fl.Bool("list", false, "print the catalogue and exit")
	apply := fl.String("apply", "", "plant this one mutant in the repository's own tree (-repo) and exit, to reproduce it by hand (undo with git checkout)")
	check := fl.Bool("check", false, "only check that every mutant's snippet occurs exactly once in the tree; build and run nothing")
	md := fl.String("markdown", "", "also write the Markdown report to this file")
	js := fl.String("json", "", "also write the JSON report to this file")
	fl.StringVar(&o.repo, "repo", "", "repository root (default: above dist/bin for a bundled binary, else found above the working directory)")
	fl.StringVar(&o.work, "work", "", "working directory for the copies (default: a new temporary directory, removed at the end)")
	fl.StringVar(&o.dist, "dist", "", "the bundle of precompiled suites, CUDA side (default: the binary's own dist/, else <repo>/dist)")
	fl.IntVar(&o.jobs, "j", 0, "mutants built (and, Go side, run) at once (default: the cores on the Go side, min(4, cores) on the CUDA side, whose builds run make -j themselves)")
	fl.IntVar(&o.gpus, "gpus", 1, "CUDA side: mutants run at once on the GPUs, run k on TOUCHSTONE_DEVICE=k when above 1")
	fl.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit of one suite run; a mutant that hangs a suite is caught")
	fl.StringVar(&o.goCmd, "go", "go", "Go side: the go command")
	fl.StringVar(&o.nvcc, "nvcc", "", "CUDA side: nvcc to build with (default: the cuda/Makefile's)")
	fl.StringVar(&o.arch, "cuda-arch", "", "CUDA side: CUDA_ARCH (default: the cuda/Makefile's, sm_90)")
	fl.BoolVar(&o.compileOnly, "compile-only", false, "CUDA side: compile every mutant (make compile-check) and run nothing (no GPU needed)")
	fl.BoolVar(&o.baseline, "baseline", true, "first run the unmutated tree and stop if it fails")
	fl.BoolVar(&o.keep, "keep", false, "keep the working directory")
	fl.BoolVar(&o.quiet, "q", false, "no progress lines on stderr")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "mutate: "+format+"\n", a...)
		return 2
	}
	if fl.NArg() > 0 {
		return usage("unexpected arguments %v", fl.Args())
	}
	if err := validate(catalogue); err != nil {
		return usage("%v", err)
	}
	switch *side {
	case "go", "cuda":
	case "all":
		if !*list && !*check {
			return usage("-side all only lists or checks: run the Go side here and the CUDA side on a GPU host")
		}
	default:
		return usage("-side %q: want go, cuda or all", *side)
	}
	ms, err := selectMutants(catalogue, *side, *only)
	if err != nil {
		return usage("%v", err)
	}
	if *list {
		printList(ms)
		return 0
	}
	if err := o.locate(); err != nil {
		return usage("%v", err)
	}
	if *check {
		return checkOnly(o.repo, ms)
	}
	if *apply != "" {
		return applyOne(o.repo, *apply)
	}
	if o.jobs == 0 {
		o.jobs = runtime.NumCPU()
		if *side == "cuda" {
			o.jobs = min(4, o.jobs)
		}
	}
	if o.jobs < 1 || o.gpus < 1 {
		return usage("-j and -gpus must be at least 1")
	}
	if err := o.tools(*side, ms); err != nil {
		return usage("%v", err)
	}
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "touchstone-mutate-"); err != nil {
			return usage("%v", err)
		}
		if !o.keep {
			defer os.RemoveAll(o.work)
		}
	} else if o.work, err = filepath.Abs(o.work); err != nil {
		return usage("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var outs []Outcome
	if *side == "go" {
		outs, err = (&goRunner{opts: o}).run(ctx, ms)
	} else {
		outs, err = (&cudaRunner{opts: o}).run(ctx, ms)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mutate: %v\n", err)
		if errors.Is(err, context.Canceled) || outs == nil {
			return 2
		}
	}
	rep := newReport(*side, outs, time.Since(start).Seconds())
	fmt.Print(rep.Markdown())
	for _, w := range []struct {
		path string
		data []byte
	}{{*md, []byte(rep.Markdown())}, {*js, rep.JSON()}} {
		if w.path == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err == nil {
			err = os.WriteFile(w.path, w.data, 0o644)
		}
		if err != nil {
			return usage("writing %s: %v", w.path, err)
		}
	}
	if o.keep {
		o.progress("working copies kept in %s", o.work)
	}
	if !rep.Summary.OK() {
		return 1
	}
	return 0
}

// locate fills in the repository and bundle directories. A binary run from dist/bin (the GPU
// host) finds both from its own path; `go run` finds the repository above the working
// directory.
func (o *opts) locate() error {
	var exeDist string
	if exe, err := os.Executable(); err == nil {
		bin := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(bin, "kernels.test")); err == nil && filepath.Base(bin) == "bin" {
			exeDist = filepath.Dir(bin)
		}
	}
	if o.repo == "" {
		if exeDist != "" && isRepo(filepath.Dir(exeDist)) {
			o.repo = filepath.Dir(exeDist)
		} else {
			wd, err := os.Getwd()
			if err != nil {
				return err
			}
			if o.repo, err = findRepo(wd); err != nil {
				return err
			}
		}
	}
	var err error
	if o.repo, err = filepath.Abs(o.repo); err != nil {
		return err
	}
	if !isRepo(o.repo) {
		return fmt.Errorf("-repo %s: not a touchstone repository (go.mod, golden/, cuda/Makefile)", o.repo)
	}
	if o.dist == "" {
		o.dist = exeDist
		if o.dist == "" {
			o.dist = filepath.Join(o.repo, "dist")
		}
	}
	o.dist, err = filepath.Abs(o.dist)
	return err
}

// tools checks that what a side needs is there before any copy is made.
func (o *opts) tools(side string, ms []Mutant) error {
	if side == "go" {
		if _, err := exec.LookPath(o.goCmd); err != nil {
			return fmt.Errorf("the Go side needs the go command (%v); on a GPU host run -side cuda", err)
		}
		return nil
	}
	if _, err := exec.LookPath("make"); err != nil {
		return fmt.Errorf("the CUDA side needs make: %v", err)
	}
	if o.compileOnly {
		return nil
	}
	for _, m := range ms {
		if m.Sanitizer != "" {
			if _, err := exec.LookPath("compute-sanitizer"); err != nil {
				return fmt.Errorf("%s runs under compute-sanitizer, which is not on PATH (%v): add the CUDA toolkit's bin/ to PATH", m.ID, err)
			}
		}
		for _, s := range m.suites() {
			if _, err := os.Stat(filepath.Join(o.dist, "bin", s+".test")); err != nil {
				return fmt.Errorf("the CUDA side runs the precompiled suites of %s (run `make bundle` on a machine with Go): %v", o.dist, err)
			}
		}
	}
	return nil
}

// checkOnly reports every mutant that no longer applies to the tree at root.
func checkOnly(root string, ms []Mutant) int {
	bad := 0
	for _, err := range applyAll(root, ms) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate:", err)
			bad++
		}
	}
	fmt.Printf("%d of %d mutants apply to %s\n", len(ms)-bad, len(ms), root)
	if bad > 0 {
		return 1
	}
	return 0
}

func printList(ms []Mutant) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSIDE\tFILE\tSUITES\tLABELS\tDESCRIPTION")
	for _, m := range ms {
		labels := m.Labels
		if labels == "" {
			labels = "-"
		}
		if m.Focus != "" {
			labels += " focus:" + m.Focus
		}
		desc := m.Bug
		if m.Equivalent != "" {
			desc += " [equivalent: " + m.Equivalent + "]"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Side, m.File, strings.Join(m.suites(), ","), labels, desc)
	}
	w.Flush()
}

// applyOne plants the mutant id in the tree at repo.
func applyOne(repo, id string) int {
	i := slices.IndexFunc(catalogue, func(m Mutant) bool { return m.ID == id })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "mutate: -apply %q: no such mutant (see -list)\n", id)
		return 2
	}
	if _, err := plant(repo, catalogue[i]); err != nil {
		fmt.Fprintf(os.Stderr, "mutate: -apply %s: %v\n", id, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "mutate: planted %s in %s (%s)\n", id, filepath.Join(repo, catalogue[i].File), catalogue[i].Bug)
	return 0
}
