package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of gemm_w4a16: each variant misreads the packing the way 4-bit kernels go wrong
// (a nibble order, a zero point's offset, a group index); the committed cases must reject each.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken 4-bit weight GEMM",
		func(bug w4Bug, mustCatch string) {
			expectRejectedBy("gemm_w4a16", setsOf("gemm_w4a16", "committed"), brokenW4A16{cpu.New(), bug}, mustCatch)
		},
		Entry("gemm_w4a16: AWQ words read in plain nibble order", w4Bug{awqPlain: true}, "awq"),
		Entry("gemm_w4a16: GPTQ zero points read as stored (z - 1)", w4Bug{gptqZeroAsStored: true}, "gptq-sym"),
		Entry("gemm_w4a16: GPTQ groups from k / G, g_idx ignored", w4Bug{ignoreGIdx: true}, "act-order"),
		Entry("gemm_w4a16: the scale of the next group", w4Bug{nextGroupScale: true}, "awq-g128_decode-m1-n128-k896"),
		Entry("gemm_w4a16: zero points ignored (symmetric 8 for every format)", w4Bug{zeroEight: true}, "awq"),
	)
	// Correct kernels round the dequantised weight in other orders than the contract's single
	// rounding of (q - z) * s: exllama's and TensorRT-LLM's fma of q * s with a pre-rounded -z * s,
	// tinygemm's (q - 8) * s plus a pre-rounded (8 - z) * s, or no 16-bit rounding at all. None of
	// them is a bug; each must pass every committed case (tolerances.yaml's gemm_w4a16 entries
	// say how far they land).
	DescribeTable("accepts a 4-bit weight GEMM that rounds the dequantised weight its own way",
		func(r w4Rounding) {
			sets := setsOf("gemm_w4a16", "committed")
			Expect(sets).NotTo(BeEmpty())
			for _, s := range sets {
				verdicts, err := conformance.Check(brokenW4A16{cpu.New(), w4Bug{rounding: r}}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		},
		Entry("fma of q * s and a pre-rounded -z * s (exllama, TensorRT-LLM)", w4FMA),
		Entry("(q - 8) * s plus a pre-rounded (8 - z) * s (tinygemm)", w4Tinygemm),
		Entry("(q - z) * s never rounded to 16 bits", w4Unrounded),
	)
	// The variants' host code without a bug passes every committed case: what fails them is
	// their bug, not the harness.
	It("accepts the 4-bit weight GEMM's host code without a bug", func() {
		sets := setsOf("gemm_w4a16", "committed")
		Expect(sets).NotTo(BeEmpty())
		for _, s := range sets {
			verdicts, err := conformance.Check(brokenW4A16{cpu.New(), w4Bug{}}, s, tols)
			Expect(err).NotTo(HaveOccurred())
			for _, v := range verdicts {
				Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
			}
		}
	})
})

// w4Bug says how a broken kernel reads the packed weight, and how a kernel rounds the weight it
// dequantises; the zero value is the contract.
type w4Bug struct {
	awqPlain, gptqZeroAsStored, ignoreGIdx, nextGroupScale, zeroEight bool
	rounding                                                          w4Rounding
}

// w4Rounding is how a kernel forms the weight from a code q, zero point z and scale s.
type w4Rounding int

const (
	w4Contract  w4Rounding = iota // T((q - z) * s), one rounding
	w4FMA                         // T(q * s + T(-z * s)): one fused multiply-add
	w4Tinygemm                    // T((q - 8) * s + T((8 - z) * s))
	w4Unrounded                   // (q - z) * s in fp32
)

// weight forms one weight element of storage type dt as r says.
func (r w4Rounding) weight(dt tensor.DType, q, z uint8, s float32) float64 {
	qf, zf, sf := float64(q), float64(z), float64(s)
	switch r {
	case w4FMA:
		return float64(roundTo16(dt, float32(qf*sf+float64(roundTo16(dt, float32(-zf*sf))))))
	case w4Tinygemm:
		return float64(roundTo16(dt, float32((qf-8)*sf+float64(roundTo16(dt, float32((8-zf)*sf))))))
	case w4Unrounded:
		return float64(float32((qf - zf) * sf))
	}
	return float64(roundTo16(dt, float32((qf-zf)*sf)))
}

// brokenW4A16 unpacks with the bug, dequantises and multiplies on the host, and writes the
// product through the correct backend's public calls.
type brokenW4A16 struct {
	*cpu.Backend
	bug w4Bug
}

func (k brokenW4A16) GemmW4A16(out, x, qweight, qzeros, scales, gIdx backend.Buffer, format backend.W4Format, groupSize int) error {
	if err := backend.CheckGemmW4A16(out, x, qweight, qzeros, scales, gIdx, format, groupSize); err != nil {
		return err
	}
	bufs := []backend.Buffer{x, qweight, qzeros, scales}
	if gIdx != nil {
		bufs = append(bufs, gIdx)
	}
	ts := make([]*tensor.Tensor, len(bufs))
	for i, b := range bufs {
		t, err := k.Download(b)
		if err != nil {
			return err
		}
		ts[i] = t
	}
	m, kk, n := ts[0].Shape[0], ts[0].Shape[1], out.Shape()[1]
	ng := kk / groupSize
	var q, z []uint8
	var err error
	groups := make([]int32, kk)
	for r := range groups {
		groups[r] = int32(r / groupSize)
	}
	// plain reads eight codes a word in nibble order, column 8c + j: GPTQ's qzeros layout
	plain := func(words []int32, rows, cols int) []uint8 {
		codes := make([]uint8, rows*cols)
		for i, w := range words {
			for j := 0; j < 8; j++ {
				codes[8*i+j] = uint8(uint32(w)>>(4*j)) & 0xF
			}
		}
		return codes
	}
	switch {
	case format == backend.W4AWQ && k.bug.awqPlain:
		q, z = plain(ts[1].I32, kk, n), plain(ts[2].I32, ng, n)
	case format == backend.W4AWQ:
		q, _ = tensor.UnpackAWQ(ts[1].I32, kk, n)
		z, err = tensor.UnpackAWQ(ts[2].I32, ng, n)
	default:
		q, _ = tensor.UnpackGPTQWeight(ts[1].I32, kk, n)
		z, err = tensor.UnpackGPTQZeros(ts[2].I32, ng, n)
		if k.bug.gptqZeroAsStored {
			z = plain(ts[2].I32, ng, n)
		}
		if !k.bug.ignoreGIdx {
			copy(groups, ts[4].I32)
		}
	}
	if err != nil {
		return err
	}
	if k.bug.zeroEight {
		for i := range z {
			z[i] = 8
		}
	}
	s := ts[3].Float32()
	if k.bug.nextGroupScale {
		shifted := make([]float32, len(s))
		copy(shifted, s[n:])
		copy(shifted[len(s)-n:], s[:n])
		s = shifted
	}
	if _, err := tensor.DequantInt4(q, z, s, groups, kk, n); err != nil {
		return err // the codes, zero points, scales and groups checked as the contract reads them
	}
	wt := make([]float64, kk*n)
	for i := 0; i < kk; i++ {
		g := int(groups[i])
		for c := 0; c < n; c++ {
			wt[i*n+c] = k.bug.rounding.weight(ts[0].DType, q[i*n+c], z[g*n+c], s[g*n+c])
		}
	}
	res := make([]float32, m*n)
	xf := ts[0].Float32()
	for r := 0; r < m; r++ {
		for c := 0; c < n; c++ {
			var acc float64
			for i := 0; i < kk; i++ {
				acc += float64(xf[r*kk+i]) * wt[i*n+c]
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

// roundTo16 rounds v to the 16-bit storage type dt, as the contract's dequantised weight is.
func roundTo16(dt tensor.DType, v float32) float32 {
	if dt == tensor.BF16 {
		return tensor.BF16FromFloat32(v).Float32()
	}
	return float16.Fromfloat32(v).Float32()
}
