package model

import "slices"

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
	return func() {
		m.Cfg, m.Fused, m.Layers = cfg, fused, layers
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
