package cpu

import (
	"errors"
	"slices"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func TestMemoryOps(t *testing.T) {
	b := New()
	d, err := b.Upload(tensor.FromI32([]int{3, 2}, []int32{1, 2, 3, 4, 5, 6}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Rows(d, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(r, tensor.FromI32([]int{4}, []int32{7, 8, 9, 10})); err != nil {
		t.Fatal(err)
	}
	v, err := b.View(d, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteRows(v, 0, r); err != nil { // an overlapping device copy: rows 1..2 to 0..1
		t.Fatal(err)
	}
	got, _ := b.Download(d)
	if want := []int32{7, 8, 9, 10, 9, 10}; !slices.Equal(got.I32, want) {
		t.Errorf("got %v, want %v", got.I32, want)
	}
	var ae *backend.ArgError
	for name, err := range map[string]error{
		"rows past the end":   func() error { _, err := b.Rows(d, 3, 1); return err }(),
		"view of other size":  func() error { _, err := b.View(d, 5); return err }(),
		"write of other size": b.Write(d, tensor.FromI32([]int{2}, []int32{1, 2})),
		"write_rows past end": b.WriteRows(d, 5, r),
	} {
		if !errors.As(err, &ae) {
			t.Errorf("%s: %v, want an ArgError", name, err)
		}
	}
}
