package model_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

func loadSet(t *testing.T, name string) (*golden.Set, *model.Model, *model.SetParams) {
	t.Helper()
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	m, p, err := model.LoadSet(cpu.New(), set)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return set, m, p
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, s := range parts {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestCommittedSetsHaveTheLoadersHParams(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "phi3-tiny", "gpt2-tiny"} {
		set, m, p := loadSet(t, name)
		if err := model.CheckHParams(m, set, p); err != nil {
			t.Error(err)
		}
		if len(p.HParams) != len(m.Cfg.HParams()) {
			t.Errorf("%s: %d hparams recorded, the loader has %d", name, len(p.HParams), len(m.Cfg.HParams()))
		}
	}
}

// A loader bug that no tap notices (Phi-3's eps read as the 1e-6 default) is named, with the
// reference's value and the loader's; so is each other mismatch at once.
func TestHParamMismatchesAreNamed(t *testing.T) {
	set, m, p := loadSet(t, "phi3-tiny")
	m.Cfg.NormEps = 1e-6
	wantErr(t, model.CheckHParams(m, set, p), "phi3-tiny", "hyper-parameter norm_eps: the reference (transformers) has 1e-05, the loader derived 1e-06")
	m.Cfg.NormEps = 1e-5
	m.Cfg.RopeTheta, m.Cfg.SlidingWindow, m.Cfg.TiedHead = 1e6, 0, true
	err := model.CheckHParams(m, set, p)
	wantErr(t, err, "rope_theta: the reference (transformers) has 10000.0, the loader derived 1e+06",
		"sliding_window: the reference (transformers) has 2047, the loader derived null",
		"tied_head: the reference (transformers) has false, the loader derived true")
	if strings.Contains(err.Error(), "norm_eps") {
		t.Errorf("a restored norm_eps is still reported: %v", err)
	}
	// GPT-2 has no RoPE: a loader that invents one is caught too.
	gset, g, gp := loadSet(t, "gpt2-tiny")
	g.Cfg.RopeTheta, g.Cfg.RopeDim = 1e4, g.Cfg.HeadDim
	wantErr(t, model.CheckHParams(g, gset, gp), "rope_theta: the reference (transformers) has null, the loader derived 10000",
		"rotary_dim: the reference (transformers) has null, the loader derived 32")
}

// The recorded names and the loader's must be the same set, and values of the same kind.
func TestHParamNamesAndKinds(t *testing.T) {
	set, m, p := loadSet(t, "qwen2-tiny")
	orig := p.HParams
	edit := func(f func(h map[string]json.RawMessage)) {
		p.HParams = map[string]json.RawMessage{}
		for k, v := range orig {
			p.HParams[k] = v
		}
		f(p.HParams)
	}
	edit(func(h map[string]json.RawMessage) { delete(h, "head_dim") })
	wantErr(t, model.CheckHParams(m, set, p), "hyper-parameter head_dim: not recorded by the reference")
	edit(func(h map[string]json.RawMessage) { h["qk_norm"] = json.RawMessage("true") })
	wantErr(t, model.CheckHParams(m, set, p), "hyper-parameter qk_norm: recorded by the reference, unknown to the loader")
	for key, raw := range map[string]string{"tied_head": "1", "num_heads": "14.5", "num_kv_heads": `"2"`, "rope_type": "null", "norm_eps": `"1e-06"`} {
		edit(func(h map[string]json.RawMessage) { h[key] = json.RawMessage(raw) })
		wantErr(t, model.CheckHParams(m, set, p), "hyper-parameter "+key+": the reference (transformers) has "+raw)
	}
}

// A set generated before params.hparams existed is an error telling to regenerate, never a
// pass with nothing checked.
func TestSetWithoutHParamsMustBeRegenerated(t *testing.T) {
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", "gpt2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(set.Manifest.Params, &params); err != nil {
		t.Fatal(err)
	}
	delete(params, "hparams")
	if set.Manifest.Params, err = json.Marshal(params); err != nil {
		t.Fatal(err)
	}
	_, _, err = model.LoadSet(cpu.New(), set)
	wantErr(t, err, "params has no hparams", "regenerate", "make golden")
}
