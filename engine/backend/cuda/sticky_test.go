package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// A fault that corrupts the context is reported once, by the op that met it; every later
// call fails at once with ErrPoisoned without entering the library. The latch is per
// process, so each mode runs in a child process.
func TestStickyFault(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		needFakes(t)
		for _, m := range []string{"sticky", "cuda-then-sticky", "at-download"} {
			t.Run(m, func(t *testing.T) { runChild(t, "TestStickyFault", m) })
		}
		return
	}
	defer t.Log("child ran: " + mode)

	b := openFake(t)
	x := upload(t, b, halfs([]int{2, 4}, 1))
	out := alloc(t, b, tensor.F16, 2, 4)
	const msg = "gelu: an illegal memory access was encountered (cudaErrorIllegalAddress) at gelu.cu:41"

	var first error
	switch mode {
	case "sticky":
		t.Setenv("FAKETS_FAIL", "ts_gelu:-6:"+msg)
		first = b.GELU(out, x)
	case "cuda-then-sticky": // the op sees a CUDA error, the probe finds it sticky
		t.Setenv("FAKETS_LATCH", "1")
		t.Setenv("FAKETS_FAIL", "ts_gelu:-5:"+msg)
		first = b.GELU(out, x)
	case "at-download": // the kernel faults asynchronously; the download finds it
		if err := b.GELU(out, x); err != nil {
			t.Fatal(err)
		}
		t.Setenv("FAKETS_FAIL", "ts_copy_to_host:-6:"+msg)
		_, first = b.Download(out)
	}
	wantFirst := "the GPU context is corrupted by gelu: an illegal memory access was encountered (cudaErrorIllegalAddress) at gelu.cu:41"
	if mode == "at-download" {
		wantFirst = "the GPU context is corrupted by download: " + msg + " (last op launched: gelu)"
	}
	if !errors.Is(first, ErrPoisoned) || first.Error() != wantFirst {
		t.Fatalf("first error:\n got  %v\n want %s", first, wantFirst)
	}
	var pe *PoisonedError
	if errors.As(first, &pe) {
		t.Errorf("the first report is itself a PoisonedError: %v", first)
	}

	t.Setenv("FAKETS_FAIL", "") // the library would now answer; the backend must not ask
	n := len(calls(t))
	later := map[string]func() error{
		"gelu":         func() error { return b.GELU(out, x) },
		"residual_add": func() error { return b.ResidualAdd(out, x, x) },
		"download":     func() error { _, err := b.Download(x); return err },
		"alloc":        func() error { _, err := b.Alloc(tensor.F16, 4); return err },
		"upload":       func() error { _, err := b.Upload(halfs([]int{1})); return err },
		"synchronize":  b.Synchronize,
		"memory":       func() error { _, err := b.MemoryInUse(); return err },
		"timer":        func() error { _, err := b.NewTimer(); return err },
		"open":         func() error { _, err := backend.Open("cuda", backend.Options{Device: -1}); return err },
	}
	for name, call := range later {
		err := call()
		if !errors.Is(err, ErrPoisoned) || !errors.As(err, &pe) {
			t.Errorf("%s after the fault: %v, want a PoisonedError", name, err)
			continue
		}
		if pe.First.Error() != wantFirst || !strings.Contains(err.Error(), wantFirst) || errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("%s after the fault: %v does not carry the first error", name, err)
		}
	}
	x.Free()
	out.Free()
	if b.LiveBuffers() != 0 {
		t.Errorf("%d live buffers after Free on a corrupted context", b.LiveBuffers())
	}
	if err := b.Close(); !errors.Is(err, ErrPoisoned) {
		t.Errorf("close: %v", err)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("calls after the fault reached the library: %q", c)
	}
}
