package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// quantEps is the spec's guard on a group's amax (docs/quantization.md): an all-zero group gets
// a finite scale and quantises to zeros.
const quantEps = float32(1e-10)

// QuantFP8 quantises x into f8e4m3 by docs/quantization.md: float32 amax per group (NaN
// propagating), s = max(amax, 1e-10) / 448, q = e4m3(x / s), every division a float32 one.
func (*Backend) QuantFP8(out, scales, x, scale backend.Buffer, groupSize int) error {
	if err := backend.CheckQuantFP8(out, scales, x, scale, groupSize); err != nil {
		return err
	}
	ts, err := tensors("quant_fp8", out, scales, x, scale)
	if err != nil {
		return err
	}
	q, xv := ts[0].F8, ts[2].Float32()
	if scale != nil {
		s := ts[3].F32[0]
		for i, v := range xv {
			q[i] = tensor.E4M3FromFloat32(v / s)
		}
		return nil
	}
	for g := range ts[1].F32 {
		group := xv[g*groupSize : (g+1)*groupSize]
		s := groupScale(group)
		ts[1].F32[g] = s
		for i, v := range group {
			q[g*groupSize+i] = tensor.E4M3FromFloat32(v / s)
		}
	}
	return nil
}

// groupScale is max(amax, 1e-10) / 448 in float32, NaN when the group holds one.
func groupScale(group []float32) float32 {
	amax := float32(0)
	for _, v := range group {
		if v != v {
			return float32(math.NaN())
		}
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	return max(amax, quantEps) / tensor.E4M3Max
}
