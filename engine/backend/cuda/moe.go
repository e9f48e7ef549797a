package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// MoERouter is the router's softmax and top-k (ts_moe_router).
func (b *Backend) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	const op = "moe_router"
	if err := backend.CheckMoERouter(weights, ids, logits, topK); err != nil {
		return err
	}
	d, err := b.device(op, arg{"weights", weights}, arg{"ids", ids}, arg{"logits", logits})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_moe_router_config{
		dtype:   dtype(d[2].dt),
		tokens:  c.int("tokens", d[2].shape[0]),
		experts: c.int("experts", d[2].shape[1]),
		top_k:   c.int("top_k", topK),
	}
	if renormalize {
		cfg.renormalize = 1
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_moe_router(b.lib.api, (*C.float)(ptr(d[0])), (*C.int32_t)(ptr(d[1])), ptr(d[2]), &cfg, b.e)
	return b.launched(op, st, arg{"weights", weights})
}

// MoEFFN is the expert block after the router (ts_moe_ffn): expert ids are range-checked on the
// device.
func (b *Backend) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	const op = "moe_ffn"
	if err := backend.CheckMoEFFN(out, x, ids, weights, gateUp, down); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"ids", ids}, arg{"weights", weights},
		arg{"gate_up", gateUp}, arg{"down", down})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_moe_ffn_config{
		dtype:   dtype(d[1].dt),
		tokens:  c.int("tokens", d[1].shape[0]),
		hidden:  c.int("hidden", d[1].shape[1]),
		ffn:     c.int("ffn", d[4].shape[1]/2),
		experts: c.int("experts", d[4].shape[0]),
		top_k:   c.int("top_k", d[2].shape[1]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_moe_ffn(b.lib.api, ptr(d[0]), ptr(d[1]), (*C.int32_t)(ptr(d[2])), (*C.float)(ptr(d[3])), ptr(d[4]),
		ptr(d[5]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
