package exec_test

import (
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/exec"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// EnvRequireAdapters makes a missing python3 or numpy a failure instead of a skip (CI sets it).
const EnvRequireAdapters = "TOUCHSTONE_REQUIRE_ADAPTERS"

// The ops of tools/adapters/numpy/adapter.py.
var numpyOps = []string{"residual_add", "rmsnorm", "rope", "swiglu", "softmax"} // and sample (sample_test.go)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// adapter is the numpy reference adapter's command with bug planted ("" for none).
func adapter(t *testing.T, bug string) string {
	t.Helper()
	if err := osexec.Command("python3", "-c", "import numpy").Run(); err != nil {
		if os.Getenv(EnvRequireAdapters) == "1" {
			t.Fatalf("python3 with numpy is needed for the numpy adapter (%s=1): %v", EnvRequireAdapters, err)
		}
		t.Skipf("no python3 with numpy (%v): the external backend's tests need it", err)
	}
	script := filepath.Join(repoRoot(t), "tools", "adapters", "numpy", "adapter.py")
	return fmt.Sprintf("TOUCHSTONE_NUMPY_ADAPTER_BUG=%s exec python3 %s", bug, script)
}

func open(t *testing.T, bug string, timeout time.Duration) *exec.Backend {
	t.Helper()
	b, err := exec.Open(adapter(t, bug), exec.Config{Timeout: timeout, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

func committed(t *testing.T, op string) []*golden.Set {
	t.Helper()
	all, err := golden.Discover(filepath.Join(repoRoot(t), "golden"))
	if err != nil {
		t.Fatal(err)
	}
	var sets []*golden.Set
	for _, s := range all {
		if s.Manifest.Kind == golden.KindKernel && s.Manifest.Op == op && s.Manifest.Tier == "committed" {
			sets = append(sets, s)
		}
	}
	if len(sets) == 0 {
		t.Fatalf("no committed sets of %s", op)
	}
	return sets
}

func tolerances(t *testing.T) *compare.Tolerances {
	t.Helper()
	tols, err := compare.LoadTolerances(filepath.Join(repoRoot(t), "golden", "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tols
}

// Every committed case of the adapter's ops passes through the protocol, judged by the same
// tolerances as the library's kernels.
func TestNumpyAdapterPassesItsOps(t *testing.T) {
	b := open(t, "", 60*time.Second)
	tols := tolerances(t)
	n := 0
	for _, op := range numpyOps {
		if !b.Supports(op) {
			t.Fatalf("the handshake does not list %s", op)
		}
		for _, s := range committed(t, op) {
			verdicts, err := conformance.Check(b, s, tols)
			if errors.Is(err, backend.ErrUnsupported) {
				continue // an fp8 or f32 storage case the adapter refuses by name
			}
			if err != nil {
				t.Fatalf("%s: %v", s.ID(), err)
			}
			for _, v := range verdicts {
				if !v.Pass() {
					t.Errorf("%s output %s:\n%s", s.ID(), v.Output, v.Result.Table())
				}
			}
			n++
		}
	}
	if n < 40 || b.Restarts() != 0 {
		t.Errorf("%d cases judged, %d restarts: want every committed case of the five ops, one adapter", n, b.Restarts())
	}
}

// A RoPE that rotates adjacent pairs (GPT-J's) instead of halves is rejected.
func TestInterleavedRoPEIsRejected(t *testing.T) {
	b := open(t, "rope-interleaved", 60*time.Second)
	tols := tolerances(t)
	sets := committed(t, "rope")
	failed := 0
	for _, s := range sets {
		verdicts, err := conformance.Check(b, s, tols)
		if err != nil {
			t.Fatalf("%s: %v", s.ID(), err)
		}
		for _, v := range verdicts {
			if !v.Pass() {
				failed++
				break
			}
		}
	}
	if failed != len(sets) {
		t.Errorf("%d of %d rope cases rejected the interleaved pairing, want all", failed, len(sets))
	}
}

// runRoPE runs the first committed rope case and returns its error.
func runRoPE(t *testing.T, b *exec.Backend) error {
	_, err := conformance.Check(b, committed(t, "rope")[0], tolerances(t))
	return err
}

func TestDyingAdapterIsAnErrorAndRestarts(t *testing.T) {
	b := open(t, "die", 60*time.Second)
	for i := 0; i < 2; i++ {
		err := runRoPE(t, b)
		if !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), "rope") || !strings.Contains(err.Error(), "exit status 3") ||
			!strings.Contains(err.Error(), "planted death") {
			t.Fatalf("call %d: err = %v, want the adapter's death naming rope, its exit status and stderr", i, err)
		}
	}
	if b.Restarts() != 1 {
		t.Errorf("restarts = %d, want 1: the second call starts a fresh adapter", b.Restarts())
	}
}

func TestHangingAdapterMeetsItsDeadline(t *testing.T) {
	b := open(t, "hang", 2*time.Second)
	start := time.Now()
	err := runRoPE(t, b)
	if !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), "no answer within 2s") {
		t.Fatalf("err = %v, want the missed deadline", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the hang took %v to report", d)
	}
}

func TestWrongShapeIsAnError(t *testing.T) {
	b := open(t, "wrong-shape", 60*time.Second)
	err := runRoPE(t, b)
	if !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), "wrote output q_out as f16[") {
		t.Fatalf("err = %v, want the output's wrong shape", err)
	}
}

func TestGarbageAnswerIsAnError(t *testing.T) {
	b := open(t, "garbage", 60*time.Second)
	if err := runRoPE(t, b); !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), "not a protocol message") {
		t.Fatalf("err = %v, want the broken protocol", err)
	}
}

func TestOtherProtocolIsRefused(t *testing.T) {
	_, err := exec.Open(adapter(t, "protocol2"), exec.Config{Timeout: 30 * time.Second, Dir: t.TempDir()})
	if !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), "speaks protocol 2; this build speaks 1") {
		t.Fatalf("err = %v, want the protocol mismatch", err)
	}
}

// Ops the adapter does not list, and the Kernels methods, are unsupported by name.
func TestUnlistedOpsAndMethodsAreUnsupported(t *testing.T) {
	b := open(t, "", 60*time.Second)
	if b.Supports("gemm") {
		t.Error("Supports(gemm) = true")
	}
	if _, err := conformance.Check(b, committed(t, "gemm")[0], tolerances(t)); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("gemm: err = %v, want unsupported", err)
	}
	x, _ := b.Alloc(tensor.F16, 2, 8)
	defer x.Free()
	if err := b.RMSNorm(x, x, x, 1e-6); !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "RMSNorm") {
		t.Errorf("RMSNorm method: err = %v, want unsupported naming it", err)
	}
}

// TOUCHSTONE_BACKEND=exec:<command> selects the external backend.
func TestSelectOpensTheAdapter(t *testing.T) {
	cmd := adapter(t, "")
	env := map[string]string{backend.EnvBackend: backend.ExecPrefix + cmd, exec.EnvDir: t.TempDir()}
	sel, err := backend.Select(func(k string) string { return env[k] }, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Backend.Close()
	if info := sel.Backend.Info(); info.Backend != "exec" || !strings.HasPrefix(info.Name, "numpy-reference ") {
		t.Errorf("info = %+v", info)
	}
	env[backend.EnvBackend] = "exec:  "
	if _, err := backend.Select(func(k string) string { return env[k] }, 0); err == nil || !strings.Contains(err.Error(), "want exec:<command>") {
		t.Errorf("an empty command: err = %v", err)
	}
}
