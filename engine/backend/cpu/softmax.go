package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Softmax normalises each row over its last dim, subtracting the row max first so large
// logits cannot overflow; sums are fp64 and the result is stored in fp32.
func (*Backend) Softmax(out, x backend.Buffer) error {
	if err := backend.CheckSoftmax(out, x); err != nil {
		return err
	}
	ts, err := tensors("softmax", out, x)
	if err != nil {
		return err
	}
	xv := ts[1].Float32()
	rows, n := lastDim(ts[1].Shape)
	for r := 0; r < rows; r++ {
		row := xv[r*n : (r+1)*n]
		maxV := math.Inf(-1)
		for _, v := range row {
			maxV = math.Max(maxV, float64(v))
		}
		e := make([]float64, n)
		var sum float64
		for i, v := range row {
			e[i] = math.Exp(float64(v) - maxV)
			sum += e[i]
		}
		for i := range row {
			row[i] = float32(e[i] / sum)
		}
	}
	store(ts[0], xv)
	return nil
}
