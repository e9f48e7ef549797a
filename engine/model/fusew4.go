package model

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// fusedW4 holds 4-bit projections (q, k and v; gate and up) that one tiled GEMM of a fused decode
// step computes together, as fusedFP8 does for FP8 ones: their packed weights concatenated along
// the outputs (every packing keeps each output's codes, zero points and scales in columns of its
// own: AWQ's and the zero points' 8 outputs a word, GPTQ's one) and tiled once into
// w[into+".tiled"]. The projections keep their own packed and tiled weights for prefill, batched
// decode and TOUCHSTONE_FUSED=0.
type fusedW4 struct {
	all   *QLinear   // the fused projection: N the sum, Tiled the only weight it holds
	cols  []int      // each projection's first output column in all's output, and the total
	parts []*QLinear // the projections, as Load made them (intact)
}

// fuseW4 fuses the named 4-bit projections of qs when every one is tiled (tileW4) in one format
// with one K and group: otherwise nil, and each runs alone. The concatenation is made on the host
// from the projections' own buffers and freed once tiled.
func fuseW4(be backend.Backend, w map[string]backend.Buffer, qs map[string]*QLinear, into string, names ...string) (*fusedW4, error) {
	tiler, ok := be.(backend.W4Tiler)
	if !ok {
		return nil, nil
	}
	f := &fusedW4{cols: []int{0}}
	for _, n := range names {
		q := qs[n]
		if q == nil || q.Tiled == nil || (q.Format != QuantAWQ && q.Format != QuantGPTQ) {
			return nil, nil
		}
		if first := f.parts; len(first) > 0 && (q.Format != first[0].Format || q.K != first[0].K || q.Group != first[0].Group) {
			return nil, nil
		}
		f.parts = append(f.parts, q)
		f.cols = append(f.cols, f.cols[len(f.cols)-1]+q.N)
	}
	first := f.parts[0]
	format := backend.W4AWQ
	if first.Format == QuantGPTQ {
		format = backend.W4GPTQ
	}
	var packed []backend.Buffer
	defer func() {
		for _, b := range packed {
			b.Free()
		}
	}()
	for _, get := range []func(q *QLinear) backend.Buffer{
		func(q *QLinear) backend.Buffer { return q.W },
		func(q *QLinear) backend.Buffer { return q.Zeros },
		func(q *QLinear) backend.Buffer { return q.Scales },
	} {
		var ts []*tensor.Tensor
		for _, q := range f.parts {
			t, err := be.Download(get(q))
			if err != nil {
				return nil, fmt.Errorf("model: fuse %v: %w", names, err)
			}
			ts = append(ts, t)
		}
		cat, err := concatColumns(ts)
		if err != nil {
			return nil, fmt.Errorf("model: fuse %v: %w", names, err)
		}
		b, err := be.Upload(cat)
		if err != nil {
			return nil, fmt.Errorf("model: fuse %v: %w", names, err)
		}
		packed = append(packed, b)
	}
	tiled, err := tiler.W4A16Tile(packed[0], packed[1], packed[2], format, first.Group)
	if err != nil {
		return nil, fmt.Errorf("model: fuse %v: %w", names, err)
	}
	w[into+".tiled"] = tiled
	f.all = &QLinear{Format: first.Format, N: f.cols[len(f.cols)-1], K: first.K, Group: first.Group, Tiled: tiled}
	return f, nil
}

// concatColumns joins 2-D tensors of one dtype and row count along their columns.
func concatColumns(ts []*tensor.Tensor) (*tensor.Tensor, error) {
	rows, cols := ts[0].Shape[0], 0
	for _, t := range ts {
		if len(t.Shape) != 2 || t.Shape[0] != rows || t.DType != ts[0].DType {
			return nil, fmt.Errorf("cannot join %s and %s along their columns", ts[0], t)
		}
		cols += t.Shape[1]
	}
	out := tensor.New(ts[0].DType, rows, cols)
	at := 0
	for _, t := range ts {
		n := t.Shape[1]
		for r := range rows {
			for c := range n {
				if err := copyElement(out, r*cols+at+c, t, r*n+c); err != nil {
					return nil, err
				}
			}
		}
		at += n
	}
	return out, nil
}

// copyElement copies element j of src into element i of dst (one dtype).
func copyElement(dst *tensor.Tensor, i int, src *tensor.Tensor, j int) error {
	switch src.DType {
	case tensor.I32:
		dst.I32[i] = src.I32[j]
	case tensor.F16:
		dst.F16[i] = src.F16[j]
	case tensor.BF16:
		dst.BF16[i] = src.BF16[j]
	default:
		return fmt.Errorf("no column join for %s", src.DType)
	}
	return nil
}

// intact reports whether cur are still the projections fused, in order; a nil f never is.
func (f *fusedW4) intact(cur ...*QLinear) bool {
	if f == nil || len(cur) != len(f.parts) {
		return false
	}
	for i, q := range cur {
		if q != f.parts[i] {
			return false
		}
	}
	return true
}

// forward computes out [1, N] of the fused projection on the tiled weight.
func (f *fusedW4) forward(p *pass, out, x backend.Buffer) {
	p.do(p.be.(backend.W4Tiler).GemmW4A16Tiled(out, x, f.all.Tiled, f.all.N, f.all.Group))
}

// usable reports whether this pass runs f: a fused decode step of one token on a backend with
// the tiled layout, the projections still the ones fused.
func (f *fusedW4) usable(p *pass, cur ...*QLinear) bool {
	_, ok := p.be.(backend.W4Tiler)
	return ok && p.singleStep() && p.fused() && f.intact(cur...)
}

// outputs returns each projection's columns of out [1, N] as a [1, n] view.
func (f *fusedW4) outputs(p *pass, out backend.Buffer) []backend.Buffer {
	return columnViews(p, out, f.cols)
}
