package conformance

import (
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// DistinctPerRow's rows hold k distinct values below n, and not the same k every row.
func TestDistinctPerRowDrawsDistinctExperts(t *testing.T) {
	const rows, n, k = 64, 128, 8
	ts := RandomInputs(7, []InputSpec{Spec("ids", tensor.I32, []int{rows, k}, DistinctPerRow(n, k))})
	ids := ts["ids"].I32
	firsts := map[int32]bool{}
	for r := 0; r < rows; r++ {
		seen := map[int32]bool{}
		for _, v := range ids[r*k : (r+1)*k] {
			if v < 0 || v >= n || seen[v] {
				t.Fatalf("row %d: %v: want %d distinct values in [0, %d)", r, ids[r*k:(r+1)*k], k, n)
			}
			seen[v] = true
		}
		firsts[ids[r*k]] = true
	}
	if len(firsts) < 16 {
		t.Errorf("the first expert of %d rows takes only %d values: the draw is not uniform", rows, len(firsts))
	}
}
