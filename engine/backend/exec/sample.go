package exec

import (
	"encoding/json"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/sample"
)

// Sample draws one token per row through the adapter's "sample" op, from the adapter's own
// random numbers keyed by (seed, step, row). The config and every row of logits are checked
// here first, as docs/sampling.md requires of every sampler, so an adapter sees only valid
// requests and a bad one is refused by name before anything runs.
func (b *Backend) Sample(tokens, logits backend.Buffer, cfg backend.SampleConfig) error {
	if err := backend.CheckSample(tokens, logits, cfg); err != nil {
		return err
	}
	h, err := b.host("sample logits", logits)
	if err != nil {
		return err
	}
	rows, vocab := h.t.Shape[0], h.t.Shape[1]
	if vocab == 0 {
		return &backend.ArgError{Op: "sample", Arg: "logits", Value: fmt.Sprintf("[%d,%d]", rows, vocab), Reason: "vocab must be >= 1"}
	}
	// The logits' checks hold until the buffer changes: a loop of draws checks them once.
	if !h.rowsChecked {
		for r := range rows {
			if err := sample.Validate(cfg, r, h.t.F32[r*vocab:(r+1)*vocab]); err != nil {
				return err
			}
		}
		h.rowsChecked = true
	}
	params, err := json.Marshal(sample.ParamsOf(cfg))
	if err != nil {
		return err
	}
	return b.RunOp(sample.OpName, params, []backend.NamedBuffer{{Name: "logits", Buf: logits}},
		[]backend.NamedBuffer{{Name: "tokens", Buf: tokens}})
}

// SamplesWithOwnRNG: an adapter's sampler draws its own random numbers (backend.OwnRNGSampler).
func (b *Backend) SamplesWithOwnRNG() bool { return true }
