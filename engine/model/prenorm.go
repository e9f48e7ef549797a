package model

import (
	"os"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// pending is a residual add and the norm after it, not yet run: the stream sum = x + y (y nil:
// x is the stream already, as the first layer's input) and n(sum), tapped as sumTap and
// normTap. Whoever reads the norm runs it: on its own (settle), or in a fused decode together
// with the projection that follows it (normGemm), so the normalised rows never leave the kernel.
type pending struct {
	x, y            backend.Buffer
	n               Norm
	sumTap, normTap string
	// normed, when set, is n(x) already run (a second reader of one norm, as the shared expert
	// beside the routed ones): settle returns it and no op fuses the norm again.
	normed backend.Buffer
}

// fusedDefault is Model.Fused at Load: on unless TOUCHSTONE_FUSED is 0 or false.
func fusedDefault() bool {
	v := os.Getenv("TOUCHSTONE_FUSED")
	return v != "0" && v != "false"
}

// fused reports whether this pass uses the fused decode ops.
func (p *pass) fused() bool { return p.decode && p.m.Fused }

// settle runs in's add and norm as ops of their own and returns the stream and its norm.
func (p *pass) settle(in pending) (sum, normed backend.Buffer) {
	if in.normed != nil {
		return in.x, in.normed
	}
	if in.y != nil {
		return p.addNorm(in.x, in.y, in.n, in.sumTap, in.normTap)
	}
	normed = p.alloc(p.T, p.m.Cfg.Hidden)
	in.n.Forward(p, normed, in.x)
	p.tap(in.normTap, normed)
	return in.x, normed
}

// normGemm computes out = n(sum) w^T + bias for in and returns the stream sum: in one
// RMSNormGemm (LayerNormGemm for a norm with a bias) in a fused decode, else the add and norm,
// then a Gemm. The fused op never stores the norm, so a requested norm tap is computed beside
// it, from the sum it stored, by the norm it equals.
func (p *pass) normGemm(in pending, out, w, bias backend.Buffer) backend.Buffer {
	// Gemma's fp32 norm weights (1 + w) have no fused op: rmsnorm_gemm takes a 16-bit weight
	if !p.fused() || in.normed != nil || in.n.W.DType() == tensor.F32 {
		sum, normed := p.settle(in)
		p.do(p.be.Gemm(out, normed, w, bias))
		return sum
	}
	sum := in.x
	if in.y != nil {
		sum = p.alloc(p.T, p.m.Cfg.Hidden)
	}
	var resid, sumOut backend.Buffer // no residual: RMSNormGemm normalises x itself
	if in.y != nil {
		resid, sumOut = in.y, sum
	}
	if in.n.B != nil {
		p.do(p.be.LayerNormGemm(out, sumOut, in.x, resid, in.n.W, in.n.B, w, bias, p.m.Cfg.NormEps))
	} else {
		p.do(p.be.RMSNormGemm(out, sumOut, in.x, resid, in.n.W, w, bias, p.m.Cfg.NormEps))
	}
	if in.y != nil {
		p.tap(in.sumTap, sum)
	}
	if p.m.want[in.normTap] {
		normed := p.alloc(p.T, p.m.Cfg.Hidden)
		in.n.Forward(p, normed, sum)
		p.tap(in.normTap, normed)
	}
	return sum
}

// tapGELU computes, when requested, the taps a fused GPTFFN does not store (ffn_up, ffn_act)
// by the unfused ops it equals, beside it.
func (f *MLP) tapGELU(p *pass, hn, act backend.Buffer, name func(string) string) {
	if !p.m.want[name("ffn_up")] && !p.m.want[name("ffn_act")] {
		return
	}
	up := p.alloc(p.T, p.m.Cfg.Intermediate)
	p.do(p.be.Gemm(up, hn, f.Up, f.UpB))
	p.tap(name("ffn_up"), up)
	p.do(p.be.GELUTanh(act, up))
	p.tap(name("ffn_act"), act)
}
