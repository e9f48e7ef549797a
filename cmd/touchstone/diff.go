package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/engine/report"
)

// runDiff prints the layer diff of one model set on the selected backend: a summary first
// (the first tap out of tolerance with the op that computes it, the worst tap of each layer,
// one line per tap kind), the full table of every tap of prefill and the stored decode steps
// with -v, the isolated replay beside it with -isolate (every op fed the reference's inputs,
// so the first failing tap names the op that introduced the error), and with -html a
// self-contained report of it all.
func runDiff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	verbose := fs.Bool("v", false, "print the full table of every tap after the summary")
	isolate := fs.Bool("isolate", false, "also replay every op from the reference's own inputs (no drift carried from earlier ops) and name the op of the first tap out of tolerance")
	htmlPath := fs.String("html", "", "write a self-contained HTML report (plots of the budget used by each tap kind across layers, per pass) to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: touchstone diff [-golden DIR] [-v] [-isolate] [-html FILE] <model set: a name such as qwen2-tiny, or a set directory>")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	root, err := goldenRoot(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	set, err := findModelSet(root, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	sel, err := backend.FromEnv()
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	defer sel.Backend.Close()
	m, p, err := model.LoadSet(sel.Backend, set)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 1
	}
	defer m.Close()
	rows, err := model.CompareTaps(m, set, p, tols)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 1
	}
	var iso []compare.TapResult
	if *isolate {
		if iso, err = model.CompareTapsIsolated(m, set, p, tols); err != nil {
			fmt.Fprintln(stderr, "touchstone: isolated replay:", err)
			return 1
		}
	}
	info := sel.Backend.Info()
	raised := 0
	for _, r := range rows {
		if r.RaisedLimits() != "" {
			raised++
		}
	}
	factor := 0.0
	if tols.TapCalibration != nil { // CompareTaps refuses to run without it
		factor = tols.TapCalibration.Factor
	}
	fmt.Fprintf(stdout, "%s on %s (%s): %d taps\nlimits: the taps: floors of %s, raised where %g x the error recorded in the set's %s is larger (tap_calibration): %d of %d taps\n\n%s",
		set.ID(), info.Backend, info.Name, len(rows), filepath.Join(root, "tolerances.yaml"), factor,
		golden.CalibrationFile, raised, len(rows), compare.LayerDiffSummary(rows, m.TapOp))
	if *verbose {
		fmt.Fprintf(stdout, "\nevery tap, in forward order\n%s", compare.LayerDiffTable(rows))
	}
	if *isolate {
		fmt.Fprintf(stdout, "\nisolated replay: every op fed the reference's inputs (its taps written over the engine's), so each tap measures the one op that computes it\n%s",
			compare.LayerDiffSummary(iso, m.TapOp))
		if *verbose {
			fmt.Fprintf(stdout, "\nevery tap of the isolated replay\n%s", compare.LayerDiffTable(iso))
		}
	}
	if *htmlPath != "" {
		rep := report.Model{Set: set.ID(), Backend: fmt.Sprintf("%s (%s)", info.Backend, info.Name), Rows: rows, Isolated: iso}
		if first := compare.FirstFailure(rows); first >= 0 {
			rep.Note = fmt.Sprintf("first tap out of tolerance: %s [%s]", rows[first].Name, m.TapOp(rows[first].Name))
		}
		if first := compare.FirstFailure(iso); first >= 0 {
			rep.Note += fmt.Sprintf("; isolated replay: %s [%s]", iso[first].Name, m.TapOp(iso[first].Name))
		}
		if err := report.WriteFile(*htmlPath, rep); err != nil {
			fmt.Fprintln(stderr, "touchstone:", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nreport: %s\n", *htmlPath)
	}
	if compare.FirstFailure(rows) >= 0 || compare.FirstFailure(iso) >= 0 {
		return 1
	}
	return 0
}

// findModelSet accepts a set directory or the name of a model set under root.
func findModelSet(root, arg string) (*golden.Set, error) {
	if st, err := os.Stat(filepath.Join(arg, golden.ManifestName)); err == nil && !st.IsDir() {
		return golden.Load(arg)
	}
	sets, err := golden.Discover(root)
	var names []string
	for _, s := range sets {
		if s.Manifest.Kind != golden.KindModel {
			continue
		}
		if s.Manifest.Model == arg {
			return s, nil
		}
		names = append(names, s.Manifest.Model)
	}
	if err != nil {
		return nil, fmt.Errorf("no model set %q found (discovery also reported: %v)", arg, err)
	}
	return nil, fmt.Errorf("no model set %q under %s (model sets: %v)", arg, root, names)
}
