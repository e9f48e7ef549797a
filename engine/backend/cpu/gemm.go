package cpu

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
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

// invariantRows is the largest m that matmulT computes row by row: every decode-sized product
// (a batched decode step of up to model.MaxBatch sequences) gives each element the same bits
// whatever the shape of the product around it. gonum's blocked Gemm does not promise that: the
// model's own decode step (one fused q/k/v product of one row) and a batch's (separate
// products of n rows) got v one ulp apart through it (engine/model's
// TestBatchDecodeEqualsSingleSequences). Larger products (prefills) take the blocked Gemm.
const invariantRows = 16

// matmulT returns x [m, k] · wᵀ for w [n, k], accumulated in fp32.
func matmulT(x, w []float32, m, k, n int) []float32 {
	if m <= invariantRows {
		return matmulRows(x, w, m, k, n)
	}
	res := make([]float32, m*n)
	blas32.Gemm(blas.NoTrans, blas.Trans, 1,
		blas32.General{Rows: m, Cols: k, Stride: k, Data: x},
		blas32.General{Rows: n, Cols: k, Stride: k, Data: w},
		0, blas32.General{Rows: m, Cols: n, Stride: n, Data: res})
	return res
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
// the product is large enough to pay for them; the split does not change any element.
func matmulRows(x, w []float32, m, k, n int) []float32 {
	res := make([]float32, m*n)
	cols := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			wj := blas32.Vector{N: k, Inc: 1, Data: w[j*k : (j+1)*k]}
			for i := 0; i < m; i++ {
				res[i*n+j] = blas32.Dot(blas32.Vector{N: k, Inc: 1, Data: x[i*k : (i+1)*k]}, wj)
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
