package kernels_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of the bf16 entries of golden/tolerances.yaml: bugs particular to bf16 storage (a
// store that truncates instead of rounding, a bf16 accumulator, bf16 statistics) and the
// generic ones that matter more at bf16's coarser rounding (an fp32 RoPE angle at long
// context), each rejected by the committed bf16 cases.
var _ = Describe("tolerance tightness, bf16", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken bf16 kernel",
		func(op string, broken backend.Backend, mustCatch string) {
			expectRejected(op, tensor.BF16, broken, mustCatch)
		},
		Entry("residual_add: the bf16 store truncates toward zero instead of rounding", "residual_add", residualTruncated{cpu.New()}, "bf16-"),
		Entry("gemm: the bf16 output truncated toward zero", "gemm", gemmTruncated{cpu.New()}, "bf16-"),
		Entry("gemm: bf16 accumulation", "gemm", gemmF16Accumulation{cpu.New()}, "bf16-"),
		Entry("rmsnorm: the sum of squares accumulated in bf16", "rmsnorm", rmsnormBF16Squares{cpu.New()}, "bf16-"),
		Entry("rope: angle pos * inv_freq in fp32, at bf16's coarser rounding", "rope", ropeFP32Angle{cpu.New()}, "bf16-"),
		Entry("attention_decode: attends the whole cache capacity, ignoring cache_lens", "attention_decode", decodeIgnoresLens{cpu.New()}, "bf16-"),
		Entry("swiglu: silu applied to up instead of gate", "swiglu", swigluSwapped{cpu.New()}, "bf16-"),
		Entry("embedding: row off by one", "embedding", embeddingOffByOne{cpu.New()}, "bf16-"),
	)
})

// storageSets are the committed sets of op whose first input is stored in dt: the fp16 broken
// variants are judged on the fp16 cases, the bf16 ones on the bf16 cases.
func storageSets(op string, dt tensor.DType) []*golden.Set {
	var out []*golden.Set
	for _, s := range setsOf(op, "committed") {
		if in := s.Files("input"); len(in) > 0 && firstFloat(in) == dt.String() {
			out = append(out, s)
		}
	}
	return out
}

// firstFloat is the dtype of the first 16-bit input of a set ("" when it has none).
func firstFloat(in []golden.File) string {
	for _, f := range in {
		if f.DType == "f16" || f.DType == "bf16" {
			return f.DType
		}
	}
	return ""
}

// elem is element i of a 16-bit or fp32 tensor, widened.
func elem(t *tensor.Tensor, i int) float32 {
	switch t.DType {
	case tensor.F16:
		return t.F16[i].Float32()
	case tensor.BF16:
		return t.BF16[i].Float32()
	}
	return t.F32[i]
}

// setElem stores v into element i, rounded to the tensor's dtype as a kernel's store would.
func setElem(t *tensor.Tensor, i int, v float32) {
	switch t.DType {
	case tensor.F16:
		t.F16[i] = float16.Fromfloat32(v)
	case tensor.BF16:
		t.BF16[i] = tensor.BF16FromFloat32(v)
	default:
		t.F32[i] = v
	}
}

// truncBF16 drops the low 16 bits of v's fp32 pattern: bf16 rounded toward zero, what a
// store through a plain shift (or __float2bfloat16_rz) does. Its error reaches one ulp (2u),
// twice rounding's, and is biased away from nothing: every magnitude shrinks.
func truncBF16(v float32) tensor.BFloat16 {
	return tensor.BFloat16(math.Float32bits(v) >> 16)
}

type residualTruncated struct{ *cpu.Backend }

func (k residualTruncated) ResidualAdd(out, x, residual backend.Buffer) error {
	if x.DType() != tensor.BF16 {
		return k.Backend.ResidualAdd(out, x, residual)
	}
	xt, err := k.Download(x)
	if err != nil {
		return err
	}
	rt, err := k.Download(residual)
	if err != nil {
		return err
	}
	res := tensor.New(tensor.BF16, xt.Shape...)
	xv, rv := xt.Float32(), rt.Float32()
	for i := range res.BF16 {
		res.BF16[i] = truncBF16(xv[i] + rv[i]) // the fp32 add of two bf16 values is exact
	}
	return copyInto(k.Backend, out, res) // not k: copyInto adds through ResidualAdd
}

// gemmTruncated computes the product exactly as the fp32-output path does, then stores it
// truncated to bf16.
type gemmTruncated struct{ *cpu.Backend }

func (k gemmTruncated) Gemm(out, x, w, bias backend.Buffer) error {
	if out.DType() != tensor.BF16 {
		return k.Backend.Gemm(out, x, w, bias)
	}
	wide, err := k.Alloc(tensor.F32, out.Shape()...)
	if err != nil {
		return err
	}
	defer wide.Free()
	if err := k.Backend.Gemm(wide, x, w, bias); err != nil {
		return err
	}
	t, err := k.Download(wide)
	if err != nil {
		return err
	}
	res := tensor.New(tensor.BF16, t.Shape...)
	for i, v := range t.F32 {
		res.BF16[i] = truncBF16(v)
	}
	return copyInto(k, out, res)
}

// rmsnormBF16Squares accumulates each row's sum of squares in the storage dtype, as a kernel
// whose reduction registers are bf16 would, then normalises exactly.
type rmsnormBF16Squares struct{ *cpu.Backend }

func (k rmsnormBF16Squares) RMSNorm(out, x, w backend.Buffer, eps float32) error {
	xt, err := k.Download(x)
	if err != nil {
		return err
	}
	wt, err := k.Download(w)
	if err != nil {
		return err
	}
	rows, h := lastDim(xt)
	xv, wv := xt.Float32(), wt.Float32()
	res := tensor.New(xt.DType, xt.Shape...)
	for r := 0; r < rows; r++ {
		var ss float32
		for _, v := range xv[r*h : (r+1)*h] {
			ss = tensor.Round(xt.DType, ss+v*v)
		}
		inv := 1 / math.Sqrt(float64(ss)/float64(h)+float64(eps))
		for i := 0; i < h; i++ {
			setElem(res, r*h+i, float32(float64(xv[r*h+i])*inv)*wv[i])
		}
	}
	return copyInto(k, out, res)
}
