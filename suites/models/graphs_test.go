package models_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// seededRun is one seeded generation: its tokens, the logits of every step, and how many of
// its decode steps were replayed from a graph.
type seededRun struct {
	tokens  []int32
	logits  [][]float32
	replays int
}

func generate(m *model.Model, p *model.SetParams) seededRun {
	before := m.GraphReplays()
	t, l, err := model.GenerateSeeded(m, p, nil)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	return seededRun{t, l, m.GraphReplays() - before}
}

// expectSameRun demands equal tokens and bit-identical logits at every step.
func expectSameRun(got, want seededRun, what string) {
	Expect(got.tokens).To(Equal(want.tokens), "%s: tokens", what)
	Expect(got.logits).To(HaveLen(len(want.logits)))
	for j := range want.logits {
		Expect(bitsEqual(got.logits[j], want.logits[j])).To(BeTrue(), "%s: the logits of step %d differ in their bits", what, j)
	}
}

// checkGraphReplay: decode steps and prefills replayed from a graph give the tokens and logits of
// passes run op by op, bit for bit.
func checkGraphReplay(s *golden.Set) {
	m, p := loadModel(s)
	if !m.UseGraphs(false) {
		Skip(fmt.Sprintf("the %s backend has no graphs", dev.Info().Backend))
	}
	eager := generate(m, p)
	Expect(eager.replays).To(BeZero())
	m.UseGraphs(true)
	graphed := generate(m, p)
	// The first decode step runs op by op (it warms the buffer pool and workspaces), the
	// second is captured, and every one after it replays that capture.
	Expect(graphed.replays).To(Equal(p.Sample.Tokens-2), "decode steps replayed")
	expectSameRun(graphed, eager, "graph replay")
	// The prefill: the first of a length ran op by op above, the second is captured and
	// launched, the third replayed; every decode step now replays the graph captured before.
	before := m.PrefillReplays()
	for _, what := range []string{"prefill captured", "prefill replayed"} {
		run := generate(m, p)
		Expect(run.replays).To(Equal(p.Sample.Tokens-1), "%s: decode steps replayed", what)
		expectSameRun(run, eager, what)
	}
	Expect(m.PrefillReplays()-before).To(Equal(2), "prefills from a graph")
	AddReportEntry("graph replay", fmt.Sprintf("%d decode steps replayed, then 2 prefills, tokens and logits bit-identical to op by op", graphed.replays))
}

var _ = Describe("decode steps replayed from a graph", harness.Model, func() {
	It("never replays a graph captured before the configuration or a weight changed", func() {
		s := findSet("qwen2-tiny")
		Expect(s).NotTo(BeNil())
		m, p := loadModel(s)
		if !m.UseGraphs(true) {
			Skip(fmt.Sprintf("the %s backend has no graphs", dev.Info().Backend))
		}
		for _, change := range []struct {
			what string
			do   func()
		}{
			{"RoPE theta 1e4", func() { m.Cfg.RopeTheta = 1e4 }},
			{"k and v biases swapped in layer 1", func() { a := m.Layers[1].Attn; a.Bk, a.Bv = a.Bv, a.Bk }},
		} {
			before := generate(m, p) // leaves a graph captured before the change
			Expect(before.replays).To(BeNumerically(">", 0))
			change.do()
			graphed := generate(m, p)
			Expect(graphed.replays).To(BeNumerically(">", 0), change.what)
			m.UseGraphs(false)
			eager := generate(m, p)
			m.UseGraphs(true)
			// The change must reach the logits, or this would prove nothing.
			last := len(eager.logits) - 1
			Expect(bitsEqual(eager.logits[last], before.logits[last])).To(BeFalse(), change.what)
			expectSameRun(graphed, eager, "after "+change.what)
		}
	})
})
