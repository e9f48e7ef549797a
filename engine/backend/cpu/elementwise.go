package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// unary validates and runs a 16-bit elementwise op (fp16 or bf16 in and out).
func unary(op string, out, x backend.Buffer, f func(float32) float32) error {
	if err := backend.CheckUnary(op, out, x); err != nil {
		return err
	}
	ts, err := tensors(op, out, x)
	if err != nil {
		return err
	}
	vals := ts[1].Float32()
	for i, v := range vals {
		vals[i] = f(v)
	}
	store(ts[0], vals)
	return nil
}

// binary validates and runs an elementwise op of two 16-bit tensors of one shape and dtype.
func binary(op, aName, bName string, out, a, b backend.Buffer, f func(a, b float32) float32) error {
	if err := backend.CheckBinary(op, aName, bName, out, a, b); err != nil {
		return err
	}
	ts, err := tensors(op, out, a, b)
	if err != nil {
		return err
	}
	av, bv := ts[1].Float32(), ts[2].Float32()
	for i := range av {
		av[i] = f(av[i], bv[i])
	}
	store(ts[0], av)
	return nil
}

// ResidualAdd computes out = x + residual; out may alias x.
func (*Backend) ResidualAdd(out, x, residual backend.Buffer) error {
	return binary("residual_add", "x", "residual", out, x, residual, func(a, b float32) float32 { return a + b })
}

// SwiGLU computes silu(gate) * up.
func (*Backend) SwiGLU(out, gate, up backend.Buffer) error {
	return binary("swiglu", "gate", "up", out, gate, up, swiglu)
}

func swiglu(g, u float32) float32 { return silu(g) * u }

// GeGLU computes GELU(gate) * up, the GELU (exact, or the tanh form) in fp64 as GELU's, the
// product in fp32, rounded once to the storage dtype on the store.
func (*Backend) GeGLU(out, gate, up backend.Buffer, tanh bool) error {
	gelu := geluErf
	if tanh {
		gelu = geluTanh
	}
	return binary("geglu", "gate", "up", out, gate, up, func(g, u float32) float32 { return gelu(g) * u })
}

func silu(x float32) float32 {
	return float32(float64(x) / (1 + math.Exp(-float64(x))))
}

// GELU is x·Φ(x) with the exact normal CDF.
func (*Backend) GELU(out, x backend.Buffer) error { return unary("gelu", out, x, geluErf) }

// GELUTanh is the tanh approximation of GELU used by GPT-2.
func (*Backend) GELUTanh(out, x backend.Buffer) error { return unary("gelu_tanh", out, x, geluTanh) }

// GELUScale is GELU or GELUTanh (their fp64 math, as fp32) times scale in fp64, rounded once to
// fp16 on the store: the GELU is not rounded to fp16 before the product.
func (*Backend) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	if err := backend.CheckGELUScale(out, x, scale); err != nil {
		return err
	}
	gelu := geluErf
	if tanh {
		gelu = geluTanh
	}
	s := float64(scale)
	return unary("gelu_scale", out, x, func(v float32) float32 { return float32(float64(gelu(v)) * s) })
}

func geluErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}
