package backend

import (
	"errors"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// shapeBuf is a Buffer that is only a dtype and a shape, for the shared checks.
type shapeBuf struct {
	dt    tensor.DType
	shape []int
}

func (b shapeBuf) DType() tensor.DType { return b.dt }
func (b shapeBuf) Shape() []int        { return b.shape }
func (b shapeBuf) Free()               {}

// Only GPTQ's g_idx without act-order (g(k) = k / G) may be tiled.
func TestW4GroupsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gIdx  []int32
		group int
		want  bool
	}{
		{"in order", []int32{0, 0, 1, 1, 2, 2}, 2, true},
		{"act-order permutation", []int32{1, 0, 0, 1, 2, 2}, 2, false},
		{"a group too long", []int32{0, 0, 0, 1, 2, 2}, 2, false},
		{"the wrong group size", []int32{0, 0, 1, 1, 2, 2}, 3, false},
		{"no group size", []int32{0, 0}, 0, false},
	} {
		if got := W4GroupsInOrder(tc.gIdx, tc.group); got != tc.want {
			t.Errorf("%s: W4GroupsInOrder(%v, %d) = %v, want %v", tc.name, tc.gIdx, tc.group, got, tc.want)
		}
	}
}

// The tiled GEMM's shared checks name the argument: a tiled buffer of another dtype, an output
// of the wrong shape, a group size that does not divide K.
func TestCheckGemmW4A16TiledRefuses(t *testing.T) {
	x := shapeBuf{dt: tensor.BF16, shape: []int{2, 256}}
	tiled := shapeBuf{dt: tensor.I32, shape: []int{100}}
	for _, tc := range []struct {
		name       string
		out, tiled Buffer
		n, group   int
	}{
		{"tiled not i32", shapeBuf{dt: tensor.BF16, shape: []int{2, 64}}, shapeBuf{dt: tensor.F32, shape: []int{100}}, 64, 128},
		{"out of another width", shapeBuf{dt: tensor.BF16, shape: []int{2, 72}}, tiled, 64, 128},
		{"group not dividing K", shapeBuf{dt: tensor.BF16, shape: []int{2, 64}}, tiled, 64, 96},
		{"n not a multiple of 8", shapeBuf{dt: tensor.BF16, shape: []int{2, 60}}, tiled, 60, 128},
	} {
		err := CheckGemmW4A16Tiled(tc.out, x, tc.tiled, tc.n, tc.group)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want an argument error", tc.name, err)
		}
	}
	if err := CheckGemmW4A16Tiled(shapeBuf{dt: tensor.BF16, shape: []int{2, 64}}, x, tiled, 64, 128); err != nil {
		t.Errorf("a valid call refused: %v", err)
	}
}
