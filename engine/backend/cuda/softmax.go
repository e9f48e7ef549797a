package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Softmax normalises each row of x (fp16 or fp32) over its last dimension into fp32 out.
func (b *Backend) Softmax(out, x backend.Buffer) error {
	const op = "softmax"
	if err := backend.CheckSoftmax(out, x); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x})
	if err != nil {
		return err
	}
	shape := d[1].shape
	n := shape[len(shape)-1]
	c := dims{op: op}
	cfg := C.ts_softmax_config{
		in_dtype: dtype(d[1].dt),
		rows:     c.int("rows", tensor.NumElements(shape)/n), // every leading dim is a row
		n:        c.int("n", n),
	}
	if c.err != nil {
		return c.err
	}
	return b.launched(op, C.tsg_softmax(b.lib.api, ptr(d[0]), ptr(d[1]), &cfg, b.e), arg{"out", out})
}
