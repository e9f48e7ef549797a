package kernels_test

import (
	"errors"
	"fmt"
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// A fused op against its unfused composition on the same backend: the same inputs through the
// ABI's stated equivalent, and the relative difference between the two, element by element,
// |fused - unfused| / max(|unfused|, rms(row)): each element against its own magnitude, or its
// row's scale where it is smaller (where a product follows the skipped rounding, the difference is
// a sum of many roundings of random sign, a fraction of the row's rms, and an output near zero
// would otherwise divide by nothing). The fused op may differ only by the intermediate roundings
// it skips; the bound is 1e-2 (fp16), 8e-2 (bf16), and the spec reports the real difference.
var _ = Describe("fused ops against their unfused composition", harness.Kernel, func() {
	It("are registered for the fused ops, each with committed cases", func() {
		fused := 0
		for _, op := range backend.Ops {
			if conformance.HasUnfused(op) {
				fused++
				Expect(len(setsOf(op, "committed"))).To(BeNumerically(">=", minCommittedCases), op)
			}
		}
		Expect(conformance.HasUnfused("gemm_swiglu")).To(BeTrue(), "gemm_swiglu's composition")
		Expect(fused).To(BeNumerically(">=", 1))
	})
	for _, op := range backend.Ops {
		if !conformance.HasUnfused(op) {
			continue
		}
		var entries []TableEntry
		for _, s := range setsOf(op, "") {
			entries = append(entries, Entry(entryName(s), s, harness.Tier(s.Manifest.Tier)))
		}
		fusedTable(op, entries)
	}
})

// fusedTable checks each set of op against its unfused composition.
func fusedTable(op string, entries []TableEntry) {
	// Label unfused: the compositions call cuBLAS GEMMs, which dist/run sanitize's racecheck
	// pass leaves out (tools/bundle/run says why).
	DescribeTable(op+" against its unfused composition", harness.Op(op), Label("unfused"), func(s *golden.Set) {
		a := runForm(s, conformance.Prepare)
		b := runForm(s, conformance.PrepareUnfused)
		Expect(b.Shape).To(Equal(a.Shape))
		if a.DType.IsFP8() {
			// A fused quantiser's codes: both forms round their intermediate as the composition
			// stores it, each within the op's tolerance of the reference (one FP8 step on a
			// share of the codes, where its fp32 intermediate rounds the other way), so within
			// twice that share of each other.
			tol, err := tols.KernelFor(op, a.DType, conformance.Storage(s))
			Expect(err).NotTo(HaveOccurred())
			res, err := compare.Compare(a, b, twoRoundings(tol))
			Expect(err).NotTo(HaveOccurred())
			AddReportEntry("fused - unfused", fmt.Sprintf("%d of %d FP8 codes differ", res.Mismatches, res.N))
			Expect(res.Pass()).To(BeTrue(), "the fused op is not its unfused composition:\n%s", res.Table())
			return
		}
		got, want := a.Float64(), b.Float64()
		n := a.Shape[len(a.Shape)-1]
		worst := 0.0
		for r := 0; r < len(want)/n; r++ {
			row := want[r*n : (r+1)*n]
			sq := 0.0
			for _, v := range row {
				sq += v * v
			}
			rms := math.Sqrt(sq / float64(n))
			for j, ref := range row {
				if d := math.Abs(got[r*n+j] - ref); d > 0 {
					worst = math.Max(worst, d/math.Max(math.Abs(ref), rms))
				}
			}
		}
		// The bound is about 20 roundings of the storage dtype: 1e-2 for fp16 (u = 2^-11), 8x
		// that for bf16 (u = 2^-8), whose skipped intermediate roundings are 8x larger.
		bound := 1e-2
		if a.DType == tensor.BF16 {
			bound = 8e-2
		}
		AddReportEntry("fused - unfused", fmt.Sprintf("max relative difference %.3g (bound %g)", worst, bound))
		Expect(worst).To(BeNumerically("<", bound), "the fused op is not its unfused composition")
	}, entries)
}

// runForm runs set's op in one form (the fused op, or its unfused composition) and returns the
// output.
func runForm(s *golden.Set, prepare func(backend.Backend, string, conformance.Source) (*conformance.Prepared, error)) *tensor.Tensor {
	p, err := prepare(dev, s.Manifest.Op, s)
	if errors.Is(err, backend.ErrUnsupported) {
		Skip(err.Error())
	}
	Expect(err).NotTo(HaveOccurred())
	defer p.Free()
	Expect(p.Launch()).To(Succeed())
	outs, err := p.Outputs()
	Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"out", "probs"} {
		if t, ok := outs[name]; ok {
			return t
		}
	}
	Fail(fmt.Sprintf("%s produced none of the outputs out, probs", s.Manifest.Op))
	return nil
}
