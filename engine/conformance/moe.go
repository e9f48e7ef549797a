package conformance

import (
	"fmt"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// moeRouterParams are moe_router's: the experts a token takes and whether their weights are
// renormalised to sum to 1.
type moeRouterParams struct {
	TopK        int  `json:"top_k"`
	Renormalize bool `json:"renormalize"`
}

// moeFFNCall loads moe_ffn's inputs and allocates its output, for the op and its composition.
type moeFFNCall struct {
	x, ids, weights, gateUp, down, out backend.Buffer
}

func loadMoEFFN(c *call) *moeFFNCall {
	var p noParams
	c.params(&p)
	m := &moeFFNCall{}
	m.x, m.ids, m.weights = c.input("x"), c.input("ids"), c.input("weights")
	m.gateUp, m.down = c.input("gate_up"), c.input("down")
	if c.err == nil {
		m.out = c.like(m.x)
	}
	return m
}

func init() {
	register("moe_router", func(c *call) {
		var p moeRouterParams
		c.params(&p)
		logits := c.input("logits")
		var weights, ids backend.Buffer
		if t := c.dim("logits", logits, 0); c.err == nil {
			weights = c.alloc(tensor.F32, []int{t, p.TopK})
			ids = c.alloc(tensor.I32, []int{t, p.TopK})
		}
		c.do(func() error { return c.b.MoERouter(weights, ids, logits, p.TopK, p.Renormalize) })
		c.output("weights", weights)
		c.output("ids", ids)
	})
	register("moe_ffn", func(c *call) {
		m := loadMoEFFN(c)
		c.do(func() error { return c.b.MoEFFN(m.out, m.x, m.ids, m.weights, m.gateUp, m.down) })
		c.output("out", m.out)
	})
	// Unfused: a loop over the experts, as transformers' MixtralExperts runs it. For each expert
	// some token chose: its tokens' rows of x (embedding over x), the gate and up products
	// (gemm by the expert's rows of gate_up), swiglu, the down product (gemm); then, on the host,
	// each token's weighted sum over its experts in float64 and one rounding.
	unfused["moe_ffn"] = func(c *call) {
		m := loadMoEFFN(c)
		ids, weights := c.host("ids"), c.host("weights")
		c.do(func() error { return moeFFNByExpert(c.b, m, ids, weights) })
		c.output("out", m.out)
	}
}

// moeFFNByExpert is moe_ffn's unfused composition (see its registration).
func moeFFNByExpert(b backend.Backend, m *moeFFNCall, ids, weights *tensor.Tensor) error {
	if err := backend.CheckMoEFFN(m.out, m.x, m.ids, m.weights, m.gateUp, m.down); err != nil {
		return err
	}
	mem, ok := b.(backend.Memory)
	if !ok {
		return fmt.Errorf("moe_ffn unfused: the %s backend has no views", b.Info().Backend)
	}
	t, h := m.x.Shape()[0], m.x.Shape()[1]
	e, f := m.gateUp.Shape()[0], m.gateUp.Shape()[1]/2
	k := ids.Shape[1]
	dt := m.x.DType()
	gu, err := mem.View(m.gateUp, e*2*f, h)
	if err != nil {
		return err
	}
	dn, err := mem.View(m.down, e*h, f)
	if err != nil {
		return err
	}
	acc := make([]float64, t*h)
	var bufs []backend.Buffer
	defer func() {
		for _, buf := range bufs {
			buf.Free()
		}
	}()
	alloc := func(dt tensor.DType, shape ...int) (backend.Buffer, error) {
		buf, err := b.Alloc(dt, shape...)
		if err == nil {
			bufs = append(bufs, buf)
		}
		return buf, err
	}
	for ex := 0; ex < e; ex++ {
		var tokens []int32
		var slots []int
		for s, v := range ids.I32 {
			if int(v) == ex {
				tokens, slots = append(tokens, int32(s/k)), append(slots, s)
			}
		}
		n := len(tokens)
		if n == 0 {
			continue
		}
		idx, err := b.Upload(tensor.FromI32([]int{n}, tokens))
		if err != nil {
			return err
		}
		bufs = append(bufs, idx)
		// rows and y are [n, H], gate, up and act [n, F]; the expert's weights are row views.
		var scratch [5]backend.Buffer
		for i, width := range []int{h, f, f, f, h} {
			if scratch[i], err = alloc(dt, n, width); err != nil {
				return err
			}
		}
		rows, gate, up, act, y := scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
		var views [3]backend.Buffer
		for i, r := range []struct {
			of         backend.Buffer
			start, num int
		}{{gu, ex * 2 * f, f}, {gu, ex*2*f + f, f}, {dn, ex * h, h}} {
			if views[i], err = mem.Rows(r.of, r.start, r.num); err != nil {
				return err
			}
		}
		wGate, wUp, wDown := views[0], views[1], views[2]
		for _, step := range []func() error{
			func() error { return b.Embedding(rows, idx, m.x, 1) },
			func() error { return b.Gemm(gate, rows, wGate, nil) },
			func() error { return b.Gemm(up, rows, wUp, nil) },
			func() error { return b.SwiGLU(act, gate, up) },
			func() error { return b.Gemm(y, act, wDown, nil) },
		} {
			if err := step(); err != nil {
				return err
			}
		}
		yh, err := b.Download(y)
		if err != nil {
			return err
		}
		yv := yh.Float32()
		for i, s := range slots {
			wt := float64(weights.F32[s])
			for col := 0; col < h; col++ {
				acc[int(tokens[i])*h+col] += wt * float64(yv[i*h+col])
			}
		}
	}
	res := tensor.New(dt, t, h)
	for i, v := range acc {
		if dt == tensor.BF16 {
			res.BF16[i] = tensor.BF16FromFloat32(float32(v))
		} else {
			res.F16[i] = float16.Fromfloat32(float32(v))
		}
	}
	return mem.Write(m.out, res)
}
