package cpu

import (
	"math/rand/v2"
	"testing"
)

// Every row of a product has the same bits whatever the rows around it: a sequence's
// projections must not depend on the other sequences of its batched or served step. Shapes
// where gonum's blocked Gemm did depend on them (a Qwen2.5-sized projection at m = 100, a
// GPT-2-tiny head at m = 300).
func TestMatmulRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][3]int{{40, 224, 160}, {100, 896, 4864}, {300, 96, 503}, {70, 8192, 64}} {
		m, k, n := sh[0], sh[1], sh[2]
		x, w := make([]float32, m*k), make([]float32, n*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		all := matmulT(x, w, m, k, n)
		for i := 0; i < m; i += 13 {
			one := matmulT(x[i*k:(i+1)*k], w, 1, k, n)
			tail := matmulT(x[i*k:], w, m-i, k, n)
			for j := range n {
				if one[j] != all[i*n+j] || tail[j] != all[i*n+j] {
					t.Fatalf("m=%d k=%d n=%d: row %d col %d is %g in %d rows, %g alone, %g in the last %d", m, k, n, i, j, all[i*n+j], m, one[j], tail[j], m-i)
				}
			}
		}
	}
}
