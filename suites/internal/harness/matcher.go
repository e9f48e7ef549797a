package harness

import (
	"fmt"
	"strings"

	"github.com/onsi/gomega/gcustom"
	"github.com/onsi/gomega/types"

	"github.com/touchstone-llm/touchstone/engine/conformance"
)

// verdictReport is the template data of BeWithinTolerance's failure message.
type verdictReport struct{ verdicts []conformance.Verdict }

// Table prints every output's checks: metric, value, limit, budget used, and the worst
// elements with their indices.
func (r *verdictReport) Table() string {
	var b strings.Builder
	for _, v := range r.verdicts {
		status := "within tolerance"
		if !v.Pass() {
			status = "OUT OF TOLERANCE"
		}
		fmt.Fprintf(&b, "output %s (%s): %s, %.1f%% of budget used\n  tolerance: %s\n%s",
			v.Output, v.DType, status, 100*v.Result.MaxBudget(), v.Tolerance.Why, v.Result.Table())
	}
	return b.String()
}

// BeWithinTolerance succeeds when every verdict of a case passes. Its failure message shows
// each metric against its limit, how much of the budget was used and the worst elements.
func BeWithinTolerance() types.GomegaMatcher {
	data := &verdictReport{}
	return gcustom.MakeMatcher(func(verdicts []conformance.Verdict) (bool, error) {
		if len(verdicts) == 0 {
			return false, fmt.Errorf("no outputs were compared")
		}
		data.verdicts = verdicts
		for _, v := range verdicts {
			if !v.Pass() {
				return false, nil
			}
		}
		return true, nil
	}).WithTemplate("Expected the outputs {{.To}} be within tolerance of the reference:\n{{.Data.Table}}", data)
}
