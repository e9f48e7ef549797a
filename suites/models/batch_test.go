package models_test

import (
	"encoding/json"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// committedBatches must always be present: CI runs them on the CPU backend.
var committedBatches = []string{"qwen2-tiny-b4", "phi3.5-tiny-b3", "gpt2-tiny-b3", "qwen2-swa-tiny-b3"}

var _ = Describe("batch golden sets", harness.Model, func() {
	It("are all discoverable and well-formed, each naming a present model set, with every committed one", func() {
		Expect(batchDiscoverErr).NotTo(HaveOccurred())
		var names []string
		for _, b := range batchSets {
			names = append(names, b.Manifest.Model)
			ms := batchModelSet(b)
			Expect(ms).NotTo(BeNil(), "%s names model set %q, which is not present (%s)", b.ID(), batchModelName(b), generateHint(batchModelName(b)))
			_, _, err := model.ReadBatchSet(b, ms)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(names).To(ContainElements(committedBatches))
	})
})

// batchModelName is the model set a batch set runs (its params.model_set), "" when unreadable
// (the discovery spec reports why).
func batchModelName(b *golden.Set) string {
	var p struct {
		ModelSet string `json:"model_set"`
	}
	if json.Unmarshal(b.Manifest.Params, &p) != nil {
		return ""
	}
	return p.ModelSet
}

// batchModelSet is the model set of the same tier root a batch set runs, or nil.
func batchModelSet(b *golden.Set) *golden.Set {
	return findSet(batchModelName(b))
}

// batchSpecs registers the checks of every batch set that runs model set s, inside s's
// container (its model is loaded once).
func batchSpecs(s *golden.Set) {
	for _, b := range batchSets {
		if batchModelName(b) != s.Manifest.Model {
			continue
		}
		what := fmt.Sprintf("batch set %s: ", b.Manifest.Model)
		It(what+"every tap of every sequence, prefilled one by one and decoded together (ragged), and each sequence's greedy choices",
			func() { checkBatchTaps(s, b, true) })
		It(what+"every tap with the fused decode ops off", Label("unfused"), func() { checkBatchTaps(s, b, false) })
		It(what+"batch invariance verdict in the default mode: alone and in batches of 1..B, bit for bit", harness.BatchInvariance,
			func() { checkBatchInvariance(s, b, false) })
		It(what+"with batch-invariant kernels (TOUCHSTONE_BATCH_INVARIANT=1): every tap within tolerance, and bit-identical alone and in batches of 1..B",
			harness.BatchInvariance, func() { checkBatchInvariance(s, b, true) })
		It(what+"batched greedy decoding is deterministic: 20 runs give the same tokens and bit-identical logits",
			func() { checkBatchDeterministic(s, b) })
		servedSpecs(s, b, what)
	}
}

// loadBatch loads the model of s and reads batch set b against it.
func loadBatch(s, b *golden.Set) (*model.Model, *model.BatchParams, []model.BatchSequence) {
	m, _ := loadModel(s)
	p, seqs, err := model.ReadBatchSet(b, s)
	Expect(err).NotTo(HaveOccurred())
	return m, p, seqs
}

// checkBatchTaps compares every tap of every sequence of b, decoded in one batch.
func checkBatchTaps(s, b *golden.Set, fused bool) {
	m, p, seqs := loadBatch(s, b)
	m.Fused = fused
	b.KeepTensors()
	rows, steps, err := model.CompareBatchTaps(m, b, p, seqs, tols)
	harness.SkipUnsupported(err)
	if rows == nil {
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(rows).NotTo(BeEmpty())
	worst, worstName := 0.0, ""
	for _, r := range rows {
		if v := r.Result.MaxBudget(); v > worst {
			worst, worstName = v, r.Name
		}
	}
	accepted := 0
	for _, st := range steps {
		if st.Accepted {
			accepted++
		}
	}
	AddReportEntry("worst tap budget", fmt.Sprintf("%s: %.1f%% of its budget (%d taps of %d sequences, fused decode %v); %d of %d greedy choices differ at a margin below %g; greedy choices: %s",
		worstName, 100*worst, len(rows), p.Batch, fused, accepted, len(steps), p.MarginEpsilon, model.BatchTally(steps, p.MarginEpsilon)))
	if first := compare.FirstFailure(rows); first >= 0 {
		Fail(fmt.Sprintf("%s: tap %s is out of tolerance (batched decode, fused %v); layer diff:\n%s", b.ID(), rows[first].Name, fused,
			attachLayerDiff(b, rows)))
	}
	Expect(err).NotTo(HaveOccurred())
}

// batchPrompts are a batch set's prompts.
func batchPrompts(seqs []model.BatchSequence) [][]int32 {
	prompts := make([][]int32, len(seqs))
	for i, s := range seqs {
		prompts[i] = s.Prompt
	}
	return prompts
}

// checkBatchInvariance decodes each sequence of b alone and in batches of 1..B with every tap
// requested and reports the verdict: batch-invariant, or the first tap where a sequence's bits
// depend on its batch. In the default mode a divergence is a verdict of its own, reported and
// not a failure (the fastest kernels choose their split by the call's size); with the
// batch-invariant switch on (or on a backend without one, which must be invariant by
// construction) it fails.
func checkBatchInvariance(s, b *golden.Set, invariant bool) {
	m, p, seqs := loadBatch(s, b)
	bi, hasSwitch := dev.(backend.BatchInvariance)
	if hasSwitch {
		was, err := bi.BatchInvariant()
		Expect(err).NotTo(HaveOccurred())
		Expect(bi.SetBatchInvariant(invariant)).To(Succeed())
		DeferCleanup(func() { Expect(bi.SetBatchInvariant(was)).To(Succeed()) })
	}
	// The decode steps' taps: a prefill is one sequence's own pass in any batch (its logits
	// are compared too).
	var taps []string
	for _, f := range b.Files(golden.RoleExpected) {
		if i, tap := golden.SplitSequence(f.Name); i == 0 && strings.HasPrefix(tap, "decode.0.") {
			taps = append(taps, strings.TrimPrefix(tap, "decode.0."))
		}
	}
	sizes := make([]int, p.Batch)
	for n := range sizes {
		sizes[n] = n + 1
	}
	// A long cache and long prompts: the decode kernels split a sequence's keys by the cache
	// length and the batch size, and a split shows only in a sequence that spans several
	// chunks; the sets' own prompts (at most 32 tokens, 48-token caches) never do. No reference
	// is needed: the runs are compared with each other.
	prompts, cacheLen := model.InvarianceInputs(m, batchPrompts(seqs), p.DecodeSteps)
	d, err := model.CheckBatchInvariance(m, prompts, cacheLen, p.DecodeSteps, sizes, taps)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	mode := "the default kernels"
	if invariant && hasSwitch {
		mode = "batch-invariant kernels"
	} else if !hasSwitch {
		mode = "a backend without a switch"
	}
	if invariant && hasSwitch {
		// The batch-invariant kernels (the gemv at every row count, fp32 logits, the splits of
		// a batch of one) must also be right, not only consistent: every tap of the batch set
		// against its reference under this mode.
		rows, _, err := model.CompareBatchTaps(m, b, p, seqs, tols)
		if rows == nil {
			Expect(err).NotTo(HaveOccurred())
		}
		if first := compare.FirstFailure(rows); first >= 0 {
			Fail(fmt.Sprintf("%s: with batch-invariant kernels, tap %s is out of tolerance; layer diff:\n%s", b.ID(), rows[first].Name,
				attachLayerDiff(b, rows)))
		}
		Expect(err).NotTo(HaveOccurred())
	}
	if d == nil {
		AddReportEntry("batch invariance", fmt.Sprintf("batch-invariant (%s): every decode tap and the prefill logits of every sequence bit-identical alone and in batches of 1..%d, %d decode steps after prompts of %d..%d tokens, %d-token caches",
			mode, p.Batch, p.DecodeSteps, len(prompts[0]), len(prompts[len(prompts)-1]), cacheLen), ReportEntryVisibilityAlways)
		return
	}
	verdict := fmt.Sprintf("batch-variant (%s, %d-token caches): %s", mode, cacheLen, d)
	AddReportEntry("batch invariance", verdict, ReportEntryVisibilityAlways)
	if invariant || !hasSwitch {
		Fail(b.ID() + ": " + verdict)
	}
}

// checkBatchDeterministic runs the whole batch greedily 20 times (graphs replayed where the
// backend has them) and demands the same tokens and bit-identical logits every time.
func checkBatchDeterministic(s, b *golden.Set) {
	m, p, seqs := loadBatch(s, b)
	prompts := batchPrompts(seqs)
	first, err := model.RunGreedyBatch(m, prompts, 0, p.DecodeSteps, nil)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	for run := 1; run < 20; run++ {
		r, err := model.RunGreedyBatch(m, prompts, 0, p.DecodeSteps, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Tokens).To(Equal(first.Tokens), "run %d: tokens", run)
		for j := range r.Logits {
			Expect(bitsEqual(r.Logits[j], first.Logits[j])).To(BeTrue(), "run %d: logits after step %d differ in their bits", run, j)
		}
	}
}
