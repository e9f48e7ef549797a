package kernels_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// A full pass over every committed case must leave device memory exactly where it was: the
// first pass loads kernels and grows workspaces, so it is the baseline; the second must not
// add a byte once the library's workspaces are released.
var _ = Describe("device memory", Serial, harness.Kernel, harness.GPU, harness.DeviceMemory, allOps(), func() {
	It("is the same before and after a pass over every committed case", func() {
		if dev.Info().Backend == "cpu" {
			Skip("the CPU backend has no device memory")
		}
		dm, ok := dev.(backend.DeviceMemory)
		Expect(ok).To(BeTrue(), "the %s backend does not account its device memory", dev.Info().Backend)
		pass := func() int64 {
			for _, s := range kernelSets {
				if s.Manifest.Tier != "committed" {
					continue
				}
				_, err := conformance.Run(dev, s)
				if harness.Unsupported(err) {
					continue // nothing ran, so nothing to account; the conformance spec lists it
				}
				Expect(err).NotTo(HaveOccurred(), s.ID())
			}
			Expect(dm.ReleaseWorkspaces()).To(Succeed())
			Expect(dm.LiveBuffers()).To(BeZero())
			used, err := dm.MemoryInUse()
			Expect(err).NotTo(HaveOccurred())
			return used
		}
		before := pass()
		after := pass()
		AddReportEntry("device memory", fmt.Sprintf("in use after a warm-up pass %d bytes, after a second pass %d bytes", before, after), ReportEntryVisibilityAlways)
		Expect(after).To(Equal(before), "a pass over the committed cases changed device memory in use by %d bytes", after-before)
	})
})

// allOps labels a spec that runs every op, so filters on any op (op:gemm, !op:gemm) see it.
func allOps() Labels {
	var all Labels
	for _, op := range backend.Ops {
		all = append(all, harness.Op(op)...)
	}
	return all
}
