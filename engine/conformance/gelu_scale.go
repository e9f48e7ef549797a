package conformance

import (
	"fmt"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// geluScaleParams are gelu_scale's (docs/golden-format.md): the GELU form, the scale, and
// inplace, which writes out over x.
type geluScaleParams struct {
	GELU    string  `json:"gelu"` // "erf" or "tanh"
	Scale   float32 `json:"scale"`
	InPlace bool    `json:"inplace"`
}

// geluScaleCall loads gelu_scale's input and allocates its output, for the op and its
// composition alike.
type geluScaleCall struct {
	tanh   bool
	scale  float32
	x, out backend.Buffer
}

func loadGELUScale(c *call) *geluScaleCall {
	var p geluScaleParams
	c.params(&p)
	g := &geluScaleCall{scale: p.Scale}
	if c.err == nil {
		var err error
		g.tanh, err = gptFFNParams{GELU: p.GELU}.tanh()
		c.fail(err)
	}
	g.x = c.input("x")
	g.out = g.x
	if !p.InPlace {
		g.out = c.like(g.x)
	}
	return g
}

func init() {
	register("gelu_scale", func(c *call) {
		g := loadGELUScale(c)
		c.do(func() error { return c.b.GELUScale(g.out, g.x, g.tanh, g.scale) })
		c.output("out", g.out)
	})
	// Unfused: gelu or gelu_tanh(h, x), then gemm(out, h, w) with h and out viewed as [n, 1] and
	// w = [[fp16(scale)]]: one exact product per element and one more rounding, so the
	// composition rounds the GELU to fp16 where the fused op does not (and uses scale rounded to
	// fp16 where it is not exact in fp16).
	unfused["gelu_scale"] = func(c *call) {
		g := loadGELUScale(c)
		if c.err != nil {
			return
		}
		mem, ok := c.b.(backend.Memory)
		if !ok {
			c.fail(fmt.Errorf("%s backend has no views to run gelu_scale's product as a [n, 1] gemm", c.b.Info().Backend))
			return
		}
		n := tensor.NumElements(g.x.Shape())
		h := c.like(g.x)
		if c.err != nil {
			return
		}
		// w = [[scale]] in the storage dtype of x (a gemm takes one dtype).
		wt := tensor.FromF16([]int{1, 1}, []float16.Float16{float16.Fromfloat32(g.scale)})
		if g.x.DType() == tensor.BF16 {
			wt = tensor.FromBF16([]int{1, 1}, []tensor.BFloat16{tensor.BF16FromFloat32(g.scale)})
		}
		w, err := c.b.Upload(wt)
		if err != nil {
			c.fail(fmt.Errorf("upload w = [[scale]]: %w", err))
			return
		}
		c.bufs = append(c.bufs, w)
		hv, err := mem.View(h, n, 1)
		if err != nil {
			c.fail(fmt.Errorf("view h as [%d, 1]: %w", n, err))
			return
		}
		ov, err := mem.View(g.out, n, 1)
		if err != nil {
			c.fail(fmt.Errorf("view out as [%d, 1]: %w", n, err))
			return
		}
		c.do(func() error {
			gelu := c.b.GELU
			if g.tanh {
				gelu = c.b.GELUTanh
			}
			if err := gelu(h, g.x); err != nil {
				return err
			}
			return c.b.Gemm(ov, hv, w, nil)
		})
		c.output("out", g.out)
	}
}
