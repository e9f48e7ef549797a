package cuda

import (
	"strings"
	"testing"
)

// SetBatchInvariant and BatchInvariant reach the library and round-trip the mode.
func TestBatchInvariantModeThroughTheLibrary(t *testing.T) {
	b := openFake(t)
	for _, on := range []bool{true, false} {
		if err := b.SetBatchInvariant(on); err != nil {
			t.Fatal(err)
		}
		got, err := b.BatchInvariant()
		if err != nil {
			t.Fatal(err)
		}
		if got != on {
			t.Errorf("SetBatchInvariant(%v), then BatchInvariant() = %v", on, got)
		}
	}
	var sawOn, sawOff bool
	for _, c := range calls(t) {
		sawOn = sawOn || c == "ts_set_batch_invariant on=1"
		sawOff = sawOff || c == "ts_set_batch_invariant on=0"
	}
	if !sawOn || !sawOff {
		t.Errorf("calls: %v", calls(t))
	}
}

// SetGemvRows and GemvRows reach the library, round-trip the limit, and a value the library
// refuses comes back as an error naming the call.
func TestGemvRowsThroughTheLibrary(t *testing.T) {
	b := openFake(t)
	for _, n := range []int{0, 2, 4} {
		if err := b.SetGemvRows(n); err != nil {
			t.Fatal(err)
		}
		got, err := b.GemvRows()
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("SetGemvRows(%d), then GemvRows() = %d", n, got)
		}
	}
	if err := b.SetGemvRows(5); err == nil || !strings.Contains(err.Error(), "ts_set_gemv_rows") {
		t.Errorf("SetGemvRows(5) = %v, want the library's refusal", err)
	}
	var sawTwo bool
	for _, c := range calls(t) {
		sawTwo = sawTwo || c == "ts_set_gemv_rows max_rows=2"
	}
	if !sawTwo {
		t.Errorf("calls: %v", calls(t))
	}
}
