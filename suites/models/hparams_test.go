package models_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// checkHParams is the spec "the loader derives the reference's hyper-parameters" (registered
// first in "model conformance", so it runs before the taps are compared): taps alone do not
// pin a hyper-parameter whose effect is below their tolerance (Phi-3's RMSNorm eps read as
// 1e-6 instead of 1e-5 passes every tap of phi3-tiny), so each one the loader derived is
// compared by name with the value transformers parsed (params.hparams).
func checkHParams(s *golden.Set) {
	m, p := loadModel(s)
	Expect(model.CheckHParams(m, s, p)).To(Succeed())
	var list []string
	for _, h := range m.Cfg.HParams() {
		list = append(list, fmt.Sprintf("%s=%v", h.Name, h.Value))
	}
	AddReportEntry("hyper-parameters", strings.Join(list, " "))
}

// hparamBug is a loader bug, and the hyper-parameters the check must report: those and no
// other.
type hparamBug struct {
	model, what string
	hparams     []string
	breakIt     func(m *model.Model)
}

// reparsedScaling is a model set's RoPE scaling parsed from its config.json with one key of
// rope_scaling changed: a loader that misreads that key.
func reparsedScaling(name, key string, value any) *model.RopeScaling {
	data, err := os.ReadFile(filepath.Join(findSet(name).Dir, "config.json"))
	Expect(err).NotTo(HaveOccurred())
	var cfg map[string]any
	Expect(json.Unmarshal(data, &cfg)).To(Succeed())
	cfg["rope_scaling"].(map[string]any)[key] = value
	data, err = json.Marshal(cfg)
	Expect(err).NotTo(HaveOccurred())
	c, err := model.ParseConfig(data)
	Expect(err).NotTo(HaveOccurred())
	return c.RopeScaling
}

// checkHParamBug plants a loader bug in a hyper-parameter: the check must name it, and only it.
func checkHParamBug(set *golden.Set, b hparamBug) {
	m, p := loadModel(set)
	Expect(model.CheckHParams(m, set, p)).To(Succeed(), "before the bug")
	b.breakIt(m)
	err := model.CheckHParams(m, set, p)
	Expect(err).To(HaveOccurred(), "%s passed the hyper-parameter check", b.what)
	for _, h := range b.hparams {
		Expect(err.Error()).To(MatchRegexp(`hyper-parameter %s: (pair \d+: )?the reference \(transformers\) has `, h))
	}
	Expect(strings.Count(err.Error(), "hyper-parameter ")).To(Equal(len(b.hparams)), "only %v are reported: %v", b.hparams, err)
}

// hparamBugs are the planted loader bugs of each model (modelSpecs runs them in its container).
var hparamBugs = []hparamBug{
	// The bug this check exists for: every tap of phi3-tiny passes with it.
	{"phi3-tiny", "RMSNorm eps 1e-6 (a default) instead of config.json's 1e-5", []string{"norm_eps"},
		func(m *model.Model) { m.Cfg.NormEps = 1e-6 }},
	{"phi3-tiny", "RoPE theta 1e6 instead of 1e4", []string{"rope_theta", "rope_inv_freq"},
		func(m *model.Model) { m.Cfg.RopeTheta = 1e6 }},
	{"phi3-tiny", "sliding_window ignored", []string{"sliding_window"},
		func(m *model.Model) { m.Cfg.SlidingWindow = 0 }},
	{"qwen2-moe-tiny", "the shared expert's width read from intermediate_size", []string{"shared_expert_intermediate_size"},
		func(m *model.Model) { m.Cfg.SharedIntermediate = m.Cfg.Intermediate }},
	{"qwen2-tiny", "RMSNorm eps 1e-5 instead of 1e-6", []string{"norm_eps"},
		func(m *model.Model) { m.Cfg.NormEps = 1e-5 }},
	{"qwen2-tiny", "half the head rotated (partial rotary)", []string{"rotary_dim", "partial_rotary_factor", "rope_inv_freq"},
		func(m *model.Model) { m.Cfg.RopeDim = m.Cfg.HeadDim / 2 }},
	// RoPE scaling read wrong: each is named by the inverse frequencies or the factors
	// themselves, whichever config key the bug misread.
	{"llama3-tiny", "RoPE scaling dropped (llama3 read as the default RoPE)", []string{"rope_type", "rope_inv_freq"},
		func(m *model.Model) { m.Cfg.RopeScaling = nil }},
	{"llama3-tiny", "llama3's factor read as 8 (Llama-3.1-8B's) instead of config.json's 32", []string{"rope_inv_freq"},
		func(m *model.Model) { m.Cfg.RopeScaling = reparsedScaling("llama3-tiny", "factor", 8.0) }},
	{"qwen2-yarn-tiny", "YaRN's attention factor left at 1", []string{"rope_attention_factor"},
		func(m *model.Model) { s := *m.Cfg.RopeScaling; s.AttentionFactor = 1; m.Cfg.RopeScaling = &s }},
	{"phi3.5-tiny", "LongRoPE's switch one position late", []string{"rope_long_from"},
		func(m *model.Model) { s := *m.Cfg.RopeScaling; s.LongFrom++; m.Cfg.RopeScaling = &s }},
	{"phi3.5-tiny", "LongRoPE's long and short factors swapped", []string{"rope_inv_freq", "rope_long_inv_freq"},
		func(m *model.Model) {
			s := *m.Cfg.RopeScaling
			s.Divisor, s.Long = s.Long, s.Divisor
			m.Cfg.RopeScaling = &s
		}},
	{"gpt2-tiny", "LayerNorm eps 1e-6 instead of 1e-5", []string{"norm_eps"},
		func(m *model.Model) { m.Cfg.NormEps = 1e-6 }},
	{"gpt2-tiny", "activation read as gelu (erf) instead of gelu_new", []string{"activation"},
		func(m *model.Model) { m.Cfg.Activation = "gelu" }},
	{"qwen2.5-0.5b", "RMSNorm eps 1e-5 instead of 1e-6", []string{"norm_eps"},
		func(m *model.Model) { m.Cfg.NormEps = 1e-5 }},
	{"phi3-mini-4k", "RMSNorm eps 1e-6 instead of 1e-5", []string{"norm_eps"},
		func(m *model.Model) { m.Cfg.NormEps = 1e-6 }},
}
