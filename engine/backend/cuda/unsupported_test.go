package cuda

import (
	"errors"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// TS_ERR_UNSUPPORTED is the one unsupported sentinel, backend.ErrUnsupported, so a call the
// library refuses gets the unsupported verdict (not an error, not an argument error) with
// the library's message naming op, argument and value, and leaves the backend usable.
func TestUnsupportedIsTheBackendSentinel(t *testing.T) {
	b := openFake(t)
	f16 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F16, shape...) }
	out, q, k, v := f16(1, 4, 2, 100), f16(1, 4, 2, 100), f16(1, 4, 2, 100), f16(1, 4, 2, 100)
	cfg := backend.AttentionConfig{NumHeads: 2, NumKVHeads: 2, HeadDim: 100, Causal: true, Scale: 0.1}
	const msg = "attention_prefill: cfg->head_dim = 100: this build supports multiples of 8 up to 256"
	t.Setenv("FAKETS_FAIL", "ts_attention_prefill:-3:"+msg)
	err := b.AttentionPrefill(out, q, k, v, cfg)
	if !errors.Is(err, backend.ErrUnsupported) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want backend.ErrUnsupported (and cuda.ErrUnsupported, its alias)", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Status != statusUnsupported || se.Name != "TS_ERR_UNSUPPORTED" {
		t.Errorf("err = %#v, want a TS_ERR_UNSUPPORTED StatusError", err)
	}
	if want := msg + " [TS_ERR_UNSUPPORTED]"; err.Error() != want {
		t.Errorf("message %q, want the library's %q", err, want)
	}
	var ae *backend.ArgError
	if errors.Is(err, backend.ErrInvalidArgument) || errors.As(err, &ae) || errors.Is(err, ErrCUDA) || errors.Is(err, ErrPoisoned) {
		t.Errorf("an unsupported call reads as another error: %v", err)
	}
	// The verdict: skipped by default, a failure under the fail switch (the op is claimed).
	if !b.Supports("attention_prefill") || !conformance.SkipUnsupported.Skips(err) || conformance.FailUnsupported.Skips(err) {
		t.Errorf("policy: skip %v, fail %v; want the case skipped by default and failed under fail",
			conformance.SkipUnsupported.Skips(err), conformance.FailUnsupported.Skips(err))
	}
	t.Setenv("FAKETS_FAIL", "")
	if err := b.AttentionPrefill(out, q, k, v, cfg); err != nil {
		t.Errorf("after an unsupported call: %v", err)
	}
}
