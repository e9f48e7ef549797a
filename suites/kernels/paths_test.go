package kernels_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// The CUDA kernels dispatch to vectorised, scalar, cluster, tensor-core and split variants by
// size, alignment and head_dim, and check indices on the device. cuda.KernelPaths lists every
// such path; this spec runs the committed tier (aligned and off a 16-byte boundary, at the
// largest gemv row limit), the gemm cases once more without cublasLt, and the out-of-range index calls, with the library
// recording what ran, and fails if a listed path was never taken or if something ran that the
// table does not list. It carries no op label: it always covers every op.
var _ = Describe("kernel paths", harness.Kernel, Label("paths"), func() {
	It("are each taken by the committed tier, and none runs that cuda.KernelPaths does not list", func() {
		rec, ok := dev.(backend.PathRecorder)
		if !ok {
			Skip(fmt.Sprintf("backend %s has one code path per op: no path table", dev.Info().Backend))
		}
		Expect(rec.RecordPaths(true)).To(Succeed())
		DeferCleanup(func() { Expect(rec.RecordPaths(false)).To(Succeed()) })
		// The gemv's 2- and 4-row tiles run only above the default row limit (1): raise it to
		// its maximum here so the committed tier reaches them (gemvrows_test.go judges them).
		if gr, ok := dev.(backend.GemvRows); ok {
			DeferCleanup(restoreGemvRows(gr))
			Expect(gr.SetGemvRows(maxGemvRows)).To(Succeed())
		}

		var bufs []backend.Buffer
		DeferCleanup(func() {
			for _, b := range bufs {
				b.Free()
			}
		})
		f16 := func(shape ...int) backend.Buffer {
			b, err := dev.Alloc(tensor.F16, shape...)
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}
		i32 := func(vals ...int32) backend.Buffer {
			b, err := dev.Upload(tensor.FromI32([]int{len(vals)}, vals))
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}
		zeros := func(dt tensor.DType, shape ...int) backend.Buffer {
			b, err := dev.Upload(tensor.New(dt, shape...))
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}
		shaped := func(shape []int, vals ...int32) backend.Buffer {
			b, err := dev.Upload(tensor.FromI32(shape, vals))
			Expect(err).NotTo(HaveOccurred())
			bufs = append(bufs, b)
			return b
		}

		// Each committed case twice: in allocations of its own, and one element off them (the
		// scalar paths that alignment selects); a kernel may refuse the second as unsupported.
		cases := 0
		for _, s := range kernelSets {
			if s.Manifest.Tier != "committed" {
				continue
			}
			for _, place := range []conformance.Placement{conformance.Aligned, conformance.Misaligned} {
				// Accuracy is the conformance tables' to judge; here only what ran counts.
				_, err := conformance.CheckAt(dev, s, tols, place)
				if errors.Is(err, backend.ErrUnsupported) {
					continue
				}
				Expect(err).NotTo(HaveOccurred(), "%s (%s)", s.ID(), place)
			}
			cases++
		}
		// The 4-bit weights a backend tiles (tiled_test.go judges them): the tile and tiled paths.
		if _, ok := dev.(backend.W4Tiler); ok {
			for _, s := range setsOf("gemm_w4a16", "committed") {
				_, err := conformance.CheckTiled(dev, s, tols)
				if errors.Is(err, backend.ErrUnsupported) {
					continue
				}
				Expect(err).NotTo(HaveOccurred(), "%s tiled", s.ID())
			}
		}
		// The fp16 GEMMs with a bias fall back to GEMM-then-bias-kernel where cublasLt has no
		// algorithm, which no shape forces on every GPU: TOUCHSTONE_GEMM_LT=0 selects it. It
		// runs nowhere else, so here it is judged too.
		Expect(os.Setenv("TOUCHSTONE_GEMM_LT", "0")).To(Succeed())
		DeferCleanup(os.Unsetenv, "TOUCHSTONE_GEMM_LT")
		for _, op := range []string{"gemm", "rmsnorm_gemm", "layernorm_gemm", "swiglu_gemm", "gpt_ffn"} { // the ops whose projections take a bias
			for _, s := range setsOf(op, "committed") {
				verdicts, err := conformance.Check(dev, s, tols)
				Expect(err).NotTo(HaveOccurred(), "%s without cublasLt", s.ID())
				Expect(verdicts).To(harness.BeWithinTolerance(), "%s without cublasLt", s.ID())
			}
		}
		Expect(os.Unsetenv("TOUCHSTONE_GEMM_LT")).To(Succeed())

		for _, ic := range indexCalls {
			Expect(runIndexCall(dev, ic, f16, i32, zeros, shaped)).To(HaveOccurred(), "%s: %s", ic.op, ic.what)
		}

		got, err := rec.RecordedPaths()
		Expect(err).NotTo(HaveOccurred())
		missing, unlisted := cuda.PathCoverage(cuda.KernelPaths, got, append(slices.Clone(backend.Ops), cuda.LoadTimeOps...))
		AddReportEntry("paths", pathReport(got, cases))
		Expect(missing).To(BeEmpty(), "listed paths that no committed case takes (add a case that does):\n%s", formatPaths(missing))
		Expect(unlisted).To(BeEmpty(), "paths that ran but are not in cuda.KernelPaths (add a row with its condition):\n%v", unlisted)
	})
})

// pathReport lists what ran, one "op  what  count" line each.
func pathReport(got map[backend.PathKey]int64, cases int) string {
	keys := make([]backend.PathKey, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].Op < keys[j].Op || keys[i].Op == keys[j].Op && keys[i].What < keys[j].What
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d committed cases (aligned and misaligned) and %d out-of-range index calls ran %d distinct paths:\n", cases, len(indexCalls), len(keys))
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-20s %-48s %d\n", k.Op, k.What, got[k])
	}
	return b.String()
}

func formatPaths(ps []cuda.KernelPath) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %-20s %-48s when %s\n", p.Op, p.What, p.When)
	}
	return b.String()
}
