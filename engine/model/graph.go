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

// graphState is the decode step captured as a graph, the prefills captured per prompt length,
// and what they were captured with.
//
// A decode step issues the same ops on the same buffers every time: the weights, the KV
// caches (written at the rows stepIn names), the activations and the logits. Only stepIn's
// contents change, and the ops read them on the device. So a step is captured once and
// replayed for every later step, as long as the model's configuration and weights (which a
// test may change after Load) are the ones it was captured with. A prefill of T tokens is the
// same from promptIn's first T rows: captured the second time a length is seen and replayed
// after that (prefillGraphs).
type graphState struct {
	graphs  backend.Graphs
	enabled bool

	step captured   // the decode step
	key  captureKey // what every graph here was captured with

	// warm: a decode step ran op by op with cfg and weights: the pool holds the step's
	// buffers and the backend's workspaces have grown, so a capture allocates nothing.
	warm    bool
	replays int

	prefill         map[int]*prefillGraph // by prompt length
	prefillSeen     map[int]bool          // lengths prefilled op by op since the graphs were current
	prefillReplays  int
	prefillCaptures int
}

// prefillGraph is one prompt length's captured prefill and the buffers it holds.
type prefillGraph struct {
	captured
	capturedWith int // the order of capture: the oldest goes first when maxPrefillGraphs are held
}

// captured is a pass recorded as a graph, with the pass's activations and views, which stay
// out of the model's pool while the graph lives (a replay writes them).
type captured struct {
	g           backend.Graph
	held, views []backend.Buffer
}

// captureInto records pass, issued on the capturing backend, into c and keeps the pass's
// buffers for it. On failure the pass's buffers go back to the pool.
func (m *Model) captureInto(c *captured, pass func(be backend.Backend, mem backend.Memory) error) error {
	g, err := m.capture(pass)
	if err != nil {
		m.endPass()
		return err
	}
	c.g = g
	c.held, c.views = slices.Clone(m.inUse), slices.Clone(m.views)
	m.inUse, m.views = m.inUse[:0], m.views[:0]
	return nil
}

// release frees c's graph, if any, and hands its buffers back to the pool at the next endPass.
func (m *Model) release(c *captured) {
	if c.g == nil {
		return
	}
	c.g.Free()
	c.g = nil
	m.inUse = append(m.inUse, c.held...)
	m.views = append(m.views, c.views...)
	c.held, c.views = nil, nil
}

// captureKey is what graphs were captured with: a test may change the model's configuration
// or weights after Load, and the batch-invariant mode changes the kernels an op picks.
type captureKey struct {
	cfg     Config
	mode    bool
	weights []backend.Buffer // every weight reference of the layers, in order, at capture
	scratch []backend.Buffer // the same, now: reused from pass to pass
}

// stale reports whether the model's configuration or weights, or the backend's batch-invariant
// mode, differ from what k recorded, and records the current ones.
func (k *captureKey) stale(m *Model, mode bool) bool {
	k.scratch = m.appendWeightRefs(k.scratch[:0])
	if k.cfg == m.Cfg && k.mode == mode && slices.Equal(k.weights, k.scratch) {
		return false
	}
	k.cfg, k.mode = m.Cfg, mode
	k.weights, k.scratch = k.scratch, k.weights
	return true
}

// Prefills are captured only up to maxPrefillGraphTokens tokens (a captured pass keeps every
// activation buffer of its length out of the pool: ~100 MB for Qwen2.5-0.5B at 128 tokens) and
// for at most maxPrefillGraphs lengths at once.
const (
	maxPrefillGraphTokens = 512
	maxPrefillGraphs      = 4
)

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

// PrefillReplays is the number of prefills replayed from a graph since Load.
func (m *Model) PrefillReplays() int {
	if m.graphs == nil {
		return 0
	}
	return m.graphs.prefillReplays
}

// graphsCurrent drops every graph and warm mark made with another configuration, other
// weights or another batch-invariant mode than the model's and the backend's now (compared every pass, into a reused slice, since a test may
// change either after Load); reports whether any graph may be used.
func (m *Model) graphsCurrent() bool {
	gs := m.graphs
	if gs == nil || !gs.enabled || len(m.want) > 0 || m.inject != nil || m.routes != nil {
		return false
	}
	mode, err := invariantMode(m.be)
	if err != nil {
		return false
	}
	if gs.key.stale(m, mode) {
		m.dropGraph()
		gs.warm = false
	}
	return true
}

// decodeStep runs one decode step from stepIn: replayed from the graph when it can be,
// captured when the step before ran op by op with the same configuration and weights,
// else op by op. Taps need host copies between ops, so a step with taps runs op by op.
func (m *Model) decodeStep(prefix string) error {
	if !m.graphsCurrent() {
		return m.eagerDecode(prefix)
	}
	gs := m.graphs
	if !gs.warm {
		if err := m.eagerDecode(prefix); err != nil {
			return err
		}
		gs.warm = true
		return nil
	}
	if gs.step.g == nil {
		if err := m.captureDecode(prefix); err != nil {
			return err
		}
	}
	if err := gs.step.g.Launch(); err != nil {
		return err
	}
	gs.replays++
	return nil
}

func (m *Model) eagerDecode(prefix string) error {
	defer m.endPass()
	return m.decodePass(m.be, m.mem, prefix)
}

// capture records pass, issued on the capturing backend, as a graph.
func (m *Model) capture(pass func(be backend.Backend, mem backend.Memory) error) (backend.Graph, error) {
	return m.graphs.graphs.Capture(func(be backend.Backend) error {
		mem, ok := be.(backend.Memory)
		if !ok {
			return fmt.Errorf("model: the capturing backend %s has no device views and copies (backend.Memory)", be.Info().Backend)
		}
		return pass(be, mem)
	})
}

// captureDecode records a decode step into gs.step and keeps the pass's buffers for it.
func (m *Model) captureDecode(prefix string) error {
	gs := m.graphs
	if err := m.captureInto(&gs.step, func(be backend.Backend, mem backend.Memory) error { return m.decodePass(be, mem, prefix) }); err != nil {
		gs.warm = false
		return fmt.Errorf("model: capturing a decode step: %w", err)
	}
	return nil
}

// dropGraph frees every graph (the decode step's and the prefills') and gives their buffers
// back to the pool; the lengths seen are forgotten.
func (m *Model) dropGraph() {
	gs := m.graphs
	if gs == nil {
		return
	}
	m.release(&gs.step)
	for t := range gs.prefill {
		m.dropPrefillGraph(t)
	}
	gs.prefillSeen = nil
	m.endPass()
}

// dropPrefillGraph frees one length's prefill graph; its buffers go back to the pool at the
// next endPass.
func (m *Model) dropPrefillGraph(t int) {
	gs := m.graphs
	m.release(&gs.prefill[t].captured)
	delete(gs.prefill, t)
}

// prefillGraphs runs the prefill of the first T rows of promptIn: replayed from its length's
// graph when there is one, captured when the same length was prefilled op by op before (an op
// by op pass right before the capture puts every buffer of the pass in the pool and grows the
// workspaces, so the capture allocates nothing), else op by op. Returns false (having done
// nothing) where graphs may not be used.
func (m *Model) prefillGraphs(T int) (bool, error) {
	if T > maxPrefillGraphTokens || !m.graphsCurrent() {
		return false, nil
	}
	gs := m.graphs
	if pg := gs.prefill[T]; pg != nil {
		if err := pg.g.Launch(); err != nil {
			return true, err
		}
		gs.prefillReplays++
		return true, nil
	}
	if !gs.prefillSeen[T] {
		if gs.prefillSeen == nil {
			gs.prefillSeen = map[int]bool{}
		}
		gs.prefillSeen[T] = true
		return false, nil
	}
	if err := m.eagerPrefill(T); err != nil {
		return true, err
	}
	if len(gs.prefill) >= maxPrefillGraphs {
		oldest, at := 0, -1
		for t, pg := range gs.prefill {
			if at < 0 || pg.capturedWith < at {
				oldest, at = t, pg.capturedWith
			}
		}
		m.dropPrefillGraph(oldest)
		m.endPass()
	}
	pg := &prefillGraph{}
	if err := m.captureInto(&pg.captured, func(be backend.Backend, mem backend.Memory) error { return m.prefillPass(be, mem, T) }); err != nil {
		return true, fmt.Errorf("model: capturing a prefill of %d tokens: %w", T, err)
	}
	if gs.prefill == nil {
		gs.prefill = map[int]*prefillGraph{}
	}
	gs.prefillCaptures++
	pg.capturedWith = gs.prefillCaptures
	gs.prefill[T] = pg
	if err := pg.g.Launch(); err != nil {
		return true, err
	}
	gs.prefillReplays++
	return true, nil
}

// appendWeightRefs appends every weight buffer a pass reads to refs, in a fixed order.
func (m *Model) appendWeightRefs(refs []backend.Buffer) []backend.Buffer {
	for _, k := range []string{"embed", "pos_embed", "final_norm", "final_norm_b", "head"} {
		refs = append(refs, m.w[k])
	}
	for _, l := range m.Layers {
		a, f := l.Attn, l.MLP
		refs = append(refs, l.AttnNorm.W, l.AttnNorm.B, l.FFNNorm.W, l.FFNNorm.B,
			a.Wq, a.Bq, a.Wk, a.Bk, a.Wv, a.Bv, a.Wo, a.Bo, f.Gate, f.Up, f.UpB, f.Down, f.DownB,
			f.Router, f.ExpertsGateUp, f.ExpertsDown)
		for _, q := range []*QLinear{a.Qq, a.Qk, a.Qv, a.Qo, f.QGate, f.QUp, f.QDown} {
			if q == nil {
				refs = append(refs, nil, nil, nil, nil, nil)
			} else {
				refs = append(refs, q.W, q.Scales, q.Zeros, q.GIdx, q.Tiled)
			}
		}
	}
	return refs
}
