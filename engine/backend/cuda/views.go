package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// View returns b's memory under another shape with the same element count, without a copy:
// what a model needs between a GEMM's [T, heads*D] and RoPE's [T, heads, D]. A view owns
// nothing: freeing it releases no memory, and it must not outlive b.
func (b *Backend) View(buf backend.Buffer, shape ...int) (backend.Buffer, error) {
	const op = "view"
	d, err := b.device(op, arg{"buf", buf})
	if err != nil {
		return nil, err
	}
	src := d[0]
	for _, n := range shape {
		if n < 0 {
			return nil, fmt.Errorf("cuda view: shape %s has a negative dimension", tensor.ShapeString(shape))
		}
	}
	if tensor.NumElements(shape) != tensor.NumElements(src.shape) {
		return nil, fmt.Errorf("cuda view: %s cannot be viewed as %s: element counts differ", src, tensor.ShapeString(shape))
	}
	v := &buffer{owner: b, data: src.data, dt: src.dt, shape: append([]int(nil), shape...), bytes: src.bytes, view: true}
	return v, nil
}

// WriteRows copies all of src into dst starting at flat element offset off, on the device
// (ts_copy_device): the KV-cache append of a decode step.
func (b *Backend) WriteRows(dst backend.Buffer, off int, src backend.Buffer) error {
	const op = "write_rows"
	d, err := b.device(op, arg{"dst", dst}, arg{"src", src})
	if err != nil {
		return err
	}
	to, from := d[0], d[1]
	n := tensor.NumElements(from.shape)
	switch {
	case to.dt != from.dt:
		return &backend.ArgError{Op: op, Arg: "src", Value: from.String(), Reason: "dtype must equal dst's " + to.dt.String()}
	case off < 0 || off+n > tensor.NumElements(to.shape):
		return &backend.ArgError{Op: op, Arg: "off", Value: fmt.Sprint(off),
			Reason: fmt.Sprintf("%d elements from there do not fit in dst %s", n, to)}
	}
	size := to.dt.Size()
	at := unsafe.Add(to.data, off*size)
	return b.status(op, C.tsg_copy_device(b.lib.api, at, from.data, C.size_t(n*size), b.e), false)
}
