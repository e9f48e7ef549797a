package bench

import (
	"encoding/json"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/sample"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SampleOp is the bench op name of seeded sampling (backend.Sampler): not a golden kernel op,
// so it has no conformance runner; the bench prepares it itself. Its params are sample.Params
// without a step; tools/bench/torch_peer.py reads the same keys.
const SampleOp = sample.OpName

// sampleCase is one token drawn from logits [1, vocab] (normal, std 3: a realistic spread).
func sampleCase(name string, vocab int, params string) Case {
	return Case{Name: name, Op: SampleOp, Params: params,
		Inputs: []conformance.InputSpec{in("logits", tensor.F32, []int{1, vocab}, normal(3, 0))},
		Bytes:  int64(vocab) * f32}
}

// prepareSample uploads a sample case's logits and returns its launch and free.
func prepareSample(b backend.Backend, c Case, seed uint64) (func() error, func(), error) {
	var p sample.Params
	if err := (conformance.Memory{Params: json.RawMessage(c.Params)}).DecodeParams(&p); err != nil {
		return nil, nil, fmt.Errorf("bench %s: params: %w", c.Name, err)
	}
	logits, err := b.Upload(conformance.RandomInputs(seed, c.Inputs)["logits"])
	if err != nil {
		return nil, nil, err
	}
	tokens, err := b.Alloc(tensor.I32, 1)
	if err != nil {
		logits.Free()
		return nil, nil, err
	}
	cfg := p.Config()
	launch := func() error {
		cfg.Step++ // a new draw each launch, as in generation
		return b.Sample(tokens, logits, cfg)
	}
	return launch, func() { logits.Free(); tokens.Free() }, nil
}
