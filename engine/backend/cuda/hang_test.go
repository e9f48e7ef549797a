package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// A wait past its deadline (TS_ERR_TIMEOUT) is a hang: reported once as an error wrapping
// ErrHang (and ErrPoisoned) that says HANG and carries the library's message naming the op
// and kernel; every later call fails at once without entering the library. The latch is per
// process, so the test runs in a child process.
func TestHangPoisons(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		needFakes(t)
		runChild(t, "TestHangPoisons", "hang")
		return
	}
	defer t.Log("child ran: hang")

	b := openFake(t)
	if err := b.SetDeadline(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Deadline(); err != nil || d != 3*time.Second {
		t.Fatalf("deadline %v, %v; want 3s", d, err)
	}
	if err := b.SetDeadline(0); err == nil || !strings.Contains(err.Error(), "ts_set_deadline: seconds = 0") {
		t.Errorf("a zero deadline: %v", err)
	}
	x := upload(t, b, halfs([]int{2, 4}, 1))
	if err := b.DebugHang(); err != nil {
		t.Fatal(err)
	}
	const msg = "ts_synchronize: the stream's work did not finish within the deadline of 3 s (waited 3.0 s; " +
		"ts_set_deadline, TOUCHSTONE_DEADLINE): a kernel hung; launched since the last completed wait: " +
		"debug_hang (debug_hang_kernel); the CUDA context stays busy with it: restart the process"
	t.Setenv("FAKETS_FAIL", "ts_synchronize:-10:"+msg)
	first := b.Synchronize()
	if !errors.Is(first, ErrHang) || !errors.Is(first, ErrPoisoned) {
		t.Fatalf("the hang: %v, want ErrHang and ErrPoisoned", first)
	}
	if got := first.Error(); !strings.HasPrefix(got, "HANG: synchronize: ") || !strings.Contains(got, "debug_hang_kernel") {
		t.Errorf("the hang's message: %s", got)
	}
	t.Setenv("FAKETS_FAIL", "")
	n := len(calls(t))
	if _, err := b.Download(x); !errors.Is(err, ErrHang) || !strings.Contains(err.Error(), "not run") {
		t.Errorf("a download after the hang: %v", err)
	}
	if err := b.GELU(x, x); !errors.Is(err, ErrHang) {
		t.Errorf("an op after the hang: %v", err)
	}
	if _, err := b.Alloc(tensor.F16, 4); !errors.Is(err, ErrHang) {
		t.Errorf("an alloc after the hang: %v", err)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("calls after the hang reached the library: %q", c)
	}
}

// A library call that never returns (FAKETS_HANG: a library without deadlines, a hang inside
// a driver call) is a hang too: the backend stops waiting at the library's deadline plus a
// grace, reports HANG naming the call and the last op launched, and refuses every later call.
func TestNeverReturningCallIsAHang(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		needFakes(t)
		runChild(t, "TestNeverReturningCallIsAHang", "never-returns")
		return
	}
	defer t.Log("child ran: never-returns")

	b := openFake(t)
	watchdogGrace = 200 * time.Millisecond
	if err := b.SetDeadline(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	x := upload(t, b, halfs([]int{2, 4}, 1))
	if err := b.GELU(x, x); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKETS_HANG", "ts_copy_to_host")
	t0 := time.Now()
	_, err := b.Download(x)
	waited := time.Since(t0)
	if !errors.Is(err, ErrHang) || !errors.Is(err, ErrPoisoned) {
		t.Fatalf("a download that never returns: %v, want ErrHang", err)
	}
	if waited < 500*time.Millisecond || waited > 3*time.Second {
		t.Errorf("gave up after %v, want the deadline plus the grace (500ms)", waited)
	}
	for _, want := range []string{"HANG: download: ", "did not return within 500ms", "last op launched: gelu"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	t.Setenv("FAKETS_HANG", "")
	n := len(calls(t))
	if err := b.Synchronize(); !errors.Is(err, ErrHang) {
		t.Errorf("synchronize after the hang: %v", err)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("calls after the hang reached the library: %q", c)
	}
}

// A call with no wait of its own that never returns (a launch blocked behind a hung kernel)
// cannot be abandoned by its caller: the monitor finds it in flight past the deadline plus
// two graces, latches a hang naming the ABI function, and hands it to the stuck handler,
// once; every later call is refused. The blocked goroutine stays blocked.
func TestBlockedLaunchIsStuck(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		needFakes(t)
		runChild(t, "TestBlockedLaunchIsStuck", "stuck")
		return
	}
	defer t.Log("child ran: stuck")

	b := openFake(t)
	watchdogGrace, stuckPoll = 200*time.Millisecond, 50*time.Millisecond
	if err := b.SetDeadline(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	OnStuck(func(err error) { got <- err })
	x := upload(t, b, halfs([]int{2, 4}, 1))
	// calls that return are never reported
	if err := b.ResidualAdd(x, x, x); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKETS_HANG", "ts_residual_add")
	t0 := time.Now()
	go b.ResidualAdd(x, x, x)
	var err error
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no stuck report within 10 s")
	}
	waited := time.Since(t0)
	if !errors.Is(err, ErrHang) || !errors.Is(err, backend.ErrHang) {
		t.Fatalf("stuck: %v, want ErrHang", err)
	}
	if waited < 700*time.Millisecond || waited > 3*time.Second {
		t.Errorf("reported after %v, want the deadline plus two graces (700ms) and a poll", waited)
	}
	for _, want := range []string{"HANG: ts_residual_add: the call did not return within", "blocked inside the CUDA library"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	t.Setenv("FAKETS_HANG", "")
	if err := b.Synchronize(); !errors.Is(err, ErrHang) {
		t.Errorf("synchronize after the stuck call: %v", err)
	}
	select {
	case err := <-got:
		t.Errorf("a second report: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}
