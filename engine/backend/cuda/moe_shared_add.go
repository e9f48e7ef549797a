package cuda

import "github.com/touchstone-llm/touchstone/engine/backend"

// MoESharedAdd: the kernel is not yet part of the library.
func (b *Backend) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	if err := backend.CheckMoESharedAdd(out, routed, shared, x, gate); err != nil {
		return err
	}
	return &backend.UnsupportedError{Op: "moe_shared_add", Arg: "dtype", Value: x.DType().String(), Reason: "the CUDA kernel is not built yet"}
}
