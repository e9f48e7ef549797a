package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// RMSNormQuantFP8 is the pre-norm and its FP8 quantisation in one kernel
// (ts_rmsnorm_quant_fp8). Unfused equivalent: RMSNormResidual(sum, y, x, residual, weight)
// (or RMSNorm(y, x, weight)), then QuantFP8(out, scales, y, scale, groupSize).
func (b *Backend) RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale backend.Buffer, groupSize int, eps float32) error {
	const op = "rmsnorm_quant_fp8"
	if err := backend.CheckRMSNormQuantFP8(out, scales, sum, x, residual, weight, scale, groupSize, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"scales", scales}, arg{"sum", sum}, arg{"x", x},
		arg{"residual", residual}, arg{"weight", weight}, arg{"scale", scale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_norm_quant_config{
		dtype:      dtype(d[3].dt),
		rows:       c.int("rows", d[3].shape[0]),
		hidden:     c.int("hidden", d[3].shape[1]),
		group_size: c.int("group_size", groupSize),
		eps:        C.float(eps),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_rmsnorm_quant_fp8(b.lib.api, ptr(d[0]), (*C.float)(ptr(d[1])), ptr(d[2]), ptr(d[3]), ptr(d[4]),
		ptr(d[5]), (*C.float)(ptr(d[6])), &cfg, b.e)
	return b.launched(op, st, quantWritten(out, scales, sum)...)
}

// SwiGLUQuantFP8 is the SwiGLU activation and its FP8 quantisation in one kernel
// (ts_swiglu_quant_fp8). Unfused equivalent: SwiGLU(y, gate, up), then QuantFP8(out, scales,
// y, scale, groupSize).
func (b *Backend) SwiGLUQuantFP8(out, scales, gate, up, scale backend.Buffer, groupSize int) error {
	const op = "swiglu_quant_fp8"
	if err := backend.CheckSwiGLUQuantFP8(out, scales, gate, up, scale, groupSize); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"scales", scales}, arg{"gate", gate}, arg{"up", up}, arg{"scale", scale})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_quant_config{
		in_dtype:   dtype(d[2].dt),
		rows:       c.int("rows", d[2].shape[0]),
		hidden:     c.int("hidden", d[2].shape[1]),
		group_size: c.int("group_size", groupSize),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_swiglu_quant_fp8(b.lib.api, ptr(d[0]), (*C.float)(ptr(d[1])), ptr(d[2]), ptr(d[3]),
		(*C.float)(ptr(d[4])), &cfg, b.e)
	return b.launched(op, st, quantWritten(out, scales, nil)...)
}

// quantWritten lists what a fused quantiser writes, for the guard checks: out, the scales of a
// dynamic quantisation and the sum of a residual add.
func quantWritten(out, scales, sum backend.Buffer) []arg {
	written := []arg{{"out", out}}
	if scales != nil {
		written = append(written, arg{"scales", scales})
	}
	if sum != nil {
		written = append(written, arg{"sum", sum})
	}
	return written
}
