package backend

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Memory is what a model pass needs besides the kernels: views and copies that keep
// activations, KV caches and logits on the device, and small host writes (token ids) into
// buffers that are reused from pass to pass instead of allocated each time.
type Memory interface {
	// View returns b's memory under another shape with the same element count, without a
	// copy. A view owns nothing: freeing it frees nothing, and it must not outlive b.
	View(b Buffer, shape ...int) (Buffer, error)
	// Rows returns rows [start, start+n) of b's first dimension as a view.
	Rows(b Buffer, start, n int) (Buffer, error)
	// WriteRows copies all of src into dst starting at dst's flat element offset off.
	WriteRows(dst Buffer, off int, src Buffer) error
	// Write copies the host tensor t into dst, which has t's dtype and element count.
	Write(dst Buffer, t *tensor.Tensor) error
}

// CheckRows validates a Rows request on a buffer of shape.
func CheckRows(shape []int, start, n int) error {
	if len(shape) == 0 {
		return &ArgError{Op: "rows", Arg: "b", Value: tensor.ShapeString(shape), Reason: "a scalar has no rows"}
	}
	if start < 0 || n < 1 || start+n > shape[0] {
		return &ArgError{Op: "rows", Arg: "start, n", Value: fmt.Sprintf("%d, %d", start, n),
			Reason: fmt.Sprintf("rows [start, start+n) must lie in the %d rows of %s", shape[0], tensor.ShapeString(shape))}
	}
	return nil
}

// CheckWriteRows validates a WriteRows of src into dst at flat offset off.
func CheckWriteRows(dstDT tensor.DType, dstShape []int, off int, srcDT tensor.DType, srcShape []int) error {
	n := tensor.NumElements(srcShape)
	switch {
	case dstDT != srcDT:
		return &ArgError{Op: "write_rows", Arg: "src", Value: srcDT.String() + tensor.ShapeString(srcShape), Reason: "dtype must equal dst's " + dstDT.String()}
	case off < 0 || off+n > tensor.NumElements(dstShape):
		return &ArgError{Op: "write_rows", Arg: "off", Value: fmt.Sprint(off),
			Reason: fmt.Sprintf("%d elements from there do not fit in dst %s%s", n, dstDT, tensor.ShapeString(dstShape))}
	}
	return nil
}

// CheckWrite validates a host write of t into a buffer of dtype dt and shape.
func CheckWrite(dt tensor.DType, shape []int, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return &ArgError{Op: "write", Arg: "t", Value: "nil", Reason: "need a host tensor"}
	case t.DType != dt || tensor.NumElements(t.Shape) != tensor.NumElements(shape) || t.Len() != tensor.NumElements(t.Shape):
		return &ArgError{Op: "write", Arg: "t", Value: t.DType.String() + tensor.ShapeString(t.Shape),
			Reason: fmt.Sprintf("must hold exactly the %d %s elements of dst%s", tensor.NumElements(shape), dt, tensor.ShapeString(shape))}
	}
	return nil
}
