package models_test

import (
	"fmt"
	"maps"
	"slices"

	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Every spec of one model set runs in one Ordered container: under ginkgo -p a container goes
// to one process, so a full-size checkpoint is loaded once per run, not once in every process
// that meets one of its specs (Phi-3-mini-4k is 7.6 GB: seven processes loading it at once
// made each of their first specs take 13-20 s), and it is freed when the set's last spec ends.
// ContinueOnFailure: a failing spec does not skip the set's other checks.
var _ = Describe("model set", harness.Model, func() {
	present := map[string]bool{}
	for _, s := range modelSets {
		present[s.Manifest.Model] = true
		Describe(fmt.Sprintf("%s (%s, %s)", s.Manifest.Model, s.ID(), s.Manifest.Tier), Ordered, ContinueOnFailure,
			harness.ModelName(s.Manifest.Model), harness.Tier(s.Manifest.Tier), func() {
				modelSpecs(s)
			})
	}
	// A full-size set that is not generated: its checks are skipped, saying how to make it.
	// Sorted: every parallel process must build the same tree.
	for _, name := range slices.Sorted(maps.Keys(fullSize)) {
		if present[name] {
			continue
		}
		It(name+": every check", harness.ModelName(name), harness.Slow, func() {
			Skip(name + ": set not generated (" + generateHint(name) + ")")
		})
	}
})

// modelSpecs registers every check of one set, the conformance checks first (the hyper-parameters
// before any tap), then its broken variants, loader bugs and planted kernel bugs.
func modelSpecs(s *golden.Set) {
	AfterAll(func() { unload(s) })
	name := s.Manifest.Model
	It("the loader derives the reference's hyper-parameters", func() { checkHParams(s) })
	It("every tap of prefill and the stored decode steps", func() { checkTaps(s, true) })
	// The decode steps op by op, as a prefill runs them: the composition the fused ops
	// (model.Model.Fused) must equal, kept passing beside them.
	It("every tap with the fused decode ops off", Label("unfused"), func() { checkTaps(s, false) })
	It("the logits of decode steps run without taps, as generation runs them", func() { checkUntappedLogits(s) })
	It("greedy generation of the reference's tokens", func() { checkGreedy(s) })
	It("seeded generation draws the reference's tokens (docs/sampling.md)", harness.Sampling, func() { checkSeeded(s) })
	It("seeded generation, teacher-forced on the reference's tokens, draws its token at every step the margin decides",
		harness.Sampling, func() { checkSeededTeacherForced(s) })
	It("seeded generation is deterministic: 20 runs give the same tokens and bit-identical logits",
		harness.Sampling, func() { checkSeededDeterministic(s) })
	It("decode steps and prefills replayed from a graph give the tokens and logits of passes run op by op, bit for bit",
		func() { checkGraphReplay(s) })
	It("the isolated replay (touchstone diff -isolate) passes every tap", func() { checkIsolatedPasses(s) })
	batchSpecs(s)
	for _, b := range brokenVariants {
		if b.model == name {
			It("a broken variant fails at the first tap it changes: "+b.what, harness.Tightness, func() { checkBroken(s, b) })
		}
	}
	for _, b := range hparamBugs {
		if b.model == name {
			It("a loader bug in a hyper-parameter is caught by the check, naming it: "+b.what, harness.Tightness,
				func() { checkHParamBug(s, b) })
		}
	}
	for _, c := range isolations {
		if c.model == name {
			It(fmt.Sprintf("the isolated replay names the layer and op of a planted kernel bug (%s broken at call %d), as the plain diff's first failing tap does, with no drift after it", c.op, c.at),
				func() { checkPlantedBug(s, c) })
		}
	}
}

// unload frees a set's model once its container has run (loadModel loaded it on first use).
func unload(s *golden.Set) {
	if lm := loaded[s.Dir]; lm != nil {
		if lm.m != nil {
			lm.m.Close()
		}
		delete(loaded, s.Dir)
	}
}
