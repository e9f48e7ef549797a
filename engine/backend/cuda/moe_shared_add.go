package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// MoESharedAdd is Qwen2-MoE's gated shared expert (ts_moe_shared_add): out = routed +
// sigmoid(x · gate) ⊙ shared, a block per token; out may be routed.
func (b *Backend) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	const op = "moe_shared_add"
	if err := backend.CheckMoESharedAdd(out, routed, shared, x, gate); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"routed", routed}, arg{"shared", shared}, arg{"x", x}, arg{"gate", gate})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_moe_shared_config{
		dtype:  dtype(d[3].dt),
		tokens: c.int("tokens", d[3].shape[0]),
		hidden: c.int("hidden", d[3].shape[1]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_moe_shared_add(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
