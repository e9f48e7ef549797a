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
	quantRows(ts[0], ts[1], ts[2].Float32(), ts[3], groupSize)
	return nil
}

// quantRows is QuantFP8 on validated arguments, x given as its float32 values xv: into the
// f8e4m3 out, dynamic (scale nil) with the group scales into scales, or static. The fused
// quantisers (RMSNormQuantFP8, SwiGLUQuantFP8) quantise their rounded intermediate with it.
func quantRows(out, scales *tensor.Tensor, xv []float32, scale *tensor.Tensor, groupSize int) {
	q := out.F8
	if scale != nil {
		s := scale.F32[0]
		for i, v := range xv {
			q[i] = tensor.E4M3FromFloat32(v / s)
		}
		return
	}
	for g := range scales.F32 {
		group := xv[g*groupSize : (g+1)*groupSize]
		s := groupScale(group)
		scales.F32[g] = s
		for i, v := range group {
			q[g*groupSize+i] = tensor.E4M3FromFloat32(v / s)
		}
	}
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

// GemmFP8 dequantises x and w (float(q) · scale, one fp32 rounding a value) and multiplies them
// with fp32 accumulation: within the kernels' error of the exact product.
func (*Backend) GemmFP8(out, x, xScales, w, wScales backend.Buffer, block bool) error {
	if err := backend.CheckGemmFP8(out, x, xScales, w, wScales, block); err != nil {
		return err
	}
	ts, err := tensors("gemm_fp8", out, x, xScales, w, wScales)
	if err != nil {
		return err
	}
	m, k, n := ts[1].Shape[0], ts[1].Shape[1], ts[3].Shape[0]
	xd := dequantFP8(ts[1], ts[2].F32, block, 1)
	wd := dequantFP8(ts[3], ts[4].F32, block, backend.FP8BlockSize)
	store(ts[0], matmulT(xd, wd, m, k, n))
	return nil
}

// dequantFP8 returns float(q) · scale for the f8e4m3 t [R, K]: with block scales the scale of
// element (r, c) is scales[r / rowsPerBlock][c / 128] (rowsPerBlock 1 for activation groups,
// 128 for weight blocks); else scales[r] (per row).
func dequantFP8(t *tensor.Tensor, scales []float32, block bool, rowsPerBlock int) []float32 {
	rows, k := t.Shape[0], t.Shape[1]
	out := make([]float32, rows*k)
	cols := k / backend.FP8BlockSize
	for r := 0; r < rows; r++ {
		for c := 0; c < k; c++ {
			var s float32
			if block {
				s = scales[(r/rowsPerBlock)*cols+c/backend.FP8BlockSize]
			} else {
				s = scales[r]
			}
			out[r*k+c] = tensor.E4M3ToFloat32(t.F8[r*k+c]) * s
		}
	}
	return out
}
