package cpu

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Gemm computes x · wᵀ + bias with gonum's fp32 SGEMM, then rounds to out's dtype.
func (*Backend) Gemm(out, x, w, bias backend.Buffer) error {
	c := backend.Validate("gemm")
	c.DType("x", x, tensor.F16)
	c.Rank("x", x, 2)
	c.DType("w", w, tensor.F16)
	c.Rank("w", w, 2)
	if c.Err() == nil {
		m, k, n := x.Shape()[0], x.Shape()[1], w.Shape()[0]
		c.That(w.Shape()[1] == k, "w", describe(w), "want [N, %d]: its last dim must equal x's K", k)
		if bias != nil {
			c.DType("bias", bias, tensor.F16)
			c.Shape("bias", bias, []int{n}, "one bias per output feature (rows of w)")
		}
		c.DType("out", out, tensor.F16, tensor.F32)
		c.Shape("out", out, []int{m, n}, "[rows of x, rows of w]")
	}
	if err := c.Err(); err != nil {
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

// matmulT returns x [m, k] · wᵀ for w [n, k], accumulated in fp32.
func matmulT(x, w []float32, m, k, n int) []float32 {
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

// SwiGLUFFN runs gate and up projections, the SwiGLU activation and the down projection,
// rounding each intermediate to fp16 as the unfused sequence of kernels would.
func (*Backend) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	c := backend.Validate("swiglu_ffn")
	c.DType("x", x, tensor.F16)
	c.Rank("x", x, 2)
	c.DType("w_gate", wGate, tensor.F16)
	c.Rank("w_gate", wGate, 2)
	if c.Err() == nil {
		t, h, f := x.Shape()[0], x.Shape()[1], wGate.Shape()[0]
		c.Shape("w_gate", wGate, []int{f, h}, "[ffn, hidden of x]")
		c.DType("w_up", wUp, tensor.F16)
		c.Shape("w_up", wUp, []int{f, h}, "the shape of w_gate")
		c.DType("w_down", wDown, tensor.F16)
		c.Shape("w_down", wDown, []int{h, f}, "[hidden, ffn] of w_gate")
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, []int{t, h}, "the shape of x")
	}
	if err := c.Err(); err != nil {
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
	roundF16(gate)
	roundF16(up)
	for i := range gate {
		gate[i] = swiglu(gate[i], up[i])
	}
	roundF16(gate)
	store(ts[0], matmulT(gate, ts[4].Float32(), t, f, h))
	return nil
}
