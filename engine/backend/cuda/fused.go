package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// RMSNormGemm is the pre-norm and the projection after it in one op (at decode one kernel).
// Unfused equivalent: RMSNormResidual(sum, h, x, residual, normW) (or RMSNorm(h, x, normW)),
// then Gemm(out, h, w, bias).
func (b *Backend) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	const op = "rmsnorm_gemm"
	if err := backend.CheckRMSNormGemm(out, sum, x, residual, normW, w, bias, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"sum", sum}, arg{"x", x}, arg{"residual", residual},
		arg{"norm_weight", normW}, arg{"w", w}, arg{"bias", bias})
	if err != nil {
		return err
	}
	cfg, err := normGemmConfig(op, d[2], d[5], eps)
	if err != nil {
		return err
	}
	st := C.tsg_rmsnorm_gemm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), ptr(d[5]), ptr(d[6]), &cfg, b.e)
	return b.normGemmLaunched(op, st, out, sum)
}

// normGemmConfig is the config of rmsnorm_gemm and layernorm_gemm: rows and hidden from x, n
// from w.
func normGemmConfig(op string, x, w *buffer, eps float32) (C.ts_norm_gemm_config, error) {
	c := dims{op: op}
	cfg := C.ts_norm_gemm_config{
		dtype:  dtype(x.dt),
		rows:   c.int("rows", x.shape[0]),
		hidden: c.int("hidden", x.shape[1]),
		n:      c.int("n", w.shape[0]),
		eps:    C.float(eps),
	}
	return cfg, c.err
}

// normGemmLaunched records a fused norm and projection's launch: out, and sum with a residual.
func (b *Backend) normGemmLaunched(op string, st C.int, out, sum backend.Buffer) error {
	if sum != nil {
		return b.launched(op, st, arg{"out", out}, arg{"sum", sum})
	}
	return b.launched(op, st, arg{"out", out})
}

// LayerNormGemm is RMSNormGemm for a LayerNorm family (at decode one kernel). Unfused
// equivalent: LayerNormResidual(sum, h, x, residual, gamma, beta) (or LayerNorm(h, x, gamma,
// beta)), then Gemm(out, h, w, bias).
func (b *Backend) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	const op = "layernorm_gemm"
	if err := backend.CheckLayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"sum", sum}, arg{"x", x}, arg{"residual", residual},
		arg{"gamma", gamma}, arg{"beta", beta}, arg{"w", w}, arg{"bias", bias})
	if err != nil {
		return err
	}
	cfg, err := normGemmConfig(op, d[2], d[6], eps)
	if err != nil {
		return err
	}
	st := C.tsg_layernorm_gemm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), ptr(d[5]), ptr(d[6]), ptr(d[7]), &cfg, b.e)
	return b.normGemmLaunched(op, st, out, sum)
}

// GPTFFN is GPT-2's MLP with the GELU in the up projection's epilogue. Unfused equivalent:
// Gemm(h, x, w1, b1), GELU or GELUTanh(a, h), Gemm(out, a, w2, b2). The activation lives in a
// library workspace, so only out is guarded.
func (b *Backend) GPTFFN(out, x, w1, b1, w2, b2 backend.Buffer, tanh bool) error {
	const op = "gpt_ffn"
	if err := backend.CheckGPTFFN(out, x, w1, b1, w2, b2); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"x", x}, arg{"w1", w1}, arg{"b1", b1}, arg{"w2", w2}, arg{"b2", b2})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_gpt_ffn_config{
		dtype:  dtype(d[1].dt),
		rows:   c.int("rows", d[1].shape[0]),
		hidden: c.int("hidden", d[1].shape[1]),
		ffn:    c.int("ffn", d[2].shape[0]),
		gelu:   C.TS_GELU_ERF,
	}
	if tanh {
		cfg.gelu = C.TS_GELU_TANH
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_gpt_ffn(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), ptr(d[5]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}

// SwiGLUGemm is a SwiGLU FFN's activation and down projection (at decode one kernel). Unfused
// equivalent: SwiGLU(a, gate, up), then Gemm(out, a, w, bias).
func (b *Backend) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	const op = "swiglu_gemm"
	if err := backend.CheckSwiGLUGemm(out, gate, up, w, bias); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out}, arg{"gate", gate}, arg{"up", up}, arg{"w", w}, arg{"bias", bias})
	if err != nil {
		return err
	}
	c := dims{op: op}
	cfg := C.ts_gemm_config{
		in_dtype:  dtype(d[1].dt),
		out_dtype: dtype(d[0].dt),
		m:         c.int("m", d[1].shape[0]),
		n:         c.int("n", d[3].shape[0]),
		k:         c.int("k", d[1].shape[1]),
	}
	if c.err != nil {
		return c.err
	}
	st := C.tsg_swiglu_gemm(b.lib.api, ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]), &cfg, b.e)
	return b.launched(op, st, arg{"out", out})
}
