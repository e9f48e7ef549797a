package cpu

import (
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Buffers from Alloc and Upload are counted until their first Free; views own nothing and
// are never counted.
func TestLiveBuffers(t *testing.T) {
	b := New()
	a, err := b.Alloc(tensor.F32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	u, err := b.Upload(tensor.FromI32([]int{4}, []int32{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	v, err := b.View(a, 6)
	if err != nil {
		t.Fatal(err)
	}
	if n, by := b.LiveBuffers(), b.LiveBytes(); n != 2 || by != 6*4+4*4 {
		t.Errorf("after alloc and upload: %d buffers, %d bytes; want 2, 40", n, by)
	}
	v.Free()
	a.Free()
	a.Free()
	if n, by := b.LiveBuffers(), b.LiveBytes(); n != 1 || by != 16 {
		t.Errorf("after freeing a view and twice the alloc: %d buffers, %d bytes; want 1, 16", n, by)
	}
	u.Free()
	if n, by := b.LiveBuffers(), b.LiveBytes(); n != 0 || by != 0 {
		t.Errorf("after freeing everything: %d buffers, %d bytes", n, by)
	}
}
