package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// RoPE rotates x [T, heads, HeadDim] by the i32 positions [T], scaled as cfg's tables say; out
// may be x. Positions are
// range-checked on the device: a negative one surfaces as TS_ERR_INDEX at the next
// Download or Synchronize (at once with guards on).
func (b *Backend) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	const op = "rope"
	if err := backend.CheckRoPE(out, x, positions, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"positions", positions},
		arg{"freq_divisor", cfg.FreqDivisor}, arg{"long_divisor", cfg.LongDivisor})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_rope_config{
		dtype:     dtype(d[1].dt),
		tokens:    c.int("tokens", d[1].shape[0]),
		heads:     c.int("heads", d[1].shape[1]),
		head_dim:  c.int("head_dim", cfg.HeadDim),
		rope_dim:  c.int("rope_dim", cfg.RopeDim),
		freq_base: C.float(cfg.FreqBase),

		freq_divisor:     (*C.float)(ptr(d[3])),
		long_divisor:     (*C.float)(ptr(d[4])),
		long_from:        c.int("long_from", cfg.LongFrom),
		attention_factor: C.float(cfg.Factor()),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_rope(b.lib.api, ptr(d[0]), ptr(d[1]), (*C.int32_t)(ptr(d[2])), &ccfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
