package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func openGuarded(t *testing.T) *Backend {
	t.Helper()
	fakeEnv(t)
	t.Setenv(EnvGuards, "1")
	bb, err := backend.Open("cuda", backend.Options{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*Backend)
	t.Cleanup(func() { _ = b.Close() })
	if !b.GuardsEnabled() {
		t.Fatalf("%s=1 did not enable guards", EnvGuards)
	}
	return b
}

func TestGuardsCatchOutOfBoundsWrites(t *testing.T) {
	b := openGuarded(t)
	f16 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F16, shape...) }
	x, w := f16(4, 896), f16(896)
	for _, tc := range []struct {
		oob, want string
		call      func() error
	}{
		{"ts_rmsnorm:after:3", "rmsnorm wrote out of bounds of out f16[4,896]: guard byte 3 after the end is 0x00, want 0xA5",
			func() error { return b.RMSNorm(f16(4, 896), x, w, 1e-6) }},
		{"ts_rmsnorm:after:0", "rmsnorm wrote out of bounds of out f16[4,896]: guard byte 0 after the end is 0x00, want 0xA5",
			func() error { return b.RMSNorm(f16(4, 896), x, w, 1e-6) }},
		{"ts_gelu:before:0", "gelu wrote out of bounds of out f16[4,896]: guard byte 0 before the start is 0x00, want 0xA5",
			func() error { return b.GELU(f16(4, 896), x) }},
		{"ts_layernorm_residual:after:255:sum", "layernorm_residual wrote out of bounds of sum f16[4,896]: guard byte 255 after the end is 0x00, want 0xA5",
			func() error { return b.LayerNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), w, w, 1e-5) }},
		{"ts_layernorm_residual:before:7", "layernorm_residual wrote out of bounds of out f16[4,896]: guard byte 7 before the start is 0x00, want 0xA5",
			func() error { return b.LayerNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), w, w, 1e-5) }},
		{"ts_rmsnorm_residual:after:0:sum", "rmsnorm_residual wrote out of bounds of sum f16[4,896]: guard byte 0 after the end is 0x00, want 0xA5",
			func() error { return b.RMSNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), w, 1e-6) }},
		{"ts_rmsnorm_residual:after:1", "rmsnorm_residual wrote out of bounds of out f16[4,896]: guard byte 1 after the end is 0x00, want 0xA5",
			func() error { return b.RMSNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), w, 1e-6) }},
	} {
		t.Setenv("FAKETS_OOB", tc.oob)
		err := tc.call()
		if !errors.Is(err, ErrOutOfBounds) || err.Error() != tc.want {
			t.Errorf("%s:\n got  %v\n want %s", tc.oob, err, tc.want)
		}
	}
	// The guards are restored after a report, so the next op is judged on its own writes.
	out := f16(4, 896)
	t.Setenv("FAKETS_OOB", "ts_gelu:after:1")
	if err := b.GELU(out, x); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("FAKETS_OOB", "")
	if err := b.GELU(out, x); err != nil {
		t.Errorf("a clean op after a caught overrun: %v", err)
	}
}

// The same overrun without guards goes unseen: the guards are what catches it.
func TestWithoutGuardsAnOverrunIsUnseen(t *testing.T) {
	b := openFake(t)
	if b.GuardsEnabled() {
		t.Fatal("guards on by default")
	}
	t.Setenv("FAKETS_OOB", "ts_gelu:after:3")
	if err := b.GELU(alloc(t, b, tensor.F16, 4, 896), alloc(t, b, tensor.F16, 4, 896)); err != nil {
		t.Fatal(err)
	}
}

func TestGuardedBuffersAreLaidOutAroundTheData(t *testing.T) {
	b := openGuarded(t)
	n := len(calls(t))
	d := upload(t, b, halfs([]int{3}, 1, 2, 3))
	want := []string{
		"ts_malloc bytes=518", // 6 data bytes between two 256-byte guards
		"ts_memset value=165 bytes=256 stream=0",
		"ts_memset value=165 bytes=256 stream=0",
		"ts_copy_to_device bytes=6 stream=0",
	}
	if got := callsSince(t, n); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("upload made calls %q, want %q", got, want)
	}
	if b.LiveBytes() != 6 {
		t.Errorf("LiveBytes = %d, want the 6 data bytes", b.LiveBytes())
	}
	if got, err := b.Download(d); err != nil || got.Float32()[2] != 3 {
		t.Errorf("download: %v %v", got, err)
	}
}

// Guards drain the stream after every op, so an index fault surfaces at the op itself.
func TestGuardsReportIndexFaultsAtTheOp(t *testing.T) {
	b := openGuarded(t)
	t.Setenv("FAKETS_FAIL", "ts_copy_to_host:-8:embedding: ids[1] = 10: must be in [0, 10) (the rows of table)")
	err := b.Embedding(alloc(t, b, tensor.F16, 2, 8), alloc(t, b, tensor.I32, 2), alloc(t, b, tensor.F16, 10, 8), 1)
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Op != "embedding" || ae.Arg != "ids[1]" {
		t.Errorf("err = %v, want the index fault", err)
	}
}

func TestGuardsSetting(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "true": true} {
		if got, err := guardsFromEnv(func(string) string { return v }); err != nil || got != want {
			t.Errorf("%s=%q: %v, %v", EnvGuards, v, got, err)
		}
	}
	fakeEnv(t)
	t.Setenv(EnvGuards, "on")
	if _, err := backend.Open("cuda", backend.Options{Device: -1}); err == nil || !strings.Contains(err.Error(), EnvGuards) {
		t.Errorf("%s=on: %v", EnvGuards, err)
	}
}

func TestGuardDamage(t *testing.T) {
	fill := func() []byte {
		b := make([]byte, guardBytes)
		for i := range b {
			b[i] = guardPattern
		}
		return b
	}
	before, after := fill(), fill()
	if s := guardDamage(before, after); s != "" {
		t.Errorf("intact guards: %q", s)
	}
	after[9], after[4], before[guardBytes-2] = 1, 2, 3
	if s, want := guardDamage(before, after), "guard byte 4 after the end is 0x02, want 0xA5 (3 guard bytes changed)"; s != want {
		t.Errorf("got %q, want %q", s, want)
	}
}
