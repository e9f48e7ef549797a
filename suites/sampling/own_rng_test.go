package sampling_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/sample"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// ownRNGDraws is how many times each settled row is drawn under each config: enough for a
// temperature off by 30% or a nucleus one rank too wide to fall far below sample.FitAlpha
// (the numpy adapter's planted bugs, make suites-external).
const ownRNGDraws = 512

// A sampler with its own random numbers (another library's, behind an external adapter)
// cannot be held to the reference token for token. It is held to what every correct sampler
// satisfies, whatever its RNG: each token one the config allows, and many draws of a row
// distributed as the reference's probabilities (docs/sampling.md, "Samplers with their own
// random numbers"). The determinism and invalid-request specs hold it as they hold every
// backend.
var _ = Describe("a sampler with its own random numbers", harness.Sampling, func() {
	BeforeEach(func() {
		if !sample.OwnRNG(dev) {
			Skip("this backend draws the spec's Philox stream: the exact specs hold it to every token")
		}
	})

	DescribeTable("draws, on every case and row, only tokens the config allows", func(s *golden.Set) {
		rep, err := sample.CheckSupport(dev, s)
		harness.SkipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("cases", fmt.Sprintf("%d cases, %d tokens checked; refused: %d %s",
			rep.Cases, rep.Rows, len(rep.Unsupported), strings.Join(rep.Unsupported, "; ")))
		Expect(rep.Failures).To(BeEmpty(), "%s:\n%s", s.ID(), strings.Join(rep.Failures, "\n"))
	}, setEntries())

	DescribeTable("draws each settled row as often as the reference's probabilities say", func(s *golden.Set) {
		rep, err := sample.CheckDistribution(dev, s, ownRNGDraws)
		harness.SkipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Failures).To(BeEmpty(), "%s:\n%s", s.ID(), strings.Join(rep.Failures, "\n"))
		Expect(rep.Fits).NotTo(BeEmpty(), "%s: no row to test", s.ID())
		low := rep.Fits[0]
		for _, f := range rep.Fits {
			if f.P < low.P {
				low = f
			}
		}
		AddReportEntry("fits", fmt.Sprintf("%d rows x configs, %d draws each; lowest p %.3g (%s row %d, %d bins); refused: %d %s",
			len(rep.Fits), low.Draws, low.P, low.Config, low.Row, low.Bins, len(rep.Unsupported), strings.Join(rep.Unsupported, "; ")))
	}, setEntries())
})
