package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// RMSNormGemm normalises the rows (after the residual add, when given) as RMSNorm would, rounds
// them to fp16 as RMSNorm stores them, and projects them with fp32 accumulation and the bias
// before the one rounding of out.
func (*Backend) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	if err := backend.CheckRMSNormGemm(out, sum, x, residual, normW, w, bias, eps); err != nil {
		return err
	}
	ts, err := tensors("rmsnorm_gemm", out, sum, x, residual, normW, w, bias)
	if err != nil {
		return err
	}
	t, h, n := ts[2].Shape[0], ts[2].Shape[1], ts[5].Shape[0]
	xv := ts[2].Float32()
	if ts[3] != nil {
		rv := ts[3].Float32()
		for i := range xv {
			xv[i] = tensor.RoundF16(xv[i] + rv[i])
		}
		store(ts[1], xv)
	}
	rmsNormRows(xv, h, ts[4].Float32(), eps)
	for i, v := range xv {
		xv[i] = tensor.RoundF16(v)
	}
	res := matmulT(xv, ts[5].Float32(), t, h, n)
	if ts[6] != nil {
		addBias(res, ts[6].Float32())
	}
	store(ts[0], res)
	return nil
}

// LayerNormGemm is RMSNormGemm's composition with LayerNorm: the rows (after the residual add,
// when given) normalised as LayerNorm would, rounded to fp16 as it stores them, then projected.
func (*Backend) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	if err := backend.CheckLayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps); err != nil {
		return err
	}
	ts, err := tensors("layernorm_gemm", out, sum, x, residual, gamma, beta, w, bias)
	if err != nil {
		return err
	}
	t, h, n := ts[2].Shape[0], ts[2].Shape[1], ts[6].Shape[0]
	xv := ts[2].Float32()
	if ts[3] != nil {
		rv := ts[3].Float32()
		for i := range xv {
			xv[i] = tensor.RoundF16(xv[i] + rv[i])
		}
		store(ts[1], xv)
	}
	layerNormRows(xv, h, ts[4].Float32(), ts[5].Float32(), eps)
	for i, v := range xv {
		xv[i] = tensor.RoundF16(v)
	}
	res := matmulT(xv, ts[6].Float32(), t, h, n)
	if ts[7] != nil {
		addBias(res, ts[7].Float32())
	}
	store(ts[0], res)
	return nil
}

// GPTFFN runs the up projection with its bias and the GELU on the fp32 accumulators, rounds
// the activation once, and projects it down as Gemm would.
func (*Backend) GPTFFN(out, x, w1, b1, w2, b2 backend.Buffer, tanh bool) error {
	if err := backend.CheckGPTFFN(out, x, w1, b1, w2, b2); err != nil {
		return err
	}
	ts, err := tensors("gpt_ffn", out, x, w1, b1, w2, b2)
	if err != nil {
		return err
	}
	t, h, f := ts[1].Shape[0], ts[1].Shape[1], ts[2].Shape[0]
	act := matmulT(ts[1].Float32(), ts[2].Float32(), t, h, f)
	if ts[3] != nil {
		addBias(act, ts[3].Float32())
	}
	gelu := geluErf
	if tanh {
		gelu = geluTanh
	}
	for i, v := range act {
		act[i] = tensor.RoundF16(gelu(v))
	}
	res := matmulT(act, ts[4].Float32(), t, f, h)
	if ts[5] != nil {
		addBias(res, ts[5].Float32())
	}
	store(ts[0], res)
	return nil
}

// SwiGLUGemm rounds the activation to fp16 as SwiGLU stores it and projects it with fp32
// accumulation and the bias before the one rounding of out.
func (*Backend) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	if err := backend.CheckSwiGLUGemm(out, gate, up, w, bias); err != nil {
		return err
	}
	ts, err := tensors("swiglu_gemm", out, gate, up, w, bias)
	if err != nil {
		return err
	}
	t, k, n := ts[1].Shape[0], ts[1].Shape[1], ts[3].Shape[0]
	g, u := ts[1].Float32(), ts[2].Float32()
	act := make([]float32, len(g))
	for i := range g {
		act[i] = tensor.RoundF16(swiglu(g[i], u[i]))
	}
	res := matmulT(act, ts[3].Float32(), t, k, n)
	if ts[4] != nil {
		addBias(res, ts[4].Float32())
	}
	store(ts[0], res)
	return nil
}
