package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// RoPE rotates the first RopeDim dims of every head of x [T, heads, HeadDim] by the
// angle pos · base^(-2i/RopeDim), pairing dim i with dim i + RopeDim/2 (rotate_half).
func (*Backend) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	c := backend.Validate("rope")
	c.DType("x", x, tensor.F16)
	c.Rank("x", x, 3)
	c.That(cfg.HeadDim > 0 && cfg.HeadDim%2 == 0, "head_dim", fmtI(cfg.HeadDim), "must be positive and even")
	c.That(cfg.RopeDim > 0 && cfg.RopeDim%2 == 0 && cfg.RopeDim <= cfg.HeadDim, "rope_dim", fmtI(cfg.RopeDim),
		"must be positive, even and at most head_dim (%d)", cfg.HeadDim)
	c.That(cfg.FreqBase > 1 && !math.IsInf(float64(cfg.FreqBase), 0), "freq_base", fmtF(cfg.FreqBase), "must be finite and > 1")
	if c.Err() == nil {
		t := x.Shape()[0]
		c.That(x.Shape()[2] == cfg.HeadDim, "x", x.DType().String()+tensor.ShapeString(x.Shape()),
			"last dim must equal head_dim (%d)", cfg.HeadDim)
		c.DType("positions", positions, tensor.I32)
		c.Shape("positions", positions, []int{t}, "one position per token of x")
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	if err := c.Err(); err != nil {
		return err
	}
	ts, err := tensors("rope", out, x, positions)
	if err != nil {
		return err
	}
	pos := ts[2].I32
	for i, p := range pos {
		if p < 0 {
			return &backend.ArgError{Op: "rope", Arg: "positions[" + fmtI(i) + "]", Value: fmtI(int(p)), Reason: "must be >= 0"}
		}
	}
	xv := ts[1].Float32()
	nTok, heads, d := ts[1].Shape[0], ts[1].Shape[1], ts[1].Shape[2]
	half := cfg.RopeDim / 2
	cos, sin := make([]float64, half), make([]float64, half)
	for tok := 0; tok < nTok; tok++ {
		for i := 0; i < half; i++ {
			theta := float64(pos[tok]) * math.Pow(float64(cfg.FreqBase), -float64(2*i)/float64(cfg.RopeDim))
			cos[i], sin[i] = math.Cos(theta), math.Sin(theta)
		}
		for h := 0; h < heads; h++ {
			v := xv[(tok*heads+h)*d : (tok*heads+h+1)*d]
			for i := 0; i < half; i++ {
				a, b := float64(v[i]), float64(v[i+half])
				v[i] = float32(a*cos[i] - b*sin[i])
				v[i+half] = float32(b*cos[i] + a*sin[i])
			}
		}
	}
	store(ts[0], xv)
	return nil
}
