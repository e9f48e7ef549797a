package model

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// fused holds weights that one GEMM of a decode step computes together (q, k and v; gate and
// up): one buffer with each weight as a consecutive block of rows, and a view per weight. The
// views are what the layer's fields hold, so a prefill (whose q, k and v would be strided
// columns of a fused output) still runs one GEMM per weight, on the same memory.
type fused struct {
	all   backend.Buffer   // [sum of rows, in] (a bias: [sum of rows])
	parts []backend.Buffer // views of all, in order
	rows  []int            // row offset of each part in all, and the total at the end
}

// intact reports whether cur are still exactly f's views, in order: a test may replace or
// swap a layer's weights after Load, and a fused GEMM must then give way to one per weight.
// A nil f is intact when every cur is nil (the family has no such weights, e.g. no biases).
func (f *fused) intact(cur ...backend.Buffer) bool {
	if f == nil {
		for _, c := range cur {
			if c != nil {
				return false
			}
		}
		return true
	}
	if len(cur) != len(f.parts) {
		return false
	}
	for i, c := range cur {
		if c != f.parts[i] {
			return false
		}
	}
	return true
}

// outputs views a fused GEMM's output [1, total] as one [1, rows] buffer per part.
func (f *fused) outputs(p *pass, out backend.Buffer) []backend.Buffer {
	return columnViews(p, out, f.rows)
}

// columnViews returns the column blocks of out [1, total] that start at cols[i] (cols ends with
// the total), each as a [1, n] view.
func columnViews(p *pass, out backend.Buffer, cols []int) []backend.Buffer {
	total := cols[len(cols)-1]
	flat := p.view(out, total)
	views := make([]backend.Buffer, len(cols)-1)
	for i := range views {
		n := cols[i+1] - cols[i]
		views[i] = p.view(p.rows(flat, cols[i], n), 1, n)
	}
	return views
}

// fuse copies the named weights of w, on the device, into one buffer of consecutive row
// blocks, frees them and puts views of the new buffer in their place (w[into] owns it).
// Nothing is done, and nil returned, when the first name is absent; the others must then be
// present with the same trailing dimensions.
func fuse(be backend.Backend, mem backend.Memory, w map[string]backend.Buffer, into string, names ...string) (*fused, error) {
	if w[names[0]] == nil {
		return nil, nil
	}
	f := &fused{rows: []int{0}}
	tail := w[names[0]].Shape()[1:]
	for _, n := range names {
		b := w[n]
		if b == nil || !tensor.SameShape(b.Shape()[1:], tail) {
			return nil, fmt.Errorf("model: cannot fuse %v: %s is missing or of another row shape", names, n)
		}
		f.rows = append(f.rows, f.rows[len(f.rows)-1]+b.Shape()[0])
	}
	all, err := be.Alloc(w[names[0]].DType(), append([]int{f.rows[len(f.rows)-1]}, tail...)...)
	if err != nil {
		return nil, err
	}
	per := tensor.NumElements(tail)
	for i, n := range names {
		if err := mem.WriteRows(all, f.rows[i]*per, w[n]); err != nil {
			all.Free()
			return nil, err
		}
	}
	for i := range names {
		v, err := mem.Rows(all, f.rows[i], f.rows[i+1]-f.rows[i])
		if err != nil {
			all.Free()
			return nil, err
		}
		f.parts = append(f.parts, v)
	}
	for i, n := range names {
		w[n].Free()
		w[n] = f.parts[i]
	}
	w[into] = all
	f.all = all
	return f, nil
}
