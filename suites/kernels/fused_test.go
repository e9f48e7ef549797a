package kernels_test

import (
	"errors"
	"fmt"
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// A fused op against its unfused composition on the same backend: the same inputs through the
// ABI's stated equivalent, and the relative difference between the two, element by element
// (|fused - unfused| / (|unfused| + 1e-3 rms(row)): the floor keeps outputs near zero from
// dividing by nothing). The fused op may differ only by the intermediate roundings it skips; the
// roadmap's bound is 1e-2, and the spec reports the real difference.
var _ = Describe("fused ops against their unfused composition", harness.Kernel, func() {
	var entries []TableEntry
	for _, s := range setsOf("gemm_swiglu", "") {
		entries = append(entries, Entry(entryName(s), s, harness.Tier(s.Manifest.Tier)))
	}
	DescribeTable("gemm_swiglu = gemm(gate) + gemm(up) + swiglu", harness.Op("gemm_swiglu"), func(s *golden.Set) {
		mem, ok := dev.(backend.Memory)
		if !ok {
			Skip("the backend has no views to split the stacked weight")
		}
		var bufs []backend.Buffer
		DeferCleanup(func() {
			for _, b := range bufs {
				b.Free()
			}
		})
		upload := func(name string) backend.Buffer {
			t, err := s.Tensor(name)
			Expect(err).NotTo(HaveOccurred())
			b, err := dev.Upload(t)
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}
		alloc := func(shape ...int) backend.Buffer {
			b, err := dev.Alloc(tensor.F16, shape...)
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}
		x, w := upload("x"), upload("w_gate_up")
		t, f := x.Shape()[0], w.Shape()[0]/2

		fused := alloc(t, f)
		err := dev.GemmSwiGLU(fused, x, w)
		if errors.Is(err, backend.ErrUnsupported) {
			Skip(err.Error())
		}
		Expect(err).NotTo(HaveOccurred())
		wg, err := mem.Rows(w, 0, f)
		Expect(err).NotTo(HaveOccurred())
		wu, err := mem.Rows(w, f, f)
		Expect(err).NotTo(HaveOccurred())
		g, u, unfused := alloc(t, f), alloc(t, f), alloc(t, f)
		Expect(dev.Gemm(g, x, wg, nil)).To(Succeed())
		Expect(dev.Gemm(u, x, wu, nil)).To(Succeed())
		Expect(dev.SwiGLU(unfused, g, u)).To(Succeed())

		a, err := dev.Download(fused)
		Expect(err).NotTo(HaveOccurred())
		b, err := dev.Download(unfused)
		Expect(err).NotTo(HaveOccurred())
		worst := 0.0
		for r := 0; r < t; r++ {
			sq := 0.0
			for j := 0; j < f; j++ {
				v := float64(b.F16[r*f+j].Float32())
				sq += v * v
			}
			rms := math.Sqrt(sq / float64(f))
			for j := 0; j < f; j++ {
				ref := float64(b.F16[r*f+j].Float32())
				d := math.Abs(float64(a.F16[r*f+j].Float32()) - ref)
				if d > 0 {
					worst = math.Max(worst, d/(math.Abs(ref)+1e-3*rms))
				}
			}
		}
		AddReportEntry("fused - unfused", fmt.Sprintf("max relative difference %.3g (bound 1e-2)", worst))
		Expect(worst).To(BeNumerically("<", 1e-2), "the fused op is not its unfused composition")
	}, entries)
})
