package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// LogitSoftcap is Gemma 2's final logit soft cap, out = softcap · tanh(x / softcap), in fp64
// (transformers' three steps, the quotient, tanh and the product, with no rounding between them)
// and stored as the kernel stores it: fp32 logits as fp32, 16-bit ones rounded once to their
// dtype (through fp32, whose rounding is far below the 16-bit one). ±inf gives ±softcap and NaN
// stays NaN, as torch.tanh gives them.
func (*Backend) LogitSoftcap(out, x backend.Buffer, softcap float32) error {
	if err := backend.CheckLogitSoftcap(out, x, softcap); err != nil {
		return err
	}
	ts, err := tensors("logit_softcap", out, x)
	if err != nil {
		return err
	}
	vals := ts[1].Float32()
	c := float64(softcap)
	for i, v := range vals {
		vals[i] = float32(c * math.Tanh(float64(v)/c))
	}
	store(ts[0], vals)
	return nil
}
