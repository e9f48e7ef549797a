package conformance

// logitSoftcapParams are logit_softcap's (docs/golden-format.md): the cap (the fp32 the kernel
// receives; Gemma 2's final_logit_softcapping), and inplace, which writes out over x.
type logitSoftcapParams struct {
	Softcap float32 `json:"softcap"`
	InPlace bool    `json:"inplace"`
}

func init() {
	register("logit_softcap", func(c *call) {
		var p logitSoftcapParams
		c.params(&p)
		x := c.input("x")
		out := x
		if !p.InPlace {
			out = c.like(x)
		}
		c.do(func() error { return c.b.LogitSoftcap(out, x, p.Softcap) })
		c.output("out", out)
	})
}
