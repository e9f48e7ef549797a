package model

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// fusedFP8 holds FP8 projections that one GEMM of a decode step computes together (q, k and v;
// gate and up), as fused does for 16-bit weights: their weights and scales each one buffer of
// consecutive row blocks, the projections' own W and Scales views of them. A prefill still runs
// one GEMM per projection, on the same memory.
type fusedFP8 struct {
	all   *QLinear   // the fused projection: W [sum of N, K], Scales likewise
	rows  *fused     // W's fuse: each projection's output columns (outputs)
	parts []*QLinear // the projections, as Load made them (intact)
}

// fuseFP8 fuses the FP8 projections named (engine names, each in qs) into w[into+".w"] and
// w[into+".scales"], when they share a format and activation group and their scale rows can be
// stacked: per channel always; with 128x128 blocks only when every projection but the last has
// a multiple of 128 rows, so that no block straddles two of them. Otherwise nil: each runs alone.
func fuseFP8(be backend.Backend, mem backend.Memory, w map[string]backend.Buffer, qs map[string]*QLinear, into string, names ...string) (*fusedFP8, error) {
	parts := make([]*QLinear, len(names))
	for i, n := range names {
		parts[i] = qs[n]
	}
	if fp8Group(parts...) == 0 {
		return nil, nil
	}
	n := 0
	for i, q := range parts {
		if q.Format == QuantFP8Block && i < len(parts)-1 && q.N%128 != 0 {
			return nil, nil
		}
		n += q.N
	}
	suffixed := func(suffix string) []string {
		out := make([]string, len(names))
		for i, name := range names {
			out[i] = name + suffix
		}
		return out
	}
	fw, err := fuse(be, mem, w, into+".w", suffixed(".w")...)
	if err != nil {
		return nil, err
	}
	fs, err := fuse(be, mem, w, into+".scales", suffixed(".scales")...)
	if err != nil {
		return nil, err
	}
	for i, q := range parts {
		q.W, q.Scales = fw.parts[i], fs.parts[i]
	}
	all := &QLinear{Format: parts[0].Format, N: n, K: parts[0].K, Group: parts[0].Group, W: fw.all, Scales: fs.all}
	return &fusedFP8{all: all, rows: fw, parts: parts}, nil
}

// intact reports whether cur are still the projections fused, in order (a test may replace one
// after Load; then each runs alone). A nil f is never intact.
func (f *fusedFP8) intact(cur ...*QLinear) bool {
	if f == nil || len(cur) != len(f.parts) {
		return false
	}
	for i, q := range cur {
		if q != f.parts[i] || q.W != f.rows.parts[i] {
			return false
		}
	}
	return true
}
