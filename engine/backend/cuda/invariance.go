package cuda

/*
#include "shim.h"
*/
import "C"

import "github.com/touchstone-llm/touchstone/engine/backend"

var _ backend.BatchInvariance = (*Backend)(nil)

// SetBatchInvariant switches the library's decode ops to batch-invariant kernels or back
// (ts_set_batch_invariant). The mode is process-wide: every Backend of the library shares it.
func (b *Backend) SetBatchInvariant(on bool) error {
	if err := b.enter("set_batch_invariant"); err != nil {
		return err
	}
	flag := C.int(0)
	if on {
		flag = 1
	}
	return b.status("set_batch_invariant", C.tsg_set_batch_invariant(b.lib.api, flag, b.e), false)
}

// BatchInvariant reports the library's mode (ts_batch_invariant).
func (b *Backend) BatchInvariant() (bool, error) {
	if err := b.enter("batch_invariant"); err != nil {
		return false, err
	}
	var on C.int
	if err := b.status("batch_invariant", C.tsg_batch_invariant(b.lib.api, &on, b.e), false); err != nil {
		return false, err
	}
	return on != 0, nil
}

var _ backend.GemvRows = (*Backend)(nil)

// SetGemvRows sets up to how many rows the decode projections take the gemv instead of cuBLAS
// (ts_set_gemv_rows, 0..4). Process-wide, as the batch-invariant mode.
func (b *Backend) SetGemvRows(maxRows int) error {
	if err := b.enter("set_gemv_rows"); err != nil {
		return err
	}
	return b.status("set_gemv_rows", C.tsg_set_gemv_rows(b.lib.api, C.int(maxRows), b.e), false)
}

// GemvRows reports the library's row limit (ts_gemv_rows).
func (b *Backend) GemvRows() (int, error) {
	if err := b.enter("gemv_rows"); err != nil {
		return 0, err
	}
	var n C.int
	if err := b.status("gemv_rows", C.tsg_gemv_rows(b.lib.api, &n, b.e), false); err != nil {
		return 0, err
	}
	return int(n), nil
}
