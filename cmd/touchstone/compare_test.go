package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/abtest"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda/cudatest"
)

// fakeLib builds the fake CUDA library once per test process (it stays loaded until exit).
var fakeLib = func() func(t *testing.T) string {
	var path string
	var err error
	built := false
	return func(t *testing.T) string {
		t.Helper()
		if !built {
			built = true
			dir, derr := os.MkdirTemp("", "touchstone-compare-fake-")
			if derr != nil {
				t.Fatal(derr)
			}
			path, err = cudatest.BuildFake(dir)
		}
		if errors.Is(err, cudatest.ErrNoCompiler) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
}()

func compareRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("TOUCHSTONE_GUARDS", "")
	var out, errOut bytes.Buffer
	code := run(append([]string{"compare", "-golden", filepath.Join("..", "..", "golden")}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCompareAcceptsTheSameBuild(t *testing.T) {
	js := filepath.Join(t.TempDir(), "r.json")
	code, out, errOut := compareRun(t, "-baseline", "cpu", "-candidate", "cpu", "-op", "gelu", "-op", "rope", "-json", js)
	if code != abtest.ExitAccepted || !strings.Contains(out, ": ACCEPTED**") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var r abtest.Report
	data, err := os.ReadFile(js)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil || !r.Summary.Accepted || r.Summary.Cases < 8 || r.Summary.Regressions != 0 {
		t.Fatalf("json report: %v %+v", err, r.Summary)
	}
}

// The fake library's gelu copies x to out: a wrong candidate, rejected with exit status 1;
// its residual_add really adds in fp16: a correct one, accepted.
func TestCompareAgainstAFakeLibrary(t *testing.T) {
	lib := fakeLib(t)
	code, out, errOut := compareRun(t, "-baseline", "cpu", "-candidate", "cuda:"+lib, "-op", "gelu")
	if code != abtest.ExitRegression || !strings.Contains(out, "REJECTED: accuracy regression") || !strings.Contains(out, "**regression**: passed, now fails") {
		t.Fatalf("a wrong gelu: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = compareRun(t, "-baseline", "cpu", "-candidate", "cuda:"+lib, "-op", "residual_add")
	if code != abtest.ExitAccepted {
		t.Fatalf("a correct residual_add: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "untimed") {
		t.Errorf("a cpu baseline cannot be timed, and compare should say so: %q", errOut)
	}
}

// A fused op against its unfused composition on one backend: the fused gemm_swiglu keeps gate
// and up in fp32, so it passes where the composition exceeds the fused op's tighter limits.
func TestCompareFusedAgainstUnfused(t *testing.T) {
	code, out, errOut := compareRun(t, "-baseline", "cpu+unfused", "-candidate", "cpu", "-op", "gemm_swiglu", "-op", "gelu")
	if code != abtest.ExitAccepted || !strings.Contains(out, "unfused`") || strings.Contains(out, "| gelu/") || !strings.Contains(out, "| gemm_swiglu/") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = compareRun(t, "-baseline", "cpu+unfused", "-candidate", "cpu", "-op", "gelu")
	if code != 2 || !strings.Contains(errOut, "no selected op has an unfused composition (fused ops: [") || !strings.Contains(errOut, " gemm_swiglu ") {
		t.Fatalf("exit %d, %s", code, errOut)
	}
}

func TestCompareBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-baseline", "cpu"}, "usage: touchstone compare"},
		{[]string{"-baseline", "cpu", "-candidate", "gpu"}, "-candidate gpu: want cpu, cuda or cuda:PATH"},
		{[]string{"-baseline", "cpu", "-candidate", "cuda:/nonexistent/lib.so"}, "/nonexistent/lib.so"},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-budget-margin", "-1"}, "budget margin = -1"},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-max-slowdown", "0.5"}, "max slowdown = 0.5"},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-op", "conv2d"}, `-op "conv2d": unknown op`},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-tier", "huge"}, `-tier "huge"`},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-kind", "layers"}, `-kind "layers"`},
		{[]string{"-baseline", "cpu", "-candidate", "cpu", "-kind", "models", "-model", "llama-tiny"}, "no committed golden set of kind models matches"},
	} {
		code, _, errOut := compareRun(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
