package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/abtest"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda/cudatest"
)

// compareHangChild marks a re-executed test binary of TestCompareHangContinuesInANewProcess.
const compareHangChild = "TOUCHSTONE_COMPARE_HANG_CHILD"

// A side whose download never returns (the fake library) is a hang: compare writes the cases
// finished, and the partial case when the baseline hung, for a new process, which finishes
// them and judges all. Both orders: the candidate hanging (a regression) and the baseline
// hanging (its candidate measured by the new process: fixed). exec is replaced by a second
// child, as in the check test.
func TestCompareHangContinuesInANewProcess(t *testing.T) {
	if os.Getenv(compareHangChild) != "" {
		reexec = func(name, path string) error {
			data, err := os.ReadFile(path)
			if err == nil {
				err = os.WriteFile(os.Getenv("PROGRESS_COPY"), data, 0o644)
			}
			fmt.Printf("REEXEC=%s err=%v\n", name, err)
			return errors.New("a test does not exec")
		}
		// straight to stdout: a launch that never returns ends this process from the handler
		code := run([]string{"compare", "-golden", os.Getenv("CHECK_ROOT"), "-op", "residual_add",
			"-baseline", os.Getenv("BASE"), "-candidate", os.Getenv("CAND"), "-json", os.Getenv("REPORT")}, os.Stdout, os.Stdout)
		fmt.Printf("CODE=%d\n", code)
		return
	}
	fake, err := cudatest.BuildFake(filepath.Join(t.TempDir(), "fake"))
	if errors.Is(err, cudatest.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := residualAddRoot(t, "batch2x5-h896", "gpt2_t1", "large-mag")
	for _, tc := range []struct {
		name, hang, base, cand string
		next, finished         int
		partial                bool
		code                   int
		accuracy               abtest.Accuracy
	}{
		{"candidate hangs", "ts_copy_to_host:2", "cpu", "cuda:" + fake, 2, 2, false, abtest.ExitRegression, abtest.AccuracyRegressed},
		{"baseline hangs", "ts_copy_to_host:2", "cuda:" + fake, "cpu", 1, 1, true, abtest.ExitAccepted, abtest.AccuracyFixed},
		{"baseline launch never returns", "ts_residual_add:2", "cuda:" + fake, "cpu", 1, 1, true, abtest.ExitAccepted, abtest.AccuracyFixed},
		{"candidate launch never returns", "ts_residual_add:2", "cpu", "cuda:" + fake, 2, 2, false, abtest.ExitRegression, abtest.AccuracyRegressed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			progress, report := filepath.Join(dir, "progress.json"), filepath.Join(dir, "report.json")
			child := func(extra ...string) string {
				return runHangChild("TestCompareHangContinuesInANewProcess", tc.hang, filepath.Join(dir, "hung"), append([]string{
					compareHangChild + "=1", "CHECK_ROOT=" + root, "BASE=" + tc.base, "CAND=" + tc.cand,
					"PROGRESS_COPY=" + progress, "REPORT=" + report}, extra...)...)
			}
			first := child()
			if !regexp.MustCompile(`HANG: the (baseline|candidate)'s check of residual_add/\S+ did not finish; the rest runs in a new process\n    \S.*did not return`).MatchString(first) ||
				!strings.Contains(first, "REEXEC="+envCompareResume+" err=<nil>") {
				t.Fatalf("the first process:\n%s", first)
			}
			data, err := os.ReadFile(progress)
			if err != nil {
				t.Fatal(err)
			}
			var p compareProgress
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			if p.Sets != 3 || p.Next != tc.next || len(p.Cases) != tc.finished || (p.Partial != nil) != tc.partial {
				t.Fatalf("progress %s", data)
			}
			second := child(envCompareResume + "=" + progress)
			if !strings.Contains(second, fmt.Sprintf("CODE=%d", tc.code)) {
				t.Fatalf("the second process, want exit %d:\n%s", tc.code, second)
			}
			if _, err := os.Stat(progress); !os.IsNotExist(err) {
				t.Errorf("the progress file was not removed: %v", err)
			}
			var r abtest.Report
			if data, err = os.ReadFile(report); err == nil {
				err = json.Unmarshal(data, &r)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Outcomes) != 3 {
				t.Fatalf("%d cases judged, want 3:\n%s", len(r.Outcomes), second)
			}
			hangs := 0
			for _, o := range r.Outcomes {
				if o.Baseline.Status == abtest.Hang || o.Candidate.Status == abtest.Hang {
					hangs++
					if o.Accuracy != tc.accuracy || !strings.Contains(o.Why, "hangs (") {
						t.Errorf("%s: %s (%s), want %s", o.ID, o.Accuracy, o.Why, tc.accuracy)
					}
				} else if o.Baseline.Status != abtest.Pass || o.Candidate.Status != abtest.Pass {
					t.Errorf("%s: %s / %s, want both passing", o.ID, o.Baseline.Status, o.Candidate.Status)
				}
			}
			if hangs != 1 {
				t.Errorf("%d hung cases, want 1:\n%s", hangs, second)
			}
		})
	}
}

// A progress file from another selection is refused by name, not misapplied.
func TestCompareProgressMustMatchTheSelection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(path, []byte(`{"sets":5,"next":2,"cases":[]}`), 0o644)
	t.Setenv(envCompareResume, path)
	if _, err := loadCompareProgress(4); err == nil || !strings.Contains(err.Error(), "this run selects 4 sets") {
		t.Fatalf("got %v", err)
	}
	os.WriteFile(path, []byte(`{"sets":4,"next":2,"cases":[]}`), 0o644)
	if p, err := loadCompareProgress(4); err != nil || p.Next != 2 {
		t.Fatalf("got %+v, %v", p, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the progress file was not removed")
	}
}
