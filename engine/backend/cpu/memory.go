package cpu

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

var _ backend.Memory = (*Backend)(nil)

// slice returns the elements [lo, hi) of t's storage as a tensor of shape, sharing memory.
func slice(t *tensor.Tensor, lo, hi int, shape []int) *tensor.Tensor {
	v := &tensor.Tensor{DType: t.DType, Shape: append([]int(nil), shape...)}
	switch t.DType {
	case tensor.F16:
		v.F16 = t.F16[lo:hi:hi]
	case tensor.BF16:
		v.BF16 = t.BF16[lo:hi:hi]
	case tensor.F32:
		v.F32 = t.F32[lo:hi:hi]
	case tensor.I32:
		v.I32 = t.I32[lo:hi:hi]
	case tensor.F8E4M3, tensor.F8E5M2, tensor.U8:
		v.F8 = t.F8[lo:hi:hi]
	}
	return v
}

// View shares b's storage under another shape.
func (*Backend) View(b backend.Buffer, shape ...int) (backend.Buffer, error) {
	hb, err := host(b)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	n := tensor.NumElements(hb.t.Shape)
	if tensor.NumElements(shape) != n {
		return nil, &backend.ArgError{Op: "view", Arg: "shape", Value: tensor.ShapeString(shape),
			Reason: fmt.Sprintf("must hold the %d elements of %s", n, tensor.ShapeString(hb.t.Shape))}
	}
	return &buffer{t: slice(hb.t, 0, n, shape)}, nil
}

// Rows shares rows [start, start+n) of b's first dimension.
func (*Backend) Rows(b backend.Buffer, start, n int) (backend.Buffer, error) {
	hb, err := host(b)
	if err != nil {
		return nil, fmt.Errorf("rows: %w", err)
	}
	if err := backend.CheckRows(hb.t.Shape, start, n); err != nil {
		return nil, err
	}
	row := tensor.NumElements(hb.t.Shape[1:])
	shape := append([]int{n}, hb.t.Shape[1:]...)
	return &buffer{t: slice(hb.t, start*row, (start+n)*row, shape)}, nil
}

// WriteRows copies src into dst from flat element offset off.
func (*Backend) WriteRows(dst backend.Buffer, off int, src backend.Buffer) error {
	ts, err := tensors("write_rows", dst, src)
	if err != nil {
		return err
	}
	d, s := ts[0], ts[1]
	if err := backend.CheckWriteRows(d.DType, d.Shape, off, s.DType, s.Shape); err != nil {
		return err
	}
	copyElems(d, off, s, 0, tensor.NumElements(s.Shape))
	return nil
}

// Write copies the host tensor t into dst.
func (*Backend) Write(dst backend.Buffer, t *tensor.Tensor) error {
	ts, err := tensors("write", dst)
	if err != nil {
		return err
	}
	if err := backend.CheckWrite(ts[0].DType, ts[0].Shape, t); err != nil {
		return err
	}
	copy(ts[0].F16, t.F16)
	copy(ts[0].BF16, t.BF16)
	copy(ts[0].F32, t.F32)
	copy(ts[0].I32, t.I32)
	copy(ts[0].F8, t.F8)
	return nil
}

// copyElems copies n elements bit for bit from src (from element from) into dst (from element
// to); the two share a dtype (the callers validated it).
func copyElems(dst *tensor.Tensor, to int, src *tensor.Tensor, from, n int) {
	switch dst.DType {
	case tensor.F16:
		copy(dst.F16[to:to+n], src.F16[from:from+n])
	case tensor.BF16:
		copy(dst.BF16[to:to+n], src.BF16[from:from+n])
	case tensor.F32:
		copy(dst.F32[to:to+n], src.F32[from:from+n])
	case tensor.I32:
		copy(dst.I32[to:to+n], src.I32[from:from+n])
	case tensor.F8E4M3, tensor.F8E5M2, tensor.U8:
		copy(dst.F8[to:to+n], src.F8[from:from+n])
	default:
		panic("cpu: copy of " + dst.DType.String())
	}
}
