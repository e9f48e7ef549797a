package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// elementwise is the config of an fp16 op over every element of x.
func elementwise(x *buffer) C.ts_elementwise_config {
	return C.ts_elementwise_config{dtype: dtype(x.dt), n: C.int64_t(tensor.NumElements(x.shape))}
}

// ResidualAdd computes out = x + residual; out may be x.
func (b *Backend) ResidualAdd(out, x, residual backend.Buffer) error {
	const op = "residual_add"
	if err := backend.CheckBinary(op, "x", "residual", out, x, residual); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"residual", residual})
	if err != nil {
		return err
	}
	cfg := elementwise(d[1])
	return b.launched(op, C.tsg_residual_add(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e), arg{"out", out})
}

// SwiGLU computes out = silu(gate) * up.
func (b *Backend) SwiGLU(out, gate, up backend.Buffer) error {
	const op = "swiglu"
	if err := backend.CheckBinary(op, "gate", "up", out, gate, up); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"gate", gate}, arg{"up", up})
	if err != nil {
		return err
	}
	cfg := elementwise(d[1])
	return b.launched(op, C.tsg_swiglu(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e), arg{"out", out})
}

// GeGLU computes out = GELU(gate) * up (the tanh form with tanh), one rounding.
func (b *Backend) GeGLU(out, gate, up backend.Buffer, tanh bool) error {
	const op = "geglu"
	if err := backend.CheckBinary(op, "gate", "up", out, gate, up); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"gate", gate}, arg{"up", up})
	if err != nil {
		return err
	}
	cfg := C.ts_geglu_config{dtype: dtype(d[1].dt), n: C.int64_t(tensor.NumElements(d[1].shape)), gelu: C.TS_GELU_ERF}
	if tanh {
		cfg.gelu = C.TS_GELU_TANH
	}
	return b.launched(op, C.tsg_geglu(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e), arg{"out", out})
}

// GELU is the exact, erf-based GELU.
func (b *Backend) GELU(out, x backend.Buffer) error {
	const op = "gelu"
	if err := backend.CheckUnary(op, out, x); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x})
	if err != nil {
		return err
	}
	cfg := elementwise(d[1])
	return b.launched(op, C.tsg_gelu(b.lib.api, ptr(d[0]), ptr(d[1]), &cfg, b.e), arg{"out", out})
}

// GELUTanh is the tanh approximation of GELU (GPT-2's gelu_new).
func (b *Backend) GELUTanh(out, x backend.Buffer) error {
	const op = "gelu_tanh"
	if err := backend.CheckUnary(op, out, x); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x})
	if err != nil {
		return err
	}
	cfg := elementwise(d[1])
	return b.launched(op, C.tsg_gelu_tanh(b.lib.api, ptr(d[0]), ptr(d[1]), &cfg, b.e), arg{"out", out})
}

// GELUScale is out = GELU(x) * scale (the tanh form with tanh) in one kernel, the product
// rounded once. Unfused equivalent: GELU or GELUTanh(h, x), then Gemm(out, h, w, nil) with h and
// out viewed as [n, 1] and w = [[fp16(scale)]].
func (b *Backend) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	const op = "gelu_scale"
	if err := backend.CheckGELUScale(out, x, scale); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x})
	if err != nil {
		return err
	}
	cfg := C.ts_gelu_scale_config{
		dtype: dtype(d[1].dt),
		n:     C.int64_t(tensor.NumElements(d[1].shape)),
		gelu:  C.TS_GELU_ERF,
		scale: C.float(scale),
	}
	if tanh {
		cfg.gelu = C.TS_GELU_TANH
	}
	return b.launched(op, C.tsg_gelu_scale(b.lib.api, ptr(d[0]), ptr(d[1]), &cfg, b.e), arg{"out", out})
}
