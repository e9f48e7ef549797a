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

func (p *pass) fail(err error) { p.do(err) }

// err is kept for readability at the end of a pass: errors have already unwound it.
func (p *pass) err() error { return nil }

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

// alloc returns an fp16 activation buffer freed when the pass ends.
func (p *pass) alloc(shape ...int) backend.Buffer {
	b, err := p.m.alloc(tensor.F16, shape...)
	p.do(err)
	return b
}

func (m *Model) alloc(dt tensor.DType, shape ...int) (backend.Buffer, error) {
	b, err := m.be.Alloc(dt, shape...)
	if err != nil {
		return nil, err
	}
	m.tmp = append(m.tmp, b)
	return b, nil
}

func (m *Model) upload(t *tensor.Tensor) (backend.Buffer, error) {
	b, err := m.be.Upload(t)
	if err != nil {
		return nil, err
	}
	m.tmp = append(m.tmp, b)
	return b, nil
}

func (m *Model) freeTmp() {
	for _, b := range m.tmp {
		b.Free()
	}
	m.tmp = nil
}

// view returns b under another shape of the same size: a real view where the backend has
// one, else a copy through the host (a cost only backends without Viewer pay).
func (p *pass) view(b backend.Buffer, shape ...int) backend.Buffer {
	if tensor.NumElements(shape) != tensor.NumElements(b.Shape()) {
		panic(fmt.Sprintf("model: view of %s as %s", tensor.ShapeString(b.Shape()), tensor.ShapeString(shape)))
	}
	if tensor.SameShape(b.Shape(), shape) {
		return b
	}
	if v, ok := p.m.be.(Viewer); ok {
		vb, err := v.View(b, shape...)
		p.do(err)
		p.m.tmp = append(p.m.tmp, vb)
		return vb
	}
	t, err := p.m.be.Download(b)
	p.do(err)
	t.Shape = append([]int(nil), shape...)
	vb, err := p.m.upload(t)
	p.do(err)
	return vb
}

// tap copies b to the host under prefix+name when that tap was requested. Taps are stored
// with the golden shapes: [T, heads, D] for q/k/v and their RoPE, [T, n] otherwise.
func (p *pass) tap(name string, b backend.Buffer) {
	if !p.m.want[name] {
		return
	}
	t, err := p.m.be.Download(b)
	p.do(err)
	p.m.store(p.prefix+name, t)
}

func (m *Model) store(name string, t *tensor.Tensor) {
	if m.taps == nil {
		m.taps = map[string]*tensor.Tensor{}
	}
	m.taps[name] = tensor.FromF32(t.Shape, t.Float32())
}

// kvCache holds one layer's keys and values, [1, maxLen, nKV, D] each. Without a RowWriter
// backend it keeps a host mirror and uploads it before each decode attention.
type kvCache struct {
	k, v   backend.Buffer
	hk, hv *tensor.Tensor // host mirror (nil with a RowWriter)
	dirty  bool
}

func newCache(be backend.Backend, maxLen, nKV, D int) (*kvCache, error) {
	c := &kvCache{}
	var err error
	if c.k, err = be.Alloc(tensor.F16, 1, maxLen, nKV, D); err != nil {
		return nil, err
	}
	if c.v, err = be.Alloc(tensor.F16, 1, maxLen, nKV, D); err != nil {
		c.k.Free()
		return nil, err
	}
	if _, ok := be.(RowWriter); !ok {
		c.hk, c.hv = tensor.New(tensor.F16, 1, maxLen, nKV, D), tensor.New(tensor.F16, 1, maxLen, nKV, D)
	}
	return c, nil
}

func (c *kvCache) free() {
	if c == nil {
		return
	}
	c.k.Free()
	c.v.Free()
}

// write stores k, v [T, nKV, D] at positions pos..pos+T-1.
func (c *kvCache) write(m *Model, pos int, k, v backend.Buffer) error {
	row := k.Shape()[1] * k.Shape()[2]
	if rw, ok := m.be.(RowWriter); ok {
		if err := rw.WriteRows(c.k, pos*row, k); err != nil {
			return err
		}
		return rw.WriteRows(c.v, pos*row, v)
	}
	for _, kv := range []struct {
		dst *tensor.Tensor
		src backend.Buffer
	}{{c.hk, k}, {c.hv, v}} {
		t, err := m.be.Download(kv.src)
		if err != nil {
			return err
		}
		copy(kv.dst.F16[pos*row:], t.F16)
	}
	c.dirty = true
	return nil
}

// device returns the cache buffers, uploading the host mirror if it changed.
func (c *kvCache) device(m *Model) (backend.Buffer, backend.Buffer, error) {
	if c.hk != nil && c.dirty {
		k, err := m.be.Upload(c.hk)
		if err != nil {
			return nil, nil, err
		}
		v, err := m.be.Upload(c.hv)
		if err != nil {
			k.Free()
			return nil, nil, err
		}
		c.k.Free()
		c.v.Free()
		c.k, c.v, c.dirty = k, v, false
	}
	return c.k, c.v, nil
}
