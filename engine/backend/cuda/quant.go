package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// QuantFP8 quantises x into f8e4m3 by docs/quantization.md (ts_quant_fp8): dynamic per group of
// groupSize with the scales written, or static with the per-tensor scale.
func (b *Backend) QuantFP8(out, scales, x, scale backend.Buffer, groupSize int) error {
	const op = "quant_fp8"
	if err := backend.CheckQuantFP8(out, scales, x, scale, groupSize); err != nil {
		return err
	}
	args := []arg{{"out", out}, {"x", x}}
	if scale != nil {
		args = append(args, arg{"scale", scale})
	} else {
		args = append(args, arg{"scales", scales})
	}
	d, err := b.device(op, args...)
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_quant_config{
		in_dtype:   dtype(d[1].dt),
		rows:       c.int("rows", d[1].shape[0]),
		hidden:     c.int("hidden", d[1].shape[1]),
		group_size: c.int("group_size", groupSize),
	}
	if c.err != nil {
		return c.err
	}
	var scalesPtr, scalePtr *C.float
	written := []arg{{"out", out}}
	if scale != nil {
		scalePtr = (*C.float)(ptr(d[2]))
	} else {
		scalesPtr = (*C.float)(ptr(d[2]))
		written = append(written, arg{"scales", scales})
	}
	st := C.tsg_quant_fp8(b.lib.api, ptr(d[0]), scalesPtr, ptr(d[1]), scalePtr, &cfg, b.e)
	return b.launched(op, st, written...)
}

// GemmFP8 is the w8a8 GEMM (ts_gemm_fp8) with block or per-channel scales.
func (b *Backend) GemmFP8(out, x, xScales, w, wScales backend.Buffer, block bool) error {
	const op = "gemm_fp8"
	if err := backend.CheckGemmFP8(out, x, xScales, w, wScales, block); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"x_scales", xScales}, arg{"w", w}, arg{"w_scales", wScales})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_gemm_fp8_config{
		out_dtype:    dtype(d[0].dt),
		m:            c.int("m", d[1].shape[0]),
		n:            c.int("n", d[3].shape[0]),
		k:            c.int("k", d[1].shape[1]),
		block_scales: 0,
	}
	if block {
		cfg.block_scales = 1
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_gemm_fp8(b.lib.api, ptr(d[0]), ptr(d[1]), (*C.float)(ptr(d[2])), ptr(d[3]), (*C.float)(ptr(d[4])), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
