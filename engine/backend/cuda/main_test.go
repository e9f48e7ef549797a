package cuda

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda/cudatest"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The fake libraries of testdata/fakets.c, built once per test process. A library stays
// loaded until the process exits, so it cannot live in one test's t.TempDir(): the next
// test to open the backend resolves the same path again.
var fakes struct {
	lib        string // the fake every backend test loads
	badVersion string // reports ts_abi_version() = 99
	noRMSNorm  string // lacks ts_rmsnorm
	skip       string // why the fakes could not be built
}

// childEnv marks a re-executed test binary (see runChild) and names what it must do.
const childEnv = "TOUCHSTONE_CUDA_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		fakes.lib = os.Getenv(EnvLib) // built by the parent
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "touchstone-fakets-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildFakes(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildFakes(dir string) {
	build := func(name string, defines ...string) string {
		out, err := cudatest.BuildFake(filepath.Join(dir, name), defines...)
		if errors.Is(err, cudatest.ErrNoCompiler) {
			fakes.skip = err.Error()
			return ""
		}
		if err != nil {
			// A fake that does not build is a broken test, not a reason to skip.
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return out
	}
	fakes.lib = build("fake")
	fakes.badVersion = build("badversion", "-DFAKE_ABI_VERSION=99")
	fakes.noRMSNorm = build("normsnorm", "-DFAKE_OMIT_RMSNORM")
}

func needFakes(t *testing.T) {
	t.Helper()
	if fakes.skip != "" {
		t.Skip(fakes.skip)
	}
}

// fakeEnv points the backend at the fake with every switch off, and gives the test its own
// call log.
func fakeEnv(t *testing.T) {
	t.Helper()
	needFakes(t)
	t.Setenv(EnvLib, fakes.lib)
	t.Setenv(EnvGuards, "")
	t.Setenv("FAKETS_LOG", filepath.Join(t.TempDir(), "calls.log"))
	for _, k := range []string{"FAKETS_FAIL", "FAKETS_LATCH", "FAKETS_OOB", "FAKETS_DEVICES", "FAKETS_PATHS"} {
		t.Setenv(k, "")
	}
}

// openFake opens the backend on the fake through the registry, as a suite would, and fails
// the test if it leaks a buffer.
func openFake(t *testing.T) *Backend {
	t.Helper()
	fakeEnv(t)
	bb, err := backend.Open("cuda", backend.Options{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*Backend)
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, ErrPoisoned) {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// calls returns the fake's call log: one line per call into the library.
func calls(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(os.Getenv("FAKETS_LOG"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	for s := bufio.NewScanner(f); s.Scan(); {
		lines = append(lines, s.Text())
	}
	return lines
}

// callsSince returns the calls logged after the first n.
func callsSince(t *testing.T, n int) []string {
	t.Helper()
	return calls(t)[n:]
}

func halfs(shape []int, vals ...float32) *tensor.Tensor {
	t := tensor.New(tensor.F16, shape...)
	for i := range t.F16 {
		if len(vals) > 0 {
			t.F16[i] = float16.Fromfloat32(vals[i%len(vals)])
		}
	}
	return t
}

func upload(t *testing.T, b *Backend, h *tensor.Tensor) backend.Buffer {
	t.Helper()
	d, err := b.Upload(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Free)
	return d
}

func alloc(t *testing.T, b *Backend, dt tensor.DType, shape ...int) backend.Buffer {
	t.Helper()
	d, err := b.Alloc(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Free)
	return d
}

// runChild re-runs test in a fresh process with childEnv=mode: the poison latch and the
// loaded library are per process, so a test that poisons the context cannot share one.
func runChild(t *testing.T, test, mode string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, EnvLib+"="+fakes.lib)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child ran: "+mode) {
		t.Fatalf("child %s (%s): %v\n%s", test, mode, err, out)
	}
}
