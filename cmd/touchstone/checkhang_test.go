package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cuda/cudatest"
)

// hangChild marks a re-executed test binary of TestCheckHangContinuesInANewProcess: a hang
// poisons the CUDA backend for the whole process, so each check runs in a child.
const hangChild = "TOUCHSTONE_CHECK_HANG_CHILD"

// A case whose download never returns (the fake library: the backend's watchdog gives up on
// it), or whose launch never returns (the monitor reports it from its own goroutine), is
// listed as HANG, and check hands the rest to a new process with the next case and the
// counts; that process runs the cases after it and sums up all of them. (exec is replaced by
// a second child: a test binary cannot exec itself into check.)
func TestCheckHangContinuesInANewProcess(t *testing.T) {
	if mode := os.Getenv(hangChild); mode != "" {
		reexec = func(_, r string) error { fmt.Printf("RESUME=%s\n", r); return errors.New("a test does not exec") }
		// straight to stdout: a launch that never returns ends this process from the handler
		code := run([]string{"check", "-golden", os.Getenv("CHECK_ROOT"), "-op", "residual_add"}, os.Stdout, os.Stdout)
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
	for _, tc := range []struct{ hang, says string }{
		{"ts_copy_to_host:2", "did not return within 6s"},
		{"ts_residual_add:2", "HANG: ts_residual_add: the call did not return within"},
	} {
		t.Run(tc.hang, func(t *testing.T) {
			once := filepath.Join(t.TempDir(), "hung")
			child := func(extra ...string) string {
				return runHangChild("TestCheckHangContinuesInANewProcess", tc.hang, once, append([]string{hangChild + "=1",
					"CHECK_ROOT=" + root, "TOUCHSTONE_BACKEND=cuda", "TOUCHSTONE_CUDA_LIB=" + fake}, extra...)...)
			}
			first := child()
			m := regexp.MustCompile(`RESUME=(\S+)`).FindStringSubmatch(first)
			if m == nil || !strings.Contains(first, "HANG\n") || !strings.Contains(first, tc.says) {
				t.Fatalf("the first process:\n%s", first)
			}
			// the hang is the second case: the first passed, the second is the failure carried
			if m[1] != "2:1:1:0:0:0" {
				t.Errorf("resume point %q, want 2:1:1:0:0:0\n%s", m[1], first)
			}
			second := child(envCheckResume + "=" + m[1])
			if !strings.Contains(second, "CODE=1") || !strings.Contains(second, "2 passed, 1 failed, 0 unsupported, 0 inconclusive") ||
				strings.Count(second, "residual_add  ") != 1 {
				t.Errorf("the second process (one case left, the counts summed):\n%s", second)
			}
		})
	}
}

// runHangChild runs the test binary's test in a child process with the fake library's hang
// (FAKETS_HANG, only while the file once does not exist), a 1 s deadline, no guards and env,
// and returns its output.
func runHangChild(test, hang, once string, env ...string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TOUCHSTONE_DEADLINE=1", "TOUCHSTONE_GUARDS=0", "FAKETS_HANG="+hang, "FAKETS_HANG_ONCE="+once)
	cmd.Env = append(cmd.Env, env...)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// residualAddRoot is a golden root holding the tolerances and the named residual_add cases.
func residualAddRoot(t *testing.T, cases ...string) string {
	t.Helper()
	src := filepath.Join("..", "..", "golden")
	root := t.TempDir()
	copyFile(t, filepath.Join(src, "tolerances.yaml"), filepath.Join(root, "tolerances.yaml"))
	for _, c := range cases {
		entries, err := os.ReadDir(filepath.Join(src, "kernels", "residual_add", c))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			copyFile(t, filepath.Join(src, "kernels", "residual_add", c, e.Name()), filepath.Join(root, "kernels", "residual_add", c, e.Name()))
		}
	}
	return root
}
