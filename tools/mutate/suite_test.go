package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

func TestSuiteCommand(t *testing.T) {
	r := suiteRun{Binary: "/d/bin/kernels.test", Filter: "(!slow && !benchmark) && (op:rope)", Report: "/w/r.json"}
	name, args := r.command()
	if name != r.Binary || !slices.Contains(args, "--ginkgo.label-filter=(!slow && !benchmark) && (op:rope)") ||
		!slices.Contains(args, "--ginkgo.json-report=/w/r.json") || !slices.Contains(args, "--ginkgo.seed=1") {
		t.Errorf("plain run: %s %q", name, args)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--ginkgo.focus") }) {
		t.Errorf("a run without a focus passes one: %q", args)
	}
	r.Focus = "bf16-"
	if _, args = r.command(); !slices.Contains(args, "--ginkgo.focus=bf16-") {
		t.Errorf("focused run: %q", args)
	}
	r.Focus = ""
	r.Sanitizer = "racecheck"
	name, args = r.command()
	want := []string{"--tool", "racecheck", "--error-exitcode", "86", "--kernel-name-exclude", "kns=nvjet", "/d/bin/kernels.test"}
	if name != "compute-sanitizer" || !slices.Equal(args[:len(want)], want) {
		t.Errorf("racecheck run: %s %q", name, args)
	}
	r.Sanitizer = "memcheck"
	if _, args = r.command(); slices.Contains(args, "--kernel-name-exclude") {
		t.Errorf("memcheck excludes kernels: %q", args)
	}
}

func TestSanitizerFindings(t *testing.T) {
	log := filepath.Join(t.TempDir(), "kernels.log")
	text := strings.Join([]string{
		"Running Suite: Kernel conformance",
		"========= Error: Race reported between Read access at ts::block_sum(float, float *)+0x330 in internal.h:331",
		"=========     and Write access at ts::block_sum(float, float *)+0x730 in internal.h:329 [62544 hazards]",
		"Ran 20 of 240 Specs in 15.298 seconds",
		"========= RACECHECK SUMMARY: 54 hazards displayed (54 errors, 0 warnings)",
	}, "\n")
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := sanitizerFindings("kernels", "racecheck", log)
	want := "kernels under compute-sanitizer racecheck: 54 hazards displayed (54 errors, 0 warnings); first: Error: Race reported between Read access at ts::block_sum(float, float *)+0x330 in internal.h:331"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	m := Mutant{ID: "cuda-x", Suites: []string{"kernels"}}
	o := outcomeOf(m)
	judge(&o, m, []suiteResult{{Ran: 20, Hazards: got}})
	if o.Status != Caught || !slices.Equal(o.CaughtBy, []string{got}) {
		t.Errorf("sanitizer errors with every spec passing: %s %q", o.Status, o.CaughtBy)
	}
}

func TestSanitizerOnlyOnTheCUDASide(t *testing.T) {
	m := Mutant{ID: "go-x", Side: SideGo, File: "engine/sample/sample.go", Original: "a", Replacement: "b", Bug: "x", Sanitizer: "racecheck"}
	if err := validate([]Mutant{m}); err == nil {
		t.Error("a Go mutant under compute-sanitizer is accepted")
	}
	m = Mutant{ID: "cuda-x", Side: SideCUDA, File: "cuda/internal.h", Original: "a", Replacement: "b", Bug: "x", Sanitizer: "racechek"}
	if err := validate([]Mutant{m}); err == nil {
		t.Error("an unknown sanitizer tool is accepted")
	}
	m.Sanitizer = "racecheck"
	if err := validate([]Mutant{m}); err != nil {
		t.Error(err)
	}
}

// fakeSuite writes a shell script standing in for a suite binary.
func fakeSuite(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake.test")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSuiteRunOutcomes(t *testing.T) {
	dir := t.TempDir()
	passed, err := json.Marshal([]types.Report{{SpecReports: []types.SpecReport{
		spec(types.SpecStatePassed, []string{"kernel conformance", "rope"}, "case", nil, "")}}})
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, passed, 0o644); err != nil {
		t.Fatal(err)
	}
	// The fake copies a prepared report to where --ginkgo.json-report asks for it.
	writeReport := `for a in "$@"; do case $a in --ginkgo.json-report=*) cp ` + good + ` "${a#*=}";; esac; done`
	run := func(body string, timeout time.Duration) suiteResult {
		t.Helper()
		r := suiteRun{Suite: "kernels", Binary: fakeSuite(t, body), Dir: dir, Filter: "x",
			Report: filepath.Join(dir, "r.json"), Log: filepath.Join(dir, "r.log"), Timeout: timeout}
		res, err := r.run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(writeReport, time.Minute); res.Ran != 1 || res.Crash != "" || len(res.Failed) != 0 {
		t.Errorf("a passing suite: %+v", res)
	}
	if res := run(writeReport+"\nexit 1", time.Minute); !strings.Contains(res.Crash, "no spec failed") {
		t.Errorf("a failing exit with every spec passed: %+v", res)
	}
	if res := run("echo boom >&2; exit 3", time.Minute); !strings.Contains(res.Crash, "no report") || !strings.Contains(res.Crash, "boom") {
		t.Errorf("a crash without a report: %+v", res)
	}
	start := time.Now()
	if res := run("sleep 30 & wait", 300*time.Millisecond); !strings.Contains(res.Crash, "timed out") {
		t.Errorf("a hung suite: %+v", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the hung suite and its child took %v to kill", d)
	}
}
