package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
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

// w4a16Config is the ts_w4a16_config of a weight of n outputs and k inputs in dt.
func w4a16Config(op string, dt tensor.DType, m, n, k, groupSize int, format C.int) (C.ts_w4a16_config, error) {
	c := dims{op: op}
	cfg := C.ts_w4a16_config{
		dtype:      dtype(dt),
		m:          c.int("m", m),
		n:          c.int("n", n),
		k:          c.int("k", k),
		group_size: c.int("group_size", groupSize),
		format:     format,
	}
	return cfg, c.err
}

// W4A16Tile rewrites a packed 4-bit weight into the library's tiled layout (ts_w4a16_tile).
func (b *Backend) W4A16Tile(qweight, qzeros, scales backend.Buffer, format backend.W4Format, groupSize int) (backend.Buffer, error) {
	const op = "w4a16_tile"
	n, k, err := backend.W4PackedDims(op, qweight, qzeros, scales, format, groupSize)
	if err != nil {
		return nil, err
	}
	d, err := b.device(op, arg{"qweight", qweight}, arg{"qzeros", qzeros}, arg{"scales", scales})
	if err != nil {
		return nil, err
	}
	cfg, err := w4a16Config(op, d[2].dt, 1, n, k, groupSize, C.int(format))
	if err != nil {
		return nil, err
	}
	var size C.size_t
	if err := b.status(op, C.tsg_w4a16_tiled_bytes(b.lib.api, &cfg, &size, b.e), false); err != nil {
		return nil, err
	}
	// i32 words: the layout's sizes are multiples of 16 bytes (and the allocator has no u8)
	tiled, err := b.Alloc(tensor.I32, int(size)/4)
	if err != nil {
		return nil, err
	}
	st := C.tsg_w4a16_tile(b.lib.api, ptr(tiled.(*buffer)), ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e)
	if err := b.launched(op, st); err != nil {
		tiled.Free()
		return nil, err
	}
	return tiled, nil
}

// GemmW4A16Tiled is gemm_w4a16 over a weight W4A16Tile wrote (ts_gemm_w4a16, TS_W4_TILED).
func (b *Backend) GemmW4A16Tiled(out, x, tiled backend.Buffer, n, groupSize int) error {
	const op = "gemm_w4a16"
	if err := backend.CheckGemmW4A16Tiled(out, x, tiled, n, groupSize); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"tiled", tiled})
	if err != nil {
		return err
	}
	cfg, err := w4a16Config(op, d[1].dt, d[1].shape[0], n, d[1].shape[1], groupSize, C.TS_W4_TILED)
	if err != nil {
		return err
	}
	var size C.size_t
	if err := b.status(op, C.tsg_w4a16_tiled_bytes(b.lib.api, &cfg, &size, b.e), false); err != nil {
		return err
	}
	if got := d[2].shape[0]; got*4 != int(size) {
		return &backend.ArgError{Op: op, Arg: "tiled", Value: d[2].String(),
			Reason: fmt.Sprintf("want i32[%d]: the tiled weight of N = %d, K = %d, group size %d", int(size)/4, n, d[1].shape[1], groupSize)}
	}
	st := C.tsg_gemm_w4a16(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), nil, nil, nil, &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
