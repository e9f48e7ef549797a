package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// batchInvarianceCacheLen is the cache length of check's batch-invariance run (at most the
// model's position limit): long enough that attention_decode splits each sequence's keys.
const batchInvarianceCacheLen = 4096

// batchVerdict is one batch set's result in check: its taps and greedy choices per sequence,
// and the batch-invariance verdict of the backend's current kernels.
type batchVerdict struct {
	worst      compare.TapResult
	worstCheck compare.Check
	taps       int
	failed     int
	first      string
	tokensErr  error
	divergence *model.Divergence
	cacheLen   int
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
	rows, _, err := model.CompareBatchTaps(m, b, p, seqs, tols)
	if rows == nil {
		return nil, err
	}
	v := &batchVerdict{taps: len(rows), tokensErr: err}
	worst := -1.0
	for _, r := range rows {
		if !r.Result.Pass() {
			v.failed++
			if v.first == "" {
				v.first = r.Name
			}
		}
		for _, c := range r.Result.Checks {
			if bud := c.Budget; bud > worst {
				worst, v.worst, v.worstCheck = bud, r, c
			}
		}
	}
	prompts := make([][]int32, len(seqs))
	for i, s := range seqs {
		prompts[i] = s.Prompt
	}
	sizes := make([]int, p.Batch)
	for i := range sizes {
		sizes[i] = i + 1
	}
	limit, _ := m.Cfg.PositionLimit()
	v.cacheLen = min(limit, batchInvarianceCacheLen)
	// Logits alone decide the verdict here; `ginkgo -r` (suites/models) names the first tap.
	prompts = model.LongPrompts(prompts, m.Cfg.Vocab, v.cacheLen-p.DecodeSteps-1)
	if v.divergence, err = model.CheckBatchInvariance(m, prompts, v.cacheLen, p.DecodeSteps, sizes, []string{"logits"}); err != nil {
		return nil, err
	}
	return v, nil
}

// printBatchRow prints a batch set's rows: its worst tap, the taps out of tolerance, the greedy
// choices, and the batch-invariance verdict (a verdict of its own, not a failure: the default
// kernels choose their split by the batch's size; TOUCHSTONE_BATCH_INVARIANT=1 selects kernels
// that do not).
func printBatchRow(tw *tabwriter.Writer, w io.Writer, name string, v *batchVerdict) {
	status := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	c := v.worstCheck
	cmp := "<="
	if !c.Upper {
		cmp = ">="
	}
	fmt.Fprintf(tw, "batch\t%s\t%s\t%s\t%.6g\t%s %.6g\t%s\t%s\n", name, v.worst.Name, c.Metric, c.Value, cmp, c.Limit, headroom(c), status(c.Pass))
	failing := fmt.Sprintf("%d of %d", v.failed, v.taps)
	if v.first != "" {
		failing += ", first " + v.first
	}
	fmt.Fprintf(tw, "batch\t%s\ttaps\tout of tolerance\t%s\t<= 0\t\t%s\n", name, failing, status(v.failed == 0))
	fmt.Fprintf(tw, "batch\t%s\tgreedy\ttokens\t\t\t\t%s\n", name, status(v.tokensErr == nil))
	verdict := fmt.Sprintf("bit-identical alone and in batches of 1..B (%d-token caches)", v.cacheLen)
	label := "INVARIANT"
	if v.divergence != nil {
		verdict, label = v.divergence.String(), "VARIANT"
	}
	fmt.Fprintf(tw, "batch\t%s\tinvariance\tlogits\t%s\t\t\t%s\n", name, verdict, label)
	if v.tokensErr != nil {
		tw.Flush()
		fmt.Fprintf(w, "    %v\n", v.tokensErr)
	}
}
