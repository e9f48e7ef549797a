package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// normConfig is the config of a norm over the rows of x [rows, hidden]. Its weight_dtype stays 0
// (the storage dtype) unless the caller sets TS_F32.
func normConfig(op string, x *buffer, eps float32) (C.ts_norm_config, error) {
	c := dims{op: op}
	cfg := C.ts_norm_config{dtype: dtype(x.dt), rows: c.int("rows", x.shape[0]), hidden: c.int("hidden", x.shape[1]), eps: C.float(eps)}
	return cfg, c.err
}

// rmsWeight sets the config's weight_dtype for an f32 weight (Gemma's 1 + w), which only the
// RMSNorms take; a 16-bit weight leaves it 0, the storage dtype.
func rmsWeight(cfg *C.ts_norm_config, weight *buffer) {
	if weight.dt == tensor.F32 {
		cfg.weight_dtype = C.TS_F32
	}
}

// RMSNorm normalises each row of x by its root mean square and scales by weight (16-bit or f32).
func (b *Backend) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	const op = "rmsnorm"
	if err := backend.CheckRMSNorm(out, x, weight, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"weight", weight})
	if err != nil {
		return err
	}
	cfg, err := normConfig(op, d[1], eps)
	if err != nil {
		return err
	}
	rmsWeight(&cfg, d[2])
	return b.launched(op, C.tsg_rmsnorm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), &cfg, b.e), arg{"out", out})
}

// LayerNorm normalises each row of x to zero mean and unit variance, then applies gamma and beta.
func (b *Backend) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	const op = "layernorm"
	if err := backend.CheckLayerNorm(out, x, gamma, beta, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"gamma", gamma}, arg{"beta", beta})
	if err != nil {
		return err
	}
	cfg, err := normConfig(op, d[1], eps)
	if err != nil {
		return err
	}
	return b.launched(op, C.tsg_layernorm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), &cfg, b.e), arg{"out", out})
}

// LayerNormResidual is the fused pre-norm step of GPT-2. Unfused equivalent:
// ResidualAdd(sum, x, residual) then LayerNorm(out, sum, gamma, beta, eps).
func (b *Backend) LayerNormResidual(sum, out, x, residual, gamma, beta backend.Buffer, eps float32) error {
	const op = "layernorm_residual"
	if err := backend.CheckLayerNormResidual(sum, out, x, residual, gamma, beta, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"sum", sum}, arg{"out", out}, arg{"x", x}, arg{"residual", residual},
		arg{"gamma", gamma}, arg{"beta", beta})
	if err != nil {
		return err
	}
	cfg, err := normConfig(op, d[2], eps)
	if err != nil {
		return err
	}
	st := C.tsg_layernorm_residual(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), ptr(d[5]), &cfg, b.e)
	return b.launched(op, st, arg{"sum", sum}, arg{"out", out})
}

// RMSNormResidual is the fused pre-norm step of Qwen2, Phi-3 and Llama. Unfused equivalent:
// ResidualAdd(sum, x, residual) then RMSNorm(out, sum, weight, eps). sum may be x or residual.
func (b *Backend) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	const op = "rmsnorm_residual"
	if err := backend.CheckRMSNormResidual(sum, out, x, residual, weight, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"sum", sum}, arg{"out", out}, arg{"x", x}, arg{"residual", residual}, arg{"weight", weight})
	if err != nil {
		return err
	}
	cfg, err := normConfig(op, d[2], eps)
	if err != nil {
		return err
	}
	rmsWeight(&cfg, d[4])
	st := C.tsg_rmsnorm_residual(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), &cfg, b.e)
	return b.launched(op, st, arg{"sum", sum}, arg{"out", out})
}
