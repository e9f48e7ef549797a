package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/sample"
)

// Sample draws one token per row with engine/sample, the Go implementation of
// docs/sampling.md. Every row is validated before any token is written.
func (*Backend) Sample(tokens, logits backend.Buffer, cfg backend.SampleConfig) error {
	if err := backend.CheckSample(tokens, logits, cfg); err != nil {
		return err
	}
	ts, err := tensors("sample", tokens, logits)
	if err != nil {
		return err
	}
	rows, vocab := ts[1].Shape[0], ts[1].Shape[1]
	for r := 0; r < rows; r++ {
		if err := sample.Validate(cfg, r, ts[1].F32[r*vocab:(r+1)*vocab]); err != nil {
			return err
		}
	}
	out := make([]int32, rows)
	for r := range out {
		res, err := sample.Row(ts[1].F32[r*vocab:(r+1)*vocab], cfg, uint32(r))
		if err != nil {
			return err
		}
		out[r] = int32(res.Token)
	}
	copy(ts[0].I32, out)
	return nil
}

// Philox writes the raw stream: row i is the output for counter (step + i, row).
func (*Backend) Philox(out backend.Buffer, seed, step uint64, row uint32) error {
	if err := backend.CheckPhilox(out); err != nil {
		return err
	}
	ts, err := tensors("philox", out)
	if err != nil {
		return err
	}
	for i := 0; i < ts[0].Shape[0]; i++ {
		w := sample.Words(seed, step+uint64(i), row)
		for j, x := range w {
			ts[0].I32[4*i+j] = int32(x)
		}
	}
	return nil
}
