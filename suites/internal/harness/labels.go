// Package harness is what every touchstone suite shares: the frozen label set, backend
// selection from the environment, golden data and tolerances, and Gomega matchers.
package harness

import (
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// The label set is closed: suites take labels from here, so a typo cannot create a label
// nobody filters on.
var (
	Kernel    = Label("kernel")
	Model     = Label("model")
	Sampling  = Label("sampling")
	Fused     = Label("fused")
	GPU       = Label("gpu")
	Slow      = Label("slow")
	Benchmark = Label("benchmark")
	// Tightness marks specs that prove a tolerance rejects a deliberately broken kernel.
	Tightness = Label("tightness")
	// DeviceMemory marks the leak specs: this process's live buffers and graphs before and
	// after, with the device's memory in use (all processes) reported beside them. Under
	// compute-sanitizer, whose own tracking allocations grow memory, they are left out
	// (memcheck's leak check covers the library there).
	DeviceMemory = Label("device-memory")
	// BatchInvariance marks the batch-invariance checks (a sequence alone and in batches, bit
	// for bit), which the invariance mutants run by themselves.
	BatchInvariance = Label("batch-invariance")
	// Served marks the paged, continuous-batching model checks (model.Served), which the
	// served mutants run by themselves.
	Served = Label("served")
)

// Op is the label op:<name> of a known op; an unknown name is a bug in the suite and panics.
func Op(name string) Labels {
	if !slices.Contains(backend.Ops, name) {
		panic("harness: no op named " + name)
	}
	return Label("op:" + name)
}

// ModelName labels a model set: model plus model:<name>. Model names come from golden
// manifests, which the golden package has already checked against [a-z0-9._-].
func ModelName(name string) Labels {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) {
		panic("harness: bad model name " + name)
	}
	return Label("model", "model:"+name)
}

// Tier labels a golden set by tier: the full-scale tier is slow.
func Tier(tier string) Labels {
	if tier == "full" {
		return Slow
	}
	return Labels{}
}
