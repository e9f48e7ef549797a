package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of sliding windows: each variant is a window bug as kernels write it (the edge one
// key off: key >= p - window, or one key short; the window dropped, plain causal); the windowed
// committed cases of each attention op must reject each. The variants change the window the
// correct CPU ops see.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	cases := map[string]string{ // a windowed case of each op that must catch every variant
		"attention_prefill":       "gqa2_d64_s150_w37",
		"attention_decode":        "gqa7_d64_b3_lens1-64-300_w64",
		"attention_decode_paged":  "qwen2.5-0.5b_bs16_lens45-200_w40",
		"attention_prefill_paged": "gqa7_d64_bs16_pre100-70-0_new40-1-20_w48",
		// over E4M3 pools: a window starting 5 into the first page, one 14 into the second
		"attention_decode_paged_fp8":  "d32-mqa16_bs16_len45_per-tensor_w40",
		"attention_prefill_paged_fp8": "gqa2_d64_bs8_pre22-12_new6-1_per-tensor_w9",
	}
	for _, op := range []string{"attention_prefill", "attention_decode", "attention_decode_paged", "attention_prefill_paged",
		"attention_decode_paged_fp8", "attention_prefill_paged_fp8"} {
		DescribeTable("rejects a deliberately broken sliding window in "+op,
			func(bug windowBug) {
				expectRejectedBy(op, setsOf(op, "committed"), brokenWindow{cpu.New(), bug}, cases[op])
			},
			Entry(op+": the window's edge one key early (key >= p - window)", windowBug{delta: 1}),
			Entry(op+": the window one key short (key > p - window + 1)", windowBug{delta: -1}),
			Entry(op+": the window ignored (plain causal)", windowBug{ignore: true}),
		)
	}
	It("accepts the window variants' host code without a bug", func() {
		for op := range cases {
			for _, s := range setsOf(op, "committed") {
				verdicts, err := conformance.Check(brokenWindow{cpu.New(), windowBug{}}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		}
	})
})

// windowBug says how a broken kernel applies a sliding window; the zero value is the contract.
type windowBug struct {
	delta  int  // added to a positive window
	ignore bool // the window dropped
}

func (b windowBug) apply(cfg backend.AttentionConfig) backend.AttentionConfig {
	if cfg.Window > 0 {
		if b.ignore {
			cfg.Window = 0
		} else {
			cfg.Window = max(1, cfg.Window+b.delta)
		}
	}
	return cfg
}

type brokenWindow struct {
	*cpu.Backend
	bug windowBug
}

func (k brokenWindow) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionPrefill(out, q, kk, v, k.bug.apply(cfg))
}

func (k brokenWindow) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecode(out, q, kc, vc, lens, k.bug.apply(cfg))
}

func (k brokenWindow) AttentionDecodePaged(out, q, kc, vc, table, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecodePaged(out, q, kc, vc, table, lens, k.bug.apply(cfg))
}

func (k brokenWindow) AttentionPrefillPaged(out, q, kc, vc, table, starts, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionPrefillPaged(out, q, kc, vc, table, starts, lens, k.bug.apply(cfg))
}

func (k brokenWindow) AttentionDecodePagedFP8(out, q, kc, vc, table, lens, ks, vs backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecodePagedFP8(out, q, kc, vc, table, lens, ks, vs, k.bug.apply(cfg))
}

func (k brokenWindow) AttentionPrefillPagedFP8(out, q, kc, vc, table, starts, lens, ks, vs backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionPrefillPagedFP8(out, q, kc, vc, table, starts, lens, ks, vs, k.bug.apply(cfg))
}
