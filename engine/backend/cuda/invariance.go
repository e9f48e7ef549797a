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
