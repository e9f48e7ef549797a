package model

import (
	"slices"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Snapshot records what a caller may change on a loaded model (Cfg, Fused, the layers and
// their weight references, graph use) and returns the function that puts it all back, so one
// loaded model can serve many checks, broken variants included, instead of a load each.
// Restoring also forgets requested and captured taps, empties the cache and drops a captured
// decode graph (which may hold the changed configuration), so the next decode steps run as
// after Load: the first op by op, then captured, then replayed.
func (m *Model) Snapshot() (restore func()) {
	cfg, fused, layers := m.Cfg, m.Fused, slices.Clone(m.Layers)
	type saved struct {
		layer Layer
		attn  Attention
		mlp   MLP
	}
	values := make([]saved, len(layers))
	for i, l := range layers {
		values[i] = saved{*l, *l.Attn, *l.MLP}
	}
	graphs := m.graphs != nil && m.graphs.enabled
	be := m.be
	return func() {
		m.Cfg, m.Fused, m.Layers, m.be = cfg, fused, layers, be
		for i, l := range layers {
			*l = values[i].layer
			*l.Attn, *l.MLP = values[i].attn, values[i].mlp
		}
		m.RequestTaps(nil)
		m.taps = nil
		if m.UseGraphs(false) {
			// As after Load: the next decode step runs op by op before one is captured.
			m.graphs.warm = false
			m.UseGraphs(graphs)
		}
		m.Reset()
	}
}

// Intercept issues the model's ops through wrap(be) from now on, be being the backend it was
// loaded on: a test plants a broken kernel this way (say, one layer's attention) on the weights
// already loaded. The wrapper must pass buffers through to be unchanged. Decode graphs are
// turned off, since a graph would replay the ops captured before. Snapshot's restore undoes it.
func (m *Model) Intercept(wrap func(be backend.Backend) backend.Backend) {
	m.UseGraphs(false)
	m.be = wrap(m.be)
}
