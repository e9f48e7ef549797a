package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// committedTier selects what CI runs: no full-scale tier, no timings.
const committedTier = "!slow && !benchmark"

// fullTier adds the full-scale tier (golden/.cache, generated on the host that runs it).
const fullTier = "!benchmark"

// labelFilter is the filter of a mutant with these labels: the committed tier, or with full
// the full-scale tier too.
func labelFilter(labels string, full bool) string {
	tier := committedTier
	if full {
		tier = fullTier
	}
	if strings.TrimSpace(labels) == "" {
		return tier
	}
	return "(" + tier + ") && (" + labels + ")"
}

// suiteRun is one run of a precompiled Ginkgo suite binary.
type suiteRun struct {
	Suite   string // kernels, models, sampling
	Binary  string
	Dir     string   // working directory
	Env     []string // added to the environment (later entries win)
	Filter  string
	Focus   string // a Ginkgo focus regular expression on spec text, or "" for none
	Report  string // where the JSON report goes
	Log     string // stdout and stderr
	Timeout time.Duration
	// Sanitizer, when set, runs the binary under `compute-sanitizer --tool <Sanitizer>`.
	Sanitizer string
}

// suiteResult is what a run shows about the mutant.
type suiteResult struct {
	Ran       int      // specs that ran (passed or failed)
	RanSlow   int      // of them, full-tier ones (labelled slow: their sets generated on the host)
	Failed    []string // "<suite>: <full spec text>" of every failed spec
	FirstTaps []string // "<model>: <tap>", the first tap out of tolerance per model set
	// Crash is set when the binary failed without a report that says why (a crash, a
	// timeout, a failure outside any spec): the mutant is caught by it.
	Crash string
	// Hazards is compute-sanitizer's summary and first error when it reported any.
	Hazards string
}

// baselineProblems says what makes a run of the unmutated code unusable as a baseline: a
// crash, a sanitizer hazard, failed specs, or no spec at all (name names the run).
func (r suiteResult) baselineProblems(name string) []string {
	switch {
	case r.Crash != "":
		return []string{r.Crash}
	case r.Hazards != "":
		return []string{r.Hazards}
	case len(r.Failed) > 0:
		return shorten(r.Failed, 5)
	case r.Ran == 0:
		return []string{name + ": no spec ran"}
	}
	return nil
}

// sanitizerExit is the exit status compute-sanitizer is asked to return on an error.
const sanitizerExit = 86

// command is the binary and arguments of a run, wrapped in compute-sanitizer if asked.
func (r suiteRun) command() (string, []string) {
	args := []string{
		"--ginkgo.label-filter=" + r.Filter,
		"--ginkgo.json-report=" + r.Report,
		"--ginkgo.no-color",
		"--ginkgo.silence-skips",
		"--ginkgo.seed=1", // the same spec order and cross-backend inputs in every run
		"-test.timeout=0", // ours is the limit: a hung mutant is killed by the context
		// a launch that never returns interrupts the suite (harness.AbortOnHang), whose
		// blocked spec then has this long before its cleanup reports the hang
		"--ginkgo.grace-period=5s",
	}
	if r.Focus != "" {
		args = append(args, "--ginkgo.focus="+r.Focus)
	}
	if r.Sanitizer == "" {
		return r.Binary, args
	}
	pre := []string{"--tool", r.Sanitizer, "--error-exitcode", fmt.Sprint(sanitizerExit)}
	if r.Sanitizer == "racecheck" {
		// As dist/run: racecheck cannot model cuBLAS's Hopper GEMM kernels (nvjet_sm90_*).
		pre = append(pre, "--kernel-name-exclude", "kns=nvjet")
	}
	return "compute-sanitizer", append(append(pre, r.Binary), args...)
}

// run executes the suite binary and parses its report.
func (r suiteRun) run(ctx context.Context) (suiteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	os.Remove(r.Report)
	log, err := os.Create(r.Log)
	if err != nil {
		return suiteResult{}, err
	}
	defer log.Close()
	name, args := r.command()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), r.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, killed whole on timeout: under compute-sanitizer the suite is a
	// child that would otherwise outlive the kill and hold the GPU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return suiteResult{Crash: fmt.Sprintf("%s: timed out after %s (killed)", r.Suite, r.Timeout)}, nil
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return suiteResult{}, fmt.Errorf("%s: %w", r.Binary, runErr)
	}
	data, rerr := os.ReadFile(r.Report)
	if rerr != nil {
		if runErr != nil {
			return suiteResult{Crash: fmt.Sprintf("%s: exited with %v and no report: %s", r.Suite, runErr, tail(r.Log, 3))}, nil
		}
		return suiteResult{}, fmt.Errorf("%s: no JSON report: %w", r.Suite, rerr)
	}
	res, err := parseReport(r.Suite, data)
	if err != nil {
		return suiteResult{}, err
	}
	if r.Sanitizer != "" && exit != nil && exit.ExitCode() == sanitizerExit {
		res.Hazards = sanitizerFindings(r.Suite, r.Sanitizer, r.Log)
		return res, nil
	}
	if runErr != nil && len(res.Failed) == 0 {
		res.Crash = fmt.Sprintf("%s: exited with %v, no spec failed: %s", r.Suite, runErr, tail(r.Log, 3))
	}
	return res, nil
}

var (
	// suites/models fails a tap spec with "<model>/<case>: tap <name> is out of tolerance".
	tapFailure = regexp.MustCompile(`(?m)^(\S+?)(?:/\S+)?: tap (\S+) is out of tolerance`)
	// compare.LayerDiffTable ends with "first tap out of tolerance: <name> (...)"; the
	// greedy and broken-variant specs attach or print that table.
	tapInTable = regexp.MustCompile(`first tap out of tolerance: (\S+)`)
	// The layer-diff report entry is named "layer diff <model>/<case>".
	layerDiffEntry = regexp.MustCompile(`^layer diff (\S+?)(?:/\S+)?$`)
	// ... and says so when every tap passed (the bug is past the last tap: tokens, sampling).
	allTapsPass = regexp.MustCompile(`all (\d+) taps within tolerance`)
)

// Where a first failing tap was read, best first: the tap spec's own failure message, a
// layer-diff table attached to another failed spec, a table in which every tap passed.
const (
	fromTapSpec = iota
	fromTable
	fromPassingTable
)

// firstTaps keeps the best-sourced first failing tap of each model, models in the order seen.
type firstTaps struct {
	order []string
	tap   map[string]string
	rank  map[string]int
}

func (f *firstTaps) note(model, tap string, rank int) {
	if f.tap == nil {
		f.tap, f.rank = map[string]string{}, map[string]int{}
	}
	old, seen := f.rank[model]
	if !seen {
		f.order = append(f.order, model)
	}
	if !seen || rank < old {
		f.tap[model], f.rank[model] = tap, rank
	}
}

func (f *firstTaps) list() []string {
	var res []string
	for _, m := range f.order {
		res = append(res, m+": "+f.tap[m])
	}
	return res
}

// parseReport reads a Ginkgo JSON report (ginkgo --json-report) of one suite.
func parseReport(suite string, data []byte) (suiteResult, error) {
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return suiteResult{}, fmt.Errorf("%s: JSON report: %w", suite, err)
	}
	var res suiteResult
	var taps firstTaps
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && (sr.State.Is(types.SpecStatePassed) || sr.State.Is(types.SpecStateFailureStates)) {
				res.Ran++
				if slices.Contains(sr.Labels(), "slow") {
					res.RanSlow++
				}
			}
			if !sr.State.Is(types.SpecStateFailureStates) {
				continue
			}
			name := sr.FullText()
			if sr.LeafNodeType != types.NodeTypeIt {
				// A suite-level node (BeforeSuite: no backend, no GPU): its message says why.
				name = strings.TrimSpace(name + " [" + sr.LeafNodeType.String() + "]: " + firstLines(sr.Failure.Message, 1))
			}
			res.Failed = append(res.Failed, suite+": "+name)
			msg := sr.Failure.Message
			for _, m := range tapFailure.FindAllStringSubmatch(msg, -1) {
				taps.note(m[1], m[2], fromTapSpec)
			}
			model := ""
			for _, l := range sr.LeafNodeLabels {
				if strings.HasPrefix(l, "model:") {
					model = strings.TrimPrefix(l, "model:")
				}
			}
			if m := tapInTable.FindStringSubmatch(msg); m != nil && model != "" {
				taps.note(model, m[1], fromTable)
			}
			for _, e := range sr.ReportEntries {
				em := layerDiffEntry.FindStringSubmatch(e.Name)
				if em == nil {
					continue
				}
				if m := tapInTable.FindStringSubmatch(e.StringRepresentation()); m != nil {
					taps.note(em[1], m[1], fromTable)
				} else if m := allTapsPass.FindStringSubmatch(e.StringRepresentation()); m != nil {
					taps.note(em[1], "none (all "+m[1]+" taps in tolerance)", fromPassingTable)
				}
			}
		}
	}
	res.FirstTaps = taps.list()
	return res, nil
}

var (
	sanitizerSummary = regexp.MustCompile(`=+ [A-Z]+ SUMMARY: (.*)`)
	sanitizerError   = regexp.MustCompile(`=+ (Error: .*|Invalid .*|Race reported .*)`)
)

// sanitizerFindings summarises compute-sanitizer's log: its summary line and first error.
func sanitizerFindings(suite, tool, log string) string {
	data, _ := os.ReadFile(log)
	s := fmt.Sprintf("%s under compute-sanitizer %s", suite, tool)
	if m := sanitizerSummary.FindSubmatch(data); m != nil {
		s += ": " + string(m[1])
	}
	if m := sanitizerError.FindSubmatch(data); m != nil {
		s += "; first: " + strings.TrimSpace(string(m[1]))
	}
	return s
}

// tail returns the last n non-blank lines of a file, joined by " | ".
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// suiteDir is the working directory a suite binary runs in (as `go test` would run it).
func suiteDir(root, suite string) string { return filepath.Join(root, "suites", suite) }
