package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
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
	if err := backend.CheckWriteRows(to.dt, to.shape, off, from.dt, from.shape); err != nil {
		return err
	}
	n := tensor.NumElements(from.shape)
	size := to.dt.Size()
	at := unsafe.Add(to.data, off*size)
	return b.status(op, C.tsg_copy_device(b.lib.api, at, from.data, C.size_t(n*size), b.e), false)
}

// Rows returns rows [start, start+n) of buf's first dimension as a view (no copy): the last
// position's logits of a prefill, or the positions of one pass out of a table of all of them.
func (b *Backend) Rows(buf backend.Buffer, start, n int) (backend.Buffer, error) {
	d, err := b.device("rows", arg{"b", buf})
	if err != nil {
		return nil, err
	}
	src := d[0]
	if err := backend.CheckRows(src.shape, start, n); err != nil {
		return nil, err
	}
	row := int64(tensor.NumElements(src.shape[1:])) * int64(src.dt.Size())
	shape := append([]int{n}, src.shape[1:]...)
	return &buffer{owner: b, data: unsafe.Add(src.data, int64(start)*row), dt: src.dt, shape: shape, bytes: int64(n) * row, view: true}, nil
}

var _ backend.Memory = (*Backend)(nil)

// Write copies the host tensor t into dst (ts_copy_to_device on the library stream): the
// token ids of a pass, written into a buffer the model reuses instead of allocating one.
func (b *Backend) Write(dst backend.Buffer, t *tensor.Tensor) error {
	const op = "write"
	d, err := b.device(op, arg{"dst", dst})
	if err != nil {
		return err
	}
	to := d[0]
	if err := backend.CheckWrite(to.dt, to.shape, t); err != nil {
		return err
	}
	if to.bytes == 0 {
		return nil
	}
	src := hostData(t)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(src)
	return b.waiting(op, false, func() C.int {
		return C.tsg_copy_to_device(b.lib.api, to.data, src, C.size_t(to.bytes), b.e)
	})
}
