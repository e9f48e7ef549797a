package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// RMSNorm computes x / sqrt(mean(x²) + eps) · weight per row, with the reduction in fp64. The
// weight is read as fp32 whatever its dtype (the storage dtype, or f32: Gemma's 1 + w), so an
// f32 weight takes the same path, with out rounded once on the store.
func (*Backend) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	if err := backend.CheckRMSNorm(out, x, weight, eps); err != nil {
		return err
	}
	ts, err := tensors("rmsnorm", out, x, weight)
	if err != nil {
		return err
	}
	xv := ts[1].Float32()
	rmsNormRows(xv, ts[1].Shape[1], ts[2].Float32(), eps)
	store(ts[0], xv)
	return nil
}

func rmsNormRows(xv []float32, h int, w []float32, eps float32) {
	for r := 0; r < len(xv)/h; r++ {
		row := xv[r*h : (r+1)*h]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(h)+float64(eps))
		for i, v := range row {
			row[i] = float32(float64(v)*inv) * w[i]
		}
	}
}

// LayerNorm computes (x - mean) / sqrt(var + eps) · gamma + beta per row, two-pass in fp64
// so a large mean cannot cancel the variance away.
func (*Backend) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	if err := backend.CheckLayerNorm(out, x, gamma, beta, eps); err != nil {
		return err
	}
	ts, err := tensors("layernorm", out, x, gamma, beta)
	if err != nil {
		return err
	}
	xv := ts[1].Float32()
	layerNormRows(xv, ts[1].Shape[1], ts[2].Float32(), ts[3].Float32(), eps)
	store(ts[0], xv)
	return nil
}

func layerNormRows(xv []float32, h int, gamma, beta []float32, eps float32) {
	for r := 0; r < len(xv)/h; r++ {
		row := xv[r*h : (r+1)*h]
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		mean := sum / float64(h)
		var ss float64
		for _, v := range row {
			d := float64(v) - mean
			ss += d * d
		}
		inv := 1 / math.Sqrt(ss/float64(h)+float64(eps))
		for i, v := range row {
			row[i] = float32((float64(v)-mean)*inv)*gamma[i] + beta[i]
		}
	}
}

// LayerNormResidual stores sum = x + residual in the storage dtype and normalises that stored sum,
// exactly as ResidualAdd followed by LayerNorm would.
func (*Backend) LayerNormResidual(sum, out, x, residual, gamma, beta backend.Buffer, eps float32) error {
	if err := backend.CheckLayerNormResidual(sum, out, x, residual, gamma, beta, eps); err != nil {
		return err
	}
	ts, err := tensors("layernorm_residual", sum, out, x, residual, gamma, beta)
	if err != nil {
		return err
	}
	xv, rv := ts[2].Float32(), ts[3].Float32()
	for i := range xv {
		xv[i] = tensor.Round(ts[2].DType, xv[i]+rv[i])
	}
	store(ts[0], xv)
	layerNormRows(xv, ts[2].Shape[1], ts[4].Float32(), ts[5].Float32(), eps)
	store(ts[1], xv)
	return nil
}

// RMSNormResidual stores sum = x + residual in the storage dtype and normalises that stored sum, exactly
// as ResidualAdd followed by RMSNorm would. Every input is read before any output is written,
// so sum may be x or residual.
func (*Backend) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	if err := backend.CheckRMSNormResidual(sum, out, x, residual, weight, eps); err != nil {
		return err
	}
	ts, err := tensors("rmsnorm_residual", sum, out, x, residual, weight)
	if err != nil {
		return err
	}
	xv, rv, w := ts[2].Float32(), ts[3].Float32(), ts[4].Float32()
	for i := range xv {
		xv[i] = tensor.Round(ts[2].DType, xv[i]+rv[i])
	}
	store(ts[0], xv)
	rmsNormRows(xv, ts[2].Shape[1], w, eps)
	store(ts[1], xv)
	return nil
}
