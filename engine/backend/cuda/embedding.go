package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Embedding gathers rows of table [V, H] by the i32 ids into out, times scale rounded once (1:
// a bit-exact gather). Ids are range-checked on the device: one outside [0, V) surfaces as
// TS_ERR_INDEX at the next Download or Synchronize (at once with guards on).
func (b *Backend) Embedding(out, ids, table backend.Buffer, scale float32) error {
	const op = "embedding"
	if err := backend.CheckEmbedding(out, ids, table, scale); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"ids", ids}, arg{"table", table})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_embedding_config{
		dtype:      dtype(d[2].dt),
		tokens:     c.int("tokens", tensor.NumElements(d[1].shape)), // ids may have any rank
		hidden:     c.int("hidden", d[2].shape[1]),
		table_rows: c.int("table_rows", d[2].shape[0]),
		scale:      C.float(scale),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_embedding(b.lib.api, ptr(d[0]), (*C.int32_t)(ptr(d[1])), ptr(d[2]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// PosEmbedding adds learned position rows: out = x [T, H] + table[positions]. Positions are
// range-checked on the device like Embedding's ids.
func (b *Backend) PosEmbedding(out, x, table, positions backend.Buffer) error {
	const op = "pos_embedding"
	if err := backend.CheckPosEmbedding(out, x, table, positions); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"table", table}, arg{"positions", positions})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_embedding_config{
		dtype:      dtype(d[1].dt),
		tokens:     c.int("tokens", d[1].shape[0]),
		hidden:     c.int("hidden", d[1].shape[1]),
		table_rows: c.int("table_rows", d[2].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_pos_embedding(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), (*C.int32_t)(ptr(d[3])), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
