package conformance

import "fmt"

// EnvInconclusive names the variable that sets the suites' InconclusivePolicy, and the
// default of touchstone check -inconclusive: "skip" (or unset) or "fail".
const EnvInconclusive = "TOUCHSTONE_INCONCLUSIVE"

// InconclusivePolicy says what a token check that decided too few of its steps counts as
// (model.MinDecisiveShare: at the other steps the reference's top tokens are closer than
// the accepted numerical error, so any of them passes). Like unsupported, inconclusive is a
// verdict of its own, neither pass nor failure, always counted and shown with its tally.
type InconclusivePolicy int

const (
	// SkipInconclusive, the default: the check is skipped and listed as inconclusive.
	SkipInconclusive InconclusivePolicy = iota
	// FailInconclusive: the check fails, for runners that want every token check to decide.
	FailInconclusive
)

// ParseInconclusivePolicy reads "skip" or "fail"; "" is the default, skip.
func ParseInconclusivePolicy(s string) (InconclusivePolicy, error) {
	switch s {
	case "", "skip":
		return SkipInconclusive, nil
	case "fail":
		return FailInconclusive, nil
	}
	return SkipInconclusive, fmt.Errorf("%q: want skip or fail", s)
}

func (p InconclusivePolicy) String() string {
	if p == FailInconclusive {
		return "fail"
	}
	return "skip"
}
