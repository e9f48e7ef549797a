package conformance

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// w4a16Call is a gemm_w4a16 case loaded and uploaded, its output allocated.
type w4a16Call struct {
	p                                gemmW4A16Params
	format                           backend.W4Format
	x, qweight, qzeros, scales, gIdx backend.Buffer
	out                              backend.Buffer
}

func loadW4A16(c *call) *w4a16Call {
	w := &w4a16Call{format: backend.W4AWQ}
	c.params(&w.p)
	switch w.p.Format {
	case "awq":
		if w.p.ActOrder {
			c.fail(fmt.Errorf("param act_order = true: AWQ has no act-order (GPTQ's g_idx)"))
		}
	case "gptq":
		w.format = backend.W4GPTQ
	default:
		c.fail(fmt.Errorf("param format = %q: want awq or gptq", w.p.Format))
	}
	w.x, w.qweight, w.qzeros, w.scales = c.input("x"), c.input("qweight"), c.input("qzeros"), c.input("scales")
	if w.format == backend.W4GPTQ {
		w.gIdx = c.input("g_idx")
	}
	if c.err == nil {
		w.out = c.alloc(w.x.DType(), []int{c.dim("x", w.x, 0), c.dim("scales", w.scales, 1)})
	}
	return w
}

// tiledW4A16 runs a gemm_w4a16 case through a W4Tiler's own layout: the weight tiled once, as a
// model's is at load time (not timed by a benchmark of the prepared op), then the tiled GEMM
// (each launch). A GPTQ case with act-order is unsupported: the layout keeps groups in order.
func tiledW4A16(c *call) {
	tiler, ok := c.b.(backend.W4Tiler)
	if !ok {
		c.fail(fmt.Errorf("gemm_w4a16 tiled on %s: no tiled layout: %w", c.b.Info().Backend, backend.ErrUnsupported))
		return
	}
	w := loadW4A16(c)
	if c.err != nil {
		return
	}
	if w.format == backend.W4GPTQ {
		g := c.host("g_idx")
		if c.err != nil {
			return
		}
		if g.DType != tensor.I32 {
			c.fail(fmt.Errorf("input g_idx is %s: want i32", g.DType))
			return
		}
		if !backend.W4GroupsInOrder(g.I32, w.p.GroupSize) {
			c.fail(&backend.UnsupportedError{Op: "w4a16_tile", Arg: "g_idx", Value: "act-order",
				Reason: "the tiled layout keeps GPTQ's groups in order (g(k) = k / group_size)"})
			return
		}
	}
	tiled, err := tiler.W4A16Tile(w.qweight, w.qzeros, w.scales, w.format, w.p.GroupSize)
	if err != nil {
		c.fail(err)
		return
	}
	c.bufs = append(c.bufs, tiled)
	n := w.scales.Shape()[1]
	c.do(func() error { return tiler.GemmW4A16Tiled(w.out, w.x, tiled, n, w.p.GroupSize) })
	c.output("out", w.out)
}

// Tiled lists the ops a W4Tiler can run through its own weight layout.
func Tiled(op string) bool { return op == "gemm_w4a16" }

// PrepareTiled is Prepare for gemm_w4a16 through a W4Tiler's tiled weight.
func PrepareTiled(b backend.Backend, op string, src Source) (*Prepared, error) {
	if !Tiled(op) {
		return nil, fmt.Errorf("op %q has no tiled weight layout", op)
	}
	return prepare(b, op, src, Aligned, tiledW4A16)
}

// CheckTiled runs and judges set's gemm_w4a16 case through b's tiled weight, by the op's
// tolerance and golden files.
func CheckTiled(b backend.Backend, set *golden.Set, tols *compare.Tolerances) ([]Verdict, error) {
	return checkForm(b, set, tols, PrepareTiled)
}
