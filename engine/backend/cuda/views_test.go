package cuda

import (
	"errors"
	"slices"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func TestViewSharesMemoryAndOwnsNothing(t *testing.T) {
	b := openFake(t)
	d := upload(t, b, halfs([]int{2, 6}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
	live := b.LiveBytes()
	v, err := b.View(d, 2, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(v)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, []int{2, 3, 2}) || got.Float32()[11] != 12 {
		t.Errorf("view downloaded as %v %v", got.Shape, got.Float32())
	}
	v.Free()
	if b.LiveBytes() != live {
		t.Errorf("freeing a view changed live bytes from %d to %d", live, b.LiveBytes())
	}
	if _, err := b.Download(d); err != nil {
		t.Errorf("the viewed buffer is unusable after the view was freed: %v", err)
	}
	if _, err := b.View(d, 5, 2); err == nil {
		t.Error("a view with another element count was accepted")
	}
}

func TestWriteRowsCopiesOnTheDevice(t *testing.T) {
	b := openFake(t)
	cache, err := b.Alloc(tensor.F16, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Free()
	row := upload(t, b, halfs([]int{1, 2}, 5, 6))
	if err := b.WriteRows(cache, 4, row); err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(cache)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 0, 0, 0, 5, 6, 0, 0}; !slices.Equal(got.Float32(), want) {
		t.Errorf("cache after WriteRows at 4 = %v, want %v", got.Float32(), want)
	}
	var ae *backend.ArgError
	if err := b.WriteRows(cache, 7, row); !errors.As(err, &ae) || ae.Arg != "off" {
		t.Errorf("a write past the end: %v", err)
	}
	f32 := upload(t, b, tensor.FromF32([]int{2}, []float32{1, 2}))
	if err := b.WriteRows(cache, 0, f32); !errors.As(err, &ae) || ae.Arg != "src" {
		t.Errorf("a write of another dtype: %v", err)
	}
}

func TestRowsAndWrite(t *testing.T) {
	b := openFake(t)
	d := upload(t, b, halfs([]int{3, 2}, 1, 2, 3, 4, 5, 6))
	r, err := b.Rows(d, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, []int{2, 2}) || !slices.Equal(got.Float32(), []float32{3, 4, 5, 6}) {
		t.Errorf("rows 1..2 downloaded as %v %v", got.Shape, got.Float32())
	}
	var ae *backend.ArgError
	if _, err := b.Rows(d, 2, 2); !errors.As(err, &ae) {
		t.Errorf("rows past the end: %v", err)
	}
	// Writing through the row view lands in the parent.
	if err := b.Write(r, halfs([]int{2, 2}, 7, 8, 9, 10)); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Download(d); !slices.Equal(got.Float32(), []float32{1, 2, 7, 8, 9, 10}) {
		t.Errorf("after Write through rows: %v", got.Float32())
	}
	if err := b.Write(d, halfs([]int{2}, 1, 2)); !errors.As(err, &ae) || ae.Op != "write" {
		t.Errorf("a host tensor of the wrong size: %v", err)
	}
	if err := b.Write(d, tensor.FromF32([]int{3, 2}, make([]float32, 6))); !errors.As(err, &ae) {
		t.Errorf("a host tensor of the wrong dtype: %v", err)
	}
}
