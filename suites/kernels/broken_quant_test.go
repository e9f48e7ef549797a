package kernels_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of quant_fp8: each variant is a quantiser with one realistic bug, run over every
// committed case (f32 inputs included: the conversion table and the reciprocal traps are f32).
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken FP8 quantiser",
		func(broken quantBug, mustCatch string) {
			expectRejectedBy("quant_fp8", setsOf("quant_fp8", "committed"), brokenQuant{cpu.New(), broken}, mustCatch)
		},
		Entry("quant_fp8: x * (1 / s) instead of x / s (two roundings)", quantBug{reciprocal: true}, "reciprocal-traps"),
		Entry("quant_fp8: rounds toward zero", quantBug{round: roundTowardZero}, "qwen2.5"),
		Entry("quant_fp8: ties away from zero", quantBug{round: roundTiesAway}, "e4m3-boundaries"),
		Entry("quant_fp8: no saturation (past 448 is NaN, as a raw float8 cast)", quantBug{noSaturation: true}, "e4m3-boundaries"),
		Entry("quant_fp8: one scale per row where the groups are 128 wide", quantBug{perRow: true}, "outliers"),
		Entry("quant_fp8: no 1e-10 floor on amax (an all-zero group divides by 0)", quantBug{noEps: true}, "zero-row-and-group"),
		Entry("quant_fp8: scale amax / 127 (the int8 range)", quantBug{qmax: 127}, "qwen2.5"),
	)
})

type rounding int

const (
	roundNearestEven rounding = iota
	roundTowardZero
	roundTiesAway
)

// quantBug is what a broken quantiser gets wrong; the zero value is the spec.
type quantBug struct {
	reciprocal, noSaturation, perRow, noEps bool
	round                                   rounding
	qmax                                    float32 // the scale's divisor; 0 is 448
}

// e4m3 converts v with the bug's rounding and saturation.
func (q quantBug) e4m3(v float32) uint8 {
	if v != v {
		return 0x7F
	}
	if q.noSaturation && math.Abs(float64(v)) > tensor.E4M3Max {
		return 0x7F
	}
	b := tensor.E4M3FromFloat32(v)
	if q.round == roundNearestEven {
		return b
	}
	// the neighbour of b toward zero and away from it, in magnitude
	got := float64(tensor.E4M3ToFloat32(b))
	mag := b & 0x7F
	switch {
	case q.round == roundTowardZero && math.Abs(got) > math.Abs(float64(v)) && mag > 0:
		return b - 1
	case q.round == roundTiesAway && mag < 0x7E && math.Abs(got) < math.Abs(float64(v)):
		up := tensor.E4M3ToFloat32(b + 1)
		if math.Abs(float64(up))-math.Abs(float64(v)) == math.Abs(float64(v))-math.Abs(got) {
			return b + 1
		}
	}
	return b
}

// brokenQuant runs quantBug's quantiser on the host and writes its bytes and scales through
// the correct backend's public calls (a static quantisation with scale 1 reproduces any byte;
// set_rows copies fp32 rows exactly).
type brokenQuant struct {
	*cpu.Backend
	bug quantBug
}

func (k brokenQuant) QuantFP8(out, scales, x, scale backend.Buffer, groupSize int) error {
	if err := backend.CheckQuantFP8(out, scales, x, scale, groupSize); err != nil {
		return err
	}
	xt, err := k.Download(x)
	if err != nil {
		return err
	}
	xv := xt.Float32()
	t, h := xt.Shape[0], xt.Shape[1]
	qmax := k.bug.qmax
	if qmax == 0 {
		qmax = tensor.E4M3Max
	}
	div := func(v, s float32) float32 {
		if k.bug.reciprocal {
			return v * (1 / s)
		}
		return v / s
	}
	q := make([]float32, len(xv))
	if scale != nil {
		st, err := k.Download(scale)
		if err != nil {
			return err
		}
		for i, v := range xv {
			q[i] = tensor.E4M3ToFloat32(k.bug.e4m3(div(v, st.F32[0])))
		}
		return k.writeBytes(out, t, h, q)
	}
	span := groupSize
	if k.bug.perRow {
		span = h
	}
	s := make([]float32, t*(h/groupSize))
	for g := range s {
		lo := g * groupSize
		from := lo / span * span
		amax, nan := float32(0), false
		for _, v := range xv[from : from+span] {
			nan = nan || v != v
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		if !k.bug.noEps {
			amax = max(amax, 1e-10)
		}
		s[g] = amax / qmax
		if nan {
			s[g] = float32(math.NaN())
		}
		for i := lo; i < lo+groupSize; i++ {
			q[i] = tensor.E4M3ToFloat32(k.bug.e4m3(div(xv[i], s[g])))
		}
	}
	if err := k.writeBytes(out, t, h, q); err != nil {
		return err
	}
	st, err := k.Upload(tensor.FromF32([]int{t, h / groupSize}, s))
	if err != nil {
		return err
	}
	defer st.Free()
	rows := make([]int32, t)
	for i := range rows {
		rows[i] = int32(i)
	}
	idx, err := k.Upload(tensor.FromI32([]int{t}, rows))
	if err != nil {
		return err
	}
	defer idx.Free()
	return k.Backend.SetRows(scales, st, idx)
}

// writeBytes stores the FP8 values q (each exactly an e4m3 value or NaN) into out.
func (k brokenQuant) writeBytes(out backend.Buffer, t, h int, q []float32) error {
	vals, err := k.Upload(tensor.FromF32([]int{t, h}, q))
	if err != nil {
		return err
	}
	defer vals.Free()
	one, err := k.Upload(tensor.FromF32([]int{1}, []float32{1}))
	if err != nil {
		return err
	}
	defer one.Free()
	return k.Backend.QuantFP8(out, nil, vals, one, 0)
}
