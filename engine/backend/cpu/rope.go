package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// RoPE rotates the first RopeDim dims of every head of x [T, heads, HeadDim] by the
// angle pos · base^(-2i/RopeDim) / divisor_i, pairing dim i with dim i + RopeDim/2
// (rotate_half), and scales the rotated pair by the attention factor (backend.RoPEConfig).
func (*Backend) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	if err := backend.CheckRoPE(out, x, positions, cfg); err != nil {
		return err
	}
	ts, err := tensors("rope", out, x, positions, cfg.FreqDivisor, cfg.LongDivisor)
	if err != nil {
		return err
	}
	pos := ts[2].I32
	for i, p := range pos {
		if p < 0 {
			return backend.IndexError("rope", "positions", i, int(p), "must be >= 0")
		}
	}
	xv := ts[1].Float32()
	nTok, heads, d := ts[1].Shape[0], ts[1].Shape[1], ts[1].Shape[2]
	half := cfg.RopeDim / 2
	factor := float64(cfg.Factor())
	short, long := ts[3], ts[4]
	cos, sin := make([]float64, half), make([]float64, half)
	for tok := 0; tok < nTok; tok++ {
		div := short
		if long != nil && int(pos[tok]) >= cfg.LongFrom {
			div = long
		}
		for i := 0; i < half; i++ {
			invFreq := math.Pow(float64(cfg.FreqBase), -float64(2*i)/float64(cfg.RopeDim))
			if div != nil {
				invFreq /= float64(div.F32[i])
			}
			theta := float64(pos[tok]) * invFreq
			cos[i], sin[i] = factor*math.Cos(theta), factor*math.Sin(theta)
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
