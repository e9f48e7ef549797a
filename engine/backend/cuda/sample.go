package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Sample draws one token per row of the fp32 logits [rows, vocab] into the i32 tokens [rows],
// as docs/sampling.md specifies. The config is checked here and again by the library; the
// logits are checked on the device: a NaN or +inf logit, or a row of -inf only, surfaces as
// an argument error at the next Download or Synchronize (at once with guards on), and that
// row's token is -1.
func (b *Backend) Sample(tokens, logits backend.Buffer, cfg backend.SampleConfig) error {
	const op = "sample"
	if err := backend.CheckSample(tokens, logits, cfg); err != nil {
		return err
	}
	d, err := b.device(op, arg{"tokens", tokens}, arg{"logits", logits})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_sample_config{
		rows:        c.int("rows", d[1].shape[0]),
		vocab:       c.int("vocab", d[1].shape[1]),
		temperature: C.float(cfg.Temperature),
		top_k:       c.int("top_k", cfg.TopK), // CheckSample keeps it in int32 range
		top_p:       C.float(cfg.TopP),
		seed:        C.uint64_t(cfg.Seed),
		step:        C.uint64_t(cfg.Step),
	}
	if c.err != nil {
		return c.err
	}
	return b.launched(op, C.tsg_sample(b.lib.api, ptr(d[0]), ptr(d[1]), &ccfg, b.e), arg{"tokens", tokens})
}

// Philox writes the raw Philox4x32-10 stream into out, i32 [n, 4] holding the uint32 words'
// bits: row i is the output for key seed and counter (step + i, row).
func (b *Backend) Philox(out backend.Buffer, seed, step uint64, row uint32) error {
	const op = "philox"
	if err := backend.CheckPhilox(out); err != nil {
		return err
	}
	d, err := b.device(op, arg{"out", out})
	if err != nil {
		return err
	}
	c := dims{op: op}
	ccfg := C.ts_philox_config{
		seed: C.uint64_t(seed),
		step: C.uint64_t(step),
		row:  C.uint32_t(row),
		n:    c.int("n", d[0].shape[0]),
	}
	if c.err != nil {
		return c.err
	}
	return b.launched(op, C.tsg_philox(b.lib.api, ptr(d[0]), &ccfg, b.e), arg{"out", out})
}
