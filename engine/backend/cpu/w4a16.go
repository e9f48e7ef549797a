package cpu

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// GemmW4A16 unpacks the 4-bit weight (engine/tensor's unpackers), dequantises it into x's storage
// type, (q - z) · s rounded once as the published dequantisers write it, and multiplies with fp32
// accumulation (Gemm's matmulT).
func (*Backend) GemmW4A16(out, x, qweight, qzeros, scales, gIdx backend.Buffer, format backend.W4Format, groupSize int) error {
	if err := backend.CheckGemmW4A16(out, x, qweight, qzeros, scales, gIdx, format, groupSize); err != nil {
		return err
	}
	bufs := []backend.Buffer{out, x, qweight, qzeros, scales}
	if gIdx != nil {
		bufs = append(bufs, gIdx)
	}
	ts, err := tensors("gemm_w4a16", bufs...)
	if err != nil {
		return err
	}
	m, k, n := ts[1].Shape[0], ts[1].Shape[1], ts[0].Shape[1]
	ng := k / groupSize
	var q, z []uint8
	groups := make([]int32, k)
	if format == backend.W4AWQ {
		if q, err = tensor.UnpackAWQ(ts[2].I32, k, n); err == nil {
			z, err = tensor.UnpackAWQ(ts[3].I32, ng, n)
		}
		for r := range groups {
			groups[r] = int32(r / groupSize)
		}
	} else {
		if q, err = tensor.UnpackGPTQWeight(ts[2].I32, k, n); err == nil {
			z, err = tensor.UnpackGPTQZeros(ts[3].I32, ng, n)
		}
		copy(groups, ts[5].I32)
		for r, g := range groups {
			if g < 0 || int(g) >= ng {
				return backend.IndexError("gemm_w4a16", "g_idx", r, int(g), fmt.Sprintf("must be in [0, %d) (the groups of scales)", ng))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("gemm_w4a16: %w", err)
	}
	wt, err := tensor.DequantInt4(q, z, ts[4].Float32(), groups, k, n)
	if err != nil {
		return fmt.Errorf("gemm_w4a16: %w", err)
	}
	roundTo(ts[1].DType, wt)
	w := make([]float32, n*k) // W [N, K], as matmulT takes it
	for r := 0; r < k; r++ {
		for c := 0; c < n; c++ {
			w[c*k+r] = wt[r*n+c]
		}
	}
	store(ts[0], matmulT(ts[1].Float32(), w, m, k, n))
	return nil
}
