package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetRows scatters the rows of src into dst in place, dst[rows[i]] = src[i]. Rows are
// range-checked on the device like Embedding's ids: one outside [0, R) is not written and
// surfaces as TS_ERR_INDEX at the next Download or Synchronize (at once with guards on).
// Because the indices live in a device buffer, a captured graph replays the append at
// whatever row the caller last wrote there.
func (b *Backend) SetRows(dst, src, rows backend.Buffer) error {
	const op = "set_rows"
	if err := backend.CheckSetRows(dst, src, rows); err != nil {
		return err
	}
	d, err := b.device(op, arg{"dst", dst}, arg{"src", src}, arg{"rows", rows})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_set_rows_config{
		dtype:     dtype(d[0].dt),
		dst_rows:  c.int("dst_rows", d[0].shape[0]),
		src_rows:  c.int("src_rows", d[1].shape[0]),
		row_elems: c.int("row_elems", tensor.NumElements(d[0].shape[1:])),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_set_rows(b.lib.api, ptr(d[0]), ptr(d[1]), (*C.int32_t)(ptr(d[2])), &cfg, b.e)
	return b.launched(op, st, arg{"dst", dst})
}
