package cpu

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Gemm computes x · wᵀ + bias with gonum's fp32 SGEMM, then rounds to out's dtype.
func (*Backend) Gemm(out, x, w, bias backend.Buffer) error {
	if err := backend.CheckGemm(out, x, w, bias); err != nil {
		return err
	}
	ts, err := tensors("gemm", out, x, w, bias)
	if err != nil {
		return err
	}
	res := matmulT(ts[1].Float32(), ts[2].Float32(), ts[1].Shape[0], ts[1].Shape[1], ts[2].Shape[0])
	if ts[3] != nil {
		addBias(res, ts[3].Float32())
	}
	store(ts[0], res)
	return nil
}

// matmulT returns x [m, k] · wᵀ for w [n, k], accumulated in fp32, one output element at a
// time (matmulRows) at every m: each element's bits depend on k alone, never on the rows or
// columns beside it, so a sequence's row is the same alone, in a batched decode step, in a
// served step of other sequences' chunks, and through a fused q/k/v weight. gonum's blocked Gemm
// does not promise that: at m = 100, k = 896, n = 4864 it gave 87% of the elements other bits
// than the same rows one at a time, and the model's own fused decode step and a batch's got v
// one ulp apart through it (engine/model's TestBatchDecodeEqualsSingleSequences).
func matmulT(x, w []float32, m, k, n int) []float32 {
	return matmulRows(x, w, m, k, n)
}

func addBias(res, bias []float32) {
	n := len(bias)
	for i := range res {
		res[i] += bias[i%n]
	}
}

// GemmSwiGLU projects x onto the stacked gate and up weights and applies SwiGLU to the fp32
// accumulators, rounding once.
func (*Backend) GemmSwiGLU(out, x, wGateUp backend.Buffer) error {
	if err := backend.CheckGemmSwiGLU(out, x, wGateUp); err != nil {
		return err
	}
	ts, err := tensors("gemm_swiglu", out, x, wGateUp)
	if err != nil {
		return err
	}
	t, h, f := ts[1].Shape[0], ts[1].Shape[1], ts[2].Shape[0]/2
	acc := matmulT(ts[1].Float32(), ts[2].Float32(), t, h, 2*f)
	act := make([]float32, t*f)
	for r := 0; r < t; r++ {
		for j := 0; j < f; j++ {
			act[r*f+j] = swiglu(acc[r*2*f+j], acc[r*2*f+f+j])
		}
	}
	store(ts[0], act)
	return nil
}

// SwiGLUFFN runs gate and up projections, the SwiGLU activation and the down projection,
// rounding each intermediate to the storage dtype as the unfused sequence of kernels would.
func (*Backend) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	if err := backend.CheckSwiGLUFFN(out, x, wGate, wUp, wDown); err != nil {
		return err
	}
	ts, err := tensors("swiglu_ffn", out, x, wGate, wUp, wDown)
	if err != nil {
		return err
	}
	t, h, f := ts[1].Shape[0], ts[1].Shape[1], ts[2].Shape[0]
	xv := ts[1].Float32()
	gate := matmulT(xv, ts[2].Float32(), t, h, f)
	up := matmulT(xv, ts[3].Float32(), t, h, f)
	dt := ts[1].DType
	roundTo(dt, gate)
	roundTo(dt, up)
	for i := range gate {
		gate[i] = swiglu(gate[i], up[i])
	}
	roundTo(dt, gate)
	store(ts[0], matmulT(gate, ts[4].Float32(), t, f, h))
	return nil
}

// matmulRows is matmulT one output element at a time, res[i, j] = dot(x_i, w_j) in one fixed
// order that depends on k alone (batch-invariant). The columns are split among goroutines once
// the product is large enough to pay for them, and swept a block of rows at a time (the block's
// x rows stay in cache while every weight row of the split passes); neither changes an element.
func matmulRows(x, w []float32, m, k, n int) []float32 {
	const rowBlock = 16
	res := make([]float32, m*n)
	cols := func(lo, hi int) {
		for r0 := 0; r0 < m; r0 += rowBlock {
			r1 := min(r0+rowBlock, m)
			for j := lo; j < hi; j++ {
				wj := blas32.Vector{N: k, Inc: 1, Data: w[j*k : (j+1)*k]}
				for i := r0; i < r1; i++ {
					res[i*n+j] = blas32.Dot(blas32.Vector{N: k, Inc: 1, Data: x[i*k : (i+1)*k]}, wj)
				}
			}
		}
	}
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || int64(m)*int64(n)*int64(k) < 1<<20 {
		cols(0, n)
		return res
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			cols(lo, hi)
		}(lo, min(lo+step, n))
	}
	wg.Wait()
	return res
}
