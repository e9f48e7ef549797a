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
)

// runDiff prints the layer-diff table of one model set on the selected backend: every tap of
// prefill and the stored decode steps in forward order, the first one over tolerance marked,
// each with the limits that the set's calibration raised above the static floor.
func runDiff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: touchstone diff [-golden DIR] <model set: a name such as qwen2-tiny, or a set directory>")
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
		golden.CalibrationFile, raised, len(rows), compare.LayerDiffTable(rows))
	if first := compare.FirstFailure(rows); first >= 0 {
		fmt.Fprintf(stdout, "\nfirst tap out of tolerance: %s\n", rows[first].Name)
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
