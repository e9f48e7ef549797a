package kernels_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of the fused FP8 quantisers (rmsnorm_quant_fp8, swiglu_quant_fp8): each variant
// computes the op on the host with one realistic bug and writes its outputs through the correct
// backend, over every committed case. Their tolerance lets a code move by one FP8 step on at most
// 1e-3 of the codes and a scale by two ulps of the storage dtype (golden/tolerances.yaml): the
// quiet bugs (the fp32 intermediate quantised unrounded, a truncating store, a truncating FP8
// conversion) move 2e-3 to 5e-2 of the codes, the others far more.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken fused FP8 quantiser",
		func(op string, bug fusedQuantBug, mustCatch string) {
			expectRejectedBy(op, setsOf(op, "committed"), brokenFusedQuant{cpu.New(), bug}, mustCatch)
		},
		Entry("rmsnorm_quant_fp8: the norm weight indexed by the position inside the quantisation group (w[i % G])",
			"rmsnorm_quant_fp8", fusedQuantBug{weightInGroup: true}, "dynamic-g128_outliers-x20_residual_phi3-mini_t2"),
		Entry("rmsnorm_quant_fp8: eps dropped (1 / rms: a row of rms ~ 1e-3 scaled by sqrt(2), a zero row NaN)",
			"rmsnorm_quant_fp8", fusedQuantBug{noEps: true}, "small-rms"),
		Entry("rmsnorm_quant_fp8: the fp32 norm quantised, not rounded to the storage dtype first",
			"rmsnorm_quant_fp8", fusedQuantBug{unrounded: true}, "dynamic-g128_llama3-405b_decode-t1"),
		Entry("rmsnorm_quant_fp8: the fp32 norm quantised unrounded, caught in bf16 by far",
			"rmsnorm_quant_fp8", fusedQuantBug{unrounded: true}, "bf16-dynamic-g128_llama3.2-1b_t3"),
		Entry("rmsnorm_quant_fp8: the amax taken before the weight multiply (scales of s * inv, codes of y)",
			"rmsnorm_quant_fp8", fusedQuantBug{amaxBeforeWeight: true}, "dynamic-per-token_qwen2.5-0.5b_t4"),
		Entry("rmsnorm_quant_fp8: the norm stored by truncation, not rounded to nearest even",
			"rmsnorm_quant_fp8", fusedQuantBug{truncate: true}, "dynamic-per-token_qwen2.5-0.5b_t4"),
		Entry("rmsnorm_quant_fp8: the FP8 conversion truncates (rounds toward zero)",
			"rmsnorm_quant_fp8", fusedQuantBug{fp8: quantBug{round: roundTowardZero}}, "static_s0.008_qwen2.5-14b_t1"),
		Entry("rmsnorm_quant_fp8: normalises x instead of x + residual (sum still stored)",
			"rmsnorm_quant_fp8", fusedQuantBug{unsummed: true}, "residual_qwen2.5-0.5b_t2_inplace"),
		Entry("swiglu_quant_fp8: silu applied to up instead of gate",
			"swiglu_quant_fp8", fusedQuantBug{siluOnUp: true}, "dynamic-per-token_qwen2.5-0.5b_t2"),
		Entry("swiglu_quant_fp8: the fp32 activation quantised, not rounded to the storage dtype first",
			"swiglu_quant_fp8", fusedQuantBug{unrounded: true}, "dynamic-g128_phi3-mini_t2"),
		Entry("swiglu_quant_fp8: the activation stored by truncation, not rounded to nearest even",
			"swiglu_quant_fp8", fusedQuantBug{truncate: true}, "static_s0.02_qwen2.5-0.5b_t1"),
		Entry("swiglu_quant_fp8: one scale per row where the groups are 128 wide",
			"swiglu_quant_fp8", fusedQuantBug{perRow: true}, "dynamic-g128_outliers-x20_f2048_t2"),
	)

	// The variants' host composition without a bug passes every committed case: what fails them is
	// their bug, not the harness.
	It("accepts the fused quantisers' host composition without a bug", func() {
		for _, op := range []string{"rmsnorm_quant_fp8", "swiglu_quant_fp8"} {
			sets := setsOf(op, "committed")
			Expect(sets).NotTo(BeEmpty())
			for _, s := range sets {
				verdicts, err := conformance.Check(brokenFusedQuant{cpu.New(), fusedQuantBug{}}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s/%s output %s:\n%s", op, s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		}
	})
})

// fusedQuantBug is what a broken fused quantiser gets wrong; the zero value is the contract.
type fusedQuantBug struct {
	weightInGroup    bool     // the norm weight read at the element's position in its group
	noEps            bool     // 1 / rms without eps
	unrounded        bool     // the fp32 intermediate quantised as it is
	amaxBeforeWeight bool     // the group amax of s * inv, before the weight multiply
	truncate         bool     // the intermediate stored by truncation
	unsummed         bool     // x normalised, not x + residual
	siluOnUp         bool     // silu(up) * gate
	perRow           bool     // one scale per row, the groups' width notwithstanding
	fp8              quantBug // the FP8 conversion's bug
}

// store is the intermediate as the broken kernel keeps it: rounded to dt (fp16 or bf16), left
// in fp32, or truncated.
func (b fusedQuantBug) store(dt tensor.DType, v float32) float32 {
	switch {
	case b.unrounded:
		return v
	case b.truncate && dt == tensor.BF16:
		return math.Float32frombits(math.Float32bits(v) &^ 0xFFFF)
	case b.truncate:
		h := float16.Fromfloat32(v)
		if math.Abs(float64(h.Float32())) > math.Abs(float64(v)) {
			h = float16.Frombits(h.Bits() - 1)
		}
		return h.Float32()
	}
	return tensor.Round(dt, v)
}

// brokenFusedQuant computes the fused quantisers on the host, as the CPU backend does (its fp64
// sum of squares and fp32 products, silu in fp64), with the bug, and writes out, scales and sum
// through the correct backend's public calls.
type brokenFusedQuant struct {
	*cpu.Backend
	bug fusedQuantBug
}

func (k brokenFusedQuant) RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale backend.Buffer, groupSize int, eps float32) error {
	if err := backend.CheckRMSNormQuantFP8(out, scales, sum, x, residual, weight, scale, groupSize, eps); err != nil {
		return err
	}
	xt, err := k.Download(x)
	if err != nil {
		return err
	}
	wt, err := k.Download(weight)
	if err != nil {
		return err
	}
	dt, t, h := xt.DType, xt.Shape[0], xt.Shape[1]
	xv, w := xt.Float32(), wt.Float32()
	s := xv
	if residual != nil {
		rt, err := k.Download(residual)
		if err != nil {
			return err
		}
		rv := rt.Float32()
		s = make([]float32, len(xv))
		for i := range s {
			s[i] = tensor.Round(dt, xv[i]+rv[i])
		}
	}
	norm := s
	if k.bug.unsummed {
		norm = xv
	}
	y, pre := make([]float32, len(s)), make([]float32, len(s))
	for r := 0; r < t; r++ {
		row := norm[r*h : (r+1)*h]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		ms := ss / float64(h)
		if !k.bug.noEps {
			ms += float64(eps)
		}
		inv := 1 / math.Sqrt(ms)
		for i, v := range row {
			col := i
			if k.bug.weightInGroup && groupSize > 0 {
				col = i % groupSize
			}
			pre[r*h+i] = float32(float64(v) * inv)
			y[r*h+i] = k.bug.store(dt, pre[r*h+i]*w[col])
		}
	}
	if sum != nil {
		st := tensor.New(dt, t, h)
		for i, v := range s { // exact: every value is in dt already
			if dt == tensor.BF16 {
				st.BF16[i] = tensor.BF16FromFloat32(v)
			} else {
				st.F16[i] = float16.Fromfloat32(v)
			}
		}
		if err := copyInto(k, sum, st); err != nil {
			return err
		}
	}
	amaxOf := y
	if k.bug.amaxBeforeWeight {
		amaxOf = pre
	}
	return k.quantise(out, scales, scale, groupSize, t, h, y, amaxOf)
}

func (k brokenFusedQuant) SwiGLUQuantFP8(out, scales, gate, up, scale backend.Buffer, groupSize int) error {
	if err := backend.CheckSwiGLUQuantFP8(out, scales, gate, up, scale, groupSize); err != nil {
		return err
	}
	gt, err := k.Download(gate)
	if err != nil {
		return err
	}
	ut, err := k.Download(up)
	if err != nil {
		return err
	}
	g, u := gt.Float32(), ut.Float32()
	y := make([]float32, len(g))
	for i := range g {
		a, b := g[i], u[i]
		if k.bug.siluOnUp {
			a, b = b, a
		}
		y[i] = k.bug.store(gt.DType, float32(float64(a)/(1+math.Exp(-float64(a))))*b)
	}
	return k.quantise(out, scales, scale, groupSize, gt.Shape[0], gt.Shape[1], y, y)
}

// quantise is quant_fp8 of y [t, h] on the host with the bug's conversion, a group's scale taken
// from the same group of amaxOf (or its whole row with perRow), written to out and scales.
func (k brokenFusedQuant) quantise(out, scales, scale backend.Buffer, groupSize, t, h int, y, amaxOf []float32) error {
	q := make([]float32, len(y))
	writer := brokenQuant{k.Backend, quantBug{}}
	if scale != nil {
		st, err := k.Download(scale)
		if err != nil {
			return err
		}
		for i, v := range y {
			q[i] = tensor.E4M3ToFloat32(k.bug.fp8.e4m3(v / st.F32[0]))
		}
		return writer.writeBytes(out, t, h, q)
	}
	span := groupSize
	if k.bug.perRow {
		span = h
	}
	sc := make([]float32, t*(h/groupSize))
	for g := range sc {
		lo := g * groupSize
		from := lo / span * span
		amax, nan := float32(0), false
		for _, v := range amaxOf[from : from+span] {
			nan = nan || v != v
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		sc[g] = max(amax, 1e-10) / tensor.E4M3Max
		if nan {
			sc[g] = float32(math.NaN())
		}
		for i := lo; i < lo+groupSize; i++ {
			q[i] = tensor.E4M3ToFloat32(k.bug.fp8.e4m3(y[i] / sc[g]))
		}
	}
	if err := writer.writeBytes(out, t, h, q); err != nil {
		return err
	}
	return writeRows(k.Backend, scales, tensor.FromF32([]int{t, h / groupSize}, sc))
}

// writeRows overwrites the f32 dst [t, n] with src through set_rows, which copies rows exactly.
func writeRows(b backend.Backend, dst backend.Buffer, src *tensor.Tensor) error {
	s, err := b.Upload(src)
	if err != nil {
		return err
	}
	defer s.Free()
	rows := make([]int32, src.Shape[0])
	for i := range rows {
		rows[i] = int32(i)
	}
	idx, err := b.Upload(tensor.FromI32([]int{len(rows)}, rows))
	if err != nil {
		return err
	}
	defer idx.Free()
	return b.SetRows(dst, s, idx)
}
