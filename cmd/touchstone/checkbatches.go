package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// batchVerdict is one batch set's result in check: its taps and greedy choices per sequence,
// and the batch-invariance verdict of the backend's current kernels.
type batchVerdict struct {
	tapSummary
	tokens     tokenCheck
	divergence *model.Divergence
	cacheLen   int
	// served: the same sequences served over a paged cache (model.PlanServed, pages of
	// servedBlockSize), every tap of every position and each greedy choice
	served       tapSummary
	servedTokens tokenCheck
	servedPlan   string
}

// servedBlockSize is the page size check serves a batch set with (vLLM's default).
const servedBlockSize = 16

func (v *batchVerdict) outcome(p conformance.InconclusivePolicy) outcome {
	return worst(passOrFail(v.tapsFailed == 0), v.tokens.outcome(p), passOrFail(v.served.tapsFailed == 0), v.servedTokens.outcome(p))
}

// checkBatchSet runs batch set b on the model of its model set ms.
func checkBatchSet(be backend.Backend, b, ms *golden.Set, tols *compare.Tolerances) (*batchVerdict, error) {
	m, _, err := model.LoadSet(be, ms)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	p, seqs, err := model.ReadBatchSet(b, ms)
	if err != nil {
		return nil, err
	}
	rows, steps, err := model.CompareBatchTaps(m, b, p, seqs, tols)
	if rows == nil {
		return nil, err
	}
	v := &batchVerdict{tapSummary: summarizeTaps(rows),
		tokens: tokenCheck{err: err, tally: model.BatchTally(steps, p.MarginEpsilon), detail: fmt.Sprintf("%d sequences, teacher-forced", len(seqs))}}
	prompts := make([][]int32, len(seqs))
	for i, s := range seqs {
		prompts[i] = s.Prompt
	}
	sizes := make([]int, p.Batch)
	for i := range sizes {
		sizes[i] = i + 1
	}
	pl := model.PlanServed(seqs, p.DecodeSteps, servedBlockSize, model.ServedSeed(b, servedBlockSize))
	srows, ssteps, err := model.CompareServedTaps(m, b, p, seqs, pl, tols)
	if srows == nil {
		return nil, err
	}
	v.served, v.servedPlan = summarizeTaps(srows), pl.String()
	v.servedTokens = tokenCheck{err: err, tally: model.BatchTally(ssteps, p.MarginEpsilon), detail: fmt.Sprintf("%d sequences served, teacher-forced", len(seqs))}
	// Logits alone decide the verdict here; `ginkgo -r` (suites/models) names the first tap.
	prompts, v.cacheLen = model.InvarianceInputs(m, prompts, p.DecodeSteps)
	if v.divergence, err = model.CheckBatchInvariance(m, prompts, v.cacheLen, p.DecodeSteps, sizes, []string{"logits"}); err != nil {
		return nil, err
	}
	return v, nil
}

// printBatchRow prints a batch set's rows: its worst tap, the taps out of tolerance, the greedy
// choices, and the batch-invariance verdict (a verdict of its own, not a failure: the default
// kernels choose their split by the batch's size; TOUCHSTONE_BATCH_INVARIANT=1 selects kernels
// that do not).
func printBatchRow(tw *tabwriter.Writer, w io.Writer, name string, v *batchVerdict, p conformance.InconclusivePolicy) {
	v.printRows(tw, "batch", name)
	fmt.Fprintf(tw, "batch\t%s\tgreedy\ttokens\t%s\t\t\t%s\n", name, v.tokens.value(), v.tokens.status(p))
	verdict := fmt.Sprintf("bit-identical alone and in batches of 1..B (%d-token caches)", v.cacheLen)
	label := "INVARIANT"
	if v.divergence != nil {
		verdict, label = v.divergence.String(), "VARIANT"
	}
	fmt.Fprintf(tw, "batch\t%s\tinvariance\tlogits\t%s\t\t\t%s\n", name, verdict, label)
	v.served.printRows(tw, "served", name)
	fmt.Fprintf(tw, "served\t%s\tgreedy\ttokens\t%s\t\t\t%s\n", name, v.servedTokens.value(), v.servedTokens.status(p))
	fmt.Fprintf(tw, "served\t%s\tplan\t\t%s\t\t\t\n", name, v.servedPlan)
	for _, err := range []error{v.tokens.err, v.servedTokens.err} {
		if err != nil {
			tw.Flush()
			fmt.Fprintf(w, "    %v\n", err)
		}
	}
}
