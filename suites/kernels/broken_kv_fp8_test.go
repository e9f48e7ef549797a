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

// Tightness of the FP8 KV cache: each variant reads or writes the cache the way FP8 KV kernels
// go wrong (a scale of the wrong head or none, a code misread, a position past the length, no
// saturation, a row off by one); the committed cases must reject each. The variants corrupt what
// such a kernel would effectively read, then run the correct CPU op.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken FP8 KV-cache append",
		func(bug kvBug, mustCatch string) {
			expectRejectedBy("set_rows_fp8", setsOf("set_rows_fp8", "committed"), brokenKVFP8{cpu.New(), bug}, mustCatch)
		},
		Entry("set_rows_fp8: every head quantised with head 0's scale", kvBug{headZeroScale: true}, "per-head"),
		Entry("set_rows_fp8: no saturation (values past 448 become NaN, as an unclamped cast)", kvBug{noSaturation: true}, "llama3.2-1b"),
		Entry("set_rows_fp8: each row written one row further", kvBug{rowOffByOne: true}, "prefill"),
	)
	DescribeTable("rejects a deliberately broken FP8 KV-cache decode",
		func(bug kvBug, mustCatch string) {
			expectRejectedBy("attention_decode_fp8", setsOf("attention_decode_fp8", "committed"), brokenKVFP8{cpu.New(), bug}, mustCatch)
		},
		Entry("attention_decode_fp8: the key scale ignored", kvBug{noKeyScale: true}, "per-head"),
		Entry("attention_decode_fp8: every head's values with head 0's scale", kvBug{headZeroScale: true}, "qwen2.5-0.5b"),
		Entry("attention_decode_fp8: key codes read with the lowest mantissa bit flipped", kvBug{flipKeyCode: true}, "per-tensor"),
		Entry("attention_decode_fp8: one position past cache_lens read", kvBug{pastLength: true}, "lens"),
	)
	// The variants' host code without a bug passes every committed case: what fails them is
	// their bug, not the harness.
	It("accepts the FP8 KV-cache variants' host code without a bug", func() {
		for _, op := range []string{"set_rows_fp8", "attention_decode_fp8"} {
			sets := setsOf(op, "committed")
			Expect(sets).NotTo(BeEmpty())
			for _, s := range sets {
				verdicts, err := conformance.Check(brokenKVFP8{cpu.New(), kvBug{}}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		}
	})
})

// kvBug says how a broken FP8 KV-cache kernel misbehaves; the zero value is the contract.
type kvBug struct {
	headZeroScale, noSaturation, rowOffByOne bool
	noKeyScale, flipKeyCode, pastLength      bool
}

type brokenKVFP8 struct {
	*cpu.Backend
	bug kvBug
}

// headZero fills a per-head scale with its first head's.
func headZero(t *tensor.Tensor) {
	for i := range t.F32 {
		t.F32[i] = t.F32[0]
	}
}

func (k brokenKVFP8) SetRowsFP8(dst, src, rows, scale backend.Buffer) error {
	if err := backend.CheckSetRowsFP8(dst, src, rows, scale); err != nil {
		return err
	}
	var err error
	if k.bug.headZeroScale {
		if scale, err = mutated(k, scale, headZero); err != nil {
			return err
		}
		defer scale.Free()
	}
	if k.bug.noSaturation {
		st, derr := k.Download(scale)
		if derr != nil {
			return derr
		}
		per := tensor.NumElements(src.Shape()[1:]) / len(st.F32)
		if src, err = mutated(k, src, func(t *tensor.Tensor) {
			v := t.Float32()
			for i, x := range v {
				if math.Abs(float64(x/st.F32[i%tensor.NumElements(t.Shape[1:])/per])) > 464 {
					setElem(t, i, float32(math.NaN()))
				}
			}
		}); err != nil {
			return err
		}
		defer src.Free()
	}
	if k.bug.rowOffByOne {
		r := int32(dst.Shape()[0])
		if rows, err = mutated(k, rows, func(t *tensor.Tensor) {
			for i, v := range t.I32 {
				t.I32[i] = (v + 1) % r
			}
		}); err != nil {
			return err
		}
		defer rows.Free()
	}
	return k.Backend.SetRowsFP8(dst, src, rows, scale)
}

func (k brokenKVFP8) AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg); err != nil {
		return err
	}
	kCache, kScale, vScale, free, err := misreadCodes(k, k.bug, kCache, kScale, vScale)
	if err != nil {
		return err
	}
	defer free()
	if k.bug.pastLength {
		maxLen := int32(kCache.Shape()[1])
		if cacheLens, err = mutated(k, cacheLens, func(t *tensor.Tensor) {
			for i, n := range t.I32 {
				t.I32[i] = min(n+1, maxLen)
			}
		}); err != nil {
			return err
		}
		defer cacheLens.Free()
	}
	return k.Backend.AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg)
}
