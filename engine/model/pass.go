package model

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// passError carries the first error of a pass out of the block Forward methods, which
// panic with it so that the forward reads as a straight sequence of ops; forward recovers.
type passError struct{ err error }

func (p *pass) do(err error) {
	if err != nil {
		panic(passError{err})
	}
}

// recoverPass turns a passError panic into err; other panics propagate.
func recoverPass(err *error) {
	if r := recover(); r != nil {
		pe, ok := r.(passError)
		if !ok {
			panic(r)
		}
		*err = pe.err
	}
}

// alloc returns an fp16 activation buffer, returned to the pool when the pass ends.
func (p *pass) alloc(shape ...int) backend.Buffer {
	return p.allocT(p.m.Cfg.StorageDType(), shape...)
}

// allocT returns a buffer of dtype dt from the model's pool: after the first pass of a shape,
// passes allocate nothing (a device allocation, and the free that synchronises the device,
// would otherwise cost more than the ops of a decode step). Buffers are not zeroed: every
// op writes all of its output.
func (p *pass) allocT(dt tensor.DType, shape ...int) backend.Buffer {
	m := p.m
	key := poolKey(dt, shape)
	var b backend.Buffer
	if free := m.pool[key]; len(free) > 0 {
		b, m.pool[key] = free[len(free)-1], free[:len(free)-1]
	} else {
		var err error
		b, err = p.be.Alloc(dt, shape...)
		p.do(err)
	}
	m.inUse = append(m.inUse, b)
	return b
}

func poolKey(dt tensor.DType, shape []int) string { return dt.String() + tensor.ShapeString(shape) }

// endPass returns the pass's buffers to the pool and drops its views.
func (m *Model) endPass() {
	for _, b := range m.inUse {
		key := poolKey(b.DType(), b.Shape())
		m.pool[key] = append(m.pool[key], b)
	}
	for _, v := range m.views {
		v.Free()
	}
	m.inUse, m.views = m.inUse[:0], m.views[:0]
}

// freePool frees every pooled buffer (Close).
func (m *Model) freePool() {
	m.endPass()
	for _, bs := range m.pool {
		for _, b := range bs {
			b.Free()
		}
	}
	m.pool = map[string][]backend.Buffer{}
}

// view returns b under another shape of the same size, without a copy.
func (p *pass) view(b backend.Buffer, shape ...int) backend.Buffer {
	if tensor.NumElements(shape) != tensor.NumElements(b.Shape()) {
		panic(fmt.Sprintf("model: view of %s as %s", tensor.ShapeString(b.Shape()), tensor.ShapeString(shape)))
	}
	if tensor.SameShape(b.Shape(), shape) {
		return b
	}
	v, err := p.mem.View(b, shape...)
	p.do(err)
	p.m.views = append(p.m.views, v)
	return v
}

// rows returns rows [start, start+n) of b as a view.
func (p *pass) rows(b backend.Buffer, start, n int) backend.Buffer {
	v, err := p.mem.Rows(b, start, n)
	p.do(err)
	p.m.views = append(p.m.views, v)
	return v
}

// tap copies b to the host under prefix+name when that tap was requested. Taps are stored
// with the golden shapes: [T, heads, D] for q/k/v and their RoPE, [T, n] otherwise.
func (p *pass) tap(name string, b backend.Buffer) {
	if !p.m.want[name] {
		return
	}
	t, err := p.be.Download(b)
	p.do(err)
	if p.rowSpans != nil {
		// A pass over several sequences: each span of rows belongs to one sequence (a batched
		// decode step's row i, a served step's chunk), stored under its own prefix.
		n := tensor.NumElements(t.Shape) / p.T
		f := t.Float32()
		for _, sp := range p.rowSpans {
			p.m.store(sp.prefix+name, tensor.FromF32(append([]int{sp.n}, t.Shape[1:]...), f[sp.start*n:(sp.start+sp.n)*n]))
		}
		return
	}
	p.m.store(p.prefix+name, t)
	if g := p.m.inject[p.prefix+name]; g != nil {
		p.do(p.overwrite(b, g, p.prefix+name))
	}
}

// overwrite writes the reference's value g of a tap over the engine's b (an isolated replay,
// isolate.go): the ops after it then read the reference's input, not the engine's.
func (p *pass) overwrite(b backend.Buffer, g *tensor.Tensor, name string) error {
	if tensor.NumElements(g.Shape) != tensor.NumElements(b.Shape()) {
		return fmt.Errorf("model: isolated replay: reference tap %s has shape %s, the engine's %s", name, tensor.ShapeString(g.Shape), tensor.ShapeString(b.Shape()))
	}
	v, err := castTo(b.DType(), g)
	if err != nil {
		return fmt.Errorf("model: isolated replay: tap %s: %w", name, err)
	}
	return p.mem.Write(b, v)
}

func (m *Model) store(name string, t *tensor.Tensor) {
	if m.taps == nil {
		m.taps = map[string]*tensor.Tensor{}
	}
	m.taps[name] = tensor.FromF32(t.Shape, t.Float32())
}

// kvCache holds one layer's keys and values for slots sequences (1 for the model's own, B for
// a Batch): one allocation [2, slots x maxLen x nKV x D], keys first, made once; a new prefill
// overwrites a slot from position 0 (attention reads only cache_lens rows). A prefill, and a
// batched decode step, append keys and values through kRows and vRows at rows slot x maxLen +
// position; the model's own fused decode step appends its key and value rows (adjacent in its
// q/k/v projection's output) with one set_rows through kvRows, at rows pos and maxLen + pos.
type kvCache struct {
	kv           backend.Buffer // the storage dtype, [2, slots x maxLen x nKV x D]
	keys, values backend.Buffer // views [1, slots x maxLen x nKV x D]: the parents of the views below
	k, v         backend.Buffer // views [slots, maxLen, nKV, D]: attention's operands
	kRows, vRows backend.Buffer // views [slots x maxLen, nKV, D]: set_rows targets
	kvRows       backend.Buffer // view [2 x slots x maxLen, nKV, D]: a single-sequence decode step's one set_rows target
}

func newCache(be backend.Backend, mem backend.Memory, dt tensor.DType, slots, maxLen, nKV, D int) (*kvCache, error) {
	c := &kvCache{}
	var err error
	if c.kv, err = be.Alloc(dt, 2, slots*maxLen*nKV*D); err != nil {
		return nil, err
	}
	views := []struct {
		dst  *backend.Buffer
		make func() (backend.Buffer, error)
	}{
		{&c.keys, func() (backend.Buffer, error) { return mem.Rows(c.kv, 0, 1) }},
		{&c.values, func() (backend.Buffer, error) { return mem.Rows(c.kv, 1, 1) }},
		{&c.k, func() (backend.Buffer, error) { return mem.View(c.keys, slots, maxLen, nKV, D) }},
		{&c.v, func() (backend.Buffer, error) { return mem.View(c.values, slots, maxLen, nKV, D) }},
		{&c.kRows, func() (backend.Buffer, error) { return mem.View(c.keys, slots*maxLen, nKV, D) }},
		{&c.vRows, func() (backend.Buffer, error) { return mem.View(c.values, slots*maxLen, nKV, D) }},
		{&c.kvRows, func() (backend.Buffer, error) { return mem.View(c.kv, 2*slots*maxLen, nKV, D) }},
	}
	for _, v := range views {
		if *v.dst, err = v.make(); err != nil {
			c.free()
			return nil, err
		}
	}
	return c, nil
}

func (c *kvCache) free() {
	if c == nil {
		return
	}
	for _, b := range []backend.Buffer{c.kvRows, c.kRows, c.vRows, c.k, c.v, c.keys, c.values, c.kv} {
		if b != nil {
			b.Free()
		}
	}
}
