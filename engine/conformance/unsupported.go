package conformance

import (
	"errors"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// EnvUnsupported names the variable that sets the suites' UnsupportedPolicy, and the
// default of touchstone check -unsupported: "skip" (or unset) or "fail". dist/run sets it to
// fail unless it is already set.
const EnvUnsupported = "TOUCHSTONE_UNSUPPORTED"

// UnsupportedPolicy says what a case the backend does not implement (an error wrapping
// backend.ErrUnsupported) counts as. There is one rule for every caller, kernel, model and
// sampling alike, after ggml's test-backend-ops: unsupported is its own verdict, neither a
// pass nor a failure, and it is always counted and shown with its reason.
type UnsupportedPolicy int

const (
	// SkipUnsupported, the default: an unsupported case is skipped and listed as such.
	SkipUnsupported UnsupportedPolicy = iota
	// FailUnsupported: an unsupported call of an op the backend claims (Supports is true)
	// fails, so a GPU runner cannot pass by skipping what the library refuses. An op the
	// backend does not claim (ErrUnsupported) is still skipped: that gap is declared in the
	// backend's code, not discovered at run time.
	FailUnsupported
)

// ParseUnsupportedPolicy reads "skip" or "fail"; "" is the default, skip.
func ParseUnsupportedPolicy(s string) (UnsupportedPolicy, error) {
	switch s {
	case "", "skip":
		return SkipUnsupported, nil
	case "fail":
		return FailUnsupported, nil
	}
	return SkipUnsupported, fmt.Errorf("%q: want skip or fail", s)
}

func (p UnsupportedPolicy) String() string {
	if p == FailUnsupported {
		return "fail"
	}
	return "skip"
}

// Skips reports whether err gets the unsupported verdict under p: the backend does not
// implement the request, and p does not make that a failure. An unsupported err that p
// does not skip is a failure, to be reported as one.
func (p UnsupportedPolicy) Skips(err error) bool {
	if !errors.Is(err, backend.ErrUnsupported) {
		return false
	}
	return p == SkipUnsupported || errors.Is(err, ErrUnsupported)
}
