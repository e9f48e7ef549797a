package sampling_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
	"github.com/touchstone-llm/touchstone/engine/sample"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// The sampler's paths (greedy, the histogram passes, its device-side logit checks) and
// philox's, as the kernels suite's "kernel paths" spec does for the kernels.
var _ = Describe("sampling paths", harness.Sampling, Label("paths"), func() {
	It("are each taken by the committed sets, and none runs that cuda.KernelPaths does not list", func() {
		rec, ok := dev.(backend.PathRecorder)
		if !ok {
			Skip(fmt.Sprintf("backend %s has one code path per op: no path table", dev.Info().Backend))
		}
		Expect(rec.RecordPaths(true)).To(Succeed())
		DeferCleanup(func() { Expect(rec.RecordPaths(false)).To(Succeed()) })
		for _, s := range samplingSets {
			_, err := sample.CheckSet(dev, s) // the conformance specs judge the tokens
			if harness.Unsupported(err) {
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "%s", s.ID())
		}
		for _, bl := range badLogitCases {
			Expect(bl.sample()).To(HaveOccurred(), bl.name)
		}
		got, err := rec.RecordedPaths()
		Expect(err).NotTo(HaveOccurred())
		missing, unlisted := cuda.PathCoverage(cuda.KernelPaths, got, []string{"sample", "philox"})
		AddReportEntry("paths", fmt.Sprint(got))
		Expect(missing).To(BeEmpty(), "listed paths that no committed set takes: %v", missing)
		Expect(unlisted).To(BeEmpty(), "paths that ran but are not in cuda.KernelPaths: %v", unlisted)
	})
})
