package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	osexec "os/exec"
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

// numpyAdapter is the reference adapter's command, timing on the host's wall clock when timed.
func numpyAdapter(t *testing.T, timed bool) string {
	t.Helper()
	if err := osexec.Command("python3", "-c", "import numpy").Run(); err != nil {
		if os.Getenv("TOUCHSTONE_REQUIRE_ADAPTERS") == "1" {
			t.Fatalf("python3 with numpy is needed for the numpy adapter: %v", err)
		}
		t.Skipf("no python3 with numpy: %v", err)
	}
	cmd := "python3 " + filepath.Join("..", "..", "tools", "adapters", "numpy", "adapter.py")
	if timed {
		cmd = "TOUCHSTONE_NUMPY_ADAPTER_TIMING=wall " + cmd
	}
	return "exec:" + cmd
}

// An external adapter against another, both timing their own ops: every case judged and timed
// per side, named by the adapters' handshake names; an adapter without timing leaves the pair
// untimed and says why; a case the adapter lacks is unsupported on its side.
func TestCompareExternalAdapters(t *testing.T) {
	js := filepath.Join(t.TempDir(), "r.json")
	timed := numpyAdapter(t, true)
	code, out, errOut := compareRun(t, "-baseline", timed, "-candidate", timed, "-op", "rmsnorm", "-warmup", "1", "-repeats", "4", "-json", js)
	if code != abtest.ExitAccepted || !strings.Contains(out, "exec:numpy-reference") || strings.Contains(errOut, "untimed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var r abtest.Report
	data, err := os.ReadFile(js)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil || r.Summary.Cases < 10 {
		t.Fatalf("json report: %v %+v", err, r.Summary)
	}
	for _, o := range r.Outcomes {
		if o.Speed == abtest.SpeedNone || len(o.Baseline.TimesMS) != 4 || len(o.Candidate.TimesMS) != 4 {
			t.Errorf("%s: speed %s, %d and %d times, want 4 a side", o.ID, o.Speed, len(o.Baseline.TimesMS), len(o.Candidate.TimesMS))
		}
	}
	broken := strings.Replace(timed, "exec:", "exec:TOUCHSTONE_NUMPY_ADAPTER_BUG=time-count ", 1)
	code, out, errOut = compareRun(t, "-baseline", broken, "-candidate", timed, "-op", "swiglu", "-warmup", "1", "-repeats", "2")
	if code != abtest.ExitAccepted || !strings.Contains(out, "untimed (timing failed: ") || !strings.Contains(out, "timed 0 launches, 1 asked") {
		t.Fatalf("an adapter that fails its time requests: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = compareRun(t, "-baseline", numpyAdapter(t, false), "-candidate", "cpu", "-op", "rmsnorm", "-op", "gelu")
	if code != abtest.ExitAccepted || !strings.Contains(errOut, "untimed: exec:numpy-reference's adapter does not time its ops") ||
		!strings.Contains(out, "unsupported") {
		t.Fatalf("an untimed adapter against cpu: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestCompareBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-baseline", "cpu"}, "usage: touchstone compare"},
		{[]string{"-baseline", "cpu", "-candidate", "gpu"}, "-candidate gpu: want cpu, cuda, cuda:PATH or exec:COMMAND"},
		{[]string{"-baseline", "exec: ", "-candidate", "cpu"}, "-baseline exec: : want cpu, cuda, cuda:PATH or exec:COMMAND"},
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

// bench over a timing adapter times the bench cases of its ops with the adapter's own timer,
// reports them against the adapter's copy bandwidth, and lists the cases it lacks as
// unsupported, not failed.
func TestBenchOverATimingAdapter(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", numpyAdapter(t, true))
	t.Setenv("TOUCHSTONE_REQUIRE_GPU", "")
	code, out, errs := runCLI("bench", "-op", "swiglu", "-op", "gemm", "-torch=false", "-warmup", "1", "-repeats", "2")
	if code != 0 || !strings.Contains(out, "external adapter numpy-reference") || !strings.Contains(out, "on cpu (wall clock)") ||
		!strings.Contains(out, "swiglu 4096x4096") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "unsupported, not timed") || !strings.Contains(errs, "gemm") {
		t.Errorf("the adapter's missing gemm should be listed as unsupported: %q", errs)
	}
}

// A case the adapter fails is reported and the others are still timed; the run fails.
func TestBenchKeepsTimingAfterAFailedCase(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", strings.Replace(numpyAdapter(t, true), "exec:", "exec:TOUCHSTONE_NUMPY_ADAPTER_BUG=time-count ", 1))
	t.Setenv("TOUCHSTONE_REQUIRE_GPU", "")
	code, out, errs := runCLI("bench", "-op", "residual_add", "-torch=false", "-warmup", "1", "-repeats", "2")
	if code != 1 || !strings.Contains(errs, "FAILED, not timed: bench residual_add 4096x4096") || !strings.Contains(errs, "timed 1 launches, 2 asked") ||
		!strings.Contains(errs, "1 bench cases failed") || !strings.Contains(out, "MEDIAN MS") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}
