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

// Tightness of Gemma 2's attention logit soft-capping (softcap: s = scale q·k becomes
// cap · tanh(s / cap) before the mask): each variant is a soft-capping bug as kernels write it,
// and the capped committed case of each op must reject it. The cap ignored and the cap applied
// to the unscaled q·k (cap · tanh(q·k / cap) · scale, which is a cap of cap · scale on the
// scaled scores) change the cap the correct CPU ops see, in all eight attention ops; the cap
// applied after the mask (masked keys at -cap instead of -inf: visible where most of a row is
// masked and its visible scores sit near -cap) and tanh replaced by a clamp to +-cap need the
// scores themselves, so they are planted in a host fp64 attention of attention_prefill and
// attention_scores_softmax (capAttention), whose bug-free form must pass.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	cases := map[string]string{ // a capped case of each op that must catch every variant
		"attention_prefill":           "gemma2-27b-4heads_s24_w7_cap50",
		"attention_decode":            "gemma2-27b-4heads_len70_w9_cap50",
		"attention_decode_paged":      "gemma2-9b-4heads_bs16_lens33-5_cap50",
		"attention_prefill_paged":     "gemma2-27b-4heads_bs16_pre20_new12_cap50",
		"attention_decode_fp8":        "gemma2-27b-8heads_per-head_len48_cap50",
		"attention_scores_softmax":    "gemma2-2b_s10_cap50",
		"attention_decode_paged_fp8":  "gemma2-27b-4heads_per-head_bs8_len13_cap50",
		"attention_prefill_paged_fp8": "gemma2-27b-2heads_bs8_pre5_new6_per-tensor_cap50",
	}
	for _, op := range []string{"attention_prefill", "attention_decode", "attention_decode_paged",
		"attention_prefill_paged", "attention_decode_fp8", "attention_scores_softmax",
		"attention_decode_paged_fp8", "attention_prefill_paged_fp8"} {
		entries := []TableEntry{
			Entry(op+": the soft cap ignored", capIgnored),
			Entry(op+": the cap applied to the unscaled q·k (cap · tanh(q·k / cap) · scale)", capUnscaled),
		}
		if op == "attention_prefill" || op == "attention_scores_softmax" {
			entries = append(entries,
				Entry(op+": the cap applied after the mask (masked keys at -cap, not -inf)", capAfterMask),
				Entry(op+": tanh replaced by a clamp to +-cap", capClamp))
		}
		DescribeTable("rejects a deliberately broken soft cap in "+op,
			func(bug capBug) {
				expectRejectedBy(op, setsOf(op, "committed"), brokenCap{cpu.New(), bug}, cases[op])
			},
			entries,
		)
	}
	It("accepts the soft-cap variants' host attention without a bug", func() {
		for _, op := range []string{"attention_prefill", "attention_scores_softmax"} {
			for _, s := range setsOf(op, "committed") {
				verdicts, err := conformance.Check(brokenCap{cpu.New(), capHostExact}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		}
	})
})

// capBug says how a broken kernel soft-caps the scores.
type capBug int

const (
	capIgnored   capBug = iota // softcap treated as 0
	capUnscaled                // cap · tanh(q·k / cap) · scale
	capAfterMask               // cap · tanh(mask(s) / cap): masked keys at -cap
	capClamp                   // min(max(s, -cap), cap)
	capHostExact               // the host attention without a bug (the variants' own check)
)

// config is the AttentionConfig the CPU op sees for a bug expressible as another cap.
func (b capBug) config(cfg backend.AttentionConfig) backend.AttentionConfig {
	if cfg.Softcap > 0 {
		switch b {
		case capIgnored:
			cfg.Softcap = 0
		case capUnscaled:
			cfg.Softcap *= cfg.Scale
		}
	}
	return cfg
}

// host reports whether the bug needs the host attention (capAttention).
func (b capBug) host() bool { return b == capAfterMask || b == capClamp || b == capHostExact }

// score is a scaled score s of a key the query sees (visible) or not, as the bug forms it:
// -inf for a masked key, except where the cap comes after the mask.
func (b capBug) score(s float64, visible bool, softcap float32) float64 {
	c := float64(softcap)
	switch {
	case b == capAfterMask && c > 0:
		if !visible {
			return -c // tanh(-inf) = -1
		}
		return c * math.Tanh(s/c)
	case !visible:
		return math.Inf(-1)
	case c == 0:
		return s
	case b == capClamp:
		return math.Max(-c, math.Min(c, s))
	}
	return c * math.Tanh(s/c)
}

type brokenCap struct {
	*cpu.Backend
	bug capBug
}

func (k brokenCap) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	if !k.bug.host() || cfg.Softcap <= 0 {
		return k.Backend.AttentionPrefill(out, q, kk, v, k.bug.config(cfg))
	}
	if err := backend.CheckAttentionPrefill(out, q, kk, v, cfg); err != nil {
		return err
	}
	ts, err := downloadAll(k, q, kk, v)
	if err != nil {
		return err
	}
	qt, kt, vt := ts[0], ts[1], ts[2]
	b, s := qt.Shape[0], qt.Shape[1]
	res := tensor.New(qt.DType, qt.Shape...)
	for bi := 0; bi < b; bi++ {
		for i := 0; i < s; i++ {
			visible := func(j int) bool {
				return (!cfg.Causal || j <= i) && (cfg.Window <= 0 || j > i-cfg.Window)
			}
			k.bug.attendRow(res, qt, kt, vt, cfg, (bi*s+i)*cfg.NumHeads, bi*s, s, visible)
		}
	}
	return k.Write(out, res)
}

func (k brokenCap) AttentionScoresSoftmax(probs, q, kk backend.Buffer, cfg backend.AttentionConfig) error {
	if !k.bug.host() || cfg.Softcap <= 0 {
		return k.Backend.AttentionScoresSoftmax(probs, q, kk, k.bug.config(cfg))
	}
	if err := backend.CheckAttentionScoresSoftmax(probs, q, kk, cfg); err != nil {
		return err
	}
	ts, err := downloadAll(k, q, kk)
	if err != nil {
		return err
	}
	qt, kt := ts[0], ts[1]
	b, sq, sk, nH, nKV, d := qt.Shape[0], qt.Shape[1], kt.Shape[1], cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	res := tensor.New(tensor.F32, b, nH, sq, sk)
	scores := make([]float64, sk)
	for bi := 0; bi < b; bi++ {
		for h := 0; h < nH; h++ {
			kvh := h / (nH / nKV)
			for i := 0; i < sq; i++ {
				mx := math.Inf(-1)
				for j := 0; j < sk; j++ {
					var dot float64
					for e := 0; e < d; e++ {
						dot += float64(elem(qt, ((bi*sq+i)*nH+h)*d+e)) * float64(elem(kt, ((bi*sk+j)*nKV+kvh)*d+e))
					}
					scores[j] = k.bug.score(dot*float64(cfg.Scale), !cfg.Causal || j <= sk-sq+i, cfg.Softcap)
					mx = math.Max(mx, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				row := res.F32[((bi*nH+h)*sq+i)*sk:][:sk]
				for j := range row {
					row[j] = float32(scores[j] / sum)
				}
			}
		}
	}
	return k.Write(probs, res)
}

// attendRow is one query token's every head of fp64 attention over keys 0..n-1 of a sequence
// starting at position row kvRow, with the bug's scores; qRow is the token's first head row.
func (b capBug) attendRow(res, qt, kt, vt *tensor.Tensor, cfg backend.AttentionConfig, qRow, kvRow, n int,
	visible func(j int) bool) {
	d, group := cfg.HeadDim, cfg.NumHeads/cfg.NumKVHeads
	scores := make([]float64, n)
	for h := 0; h < cfg.NumHeads; h++ {
		kvh := h / group
		mx := math.Inf(-1)
		for j := 0; j < n; j++ {
			var dot float64
			for e := 0; e < d; e++ {
				dot += float64(elem(qt, (qRow+h)*d+e)) * float64(elem(kt, ((kvRow+j)*cfg.NumKVHeads+kvh)*d+e))
			}
			scores[j] = b.score(dot*float64(cfg.Scale), visible(j), cfg.Softcap)
			mx = math.Max(mx, scores[j])
		}
		var sum float64
		for j := range scores {
			scores[j] = math.Exp(scores[j] - mx)
			sum += scores[j]
		}
		for e := 0; e < d; e++ {
			var acc float64
			for j, p := range scores {
				acc += p * float64(elem(vt, ((kvRow+j)*cfg.NumKVHeads+kvh)*d+e))
			}
			setElem(res, (qRow+h)*d+e, float32(acc/sum))
		}
	}
}

func downloadAll(b backend.Backend, bufs ...backend.Buffer) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(bufs))
	for i, buf := range bufs {
		t, err := b.Download(buf)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func (k brokenCap) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecode(out, q, kc, vc, lens, k.bug.config(cfg))
}

func (k brokenCap) AttentionDecodePaged(out, q, kc, vc, table, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecodePaged(out, q, kc, vc, table, lens, k.bug.config(cfg))
}

func (k brokenCap) AttentionPrefillPaged(out, q, kc, vc, table, starts, lens backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionPrefillPaged(out, q, kc, vc, table, starts, lens, k.bug.config(cfg))
}

func (k brokenCap) AttentionDecodeFP8(out, q, kc, vc, lens, ks, vs backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecodeFP8(out, q, kc, vc, lens, ks, vs, k.bug.config(cfg))
}

func (k brokenCap) AttentionDecodePagedFP8(out, q, kc, vc, table, lens, ks, vs backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionDecodePagedFP8(out, q, kc, vc, table, lens, ks, vs, k.bug.config(cfg))
}

func (k brokenCap) AttentionPrefillPagedFP8(out, q, kc, vc, table, starts, lens, ks, vs backend.Buffer, cfg backend.AttentionConfig) error {
	return k.Backend.AttentionPrefillPagedFP8(out, q, kc, vc, table, starts, lens, ks, vs, k.bug.config(cfg))
}
