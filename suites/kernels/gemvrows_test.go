package kernels_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// maxGemvRows is the largest row limit ts_set_gemv_rows accepts (the gemv's largest row tile).
const maxGemvRows = 4

// gemvProjectionOps are the ops whose decode projections choose between the gemv and cuBLAS by
// the library's gemv row limit (touchstone.h's ts_set_gemv_rows).
var gemvProjectionOps = []string{"gemm", "rmsnorm_gemm", "layernorm_gemm", "swiglu_gemm", "swiglu_ffn", "gpt_ffn"}

// The default row limit (1) leaves the gemv's 2- and 4-row tiles to a setting a user may choose
// (TOUCHSTONE_GEMV_ROWS, bench-batch -gemv-rows), so the conformance table above never runs
// them. Here every committed case of the projection ops runs at each limit other than the one in
// effect, and is judged as it is there: a limit is a choice of kernels, not of accuracy.
var _ = Describe("kernel conformance at every gemv row limit", harness.Kernel, Label("gemv-rows"), func() {
	for _, op := range gemvProjectionOps {
		var entries []TableEntry
		for _, s := range setsOf(op, "committed") {
			for limit := 0; limit <= maxGemvRows; limit++ {
				entries = append(entries, Entry(fmt.Sprintf("%s at gemv row limit %d", entryName(s), limit), s, limit))
			}
		}
		DescribeTable(op, harness.Op(op), func(s *golden.Set, limit int) {
			gr, ok := dev.(backend.GemvRows)
			if !ok {
				Skip(fmt.Sprintf("backend %s has no gemv row limit", dev.Info().Backend))
			}
			current, err := gr.GemvRows()
			Expect(err).NotTo(HaveOccurred())
			if limit == current {
				Skip(fmt.Sprintf("the limit in effect (%d): the conformance table runs it", current))
			}
			DeferCleanup(restoreGemvRows(gr))
			Expect(gr.SetGemvRows(limit)).To(Succeed())
			verdicts, err := conformance.Check(dev, s, tols)
			harness.SkipUnsupported(err)
			Expect(err).NotTo(HaveOccurred())
			Expect(verdicts).To(harness.BeWithinTolerance(), "at gemv row limit %d", limit)
		}, entries)
	}
})

// restoreGemvRows returns a cleanup that sets gr's row limit back to what it is now.
func restoreGemvRows(gr backend.GemvRows) func() {
	was, err := gr.GemvRows()
	Expect(err).NotTo(HaveOccurred())
	return func() { Expect(gr.SetGemvRows(was)).To(Succeed()) }
}
