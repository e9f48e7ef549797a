package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The fused FP8 quantisers are their unfused compositions, run through the same code as the
// ops they fuse: the residual add and rmsNormRows of RMSNormResidual, or swiglu of SwiGLU, the
// intermediate rounded to the storage dtype as those ops store it, then quantRows of QuantFP8.

// RMSNormQuantFP8 stores sum = x + residual in the storage dtype (when given), normalises it
// (or x) as RMSNorm does, rounds the row to the storage dtype and quantises it as QuantFP8.
// Every input is read before any output is written, so sum may be x or residual.
func (*Backend) RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale backend.Buffer, groupSize int, eps float32) error {
	if err := backend.CheckRMSNormQuantFP8(out, scales, sum, x, residual, weight, scale, groupSize, eps); err != nil {
		return err
	}
	ts, err := tensors("rmsnorm_quant_fp8", out, scales, sum, x, residual, weight, scale)
	if err != nil {
		return err
	}
	dt, xv := ts[3].DType, ts[3].Float32()
	if ts[4] != nil {
		rv := ts[4].Float32()
		for i := range xv {
			xv[i] = tensor.Round(dt, xv[i]+rv[i])
		}
		store(ts[2], xv)
	}
	rmsNormRows(xv, ts[3].Shape[1], ts[5].Float32(), eps)
	roundTo(dt, xv)
	quantRows(ts[0], ts[1], xv, ts[6], groupSize)
	return nil
}

// SwiGLUQuantFP8 computes silu(gate) * up as SwiGLU does, rounds it to the storage dtype and
// quantises it as QuantFP8.
func (*Backend) SwiGLUQuantFP8(out, scales, gate, up, scale backend.Buffer, groupSize int) error {
	if err := backend.CheckSwiGLUQuantFP8(out, scales, gate, up, scale, groupSize); err != nil {
		return err
	}
	ts, err := tensors("swiglu_quant_fp8", out, scales, gate, up, scale)
	if err != nil {
		return err
	}
	g, u := ts[2].Float32(), ts[3].Float32()
	for i := range g {
		g[i] = tensor.Round(ts[2].DType, swiglu(g[i], u[i]))
	}
	quantRows(ts[0], ts[1], g, ts[4], groupSize)
	return nil
}
