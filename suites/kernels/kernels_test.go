package kernels_test

import (
	"errors"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Sets are discovered while the spec tree is built, so every golden case becomes its own
// table entry (and its own line in JUnit). A discovery error fails a spec below rather
// than the build of the tree.
var kernelSets, discoverErr = harness.KernelSets()

// minCommittedCases is how many committed cases each op must have, so no op can silently
// lose its coverage.
const minCommittedCases = 4

var _ = Describe("kernel golden sets", harness.Kernel, func() {
	It("are all discoverable and well-formed", func() {
		Expect(discoverErr).NotTo(HaveOccurred())
	})

	It("cover every op with committed cases", func() {
		count := map[string]int{}
		for _, s := range kernelSets {
			if s.Manifest.Tier == "committed" {
				count[s.Manifest.Op]++
			}
		}
		for _, op := range backend.Ops {
			Expect(count[op]).To(BeNumerically(">=", minCommittedCases),
				"op %s has %d committed golden cases", op, count[op])
		}
	})
})

var _ = Describe("kernel conformance", harness.Kernel, func() {
	for _, op := range backend.Ops {
		var entries []TableEntry
		for _, s := range setsOf(op, "") {
			entries = append(entries, Entry(entryName(s), s, harness.Tier(s.Manifest.Tier)))
		}
		DescribeTable(op, harness.Op(op), func(s *golden.Set) {
			verdicts, err := conformance.Check(dev, s, tols)
			// A case the backend does not implement (an op it does not claim, or a call it
			// refuses, such as a head_dim the CUDA kernels have no variant for) is skipped
			// with its reason, or fails under TOUCHSTONE_UNSUPPORTED=fail.
			harness.SkipUnsupported(err)
			Expect(err).NotTo(HaveOccurred())
			Expect(verdicts).To(harness.BeWithinTolerance())
		}, entries)
	}
})

// The same committed cases with every input and output one element past the start of its
// allocation (a view into a larger buffer, as a model's activations are): off every 16-byte
// boundary, so each kernel takes its scalar path. A kernel may refuse such buffers as
// unsupported (the attention kernels do); that skips the case, whatever TOUCHSTONE_UNSUPPORTED
// says, since misaligned buffers are not part of an op's claim.
var _ = Describe("kernel conformance off a 16-byte boundary", harness.Kernel, Label("misaligned"), func() {
	for _, op := range backend.Ops {
		var entries []TableEntry
		for _, s := range setsOf(op, "committed") {
			entries = append(entries, Entry(entryName(s), s))
		}
		DescribeTable(op, harness.Op(op), func(s *golden.Set) {
			verdicts, err := conformance.CheckAt(dev, s, tols, conformance.Misaligned)
			if errors.Is(err, backend.ErrUnsupported) {
				Skip("unsupported off a 16-byte boundary: " + err.Error())
			}
			Expect(err).NotTo(HaveOccurred())
			Expect(verdicts).To(harness.BeWithinTolerance())
		}, entries)
	}
})

// setsOf returns the discovered sets of op, of one tier or ("") of both.
func setsOf(op, tier string) []*golden.Set {
	var out []*golden.Set
	for _, s := range kernelSets {
		if s.Manifest.Op == op && (tier == "" || s.Manifest.Tier == tier) {
			out = append(out, s)
		}
	}
	return out
}

// entryName reads like "RMSNORM(x=f16[4,896],eps=1e-06) qwen2.5-0.5b_t4", after
// test-backend-ops, so a failing line says what was run without opening the manifest.
func entryName(s *golden.Set) string {
	m := s.Manifest
	var args []string
	if in := s.Files("input"); len(in) > 0 {
		args = append(args, fmt.Sprintf("%s=%s%s", in[0].Name, in[0].DType, tensor.ShapeString(in[0].Shape)))
	}
	if p := strings.Trim(string(m.Params), "{} \n"); p != "" {
		args = append(args, strings.NewReplacer(`"`, "", ": ", "=", ":", "=", ", ", ",").Replace(p))
	}
	name := fmt.Sprintf("%s(%s) %s", strings.ToUpper(m.Op), strings.Join(args, ","), m.Case)
	if m.Tier != "committed" {
		name += " [" + m.Tier + "]"
	}
	return name
}
