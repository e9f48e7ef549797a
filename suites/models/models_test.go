package models_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/engine/report"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Sets are discovered while the tree is built, so each model is its own entry; a discovery
// error fails a spec below.
var modelSets, discoverErr = harness.ModelSets()

// batchSets are the batch sets (docs/golden-format.md, "Batch sets"), run in the container of
// the model set whose checkpoint they use.
var batchSets, batchDiscoverErr = harness.BatchSets()

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

// loaded holds each set's model, loaded once per process on the first spec that needs it and
// shared by every later spec of the set (a checkpoint load is most of a full-size spec's time):
// each spec's changes (a broken variant's, Fused, graph use) are undone when it ends
// (Model.Snapshot). The models stay until the suite ends: the process holds every set's
// weights at once.
var loaded = map[string]*loadedModel{}

type loadedModel struct {
	m   *model.Model
	p   *model.SetParams
	err error
}

var _ = AfterSuite(func() {
	for dir, lm := range loaded {
		if lm.m != nil {
			lm.m.Close()
		}
		delete(loaded, dir)
	}
})

// loadModel returns the set's model on the suite's backend, loading it on first use, with the
// set's tensors kept in memory after their first read (golden.Set.KeepTensors). Every model
// spec passes the error of each run through harness.SkipUnsupported first: a model one of
// whose op calls the backend does not implement gets the unsupported verdict, as a kernel case
// does.
func loadModel(s *golden.Set) (*model.Model, *model.SetParams) {
	lm, ok := loaded[s.Dir]
	if !ok {
		s.KeepTensors()
		m, p, err := model.LoadSet(dev, s)
		lm = &loadedModel{m, p, err}
		loaded[s.Dir] = lm
	}
	harness.SkipUnsupported(lm.err)
	Expect(lm.err).NotTo(HaveOccurred())
	DeferCleanup(lm.m.Snapshot())
	return lm.m, lm.p
}

// attachLayerDiff adds the layer-diff table as a report entry and returns it.
func attachLayerDiff(s *golden.Set, rows []compare.TapResult) string {
	table := compare.LayerDiffTable(rows)
	AddReportEntry("layer diff "+s.ID(), table)
	return table
}

// checkTaps compares every tap of s, the decode steps run with the fused ops or without.
func checkTaps(s *golden.Set, fused bool) {
	m, p := loadModel(s)
	m.Fused = fused
	rows, err := model.CompareTaps(m, s, p, tols)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	Expect(rows).NotTo(BeEmpty())
	worst, worstName := 0.0, ""
	for _, r := range rows {
		if b := r.Result.MaxBudget(); b > worst {
			worst, worstName = b, r.Name
		}
	}
	AddReportEntry("worst tap budget", fmt.Sprintf("%s: %.1f%% of its budget (%d taps, fused decode %v)", worstName, 100*worst, len(rows), fused))
	if n, stop, err := m.FollowAmbiguousRoutes(s, false); err == nil && n > 0 {
		stop()
		AddReportEntry("routing decisions that followed the reference", fmt.Sprintf("%d token rows whose k-th and next router logits are within %d times their calibrated error", n, model.RoutingMargin))
	}
	if first := compare.FirstFailure(rows); first >= 0 {
		Fail(fmt.Sprintf("%s: tap %s [%s] is out of tolerance (fused decode %v)%s; layer diff:\n%s", s.ID(), rows[first].Name,
			m.TapOp(rows[first].Name), fused, triage(m, s, p, rows, fmt.Sprintf("fused-%v", fused)), attachLayerDiff(s, rows)))
	}
}

// checkUntappedLogits compares the logits of the stored decode steps run with no tap requested
// (model.CompareUntappedLogits) with the reference's.
func checkUntappedLogits(s *golden.Set) {
	m, p := loadModel(s)
	rows, err := model.CompareUntappedLogits(m, s, p, tols)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	Expect(rows).To(HaveLen(p.DecodeSteps))
	if first := compare.FirstFailure(rows); first >= 0 {
		Fail(fmt.Sprintf("%s: %s of a pass without taps is out of tolerance (the tapped pass's logits are checked by \"every tap\"):\n%s", s.ID(), rows[first].Name, rows[first].Result.Table()))
	}
}

// triage runs the isolated replay of a failing set (every op fed the reference's inputs), writes
// the HTML report of both runs into harness.TriageDir, attaches its path as a report entry, and
// returns what to add to the failure message: the op the isolated replay blames, and the path.
func triage(m *model.Model, s *golden.Set, p *model.SetParams, rows []compare.TapResult, variant string) string {
	var note string
	iso, err := model.CompareTapsIsolated(m, s, p, tols)
	switch first := compare.FirstFailure(iso); {
	case err != nil:
		note = "; isolated replay: " + err.Error()
	case first >= 0:
		note = fmt.Sprintf("; the isolated replay (each op from the reference's inputs) first fails at %s [%s]", iso[first].Name, m.TapOp(iso[first].Name))
	default:
		note = "; every op passes in the isolated replay: the error builds up over ops each within tolerance"
	}
	path := filepath.Join(harness.TriageDir(), strings.ReplaceAll(s.ID(), "/", "_")+"-"+variant+".html")
	first := compare.FirstFailure(rows)
	rep := report.Model{Set: s.ID(), Backend: fmt.Sprintf("%s (%s)", dev.Info().Backend, dev.Info().Name), Rows: rows, Isolated: iso,
		Note: fmt.Sprintf("first tap out of tolerance: %s [%s]%s", rows[first].Name, m.TapOp(rows[first].Name), note)}
	if err := report.WriteFile(path, rep); err != nil {
		return note + "; the HTML report could not be written: " + err.Error()
	}
	AddReportEntry("triage report", path, ReportEntryVisibilityAlways)
	return note + "; HTML report: " + path
}

// modelEntriesWhere is a table entry for each set keep accepts, labelled by model and tier.
func modelEntriesWhere(keep func(*golden.Set) bool) []TableEntry {
	var entries []TableEntry
	for _, s := range modelSets {
		if !keep(s) {
			continue
		}
		entries = append(entries, Entry(fmt.Sprintf("%s (%s, %s)", s.Manifest.Model, s.ID(), s.Manifest.Tier), s,
			harness.ModelName(s.Manifest.Model), harness.Tier(s.Manifest.Tier)))
	}
	return entries
}

// checkGreedy is the spec "greedy generation of the reference's tokens".
func checkGreedy(s *golden.Set) {
	m, p := loadModel(s)
	steps, err := model.Greedy(m, s, p)
	harness.SkipUnsupported(err)
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
	harness.Decided("greedy", model.GreedyTally(steps, p.MarginEpsilon, p.GreedyTokens))
}

// checkSeeded is the spec "seeded generation draws the reference's tokens".
func checkSeeded(s *golden.Set) {
	m, p := loadModel(s)
	steps, err := model.Seeded(m, s, p)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	last := steps[len(steps)-1]
	if last.Accepted {
		AddReportEntry("seeded", fmt.Sprintf("%d tokens equal, then an accepted difference at step %d (margin %.3g < %g): comparison stopped",
			len(steps)-1, last.Step, last.Margin, p.MarginEpsilon))
	} else {
		Expect(steps).To(HaveLen(p.Sample.Tokens))
	}
	harness.Decided("seeded", model.SampledTally(steps, p.MarginEpsilon, p.Sample.Tokens))
}

// checkSeededTeacherForced draws with the reference's tokens fed back, so every step compares.
func checkSeededTeacherForced(s *golden.Set) {
	m, p := loadModel(s)
	steps, err := model.SeededTeacherForced(m, s, p)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	Expect(steps).To(HaveLen(p.Sample.Tokens))
	accepted := 0
	for _, st := range steps {
		if st.Accepted {
			accepted++
		}
	}
	AddReportEntry("seeded, teacher-forced", fmt.Sprintf("%d of %d steps drew the reference's token; %d differed at a margin below %g",
		len(steps)-accepted, len(steps), accepted, p.MarginEpsilon))
	harness.Decided("seeded, teacher-forced", model.SampledTally(steps, p.MarginEpsilon, p.Sample.Tokens))
}

// checkSeededDeterministic demands 20 runs of the same seeded generation be bit-identical.
func checkSeededDeterministic(s *golden.Set) {
	m, p := loadModel(s)
	tokens, logits, err := model.GenerateSeeded(m, p, nil)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	for run := 1; run < 20; run++ {
		t, l, err := model.GenerateSeeded(m, p, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(t).To(Equal(tokens), "run %d: tokens", run)
		for j := range l {
			Expect(bitsEqual(l[j], logits[j])).To(BeTrue(), "run %d: logits of step %d differ in their bits", run, j)
		}
	}
}

// bitsEqual compares float32 slices by bit pattern (NaN == NaN, -0 != +0).
func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// broken is a deliberately wrong variant of a model and the tap where it must first fail.
type broken struct {
	model, what, firstTap string
	breakIt               func(m *model.Model)
}

// judgedIsolated lists the variants (by what) judged by the isolated replay
// (model.CompareTapsIsolated) instead of a plain run: an FP8 projection's tight check.
var judgedIsolated = map[string]bool{}

// findSet returns the set of a model by name, or nil.
func findSet(name string) *golden.Set {
	for _, s := range modelSets {
		if s.Manifest.Model == name {
			return s
		}
	}
	return nil
}

// fullSize lists the models whose sets exist only where they were generated: the full-size
// tier (`make golden-full`) and the random-init deep check (randinitModel).
var fullSize = map[string]bool{"qwen2.5-0.5b": true, "phi3-mini-4k": true, "gpt2-124m": true, "llama3.2-1b": true,
	"llama3.1-8b-l2": true, "phi3.5-mini": true, "qwen2.5-7b-yarn-l2": true, randinitModel: true,
	"qwen2.5-0.5b-bf16": true, "llama3.2-1b-bf16": true,
	"llama3.2-1b-fp8-bf16": true, "llama3.2-1b-fp8dyn-bf16": true, "llama3.2-1b-awq": true, "llama3.2-1b-gptq": true,
	"qwen2.5-0.5b-fp8-bf16": true, "qwen2.5-0.5b-fp8dyn-bf16": true, "qwen2.5-0.5b-awq": true, "qwen2.5-0.5b-gptq": true,
	// mixtures of experts at their published widths, whose ambiguous routing rows follow the reference
	"qwen3-30b-a3b-l2": true, "qwen3-30b-a3b-bf16-l2": true, "qwen1.5-moe-a2.7b-l2": true, "mixtral-8x7b-l1": true}

// randinitModel is a Qwen2.5-1.5B-shaped checkpoint with transformers' own random
// initialisation (28 layers, nearly flat logits over 151936 tokens): deep-layer drift that only
// calibrated limits pass, and where a late-layer bug must still fail at its own tap
// (docs/golden-format.md, "Calibration").
const randinitModel = "qwen2.5-1.5b-randinit"

// generateHint says how to make the set of a fullSize model.
func generateHint(name string) string {
	if name == randinitModel {
		return "python3 tools/gen-golden randinit --preset qwen2.5-1.5b --out DIR && python3 tools/gen-golden models --checkpoint DIR --name " + randinitModel
	}
	return "make golden-full"
}

// checkBroken runs a broken variant of set's model: it must fail, first at the tap it changes.
func checkBroken(set *golden.Set, b broken) {
	m, p := loadModel(set)
	b.breakIt(m)
	compareTaps := model.CompareTaps
	if judgedIsolated[b.what] {
		compareTaps = model.CompareTapsIsolated
	}
	rows, err := compareTaps(m, set, p, tols)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	first := compare.FirstFailure(rows)
	table := compare.LayerDiffTable(rows)
	Expect(first).To(BeNumerically(">=", 0), "%s passed every tap:\n%s", b.what, table)
	Expect(rows[first].Name).To(Equal(b.firstTap), "layer diff:\n%s", table)
	Expect(strings.Count(table, ">>")).To(Equal(1))
}

// brokenVariants are the broken variants of each model (modelSpecs runs them in its container).
var brokenVariants = []broken{
	{"qwen2-tiny", "RoPE theta 1e4 instead of 1e6", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeTheta = 1e4 }},
	{"qwen2-tiny", "k and v biases swapped in layer 1", "prefill.layers.1.k",
		func(m *model.Model) { a := m.Layers[1].Attn; a.Bk, a.Bv = a.Bv, a.Bk }},
	{"phi3-tiny", "RoPE theta 1e6 instead of 1e4", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeTheta = 1e6 }},
	{"phi3-tiny", "RMSNorm eps 1e-2 instead of 1e-5", "prefill.layers.0.attn_norm",
		func(m *model.Model) { m.Cfg.NormEps = 1e-2 }},
	{"gpt2-tiny", "LayerNorm eps 1e-2 instead of 1e-5", "prefill.layers.0.attn_norm",
		func(m *model.Model) { m.Cfg.NormEps = 1e-2 }},
	// RoPE scaling: each part of a recipe shows at the first tap it moves.
	{"llama3-tiny", "llama3 RoPE scaling dropped (default frequencies)", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeScaling = nil }},
	{"qwen2-yarn-tiny", "YaRN's attention factor dropped", "prefill.layers.0.q_rope",
		func(m *model.Model) { s := *m.Cfg.RopeScaling; s.AttentionFactor = 1; m.Cfg.RopeScaling = &s }},
	{"phi3.5-tiny", "LongRoPE's attention factor dropped", "prefill.layers.0.q_rope",
		func(m *model.Model) { s := *m.Cfg.RopeScaling; s.AttentionFactor = 1; m.Cfg.RopeScaling = &s }},
	// The set's original context is 20 tokens: the decode step at position 20 is the first to
	// use the long factors, and the first tap a short-only forward gets wrong.
	{"phi3.5-tiny", "LongRoPE's long factors never used", "decode.4.layers.0.q_rope",
		func(m *model.Model) { s := *m.Cfg.RopeScaling; s.Long = nil; m.Cfg.RopeScaling = &s }},
	// Sliding window (7 keys, layer 1 only): each mistake shows at the first layer it moves.
	{"qwen2-swa-tiny", "window one key wider (8 instead of 7)", "prefill.layers.1.attn",
		func(m *model.Model) { m.Cfg.SlidingWindow = 8 }},
	{"qwen2-swa-tiny", "window dropped (layer 1 attends to everything)", "prefill.layers.1.attn",
		func(m *model.Model) { m.Cfg.SlidingWindow = 0 }},
	{"qwen2-swa-tiny", "window on every layer, max_window_layers ignored", "prefill.layers.0.attn",
		func(m *model.Model) { m.Cfg.WindowedLayers = nil }},
	// Mistral (5 keys, every layer): the window read as Qwen2's layer list, or a key short.
	{"mistral-tiny", "window only on layers from max_window_layers (1) on, as Qwen2 reads it", "prefill.layers.0.attn",
		func(m *model.Model) { only1 := model.LayerSet{false, true}; m.Cfg.WindowedLayers = &only1 }},
	{"mistral-tiny", "window one key short (4 instead of 5)", "prefill.layers.0.attn",
		func(m *model.Model) { m.Cfg.SlidingWindow = 4 }},
	// Mixtral's sparse MoE block: the router's choice and weights, and which experts run.
	{"mixtral-tiny", "the top-k weights not renormalised", "prefill.layers.0.ffn_out",
		func(m *model.Model) { m.Cfg.NormTopKProb = false }},
	{"mixtral-tiny", "one expert a token instead of two", "prefill.layers.0.ffn_out",
		func(m *model.Model) { m.Cfg.ExpertsPerToken = 1 }},
	{"mixtral-tiny", "layer 1 runs layer 0's experts", "prefill.layers.1.ffn_out",
		func(m *model.Model) {
			f, g := m.Layers[1].MLP, m.Layers[0].MLP
			f.ExpertsGateUp, f.ExpertsDown = g.ExpertsGateUp, g.ExpertsDown
		}},
	{"mixtral-tiny", "layer 1 routes with layer 0's router", "prefill.layers.1.router_logits",
		func(m *model.Model) { m.Layers[1].MLP.Router = m.Layers[0].MLP.Router }},
	// Qwen3-MoE: Qwen3's attention and the sparse block with norm_topk_prob from the config.
	{"qwen3-moe-tiny", "norm_topk_prob ignored (the top-k weights not renormalised)", "prefill.layers.0.ffn_out",
		func(m *model.Model) { m.Cfg.NormTopKProb = false }},
	{"qwen3-moe-tiny", "layer 1 routes with layer 0's router", "prefill.layers.1.router_logits",
		func(m *model.Model) { m.Layers[1].MLP.Router = m.Layers[0].MLP.Router }},
	// Qwen2-MoE: the sparse block's router, its shared expert and the shared expert's gate, each
	// at the first tap it moves.
	{"qwen2-moe-tiny", "norm_topk_prob taken as true (the top-k weights renormalised)", "prefill.layers.0.moe_out",
		func(m *model.Model) { m.Cfg.NormTopKProb = true }},
	{"qwen2-moe-tiny", "layer 1 runs layer 0's shared expert", "prefill.layers.1.ffn_gate",
		func(m *model.Model) { m.Layers[1].MLP.Shared = m.Layers[0].MLP.Shared }},
	{"qwen2-moe-tiny", "layer 1 gates its shared expert with layer 0's shared_expert_gate", "prefill.layers.1.ffn_out",
		func(m *model.Model) { m.Layers[1].MLP.SharedGate = m.Layers[0].MLP.SharedGate }},
	{"qwen2-moe-tiny", "layer 0 routes with layer 1's router", "prefill.layers.0.router_logits",
		func(m *model.Model) { m.Layers[0].MLP.Router = m.Layers[1].MLP.Router }},
	// Qwen3's per-head norms of q and k: each weight shows at its own tap.
	{"qwen3-tiny", "q_norm and k_norm weights swapped in layer 1", "prefill.layers.1.q_norm",
		func(m *model.Model) { a := m.Layers[1].Attn; a.QNorm, a.KNorm = a.KNorm, a.QNorm }},
	{"qwen3-tiny", "k normalised with q_norm's weight in layer 0", "prefill.layers.0.k_norm",
		func(m *model.Model) { a := m.Layers[0].Attn; a.KNorm = a.QNorm }},
	// Gemma 3: each of its departures from Llama shows at the first tap it moves.
	{"gemma3-tiny", "embedding not scaled by sqrt(hidden_size)", "prefill.embed",
		func(m *model.Model) { m.Cfg.EmbedScale = 0 }},
	{"gemma3-tiny", "scores scaled by head_dim^-0.5, query_pre_attn_scalar ignored", "prefill.layers.0.attn",
		func(m *model.Model) { m.Cfg.AttnScalar = 0 }},
	{"gemma3-tiny", "sliding layers rotated with the global RoPE base", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeLocalTheta = 0 }},
	{"gemma3-tiny", "the global layers' linear RoPE scaling dropped", "prefill.layers.1.q_rope",
		func(m *model.Model) { m.Cfg.RopeScaling = nil }},
	{"gemma3-tiny", "every layer sliding, layer_types ignored", "prefill.layers.1.q_rope",
		func(m *model.Model) { m.Cfg.WindowedLayers = nil }},
	{"gemma3-tiny", "layer 0's post-attention norm with the pre-feedforward weight", "prefill.layers.0.attn_post_norm",
		func(m *model.Model) { m.Layers[0].PostAttnNorm = m.Layers[0].FFNNorm }},
	{"gemma3-tiny-bf16", "layer 1's post-feedforward norm with the post-attention weight", "prefill.layers.1.ffn_post_norm",
		func(m *model.Model) { l := m.Layers[1]; l.PostFFNNorm = l.PostAttnNorm }},
	{"gemma3-tiny-bf16", "q_norm and k_norm weights swapped in layer 1", "prefill.layers.1.q_norm",
		func(m *model.Model) { a := m.Layers[1].Attn; a.QNorm, a.KNorm = a.KNorm, a.QNorm }},
	// Gemma 2: its soft caps and its layer alternation, each at the first tap it moves (the
	// tiny set's attention cap is 4, below its largest scores; the logits' 30 below its largest).
	{"gemma2-tiny", "attention soft cap dropped", "prefill.layers.0.attn",
		func(m *model.Model) { m.Cfg.AttnSoftcap = 0 }},
	{"gemma2-tiny", "attention capped at Gemma 2's published 50, not the config's", "prefill.layers.0.attn",
		func(m *model.Model) { m.Cfg.AttnSoftcap = 50 }},
	{"gemma2-tiny", "final logit soft cap dropped", "prefill.logits",
		func(m *model.Model) { m.Cfg.FinalSoftcap = 0 }},
	{"gemma2-tiny-bf16", "final logits capped with the attention's cap", "prefill.logits",
		func(m *model.Model) { m.Cfg.FinalSoftcap = m.Cfg.AttnSoftcap }},
	{"gemma2-tiny", "the odd layers sliding instead of the even ones", "prefill.layers.0.attn",
		func(m *model.Model) { odd := model.LayerSet{false, true}; m.Cfg.WindowedLayers = &odd }},
	{"gemma2-tiny-bf16", "embedding not scaled by sqrt(hidden_size)", "prefill.embed",
		func(m *model.Model) { m.Cfg.EmbedScale = 0 }},
	// Full size: deep layers run under limits their calibration widened; these show a
	// wrong weight in a late layer is still caught at that layer's own tap.
	{"qwen2.5-0.5b", "RoPE theta 1e4 instead of 1e6", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeTheta = 1e4 }},
	{"qwen2.5-0.5b", "k and v biases swapped in layer 20", "prefill.layers.20.k",
		func(m *model.Model) { a := m.Layers[20].Attn; a.Bk, a.Bv = a.Bv, a.Bk }},
	{"qwen2.5-0.5b", "q bias dropped in layer 23", "prefill.layers.23.q",
		func(m *model.Model) { m.Layers[23].Attn.Bq = nil }},
	{"gpt2-124m", "MLP up-projection bias dropped in layer 11", "prefill.layers.11.ffn_up",
		func(m *model.Model) { m.Layers[11].MLP.UpB = nil }},
	{"phi3-mini-4k", "RoPE theta 1e6 instead of 1e4", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeTheta = 1e6 }},
	{"phi3-mini-4k", "gate and up projections swapped in layer 31", "prefill.layers.31.ffn_gate",
		func(m *model.Model) { f := m.Layers[31].MLP; f.Gate, f.Up = f.Up, f.Gate }},
	// bf16 sets: the limits follow bf16's coarser rounding (scaled floors, a bf16 calibration);
	// a wrong weight or recipe still fails at its own tap.
	{"qwen2-tiny-bf16", "k and v biases swapped in layer 1", "prefill.layers.1.k",
		func(m *model.Model) { a := m.Layers[1].Attn; a.Bk, a.Bv = a.Bv, a.Bk }},
	// (Dropping llama3's scaling, caught in llama3-tiny, moves the angles of these 48 positions
	// by less than bf16's rounding: the bf16 rope kernel cases catch it at long positions.)
	{"llama3-tiny-bf16", "gate and up projections swapped in layer 1", "prefill.layers.1.ffn_gate",
		func(m *model.Model) { f := m.Layers[1].MLP; f.Gate, f.Up = f.Up, f.Gate }},
	{"qwen2.5-0.5b-bf16", "q bias dropped in layer 23", "prefill.layers.23.q",
		func(m *model.Model) { m.Layers[23].Attn.Bq = nil }},
	{"llama3.2-1b-bf16", "gate and up projections swapped in layer 15", "prefill.layers.15.ffn_gate",
		func(m *model.Model) { f := m.Layers[15].MLP; f.Gate, f.Up = f.Up, f.Gate }},
	// Random init has zero biases and unit norm weights, so its bugs are structural.
	{randinitModel, "RoPE theta 1e4 instead of 1e6", "prefill.layers.0.q_rope",
		func(m *model.Model) { m.Cfg.RopeTheta = 1e4 }},
	{randinitModel, "gate and up projections swapped in layer 27", "prefill.layers.27.ffn_gate",
		func(m *model.Model) { f := m.Layers[27].MLP; f.Gate, f.Up = f.Up, f.Gate }},
}
