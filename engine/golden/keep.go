package golden

import (
	"sync"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// keptTensors holds each tensor of a set after its first read.
type keptTensors struct {
	mu sync.Mutex
	t  map[string]*tensor.Tensor
}

// KeepTensors makes Tensor read, checksum and decode each file once and then answer from
// memory, with a copy the caller may change: for a process that compares the same set many
// times (the models suite runs a full-size set's ~2000 taps in several specs). The set's
// tensors then stay in memory as long as the set does.
func (s *Set) KeepTensors() {
	if s.kept == nil {
		s.kept = &keptTensors{t: map[string]*tensor.Tensor{}}
	}
}

func (k *keptTensors) get(s *Set, name string) (*tensor.Tensor, error) {
	k.mu.Lock()
	t, ok := k.t[name]
	k.mu.Unlock()
	if !ok {
		var err error
		if t, err = s.readTensor(name); err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.t[name] = t
		k.mu.Unlock()
	}
	return t.Clone(), nil
}
