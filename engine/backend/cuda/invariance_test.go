package cuda

import "testing"

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
