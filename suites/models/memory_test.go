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

// ownCounter is what both backends count of their own: buffers allocated (Alloc, Upload) and
// not yet freed, and graphs captured and not yet freed. The CPU backend has no device memory,
// but a weight the loader uploads and never frees, or a graph a model never frees, shows in
// these counts on CI as it would on the GPU.
type ownCounter interface {
	LiveBuffers() int64
	LiveBytes() int64
	LiveGraphs() int64
}

// usage is what the device-memory spec compares: this process's own live buffers, bytes and
// graphs, and, as information only, the device's memory in use with the library's workspaces
// released (0 on the CPU backend): that figure is the whole GPU's, which another process on
// the same GPU (another suite, a mutant run) moves at any time.
type usage struct {
	Buffers, Bytes, Graphs int64
	InUse                  int64
}

func (u usage) own() []int64 { return []int64{u.Buffers, u.Bytes, u.Graphs} }

func measureUsage(oc ownCounter) usage {
	u := usage{Buffers: oc.LiveBuffers(), Bytes: oc.LiveBytes(), Graphs: oc.LiveGraphs()}
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

// Serial: the device-wide figure it reports is only meaningful while this process's other
// specs are idle.
var _ = Describe("device memory", Serial, harness.Model, harness.DeviceMemory, func() {
	DescribeTable("is where it was after loading, running and closing the model", func(s *golden.Set) {
		oc, ok := dev.(ownCounter)
		Expect(ok).To(BeTrue(), "the %s backend does not count its buffers and graphs", dev.Info().Backend)
		start := measureUsage(oc)
		// The first model on a device also loads kernels, creates library handles and grows
		// workspaces that outlive it: the second load, run and close is the one measured.
		loadRunClose(s)
		warm := measureUsage(oc)
		Expect(warm.own()).To(Equal(start.own()), "buffers (count, bytes) and graphs still live after Close: %+v, before loading: %+v", warm, start)
		loadRunClose(s)
		after := measureUsage(oc)
		AddReportEntry("device memory", fmt.Sprintf("this process: live buffers %d (%d bytes), graphs %d, before and after; the device (every process on it, information only): %d bytes in use after a warm-up load, %d after a second",
			after.Buffers, after.Bytes, after.Graphs, warm.InUse, after.InUse))
		Expect(after.own()).To(Equal(warm.own()), "this process's buffers (count, bytes) and graphs after loading, running and closing %s twice", s.ID())
	}, committedModelEntries())
})

// committedModelEntries are the committed tier's sets as table entries: a leak is in the loader's and
// the pass's code, which every family's tiny set runs, while loading a full-size checkpoint
// twice more (Phi-3-mini-4k: 7.6 GB, ~20 s a load on an H100) was a third of the whole
// conformance run.
func committedModelEntries() []TableEntry {
	return modelEntriesWhere(func(s *golden.Set) bool { return s.Manifest.Tier == "committed" })
}
