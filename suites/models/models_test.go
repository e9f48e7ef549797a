package models_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Sets are discovered while the tree is built, so each model is its own entry; a discovery
// error fails a spec below.
var modelSets, discoverErr = harness.ModelSets()

// committedModels must always be present: CI runs them on the CPU backend.
var committedModels = []string{"qwen2-tiny", "phi3-tiny", "gpt2-tiny"}

var _ = Describe("model golden sets", harness.Model, func() {
	It("are all discoverable and well-formed, with every committed tiny model", func() {
		Expect(discoverErr).NotTo(HaveOccurred())
		var names []string
		for _, s := range modelSets {
			names = append(names, s.Manifest.Model)
		}
		Expect(names).To(ContainElements(committedModels))
	})
})

// loadModel loads a set's checkpoint onto the suite's backend, freed when the spec ends.
func loadModel(s *golden.Set) (*model.Model, *model.SetParams) {
	m, p, err := model.LoadSet(dev, s)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(m.Close)
	return m, p
}

// attachLayerDiff adds the layer-diff table as a report entry and returns it.
func attachLayerDiff(s *golden.Set, rows []compare.TapResult) string {
	table := compare.LayerDiffTable(rows)
	AddReportEntry("layer diff "+s.ID(), table)
	return table
}

func modelEntries() []TableEntry {
	var entries []TableEntry
	for _, s := range modelSets {
		entries = append(entries, Entry(fmt.Sprintf("%s (%s, %s)", s.Manifest.Model, s.ID(), s.Manifest.Tier), s,
			harness.ModelName(s.Manifest.Model), harness.Tier(s.Manifest.Tier)))
	}
	return entries
}

var _ = Describe("model conformance", harness.Model, func() {
	DescribeTable("every tap of prefill and the stored decode steps", func(s *golden.Set) {
		m, p := loadModel(s)
		rows, err := model.CompareTaps(m, s, p, tols)
		Expect(err).NotTo(HaveOccurred())
		Expect(rows).NotTo(BeEmpty())
		worst, worstName := 0.0, ""
		for _, r := range rows {
			if b := r.Result.MaxBudget(); b > worst {
				worst, worstName = b, r.Name
			}
		}
		AddReportEntry("worst tap budget", fmt.Sprintf("%s: %.1f%% of its budget (%d taps)", worstName, 100*worst, len(rows)))
		if first := compare.FirstFailure(rows); first >= 0 {
			Fail(fmt.Sprintf("%s: tap %s is out of tolerance; layer diff:\n%s", s.ID(), rows[first].Name, attachLayerDiff(s, rows)))
		}
	}, modelEntries())

	DescribeTable("greedy generation of the reference's tokens", func(s *golden.Set) {
		m, p := loadModel(s)
		steps, err := model.Greedy(m, s, p)
		if err != nil {
			// On a token failure, the taps say where the pass went wrong.
			if rows, terr := model.CompareTaps(m, s, p, tols); terr == nil {
				attachLayerDiff(s, rows)
			}
		}
		Expect(err).NotTo(HaveOccurred())
		last := steps[len(steps)-1]
		if last.Accepted {
			AddReportEntry("greedy", fmt.Sprintf("%d tokens equal, then an accepted near-tie at step %d (margin %.3g < %g): comparison stopped",
				len(steps)-1, last.Step, last.Margin, p.MarginEpsilon))
		} else {
			Expect(steps).To(HaveLen(p.GreedyTokens))
		}
	}, modelEntries())
})

// broken is a deliberately wrong variant of a model and the tap where it must first fail.
type broken struct {
	model, what, firstTap string
	breakIt               func(m *model.Model)
}

var _ = Describe("model tolerances are tight", harness.Model, harness.Tightness, func() {
	DescribeTable("a broken variant fails at the first tap it changes", func(b broken) {
		var set *golden.Set
		for _, s := range modelSets {
			if s.Manifest.Model == b.model && s.Manifest.Tier == golden.TierCommitted {
				set = s
			}
		}
		Expect(set).NotTo(BeNil(), "committed set %s", b.model)
		m, p := loadModel(set)
		b.breakIt(m)
		rows, err := model.CompareTaps(m, set, p, tols)
		Expect(err).NotTo(HaveOccurred())
		first := compare.FirstFailure(rows)
		table := compare.LayerDiffTable(rows)
		Expect(first).To(BeNumerically(">=", 0), "%s passed every tap:\n%s", b.what, table)
		Expect(rows[first].Name).To(Equal(b.firstTap), "layer diff:\n%s", table)
		Expect(strings.Count(table, ">>")).To(Equal(1))
	},
		func(b broken) string { return b.model + ": " + b.what },
		Entry(nil, broken{"qwen2-tiny", "RoPE theta 1e4 instead of 1e6", "prefill.layers.0.q_rope",
			func(m *model.Model) { m.Cfg.RopeTheta = 1e4 }}, harness.ModelName("qwen2-tiny")),
		Entry(nil, broken{"qwen2-tiny", "k and v biases swapped in layer 1", "prefill.layers.1.k",
			func(m *model.Model) { a := m.Layers[1].Attn; a.Bk, a.Bv = a.Bv, a.Bk }}, harness.ModelName("qwen2-tiny")),
		Entry(nil, broken{"phi3-tiny", "RoPE theta 1e6 instead of 1e4", "prefill.layers.0.q_rope",
			func(m *model.Model) { m.Cfg.RopeTheta = 1e6 }}, harness.ModelName("phi3-tiny")),
		Entry(nil, broken{"phi3-tiny", "RMSNorm eps 1e-2 instead of 1e-5", "prefill.layers.0.attn_norm",
			func(m *model.Model) { m.Cfg.NormEps = 1e-2 }}, harness.ModelName("phi3-tiny")),
		Entry(nil, broken{"gpt2-tiny", "LayerNorm eps 1e-2 instead of 1e-5", "prefill.layers.0.attn_norm",
			func(m *model.Model) { m.Cfg.NormEps = 1e-2 }}, harness.ModelName("gpt2-tiny")),
	)
})
