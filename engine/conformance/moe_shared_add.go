package conformance

import (
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// moeSharedParams are moe_shared_add's (docs/golden-format.md): inplace writes out over routed,
// as a decode step adds the shared expert into the experts' sum.
type moeSharedParams struct {
	InPlace bool `json:"inplace"`
}

// moeSharedCall loads moe_shared_add's inputs and allocates (or aliases) its output, for the op
// and its composition alike.
type moeSharedCall struct {
	out, routed, shared, x, gate backend.Buffer
}

func loadMoEShared(c *call) *moeSharedCall {
	var p moeSharedParams
	c.params(&p)
	m := &moeSharedCall{}
	m.routed, m.shared, m.x, m.gate = c.input("routed"), c.input("shared"), c.input("x"), c.input("gate")
	m.out = m.routed
	if !p.InPlace {
		m.out = c.like(m.routed)
	}
	return m
}

func init() {
	register("moe_shared_add", func(c *call) {
		m := loadMoEShared(c)
		c.do(func() error { return c.b.MoESharedAdd(m.out, m.routed, m.shared, m.x, m.gate) })
		c.output("out", m.out)
	})
	// Unfused: transformers' eager order, `routed + F.sigmoid(shared_expert_gate(x)) * shared`:
	// the gate's logits by gemm (g [T, 1] = x gateᵀ, rounded to the storage dtype), then on the
	// host the sigmoid, the product and the sum, each rounded to the storage dtype.
	unfused["moe_shared_add"] = func(c *call) {
		m := loadMoEShared(c)
		routed, shared := c.host("routed"), c.host("shared")
		c.do(func() error { return moeSharedUnfused(c.b, m, routed, shared) })
		c.output("out", m.out)
	}
}

// moeSharedUnfused is moe_shared_add's unfused composition (see its registration); routed and
// shared are the set's host tensors (routed is read before out, which may be it, is written).
func moeSharedUnfused(b backend.Backend, m *moeSharedCall, routed, shared *tensor.Tensor) error {
	if err := backend.CheckMoESharedAdd(m.out, m.routed, m.shared, m.x, m.gate); err != nil {
		return err
	}
	mem, ok := b.(backend.Memory)
	if !ok {
		return fmt.Errorf("moe_shared_add unfused: the %s backend cannot write a buffer", b.Info().Backend)
	}
	t, h := m.x.Shape()[0], m.x.Shape()[1]
	dt := m.x.DType()
	g, err := b.Alloc(dt, t, 1)
	if err != nil {
		return err
	}
	defer g.Free()
	if err := b.Gemm(g, m.x, m.gate, nil); err != nil {
		return err
	}
	gh, err := b.Download(g)
	if err != nil {
		return err
	}
	logits, rv, sv := gh.Float32(), routed.Float32(), shared.Float32()
	res := tensor.New(dt, t, h)
	vals := make([]float32, t*h)
	for r := 0; r < t; r++ {
		s := tensor.Round(dt, float32(1/(1+math.Exp(-float64(logits[r])))))
		for col := 0; col < h; col++ {
			i := r*h + col
			vals[i] = tensor.Round(dt, rv[i]+tensor.Round(dt, s*sv[i]))
		}
	}
	for i, v := range vals {
		if dt == tensor.BF16 {
			res.BF16[i] = tensor.BF16FromFloat32(v)
		} else {
			res.F16[i] = float16.Fromfloat32(v)
		}
	}
	return mem.Write(m.out, res)
}
