package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// GemmW4A16 is the 4-bit weight GEMM (ts_gemm_w4a16) in the AWQ or GPTQ packing.
func (b *Backend) GemmW4A16(out, x, qweight, qzeros, scales, gIdx backend.Buffer, format backend.W4Format, groupSize int) error {
	const op = "gemm_w4a16"
	if err := backend.CheckGemmW4A16(out, x, qweight, qzeros, scales, gIdx, format, groupSize); err != nil {
		return err
	}
	args := []arg{{"out", out}, {"x", x}, {"qweight", qweight}, {"qzeros", qzeros}, {"scales", scales}}
	if gIdx != nil {
		args = append(args, arg{"g_idx", gIdx})
	}
	d, err := b.device(op, args...)
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_w4a16_config{
		dtype:      dtype(d[1].dt),
		m:          c.int("m", d[1].shape[0]),
		n:          c.int("n", d[0].shape[1]),
		k:          c.int("k", d[1].shape[1]),
		group_size: c.int("group_size", groupSize),
		format:     C.int(format),
	}
	if c.err != nil {
		return c.err
	}
	var g unsafe.Pointer
	if gIdx != nil {
		g = ptr(d[5])
	}
	st := C.tsg_gemm_w4a16(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), g, &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
