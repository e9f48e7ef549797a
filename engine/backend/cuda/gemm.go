package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Gemm computes out [M, N] = x [M, K] · wᵀ + bias with fp32 accumulation (cuBLAS), rounded
// to out's dtype. bias may be nil.
func (b *Backend) Gemm(out, x, w, bias backend.Buffer) error {
	const op = "gemm"
	if err := backend.CheckGemm(out, x, w, bias); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"w", w}, arg{"bias", bias})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_gemm_config{
		in_dtype:  dtype(d[1].dt),
		out_dtype: dtype(d[0].dt),
		m:         c.int("m", d[1].shape[0]),
		n:         c.int("n", d[2].shape[0]),
		k:         c.int("k", d[1].shape[1]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_gemm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// GemmSwiGLU is the gate/up projection and the SwiGLU activation over stacked weights, the
// accumulators never rounded before the activation. Unfused equivalent: Gemm(g, x, wGateUp[:ffn]),
// Gemm(u, x, wGateUp[ffn:]), SwiGLU(out, g, u).
func (b *Backend) GemmSwiGLU(out, x, wGateUp backend.Buffer) error {
	const op = "gemm_swiglu"
	if err := backend.CheckGemmSwiGLU(out, x, wGateUp); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"w_gate_up", wGateUp})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_ffn_config{
		dtype:  dtype(d[1].dt),
		rows:   c.int("rows", d[1].shape[0]),
		hidden: c.int("hidden", d[1].shape[1]),
		ffn:    c.int("ffn", d[2].shape[0]/2),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_gemm_swiglu(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// SwiGLUFFN is the whole gated FFN. Unfused equivalent, each step rounding to fp16:
// Gemm(g, x, wGate), Gemm(u, x, wUp), SwiGLU(a, g, u), Gemm(out, a, wDown). The
// intermediates live in a library workspace, so only out is guarded.
func (b *Backend) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	const op = "swiglu_ffn"
	if err := backend.CheckSwiGLUFFN(out, x, wGate, wUp, wDown); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"w_gate", wGate}, arg{"w_up", wUp}, arg{"w_down", wDown})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_ffn_config{
		dtype:  dtype(d[1].dt),
		rows:   c.int("rows", d[1].shape[0]),
		hidden: c.int("hidden", d[1].shape[1]),
		ffn:    c.int("ffn", d[2].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_swiglu_ffn(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
