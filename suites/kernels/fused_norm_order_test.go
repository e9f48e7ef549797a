package kernels_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// The order FlashInfer's fused_add_rmsnorm and Liger-Kernel's LigerFusedAddRMSNorm compute in:
// the sum x + residual is stored rounded, but the row normalised is the fp32 sum the kernel
// kept, not the stored one the unfused model reads (this library's order and the reference's).
// The two differ by the sum's rounding, up to two ulps of out at the bottom of a binade, which
// rmsnorm_residual's out entries admit (as layernorm_residual's do); the sum keeps its one
// rounding's limit.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	It("accepts a fused add+RMSNorm that normalises its fp32 sum (FlashInfer's, Liger's order)", func() {
		sets := setsOf("rmsnorm_residual", "committed")
		Expect(sets).NotTo(BeEmpty())
		for _, s := range sets {
			verdicts, err := conformance.Check(fp32SumNorm{cpu.New(), false}, s, tols)
			Expect(err).NotTo(HaveOccurred())
			for _, v := range verdicts {
				Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
			}
		}
	})
	// The CUDA mutant cuda-bf16-store-truncates truncates every bf16 store; the fused residual
	// norms' bf16 cases are its catchers. With out's limit widened, the sum's keeps them.
	It("still rejects bf16 stores that truncate, by the sum's limit", func() {
		expectRejectedBy("rmsnorm_residual", setsOf("rmsnorm_residual", "committed"), fp32SumNorm{cpu.New(), true}, "bf16-")
	})
})

// fp32SumNorm is the CPU backend with RMSNormResidual in the fp32-sum order; with truncate,
// its 16-bit stores of sum and out truncate (keep the top 16 bits of the fp32) instead of
// rounding, and out normalises the truncated sum.
type fp32SumNorm struct {
	*cpu.Backend
	truncate bool
}

func (k fp32SumNorm) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	if err := backend.CheckRMSNormResidual(sum, out, x, residual, weight, eps); err != nil {
		return err
	}
	var ts [3]*tensor.Tensor
	for i, b := range []backend.Buffer{x, residual, weight} {
		t, err := k.Download(b)
		if err != nil {
			return err
		}
		ts[i] = t
	}
	xv, rv, w := ts[0].Float32(), ts[1].Float32(), ts[2].Float32()
	h := len(w)
	st, y := tensor.New(sum.DType(), ts[0].Shape...), tensor.New(out.DType(), ts[0].Shape...)
	for r := 0; r < len(xv)/h; r++ {
		s := make([]float32, h)
		var ss float64
		for j := range s {
			s[j] = xv[r*h+j] + rv[r*h+j] // the fp32 add, kept
			if k.truncate {
				s[j] = truncateTo(sum.DType(), s[j])
			}
			ss += float64(s[j]) * float64(s[j])
			setElem(st, r*h+j, s[j])
		}
		inv := 1 / math.Sqrt(ss/float64(h)+float64(eps))
		for j, v := range s {
			o := float32(float64(v)*inv) * w[j]
			if k.truncate {
				o = truncateTo(out.DType(), o)
			}
			setElem(y, r*h+j, o)
		}
	}
	if err := k.Write(sum, st); err != nil {
		return err
	}
	return k.Write(out, y)
}

// truncateTo drops the bits of v that bf16 does not keep (toward zero); other dtypes as they are.
func truncateTo(dt tensor.DType, v float32) float32 {
	if dt != tensor.BF16 {
		return v
	}
	return math.Float32frombits(math.Float32bits(v) &^ 0xffff)
}
