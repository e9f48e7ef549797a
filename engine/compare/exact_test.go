package compare

import (
	"math"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// An exact tolerance holds a NaN the reference has in the same place (a quantisation of a NaN
// input); a NaN anywhere else, or under any other tolerance, fails.
func TestExactToleranceMatchesNaNInPlace(t *testing.T) {
	zero := 0.0
	exact := Tolerance{MaxAbs: &zero, Why: "test"}
	nan := float32(math.NaN())
	want := tensor.FromF32([]int{3}, []float32{1, nan, -2})
	r, err := Compare(tensor.FromF32([]int{3}, []float32{1, nan, -2}), want, exact)
	if err != nil || !r.Pass() {
		t.Fatalf("NaN in place under max_abs 0: %v %+v", err, r)
	}
	r, _ = Compare(tensor.FromF32([]int{3}, []float32{nan, 1, -2}), want, exact)
	if r.Pass() {
		t.Error("NaN moved: passed")
	}
	one := 1.0
	r, _ = Compare(tensor.FromF32([]int{3}, []float32{1, nan, -2}), want, Tolerance{MaxAbs: &one, Why: "test"})
	if r.Pass() {
		t.Error("NaN under max_abs 1: passed")
	}
}
