package models_test

import (
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

// servedBlockSizes are the page sizes a batch set is served with: 4 puts the sets' short
// prompts (1-32 tokens) over many pages, with prefixes and chunks ending mid-page; 16 is
// vLLM's default.
var servedBlockSizes = []int{4, 16}

// servedSpecs registers the paged, continuous-batching checks of batch set b (inside model set
// s's container).
func servedSpecs(s, b *golden.Set, what string) {
	for _, bs := range servedBlockSizes {
		It(fmt.Sprintf("%sserved over a paged cache (pages of %d): prompt chunks and decode tokens of different sequences in one pass, shared prefix pages, every tap of every position and each greedy choice", what, bs),
			harness.Served, func() { checkServed(s, b, bs) })
	}
	It(what+"served invariance verdict: every sequence's rows bit for bit alone and in the mixed plan (pages of 4)", harness.Served, harness.BatchInvariance,
		func() { checkServedInvariance(s, b, 4) })
}

func checkServed(s, b *golden.Set, bs int) {
	m, p, seqs := loadBatch(s, b)
	b.KeepTensors()
	pl := model.PlanServed(seqs, p.DecodeSteps, bs, model.ServedSeed(b, bs))
	rows, steps, err := model.CompareServedTaps(m, b, p, seqs, pl, tols)
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
	AddReportEntry("served plan", fmt.Sprintf("%s; worst tap %s at %.1f%% of its budget (%d taps); greedy choices: %s",
		pl, worstName, 100*worst, len(rows), model.BatchTally(steps, p.MarginEpsilon)))
	if first := compare.FirstFailure(rows); first >= 0 {
		Fail(fmt.Sprintf("%s: tap %s is out of tolerance served over pages of %d (%s); layer diff:\n%s", b.ID(), rows[first].Name, bs, pl,
			attachLayerDiff(b, rows)))
	}
	Expect(err).NotTo(HaveOccurred())
}

// checkServedInvariance reports whether a sequence's rows depend on the sequences served with
// it. Like the batch verdict, a divergence fails only on a backend without a batch-invariance
// switch (which must be invariant by construction); on one with a switch it is the verdict.
func checkServedInvariance(s, b *golden.Set, bs int) {
	m, p, seqs := loadBatch(s, b)
	_, hasSwitch := dev.(backend.BatchInvariance)
	var taps []string
	for _, f := range b.Files(golden.RoleExpected) {
		if i, tap := golden.SplitSequence(f.Name); i == 0 && strings.HasPrefix(tap, "prefill.") && tap != "prefill.logits" {
			taps = append(taps, strings.TrimPrefix(tap, "prefill."))
		}
	}
	pl := model.PlanServed(shareFirstPrompt(seqs, bs), p.DecodeSteps, bs, model.ServedSeed(b, bs))
	d, err := model.CheckServedInvariance(m, pl, taps)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	if d == nil {
		AddReportEntry("served invariance", fmt.Sprintf("served-invariant: every tap of every position bit-identical alone and in the plan (%s)", pl), ReportEntryVisibilityAlways)
		return
	}
	verdict := fmt.Sprintf("served-variant (%s): %s", pl, d)
	AddReportEntry("served invariance", verdict, ReportEntryVisibilityAlways)
	if !hasSwitch {
		Fail(b.ID() + ": " + verdict)
	}
}

// shareFirstPrompt gives every sequence after the first the first sequence's leading tokens in
// place of its own (as many whole pages as fit before its last prompt token; the lengths stay),
// so the invariance plan reads shared pages too; no reference is needed, the runs are compared
// with each other.
func shareFirstPrompt(seqs []model.BatchSequence, bs int) []model.BatchSequence {
	out := make([]model.BatchSequence, len(seqs))
	first := seqs[0].Prompt
	for i, s := range seqs {
		out[i] = s
		if i == 0 {
			continue
		}
		k := min(len(first), len(s.Prompt)-1) / bs * bs
		out[i].Prompt = append(append([]int32(nil), first[:k]...), s.Prompt[k:]...)
	}
	return out
}
