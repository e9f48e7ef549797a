// Command resume restarts, for dist/run, a suite that a hang aborted, and folds the restarted
// runs into one report.
//
// A kernel that never finishes fails its spec with HANG and aborts its suite (harness.AbortOnHang):
// the backend refuses every later call, so the specs after it are reported skipped, not run. dist/run
// then asks
//
//	resume plan -reports DIR -work WORK
//
// which prints, for each suite of DIR/report.json whose last run was aborted by a hang, a line
// "<suite directory>\t<skip file>": the skip file (under WORK) lists the full text of every spec
// of that suite that some run already reported, for the suite to skip
// (TOUCHSTONE_RESUME_SKIP). dist/run runs each such suite again into a directory of its own and
// calls
//
//	resume merge -into DIR -from RUNDIR
//
// which replaces, in DIR's report.json and junit.xml, each spec that RUNDIR's run reported
// (ran, or skipped for a reason of its own) and marks what the next plan must look at. The loop
// ends when no suite's last run was aborted: each round reports at least the spec that hung.
// Then
//
//	resume failed -reports DIR
//
// exits 1 when a suite of the merged reports failed (a hang is a failure): dist/run's status.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
)

// stateFile, beside the merged report, says per suite whether its last run was aborted by a
// hang (the merged report alone cannot: the hung spec stays in it).
const stateFile = "resume-state.json"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "plan":
		err = plan(os.Args[2:])
	case "merge":
		err = merge(os.Args[2:])
	case "failed":
		var failed bool
		failed, err = anyFailed(os.Args[2:])
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "resume:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: resume plan -reports DIR [-work WORK] | resume merge -into DIR -from RUNDIR | resume failed -reports DIR")
	os.Exit(2)
}

func readReports(dir string) ([]types.Report, error) {
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "report.json"), err)
	}
	return reports, nil
}

// abortedByHang reports whether a run of a suite was cut short by a hang: a spec aborted
// with the hang marker in its failure.
func abortedByHang(r types.Report) bool {
	for _, s := range r.SpecReports {
		if s.State == types.SpecStateAborted && strings.Contains(s.Failure.Message, backend.HangMarker) {
			return true
		}
	}
	return false
}

// reported says whether a spec's verdict is its own: it ran, or it was skipped with a reason
// (unsupported, inconclusive, a resume). A spec left skipped by an abort has no message.
func reported(s types.SpecReport) bool {
	return s.State != types.SpecStateSkipped || s.Failure.Message != ""
}

// state is, per suite directory, whether its last run was aborted by a hang.
type state map[string]bool

func readState(dir string, reports []types.Report) (state, error) {
	st := state{}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		// the first plan: the main run's reports are the last run of every suite
		for _, r := range reports {
			st[r.SuitePath] = abortedByHang(r)
		}
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	return st, json.Unmarshal(data, &st)
}

// load reads the merged reports of dir and the state of its suites.
func load(dir string) ([]types.Report, state, error) {
	reports, err := readReports(dir)
	if err != nil {
		return nil, nil, err
	}
	st, err := readState(dir, reports)
	return reports, st, err
}

func writeState(dir string, st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), data, 0o644)
}

func plan(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ExitOnError)
	dir := fs.String("reports", "build/reports", "the directory of the merged report.json")
	work := fs.String("work", "", "where the skip files go (default: DIR/resume)")
	fs.Parse(args)
	if *work == "" {
		*work = filepath.Join(*dir, "resume")
	}
	reports, st, err := load(*dir)
	if err != nil {
		return err
	}
	if err := writeState(*dir, st); err != nil {
		return err
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return err
	}
	for i, r := range reports {
		if !st[r.SuitePath] {
			continue
		}
		var done []string
		for _, s := range r.SpecReports {
			if s.LeafNodeType == types.NodeTypeIt && reported(s) {
				done = append(done, s.FullText())
			}
		}
		sort.Strings(done)
		skip := filepath.Join(*work, fmt.Sprintf("skip-%d-%s.txt", i, filepath.Base(r.SuitePath)))
		if err := os.WriteFile(skip, []byte(strings.Join(done, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s\t%s\n", r.SuitePath, skip)
	}
	return nil
}

// specKey identifies a spec across runs of one suite.
func specKey(s types.SpecReport) string {
	return s.FullText() + "\x00" + s.LeafNodeLocation.String()
}

func merge(args []string) error {
	fs := flag.NewFlagSet("merge", flag.ExitOnError)
	into := fs.String("into", "build/reports", "the merged reports, updated in place")
	from := fs.String("from", "", "the reports of a resumed run")
	fs.Parse(args)
	if *from == "" {
		return errors.New("merge: -from is required")
	}
	main, st, err := load(*into)
	if err != nil {
		return err
	}
	runs, err := readReports(*from)
	if err != nil {
		return err
	}
	for _, run := range runs {
		at := -1
		for i := range main {
			if main[i].SuitePath == run.SuitePath {
				at = i
			}
		}
		if at < 0 {
			return fmt.Errorf("merge: %s is not a suite of %s", run.SuitePath, *into)
		}
		m := &main[at]
		index := map[string]int{}
		for i, s := range m.SpecReports {
			index[specKey(s)] = i
		}
		for _, s := range run.SpecReports {
			if !reported(s) || (s.State == types.SpecStateSkipped && s.Failure.Message == conformance.ResumeSkipMessage) {
				continue // not run here, or reported by an earlier run: keep that verdict
			}
			if i, ok := index[specKey(s)]; ok {
				m.SpecReports[i] = s
			} else {
				m.SpecReports = append(m.SpecReports, s)
			}
		}
		m.SuiteSucceeded = true
		for _, s := range m.SpecReports {
			if s.State.Is(types.SpecStateFailureStates) {
				m.SuiteSucceeded = false
			}
		}
		m.RunTime += run.RunTime
		st[run.SuitePath] = abortedByHang(run)
	}
	if err := writeReports(*into, main); err != nil {
		return err
	}
	return writeState(*into, st)
}

// writeReports writes report.json and junit.xml of all suites, as ginkgo merges them.
func writeReports(dir string, reports []types.Report) error {
	var jsons, junits []string
	for i, r := range reports {
		j := filepath.Join(dir, fmt.Sprintf(".resume-%d.json", i))
		x := filepath.Join(dir, fmt.Sprintf(".resume-%d.xml", i))
		if err := reporters.GenerateJSONReport(r, j); err != nil {
			return err
		}
		if err := reporters.GenerateJUnitReport(r, x); err != nil {
			return err
		}
		jsons, junits = append(jsons, j), append(junits, x)
	}
	if _, err := reporters.MergeAndCleanupJSONReports(jsons, filepath.Join(dir, "report.json")); err != nil {
		return err
	}
	_, err := reporters.MergeAndCleanupJUnitReports(junits, filepath.Join(dir, "junit.xml"))
	return err
}

// anyFailed reports whether a suite of the merged reports failed (exit status 1 of
// `resume failed`, dist/run's own after a resume).
func anyFailed(args []string) (bool, error) {
	fs := flag.NewFlagSet("failed", flag.ExitOnError)
	dir := fs.String("reports", "build/reports", "the directory of the merged report.json")
	fs.Parse(args)
	reports, err := readReports(*dir)
	if err != nil {
		return false, err
	}
	for _, r := range reports {
		if !r.SuiteSucceeded {
			return true, nil
		}
	}
	return false, nil
}
