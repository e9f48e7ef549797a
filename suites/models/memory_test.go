package models_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// liveCounter is what both backends count of their own buffers: allocated (Alloc, Upload)
// and not yet freed. The CPU backend has no device memory, but a weight the loader uploads
// and never frees shows in this count on CI as it would on the GPU.
type liveCounter interface {
	LiveBuffers() int64
	LiveBytes() int64
}

// usage is what the device-memory spec compares: the backend's live buffers and bytes and,
// on a device, the memory in use with the library's workspaces released.
type usage struct {
	Buffers, Bytes int64
	InUse          int64 // 0 on the CPU backend
}

func measureUsage(lc liveCounter) usage {
	u := usage{Buffers: lc.LiveBuffers(), Bytes: lc.LiveBytes()}
	if dm, ok := dev.(backend.DeviceMemory); ok {
		Expect(dm.ReleaseWorkspaces()).To(Succeed())
		var err error
		u.InUse, err = dm.MemoryInUse()
		Expect(err).NotTo(HaveOccurred())
	}
	return u
}

// loadRunClose loads a set's model, runs a prefill and three decode steps (the pool fills,
// the second step is captured as a graph where the backend has graphs, the third replays it)
// and closes the model.
func loadRunClose(s *golden.Set) {
	m, p, err := model.LoadSet(dev, s)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	defer m.Close() // also when an Expect below fails
	err = m.PrefillOnDevice(p.PromptIDs)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	for _, tok := range p.PromptIDs[:3] {
		Expect(m.DecodeOnDevice(tok)).To(Succeed())
	}
}

// Serial: memory in use is the whole device's, which another process's specs would move.
var _ = Describe("device memory", Serial, harness.Model, harness.DeviceMemory, func() {
	DescribeTable("is where it was after loading, running and closing the model", func(s *golden.Set) {
		lc, ok := dev.(liveCounter)
		Expect(ok).To(BeTrue(), "the %s backend does not count its buffers", dev.Info().Backend)
		start := measureUsage(lc)
		// The first model on a device also loads kernels, creates library handles and grows
		// workspaces that outlive it: the second load, run and close is the one measured.
		loadRunClose(s)
		warm := measureUsage(lc)
		Expect([]int64{warm.Buffers, warm.Bytes}).To(Equal([]int64{start.Buffers, start.Bytes}),
			"buffers still allocated after Close: %d (%d bytes)", warm.Buffers-start.Buffers, warm.Bytes-start.Bytes)
		loadRunClose(s)
		after := measureUsage(lc)
		AddReportEntry("device memory", fmt.Sprintf("live buffers %d (%d bytes) before and after; device memory in use %d bytes after a warm-up load, %d after a second",
			after.Buffers, after.Bytes, warm.InUse, after.InUse))
		Expect([]int64{after.Buffers, after.Bytes}).To(Equal([]int64{warm.Buffers, warm.Bytes}), "this process's buffers")
		if suiteConfig, _ := GinkgoConfiguration(); suiteConfig.ParallelTotal > 1 {
			// Under -p this Serial spec runs once the other processes have run their specs,
			// while they free their loaded models (each set's AfterAll, permodel_test.go): the device's
			// memory in use may only fall.
			Expect(after.InUse).To(BeNumerically("<=", warm.InUse), "loading, running and closing %s raised device memory in use by %d bytes", s.ID(), after.InUse-warm.InUse)
			return
		}
		Expect(after).To(Equal(warm), "loading, running and closing %s changed device memory in use by %d bytes", s.ID(), after.InUse-warm.InUse)
	}, committedModelEntries())
})

// committedModelEntries are the committed tier's sets as table entries: a leak is in the loader's and
// the pass's code, which every family's tiny set runs, while loading a full-size checkpoint
// twice more (Phi-3-mini-4k: 7.6 GB, ~20 s a load on an H100) was a third of the whole
// conformance run.
func committedModelEntries() []TableEntry {
	return modelEntriesWhere(func(s *golden.Set) bool { return s.Manifest.Tier == "committed" })
}
