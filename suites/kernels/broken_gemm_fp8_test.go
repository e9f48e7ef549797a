package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of gemm_fp8: each variant reads a scale from the wrong place, the bugs of FP8 GEMM
// kernels that give plausible numbers; the committed cases must reject each.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken FP8 GEMM",
		func(bug gemmFP8Bug, mustCatch string) {
			expectRejectedBy("gemm_fp8", setsOf("gemm_fp8", "committed"), brokenGemmFP8{cpu.New(), bug}, mustCatch)
		},
		Entry("gemm_fp8: weight block row n % blocks instead of n / 128", gemmFP8Bug{wRow: func(n, blocks int) int { return n % blocks }}, "block"),
		Entry("gemm_fp8: weight scales read transposed ([k/128][n/128])", gemmFP8Bug{transposeW: true}, "block"),
		Entry("gemm_fp8: weight blocks of 64 rows instead of 128", gemmFP8Bug{wRow: func(n, blocks int) int { return min(n/64, blocks-1) }}, "block"),
		Entry("gemm_fp8: activation scales ignored", gemmFP8Bug{ignoreX: true}, "channel"),
		Entry("gemm_fp8: the activation group of column k taken from the weight's block grid (k / 128 of the next row)", gemmFP8Bug{xNextRow: true}, "block"),
	)
})

// gemmFP8Bug says which scale a broken kernel reads; the zero value is the contract.
type gemmFP8Bug struct {
	wRow       func(n, blocks int) int // the row of w_scales for output column n (block scales)
	transposeW bool
	ignoreX    bool
	xNextRow   bool // x_scales[(m + 1) % M] instead of x_scales[m]
}

// brokenGemmFP8 computes the product on the host with the bug's scale lookups and writes it
// through the correct backend's public calls.
type brokenGemmFP8 struct {
	*cpu.Backend
	bug gemmFP8Bug
}

func (k brokenGemmFP8) GemmFP8(out, x, xScales, w, wScales backend.Buffer, block bool) error {
	if err := backend.CheckGemmFP8(out, x, xScales, w, wScales, block); err != nil {
		return err
	}
	var ts [4]*tensor.Tensor
	for i, b := range []backend.Buffer{x, xScales, w, wScales} {
		t, err := k.Download(b)
		if err != nil {
			return err
		}
		ts[i] = t
	}
	m, kk, n := ts[0].Shape[0], ts[0].Shape[1], ts[2].Shape[0]
	const bs = backend.FP8BlockSize
	kb := kk / bs
	nb := (n + bs - 1) / bs
	xsAt := func(r, c int) float64 {
		if k.bug.ignoreX {
			return 1
		}
		if k.bug.xNextRow {
			r = (r + 1) % m
		}
		if block {
			return float64(ts[1].F32[r*kb+c/bs])
		}
		return float64(ts[1].F32[r])
	}
	wsAt := func(r, c int) float64 {
		if !block {
			return float64(ts[3].F32[r])
		}
		row := r / bs
		if k.bug.wRow != nil {
			row = k.bug.wRow(r, nb)
		}
		if k.bug.transposeW {
			// the flat index a [k/128][n/128] reading takes, wrapped into the table
			return float64(ts[3].F32[((c/bs)*nb+row)%(nb*kb)])
		}
		return float64(ts[3].F32[row*kb+c/bs])
	}
	res := make([]float32, m*n)
	for r := 0; r < m; r++ {
		for c := 0; c < n; c++ {
			var acc float64
			for i := 0; i < kk; i++ {
				acc += float64(tensor.E4M3ToFloat32(ts[0].F8[r*kk+i])) * xsAt(r, i) *
					float64(tensor.E4M3ToFloat32(ts[2].F8[c*kk+i])) * wsAt(c, i)
			}
			res[r*n+c] = float32(acc)
		}
	}
	o := tensor.New(out.DType(), m, n)
	for i, v := range res {
		setElem(o, i, v)
	}
	return copyInto(k, out, o)
}
