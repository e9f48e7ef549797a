package kernels_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// A full pass over every committed case must leave nothing of this process's allocated: no
// buffer and no graph once each pass is over. Device memory in use is reported beside it as
// information only: it is the whole GPU's, which another process sharing the GPU moves.
var _ = Describe("device memory", Serial, harness.Kernel, harness.GPU, harness.DeviceMemory, allOps(), func() {
	It("is the same before and after a pass over every committed case", func() {
		if dev.Info().Backend == "cpu" {
			Skip("the CPU backend has no device memory")
		}
		harness.SkipExternal(dev, "its device memory is its adapter's")
		dm, ok := dev.(backend.DeviceMemory)
		Expect(ok).To(BeTrue(), "the %s backend does not account its device memory", dev.Info().Backend)
		graphs, ok := dev.(backend.Graphs)
		Expect(ok).To(BeTrue(), "the %s backend does not count its graphs", dev.Info().Backend)
		startGraphs := graphs.LiveGraphs()
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
			Expect([]int64{dm.LiveBuffers(), dm.LiveBytes()}).To(Equal([]int64{0, 0}), "buffers (count, bytes) left allocated by a pass")
			Expect(graphs.LiveGraphs()).To(Equal(startGraphs), "graphs left live by a pass")
			used, err := dm.MemoryInUse()
			Expect(err).NotTo(HaveOccurred())
			return used
		}
		before := pass()
		after := pass()
		AddReportEntry("device memory", fmt.Sprintf("this process: no buffer and no graph live after either pass; the device (every process on it, information only): %d bytes in use after a warm-up pass, %d after a second",
			before, after), ReportEntryVisibilityAlways)
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
