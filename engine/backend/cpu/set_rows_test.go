package cpu

import (
	"slices"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetRows writes exactly the indexed rows, bit for bit, and leaves every other row alone.
func TestSetRowsWritesOnlyTheIndexedRows(t *testing.T) {
	b := New()
	for _, dt := range []tensor.DType{tensor.F16, tensor.F32} {
		dstT, srcT := tensor.New(dt, 6, 2, 3), tensor.New(dt, 2, 6)
		for i := 0; i < dstT.Len(); i++ {
			setElem(dstT, i, float32(i))
		}
		for i := 0; i < srcT.Len(); i++ {
			setElem(srcT, i, -float32(i)-0.5)
		}
		dst, _ := b.Upload(dstT)
		src, _ := b.Upload(srcT)
		if err := b.SetRows(dst, src, ints(t, 5, 1)); err != nil {
			t.Fatal(err)
		}
		got, _ := b.Download(dst)
		want := dstT.Float32()
		copy(want[5*6:], srcT.Float32()[:6])
		copy(want[1*6:], srcT.Float32()[6:])
		if !slices.Equal(got.Float32(), want) {
			t.Errorf("%s: dst = %v, want %v", dt, got.Float32(), want)
		}
		// A bad index anywhere refuses the whole call: no row is written, not even the good one.
		if err := b.SetRows(dst, src, ints(t, 0, 6)); err == nil {
			t.Errorf("%s: row 6 of 6 accepted", dt)
		}
		after, _ := b.Download(dst)
		if !slices.Equal(after.Float32(), want) {
			t.Errorf("%s: a refused call wrote dst: %v", dt, after.Float32())
		}
	}
}

func setElem(t *tensor.Tensor, i int, v float32) {
	if t.DType == tensor.F16 {
		t.F16[i] = f16(v)
	} else {
		t.F32[i] = v
	}
}
