package model

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// ropeTables holds the device copies of a RoPE scaling's divisor tables and the scaling they
// were uploaded from: a test may swap m.Cfg.RopeScaling after Load (a broken variant), and
// the next pass uploads that one's tables instead.
type ropeTables struct {
	from      *RopeScaling
	div, long backend.Buffer
}

func (t *ropeTables) free() {
	for _, b := range []backend.Buffer{t.div, t.long} {
		if b != nil {
			b.Free()
		}
	}
	*t = ropeTables{}
}

// ropeConfig is the rope kernel's configuration for this pass: the plain RoPE, or the
// model's scaling with its tables on the device. LongRoPE switches to its long factors as
// transformers does, by the length of the sequence a forward call covers: a prefill longer
// than the original context uses them for every token (LongFrom 0); a decode step from the
// position where the sequence first exceeds it.
func (p *pass) ropeConfig(layer int) backend.RoPEConfig {
	c := &p.m.Cfg
	theta, s := c.LayerRope(layer)
	rc := backend.RoPEConfig{HeadDim: c.HeadDim, RopeDim: c.RopeDim, FreqBase: theta}
	if s == nil {
		return rc
	}
	t := &p.m.rope
	if t.from != s {
		t.free()
		var err error
		t.div, err = p.be.Upload(tensor.FromF32([]int{len(s.Divisor)}, s.Divisor))
		p.do(err)
		if s.Long != nil {
			t.long, err = p.be.Upload(tensor.FromF32([]int{len(s.Long)}, s.Long))
			p.do(err)
		}
		t.from = s
	}
	rc.FreqDivisor, rc.AttentionFactor = t.div, s.AttentionFactor
	if s.Long != nil {
		rc.LongDivisor, rc.LongFrom = t.long, s.LongFrom
		// A served step's chunks are positions of several sequences: per position (Served.Step
		// refuses a chunk of several tokens past the original context).
		if !p.decode && p.served == nil && p.T > s.LongFrom {
			rc.LongFrom = 0
		}
	}
	return rc
}
