package models_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// plantedBug passes every op through to the backend it wraps except one call of one op, the
// at-th since the count was last reset (calls count across passes, so a call is one layer of
// one pass): a kernel bug that strikes one layer, as a wrong index or a missed scale would.
type plantedBug struct {
	backend.Backend
	op    string // ABI name of the broken op
	at, n int
}

func (b *plantedBug) hit(op string) bool {
	if op != b.op {
		return false
	}
	b.n++
	return b.n-1 == b.at
}

func (b *plantedBug) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	if b.hit("attention_prefill") {
		cfg.Scale *= 1.25
	}
	return b.Backend.AttentionPrefill(out, q, k, v, cfg)
}

func (b *plantedBug) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	if b.hit("attention_decode") {
		cfg.Scale *= 1.25
	}
	return b.Backend.AttentionDecode(out, q, kc, vc, lens, cfg)
}

func (b *plantedBug) SwiGLU(out, gate, up backend.Buffer) error {
	if b.hit("swiglu") {
		gate, up = up, gate
	}
	return b.Backend.SwiGLU(out, gate, up)
}

func (b *plantedBug) RMSNormResidual(sum, out, x, residual, w backend.Buffer, eps float32) error {
	if b.hit("rmsnorm_residual") {
		eps = 0.5
	}
	return b.Backend.RMSNormResidual(sum, out, x, residual, w, eps)
}

func (b *plantedBug) LayerNormResidual(sum, out, x, residual, g, beta backend.Buffer, eps float32) error {
	if b.hit("layernorm_residual") {
		// A wrong eps moves the output by about eps / (2 var): the tiny GPT-2's residual
		// stream has a variance near 80 at layer 1, where 0.5 moved ffn_norm by 0.3% (98% of
		// its calibrated nmse budget, a bug the isolated replay could not be sure to show).
		eps = 8
	}
	return b.Backend.LayerNormResidual(sum, out, x, residual, g, beta, eps)
}

// isolation is a planted kernel bug and the tap (and op) where plain and isolated replays must
// both first fail.
type isolation struct {
	model, op string
	at        int
	firstTap  string
}

func failing(rows []compare.TapResult) []string {
	var names []string
	for _, r := range rows {
		if !r.Result.Pass() {
			names = append(names, r.Name)
		}
	}
	return names
}

// checkIsolatedPasses: the isolated replay of a correct engine passes every tap.
func checkIsolatedPasses(s *golden.Set) {
	m, p := loadModel(s)
	rows, err := model.CompareTapsIsolated(m, s, p, tols)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	if first := compare.FirstFailure(rows); first >= 0 {
		Fail(fmt.Sprintf("%s: isolated tap %s (%s) is out of tolerance:\n%s", s.ID(), rows[first].Name,
			m.TapOp(rows[first].Name), attachLayerDiff(s, rows)))
	}
}

// checkPlantedBug plants a kernel bug in one call of one op: the plain diff and the isolated
// replay must both first fail at its tap, the isolated replay there only, naming the op.
func checkPlantedBug(set *golden.Set, c isolation) {
	m, p := loadModel(set)
	bug := &plantedBug{op: c.op, at: c.at}
	m.Intercept(func(be backend.Backend) backend.Backend { bug.Backend = be; return bug })

	plain, err := model.CompareTaps(m, set, p, tols)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	Expect(bug.n).To(BeNumerically(">", c.at), "the planted bug never struck")
	bug.n = 0
	iso, err := model.CompareTapsIsolated(m, set, p, tols)
	Expect(err).NotTo(HaveOccurred())

	pf, isf := failing(plain), failing(iso)
	AddReportEntry("isolated replay "+set.ID(), compare.LayerDiffTable(iso))
	Expect(pf).NotTo(BeEmpty(), "the plain diff caught nothing:\n%s", compare.LayerDiffTable(plain))
	Expect(pf[0]).To(Equal(c.firstTap), "plain diff:\n%s", compare.LayerDiffTable(plain))
	Expect(isf).NotTo(BeEmpty(), "the isolated replay caught nothing:\n%s", compare.LayerDiffTable(iso))
	Expect(isf[0]).To(Equal(pf[0]), "isolated replay:\n%s", compare.LayerDiffTable(iso))
	Expect(m.TapOp(isf[0])).To(HavePrefix(c.op))
	// The error of the plain run is carried into every later tap; the isolated replay
	// feeds each op the reference's inputs, so only the broken call's tap fails.
	Expect(isf).To(Equal([]string{c.firstTap}), "isolated replay:\n%s", compare.LayerDiffTable(iso))
	Expect(len(pf)).To(BeNumerically(">", 1), "plain diff:\n%s", compare.LayerDiffTable(plain))
}

// isolations are the planted kernel bugs of each model (modelSpecs runs them in its container).
var isolations = []isolation{
	{"qwen2-tiny", "attention_prefill", 1, "prefill.layers.1.attn"},
	// Calls count across passes: two layers a pass, so call 3 is layer 1 of decode step 1.
	{"qwen2-tiny", "attention_decode", 3, "decode.1.layers.1.attn"},
	{"phi3-tiny", "swiglu", 1, "prefill.layers.1.ffn_act"},
	// Layer 0's attn_norm has no residual add, so the calls alternate from layer 0's ffn_norm:
	// call 1 is layer 1's attn_norm (layer 0's ffn_out added), call 2 layer 1's ffn_norm.
	{"phi3-tiny", "rmsnorm_residual", 1, "prefill.layers.1.attn_norm"},
	{"gpt2-tiny", "layernorm_residual", 2, "prefill.layers.1.ffn_norm"},
	{"qwen2.5-0.5b", "attention_prefill", 20, "prefill.layers.20.attn"},
	{"phi3-mini-4k", "swiglu", 30, "prefill.layers.30.ffn_act"},
}
