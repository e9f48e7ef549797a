package model

import (
	"fmt"
	"os"
	"slices"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// EnvGraphs turns the replay of decode steps from a captured graph off ("0") or on ("1", the
// default where the backend has graphs): off, every step issues its ops one by one, which
// helps to tell a graph problem from a kernel problem.
const EnvGraphs = "TOUCHSTONE_GRAPHS"

// graphState is the decode step captured as a graph, and what it was captured with.
//
// A decode step issues the same ops on the same buffers every time: the weights, the KV
// caches (written at the rows stepIn names), the activations and the logits. Only stepIn's
// contents change, and the ops read them on the device. So a step is captured once and
// replayed for every later step, as long as the model's configuration and weights (which a
// test may change after Load) are the ones it was captured with.
type graphState struct {
	graphs  backend.Graphs
	enabled bool

	g       backend.Graph
	cfg     Config           // the configuration the graph was captured with
	weights []backend.Buffer // every weight reference of the layers, in order, at capture
	scratch []backend.Buffer // the same, now: reused from step to step
	held    []backend.Buffer // the captured pass's activations, out of the pool while g lives
	views   []backend.Buffer // and its views

	// warm: a decode step ran op by op with cfg and weights: the pool holds the step's
	// buffers and the backend's workspaces have grown, so a capture allocates nothing.
	warm    bool
	replays int
}

// initGraphs enables graphs where the backend has them and EnvGraphs allows it.
func (m *Model) initGraphs() error {
	gr, ok := m.be.(backend.Graphs)
	if !ok {
		return nil
	}
	on := true
	switch v := os.Getenv(EnvGraphs); v {
	case "", "1":
	case "0":
		on = false
	default:
		return fmt.Errorf("model: %s=%q: want 1 (replay decode steps from a graph) or 0 (op by op)", EnvGraphs, v)
	}
	m.graphs = &graphState{graphs: gr, enabled: on}
	return nil
}

// UseGraphs turns the replay of decode steps on or off; it reports whether the backend has
// graphs at all (if not, steps always run op by op).
func (m *Model) UseGraphs(on bool) bool {
	if m.graphs == nil {
		return false
	}
	if !on {
		m.dropGraph()
	}
	m.graphs.enabled = on
	return true
}

// GraphReplays is the number of decode steps replayed from a graph since Load.
func (m *Model) GraphReplays() int {
	if m.graphs == nil {
		return 0
	}
	return m.graphs.replays
}

// decodeStep runs one decode step from stepIn: replayed from the graph when it can be,
// captured when the step before ran op by op with the same configuration and weights,
// else op by op. Taps need host copies between ops, so a step with taps runs op by op.
func (m *Model) decodeStep(prefix string) error {
	gs := m.graphs
	if gs == nil || !gs.enabled || len(m.want) > 0 {
		return m.eagerDecode(prefix)
	}
	// What the graph (or the warm-up step before it) was made with, against now: compared
	// every step, into a reused slice, since a test may change either after Load.
	gs.scratch = m.appendWeightRefs(gs.scratch[:0])
	if !gs.warm || gs.cfg != m.Cfg || !slices.Equal(gs.weights, gs.scratch) {
		m.dropGraph()
		if err := m.eagerDecode(prefix); err != nil {
			return err
		}
		gs.warm, gs.cfg = true, m.Cfg
		gs.weights, gs.scratch = gs.scratch, gs.weights
		return nil
	}
	if gs.g == nil {
		if err := m.captureDecode(prefix); err != nil {
			return err
		}
	}
	if err := gs.g.Launch(); err != nil {
		return err
	}
	gs.replays++
	return nil
}

func (m *Model) eagerDecode(prefix string) error {
	defer m.endPass()
	return m.decodePass(m.be, m.mem, prefix)
}

// captureDecode records a decode step into gs.g and keeps the pass's buffers for it.
func (m *Model) captureDecode(prefix string) error {
	gs := m.graphs
	g, err := gs.graphs.Capture(func(be backend.Backend) error {
		mem, ok := be.(backend.Memory)
		if !ok {
			return fmt.Errorf("model: the capturing backend %s has no device views and copies (backend.Memory)", be.Info().Backend)
		}
		return m.decodePass(be, mem, prefix)
	})
	if err != nil {
		m.endPass()
		gs.warm = false
		return fmt.Errorf("model: capturing a decode step: %w", err)
	}
	gs.g = g
	gs.held, gs.views = slices.Clone(m.inUse), slices.Clone(m.views)
	m.inUse, m.views = m.inUse[:0], m.views[:0]
	return nil
}

// dropGraph frees the graph and gives its buffers back to the pool.
func (m *Model) dropGraph() {
	gs := m.graphs
	if gs == nil || gs.g == nil {
		return
	}
	gs.g.Free()
	gs.g = nil
	m.inUse = append(m.inUse, gs.held...)
	m.views = append(m.views, gs.views...)
	gs.held, gs.views = nil, nil
	m.endPass()
}

// appendWeightRefs appends every weight buffer a pass reads to refs, in a fixed order.
func (m *Model) appendWeightRefs(refs []backend.Buffer) []backend.Buffer {
	for _, k := range []string{"embed", "pos_embed", "final_norm", "final_norm_b", "head"} {
		refs = append(refs, m.w[k])
	}
	for _, l := range m.Layers {
		a, f := l.Attn, l.MLP
		refs = append(refs, l.AttnNorm.W, l.AttnNorm.B, l.FFNNorm.W, l.FFNNorm.B,
			a.Wq, a.Bq, a.Wk, a.Bk, a.Wv, a.Bv, a.Wo, a.Bo, f.Gate, f.Up, f.UpB, f.Down, f.DownB)
	}
	return refs
}
