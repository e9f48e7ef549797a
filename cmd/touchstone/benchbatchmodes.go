package main

import (
	"fmt"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/bench"
)

// batchModes lists the kernel settings bench-batch times, in order: the library's own setting
// (or, with -gemv-rows, each row limit in its place), then the batch-invariant kernels with
// -invariant. restore is the setting the backend had, applied again when a model is done.
func batchModes(prof any, gemvRows []int, invariant bool) (modes []batchKernels, restore batchKernels, err error) {
	restore = batchKernels{label: "default", gemvRows: -1}
	inv, hasInv := prof.(backend.BatchInvariance)
	if hasInv {
		if restore.invariant, err = inv.BatchInvariant(); err != nil {
			return nil, restore, err
		}
	}
	gr, hasRows := prof.(backend.GemvRows)
	if hasRows {
		if restore.gemvRows, err = gr.GemvRows(); err != nil {
			return nil, restore, err
		}
	}
	switch {
	case len(gemvRows) > 0 && !hasRows:
		return nil, restore, fmt.Errorf("-gemv-rows: the backend has no gemv row limit to set")
	case len(gemvRows) > 0:
		for _, r := range gemvRows {
			label := fmt.Sprintf("gemv up to %d rows", r)
			if r == 0 {
				label = "no gemv"
			}
			if r == restore.gemvRows {
				label += " (default)"
			}
			modes = append(modes, batchKernels{label: label, gemvRows: r})
		}
	default:
		modes = append(modes, batchKernels{label: "default", gemvRows: restore.gemvRows})
	}
	if invariant {
		if !hasInv {
			return nil, restore, fmt.Errorf("-invariant: the backend has no batch-invariant switch")
		}
		modes = append(modes, batchKernels{label: "batch-invariant", invariant: true, gemvRows: restore.gemvRows})
	}
	return modes, restore, nil
}

// applyBatchKernels switches the backend to k (the parts it has: a backend without a
// batch-invariant switch or a gemv row limit runs every setting the same way).
func applyBatchKernels(prof any, k batchKernels) error {
	if inv, ok := prof.(backend.BatchInvariance); ok {
		if err := inv.SetBatchInvariant(k.invariant); err != nil {
			return err
		}
	}
	if gr, ok := prof.(backend.GemvRows); ok && k.gemvRows >= 0 {
		if err := gr.SetGemvRows(k.gemvRows); err != nil {
			return err
		}
	}
	return nil
}

// fastestGemvRows names, for each batch size, the row-limit setting with the shortest step:
// the measurement the library's default limit follows.
func fastestGemvRows(name string, sizes []int, modes []batchKernels, results map[string]*bench.BatchResult) string {
	var parts []string
	for _, n := range sizes {
		best, bestMs := "", 0.0
		for _, k := range modes {
			res := results[fmt.Sprintf("%d/%s", n, k.label)]
			if k.invariant || res == nil {
				continue
			}
			if best == "" || res.LoopMsPerStep < bestMs {
				best, bestMs = k.label, res.LoopMsPerStep
			}
		}
		parts = append(parts, fmt.Sprintf("B=%d: %s (%.3f ms)", n, best, bestMs))
	}
	return fmt.Sprintf("%s, fastest gemv row limit by batch: %s", name, strings.Join(parts, "; "))
}
