package model

import (
	"slices"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The packed 4-bit tensors of q, k and v joined along their outputs keep each row's words in
// order: row r of the join is row r of each part, one after another.
func TestConcatColumnsJoinsEachRow(t *testing.T) {
	a := tensor.FromI32([]int{2, 3}, []int32{1, 2, 3, 4, 5, 6})
	b := tensor.FromI32([]int{2, 1}, []int32{7, 8})
	got, err := concatColumns([]*tensor.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 2, 3, 7, 4, 5, 6, 8}; !slices.Equal(got.Shape, []int{2, 4}) || !slices.Equal(got.I32, want) {
		t.Errorf("join %v %v, want [2 4] %v", got.Shape, got.I32, want)
	}
	if _, err := concatColumns([]*tensor.Tensor{a, tensor.FromI32([]int{1, 2}, []int32{0, 0})}); err == nil {
		t.Error("parts of different row counts were joined")
	}
	if _, err := concatColumns([]*tensor.Tensor{a, tensor.New(tensor.F32, 2, 1)}); err == nil {
		t.Error("parts of different dtypes were joined")
	}
}
