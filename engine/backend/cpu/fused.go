package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// RMSNormGemm normalises the rows (after the residual add, when given) as RMSNorm would, rounds
// them to the storage dtype as RMSNorm stores them, and projects them with fp32 accumulation and the bias
// before the one rounding of out.
func (*Backend) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	if err := backend.CheckRMSNormGemm(out, sum, x, residual, normW, w, bias, eps); err != nil {
		return err
	}
	return normGemm("rmsnorm_gemm", out, sum, x, residual, w, bias, func(xv []float32, h int, v []*tensor.Tensor) {
		rmsNormRows(xv, h, v[0].Float32(), eps)
	}, normW)
}

// LayerNormGemm is RMSNormGemm's composition with LayerNorm.
func (*Backend) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	if err := backend.CheckLayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps); err != nil {
		return err
	}
	return normGemm("layernorm_gemm", out, sum, x, residual, w, bias, func(xv []float32, h int, v []*tensor.Tensor) {
		layerNormRows(xv, h, v[0].Float32(), v[1].Float32(), eps)
	}, gamma, beta)
}

// normGemm is a fused norm and projection on validated arguments: the rows of x (plus residual,
// rounded and stored in sum, when given) normalised in place by norm (which gets the norm's
// vectors), rounded to the storage dtype as the norm op stores them, then projected with fp32 accumulation
// and the bias before the one rounding of out.
func normGemm(op string, out, sum, x, residual, w, bias backend.Buffer,
	norm func(xv []float32, h int, vecs []*tensor.Tensor), vecs ...backend.Buffer) error {
	ts, err := tensors(op, append([]backend.Buffer{out, sum, x, residual, w, bias}, vecs...)...)
	if err != nil {
		return err
	}
	t, h, n := ts[2].Shape[0], ts[2].Shape[1], ts[4].Shape[0]
	xv := ts[2].Float32()
	if ts[3] != nil {
		rv := ts[3].Float32()
		for i := range xv {
			xv[i] = tensor.Round(ts[2].DType, xv[i]+rv[i])
		}
		store(ts[1], xv)
	}
	norm(xv, h, ts[6:])
	roundTo(ts[2].DType, xv)
	res := matmulT(xv, ts[4].Float32(), t, h, n)
	if ts[5] != nil {
		addBias(res, ts[5].Float32())
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
		act[i] = tensor.Round(ts[1].DType, gelu(v))
	}
	res := matmulT(act, ts[4].Float32(), t, f, h)
	if ts[5] != nil {
		addBias(res, ts[5].Float32())
	}
	store(ts[0], res)
	return nil
}

// SwiGLUGemm rounds the activation to the storage dtype as SwiGLU stores it and projects it with fp32
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
		act[i] = tensor.Round(ts[1].DType, swiglu(g[i], u[i]))
	}
	res := matmulT(act, ts[3].Float32(), t, k, n)
	if ts[4] != nil {
		addBias(res, ts[4].Float32())
	}
	store(ts[0], res)
	return nil
}
