package conformance

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

// noRoPE is the CPU backend declaring that it does not implement rope.
type noRoPE struct{ *cpu.Backend }

func (noRoPE) Supports(op string) bool { return op != "rope" }

func TestAnUnclaimedOpIsUnsupported(t *testing.T) {
	_, err := Prepare(noRoPE{cpu.New()}, "rope", Memory{})
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("err = %v, want conformance.ErrUnsupported wrapping backend.ErrUnsupported", err)
	}
	if want := "rope on cpu: op not supported by this backend"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestUnsupportedPolicy(t *testing.T) {
	refused := fmt.Errorf("golden/x: %w", &backend.UnsupportedError{Op: "attention_prefill", Arg: "cfg->head_dim", Value: "100", Reason: "no kernel"})
	unclaimed := fmt.Errorf("golden/x: rope on cpu: %w", ErrUnsupported)
	invalid := fmt.Errorf("golden/x: %w", &backend.ArgError{Op: "rmsnorm", Arg: "eps", Value: "0", Reason: "must be positive"})
	for _, tc := range []struct {
		policy UnsupportedPolicy
		err    error
		skips  bool
	}{
		{SkipUnsupported, refused, true},
		{SkipUnsupported, unclaimed, true},
		{SkipUnsupported, invalid, false},
		{SkipUnsupported, nil, false},
		{FailUnsupported, refused, false}, // a claimed op the backend refuses: a failure
		{FailUnsupported, unclaimed, true},
		{FailUnsupported, invalid, false},
	} {
		if got := tc.policy.Skips(tc.err); got != tc.skips {
			t.Errorf("%s.Skips(%v) = %v, want %v", tc.policy, tc.err, got, tc.skips)
		}
	}
	if want := "golden/x: attention_prefill: unsupported cfg->head_dim = 100: no kernel"; refused.Error() != want {
		t.Errorf("message %q, want %q (op, argument and value)", refused, want)
	}
}

func TestParseUnsupportedPolicy(t *testing.T) {
	for s, want := range map[string]UnsupportedPolicy{"": SkipUnsupported, "skip": SkipUnsupported, "fail": FailUnsupported} {
		if got, err := ParseUnsupportedPolicy(s); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"FAIL", "1", "error", " skip"} {
		if _, err := ParseUnsupportedPolicy(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestParseInconclusivePolicy(t *testing.T) {
	for in, want := range map[string]InconclusivePolicy{"": SkipInconclusive, "skip": SkipInconclusive, "fail": FailInconclusive} {
		if got, err := ParseInconclusivePolicy(in); err != nil || got != want || (in != "" && got.String() != in) {
			t.Errorf("ParseInconclusivePolicy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseInconclusivePolicy("pass"); err == nil || !strings.Contains(err.Error(), `"pass"`) {
		t.Errorf("pass: %v", err)
	}
}
