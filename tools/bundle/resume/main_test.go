package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
)

func spec(text string, state types.SpecState, msg string) types.SpecReport {
	return types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: text, State: state,
		Failure: types.Failure{Message: msg}, LeafNodeLocation: types.CodeLocation{FileName: "k_test.go", LineNumber: len(text)}}
}

func write(t *testing.T, dir string, reports []types.Report) {
	t.Helper()
	data, err := json.Marshal(reports)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A suite aborted by a hang is planned again with every reported spec to skip; the resumed
// run's verdicts replace the ones the abort left, the resume skips and the filtered specs
// change nothing, and once the resumed run ends without a hang nothing more is planned.
func TestPlanAndMerge(t *testing.T) {
	dir := t.TempDir()
	main := []types.Report{{SuitePath: "/d/suites/kernels", SuiteDescription: "Kernel conformance", SpecReports: []types.SpecReport{
		spec("a", types.SpecStatePassed, ""),
		spec("b", types.SpecStateAborted, backend.HangMarker+"download: ..."),
		spec("c", types.SpecStateSkipped, ""),
		spec("u", types.SpecStateSkipped, "unsupported: ..."),
	}}, {SuitePath: "/d/suites/models", SuiteDescription: "Model conformance", SuiteSucceeded: true, SpecReports: []types.SpecReport{
		spec("m", types.SpecStatePassed, ""),
	}}}
	write(t, dir, main)

	out := captureStdout(t, func() error { return plan([]string{"-reports", dir}) })
	suite, skip, ok := strings.Cut(strings.TrimSpace(out), "\t")
	if !ok || suite != "/d/suites/kernels" || strings.Contains(out, "models") {
		t.Fatalf("plan: %q, want only the kernel suite", out)
	}
	data, _ := os.ReadFile(skip)
	if got := strings.Fields(string(data)); strings.Join(got, ",") != "a,b,u" {
		t.Errorf("skip list %q, want a, b and u (c was left by the abort)", got)
	}

	run := filepath.Join(dir, "run-1")
	write(t, run, []types.Report{{SuitePath: "/d/suites/kernels", SpecReports: []types.SpecReport{
		spec("a", types.SpecStateSkipped, conformance.ResumeSkipMessage),
		spec("b", types.SpecStateSkipped, conformance.ResumeSkipMessage),
		spec("c", types.SpecStatePassed, ""),
		spec("u", types.SpecStateSkipped, conformance.ResumeSkipMessage),
	}}})
	if err := merge([]string{"-into", dir, "-from", run}); err != nil {
		t.Fatal(err)
	}
	merged, err := readReports(dir)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]types.SpecState{}
	for _, s := range merged[0].SpecReports {
		states[s.LeafNodeText] = s.State
	}
	if states["a"] != types.SpecStatePassed || states["b"] != types.SpecStateAborted || states["c"] != types.SpecStatePassed ||
		states["u"] != types.SpecStateSkipped || len(states) != 4 {
		t.Errorf("merged states %v", states)
	}
	if merged[0].SuiteSucceeded || !merged[1].SuiteSucceeded {
		t.Errorf("succeeded: kernels %v (a hang is a failure), models %v", merged[0].SuiteSucceeded, merged[1].SuiteSucceeded)
	}
	if _, err := os.Stat(filepath.Join(dir, "junit.xml")); err != nil {
		t.Errorf("junit.xml: %v", err)
	}
	if out := captureStdout(t, func() error { return plan([]string{"-reports", dir}) }); out != "" {
		t.Errorf("planned again after a clean resumed run: %q", out)
	}
	if failed, err := anyFailed([]string{"-reports", dir}); err != nil || !failed {
		t.Errorf("anyFailed: %v, %v; want true", failed, err)
	}
}

func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	ferr := f()
	os.Stdout = old
	w.Close()
	data, _ := io.ReadAll(r)
	if ferr != nil {
		t.Fatal(ferr)
	}
	return string(data)
}
