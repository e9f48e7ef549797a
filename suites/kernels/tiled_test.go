package kernels_test

import (
	"encoding/json"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// A backend's own layout of 4-bit weights (backend.W4Tiler, the CUDA library's TS_W4_TILED): every
// gemm_w4a16 case is tiled once, as a model's weight is at load time, multiplied by the tiled
// GEMM, and judged by the same golden files and tolerance as the packed op. A case the layout
// does not hold (k or the group size not a multiple of 32, GPTQ's act-order) stays on the packed
// kernels; every other case must tile.
var _ = Describe("4-bit weights in the backend's tiled layout", harness.Kernel, func() {
	var entries []TableEntry
	for _, s := range setsOf("gemm_w4a16", "") {
		entries = append(entries, Entry(entryName(s), s, harness.Tier(s.Manifest.Tier)))
	}
	DescribeTable("gemm_w4a16 through the tiled weight", harness.Op("gemm_w4a16"), Label("tiled"), func(s *golden.Set) {
		if _, ok := dev.(backend.W4Tiler); !ok {
			Skip(fmt.Sprintf("the %s backend has no tiled layout of its own", dev.Info().Backend))
		}
		why := untileable(s)
		verdicts, err := conformance.CheckTiled(dev, s, tols)
		if why != "" {
			Expect(err).To(MatchError(backend.ErrUnsupported), "a case the layout cannot hold (%s) must be refused", why)
			Skip("not tiled: " + why + "; the packed kernels run it")
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(verdicts).To(harness.BeWithinTolerance())
	}, entries)
})

// untileable says why the tiled layout cannot hold set's weight ("" when it can).
func untileable(s *golden.Set) string {
	var p struct {
		GroupSize int  `json:"group_size"`
		ActOrder  bool `json:"act_order"`
	}
	Expect(json.Unmarshal(s.Manifest.Params, &p)).To(Succeed())
	x, ok := s.File("x")
	Expect(ok).To(BeTrue(), "gemm_w4a16 set without x")
	k := x.Shape[1]
	switch {
	case p.ActOrder:
		return "GPTQ act-order (the layout keeps groups in order)"
	case k%32 != 0 || p.GroupSize%32 != 0:
		return fmt.Sprintf("k = %d, group size %d (the layout needs multiples of 32)", k, p.GroupSize)
	}
	return ""
}
