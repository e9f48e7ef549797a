package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

const qwenCfg = `{"model_type": "qwen2", "hidden_size": 224, "num_hidden_layers": 2, "num_attention_heads": 14,
 "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 384, "rms_norm_eps": 1e-6,
 "max_position_embeddings": 32768, "tie_word_embeddings": true, "rope_theta": 1000000.0,
 "rope_scaling": null, "use_sliding_window": false, "sliding_window": 32768%s}`

func TestParseConfigFamilies(t *testing.T) {
	for _, dir := range []string{"qwen2-tiny", "phi3-tiny", "gpt2-tiny"} {
		c, err := LoadConfig("../../golden/models/" + dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.HeadDim*c.Heads != c.Hidden || c.Layers != 2 || c.Activation == "" || (c.RopeTheta != 0) != (c.RopeDim == c.HeadDim) {
			t.Errorf("%s: %+v", dir, c)
		}
	}
	c, err := ParseConfig([]byte(`{"model_type": "qwen2", "hidden_size": 224, "num_hidden_layers": 2, "num_attention_heads": 14, "intermediate_size": 160, "vocab_size": 384, "max_position_embeddings": 64, "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}`))
	if err != nil || c.RopeTheta != 1e6 || c.KVHeads != 14 || !c.AttnBias || c.TiedHead {
		t.Errorf("rope_parameters form: %+v, %v", c, err)
	}
	g, err := LoadConfig("../../golden/models/gpt2-tiny")
	if err != nil || g.Intermediate != 384 || !g.TiedHead || g.RopeTheta != 0 || g.NormEps != 1e-5 {
		t.Errorf("gpt2: %+v %v", g, err)
	}
}

func TestParseConfigRefusesUnimplemented(t *testing.T) {
	for extra, key := range map[string]string{
		`, "rope_scaling": {"type": "dynamic", "factor": 4}`: "rope_scaling.rope_type = \"dynamic\"",
		`, "partial_rotary_factor": 0.5`:                     "partial_rotary_factor",
		`, "hidden_act": "gelu"`:                             "hidden_act",
		`, "rope_parameters": {"rope_theta": 1e4}`:           "rope_parameters.rope_theta",
		`, "num_key_value_heads": 3`:                         "num_key_value_heads",
	} {
		_, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", extra, 1)))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", extra, err, key)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", "", 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig([]byte(`{"model_type": "deepseek_v3"}`)); err == nil || !strings.Contains(err.Error(), `model_type "deepseek_v3" is not implemented`) {
		t.Errorf("deepseek_v3: %v", err)
	}
}

// An explicit head_dim is the heads' width, whatever hidden_size / heads is (Qwen3-4B: 128 where
// that is 80), as transformers' Llama, Mistral, Qwen2 and Qwen3 attention read it. Phi-3's
// head_dim must agree with its hidden size.
func TestExplicitHeadDimAndQwen3(t *testing.T) {
	c, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "head_dim": 64`, 1)))
	if err != nil || c.HeadDim != 64 || c.Family != "qwen2" {
		t.Errorf("qwen2 with head_dim 64: %+v, %v", c, err)
	}
	q3 := strings.Replace(strings.Replace(qwenCfg, `"qwen2"`, `"qwen3"`, 1), "%s", `, "head_dim": 32`, 1)
	c, err = ParseConfig([]byte(q3))
	if err != nil || c.Family != "qwen3" || c.HeadDim != 32 || c.AttnBias {
		t.Errorf("qwen3: %+v, %v", c, err)
	}
	for extra, key := range map[string]string{
		`, "head_dim": 0`:                                  "head_dim = 0",
		`, "attention_bias": true`:                         "attention_bias",
		`, "quantization_config": {"quant_method": "awq"}`: "quantization_config",
	} {
		bad := strings.Replace(strings.Replace(qwenCfg, `"qwen2"`, `"qwen3"`, 1), "%s", extra, 1)
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("qwen3 %s: error %v, want one naming %s", extra, err, key)
		}
	}
	phi := `{"model_type": "phi3", "hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 320, "max_position_embeddings": 64, "rope_theta": 1e4, "head_dim": 64}`
	if _, err := ParseConfig([]byte(phi)); err == nil || !strings.Contains(err.Error(), "head_dim = 64") {
		t.Errorf("phi3 head_dim 64 with 2 heads of 48: %v", err)
	}
}

// Mistral runs as the llama family with its window in every layer; v0.3's null window is none.
func TestMistralIsLlamaWithAWindow(t *testing.T) {
	const cfg = `{"model_type": "mistral", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 192, "vocab_size": 384, "max_position_embeddings": 32768, "rope_theta": 10000.0, "tie_word_embeddings": false, "sliding_window": %s}`
	c, err := ParseConfig([]byte(fmt.Sprintf(cfg, "5")))
	if err != nil || c.Family != "llama" || c.ModelType != "mistral" || c.AttnBias || c.TiedHead ||
		c.LayerWindow(0) != 5 || c.LayerWindow(1) != 5 || c.HeadDim != 16 {
		t.Errorf("mistral with a window: %+v, %v", c, err)
	}
	c, err = ParseConfig([]byte(fmt.Sprintf(cfg, "null")))
	if err != nil || c.SlidingWindow != 0 || c.LayerWindow(1) != 0 {
		t.Errorf("mistral with sliding_window null: %+v, %v", c, err)
	}
	if _, err := ParseConfig([]byte(fmt.Sprintf(cfg, "0"))); err == nil || !strings.Contains(err.Error(), "sliding_window = 0") {
		t.Errorf("mistral with sliding_window 0: %v", err)
	}
}

// A Phi-3 window is kept for every layer.
// Mixtral-8x7B-v0.1's published config.json (the keys the engine reads): Llama's attention, a
// sparse MoE block of 8 experts, top 2, renormalised; the refusals name the key.
func TestMixtralIsAMixtureOfExperts(t *testing.T) {
	const cfg = `{"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1e6, "rms_norm_eps": 1e-5, "sliding_window": null, "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "output_router_logits": false, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}`
	c, err := ParseConfig([]byte(cfg))
	if err != nil || c.Family != "mixtral" || c.Experts != 8 || c.ExpertsPerToken != 2 || !c.NormTopKProb ||
		c.SlidingWindow != 0 || c.HeadDim != 128 || c.KVHeads != 8 || c.AttnBias {
		t.Fatalf("mixtral: %+v, %v", c, err)
	}
	for _, bad := range []struct{ edit, want string }{
		{`"num_experts_per_tok": 2`, "num_experts_per_tok"},
		{`"num_local_experts": 8`, "num_local_experts"},
	} {
		_, err := ParseConfig([]byte(strings.Replace(cfg, bad.edit, strings.Split(bad.edit, ":")[0]+": 9", 1)))
		if bad.want == "num_local_experts" {
			_, err = ParseConfig([]byte(strings.Replace(cfg, bad.edit, `"num_local_experts": 2000`, 1)))
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s edited: err %v, want one naming %s", bad.edit, err, bad.want)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(cfg, `"num_local_experts": 8, `, "", 1))); err == nil || !strings.Contains(err.Error(), "missing num_local_experts") {
		t.Errorf("no num_local_experts: %v", err)
	}
}

// Qwen3-30B-A3B's published config.json: Qwen3's attention, 128 experts of moe_intermediate_size
// 768 (intermediate_size is a dense layer's, which it has none of), top 8, renormalised; the
// variants with dense layers are refused by name.
func TestQwen3MoEConfig(t *testing.T) {
	const cfg = `{"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "use_sliding_window": false, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}`
	c, err := ParseConfig([]byte(cfg))
	if err != nil || c.Family != "qwen3_moe" || c.Experts != 128 || c.ExpertsPerToken != 8 || !c.NormTopKProb ||
		c.Intermediate != 768 || c.HeadDim != 128 || c.KVHeads != 4 || c.AttnBias || c.SlidingWindow != 0 {
		t.Fatalf("qwen3_moe: %+v, %v", c, err)
	}
	if c, err := ParseConfig([]byte(strings.Replace(cfg, `"norm_topk_prob": true, `, "", 1))); err != nil || c.NormTopKProb {
		t.Errorf("qwen3_moe without norm_topk_prob (transformers' default false): %+v, %v", c, err)
	}
	// transformers 5 re-saves the key as num_local_experts: read either, refuse the two differing
	if c, err := ParseConfig([]byte(strings.Replace(cfg, `"num_experts": 128`, `"num_local_experts": 128`, 1))); err != nil || c.Experts != 128 {
		t.Errorf("qwen3_moe with num_local_experts: %+v, %v", c, err)
	}
	if _, err := ParseConfig([]byte(strings.Replace(cfg, `"num_experts": 128`, `"num_experts": 128, "num_local_experts": 64`, 1))); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("num_experts and num_local_experts differing: %v", err)
	}
	if c, err := ParseConfig([]byte(strings.Replace(cfg, `"use_sliding_window": false, "sliding_window": null`, `"use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 28`, 1))); err != nil || c.SlidingWindow != 4096 || c.WindowedLayers != nil {
		t.Errorf("qwen3_moe windows every layer: %+v, %v", c, err)
	}
	for edit, key := range map[string]string{
		`"decoder_sparse_step": 2`: "decoder_sparse_step",
		`"mlp_only_layers": [0]`:   "mlp_only_layers",
		`"num_experts": 2000`:      "num_experts",
	} {
		old := map[string]string{"decoder_sparse_step": `"decoder_sparse_step": 1`, "mlp_only_layers": `"mlp_only_layers": []`, "num_experts": `"num_experts": 128`}[key]
		if _, err := ParseConfig([]byte(strings.Replace(cfg, old, edit, 1))); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: err %v, want one naming %s", edit, err, key)
		}
	}
}

// Qwen1.5-MoE-A2.7B's published config.json: Qwen2's attention with q/k/v biases, 60 experts of
// moe_intermediate_size 1408, top 4 not renormalised, and a shared expert of 5632 on every token.
const qwen2MoEHub = `{"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "norm_topk_prob": false, "decoder_sparse_step": 1, "vocab_size": 151936, "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 21, "tie_word_embeddings": false, "torch_dtype": "bfloat16"%s}`

func TestQwen2MoEConfig(t *testing.T) {
	cfg := strings.Replace(qwen2MoEHub, "%s", "", 1)
	c, err := ParseConfig([]byte(cfg))
	if err != nil || c.Family != "qwen2_moe" || c.Experts != 60 || c.ExpertsPerToken != 4 || c.NormTopKProb ||
		c.Intermediate != 1408 || c.SharedIntermediate != 5632 || !c.AttnBias || c.SlidingWindow != 0 || c.TiedHead {
		t.Fatalf("qwen2_moe: %+v, %v", c, err)
	}
	hp := c.HParams()
	if last := hp[len(hp)-1]; last.Name != "shared_expert_intermediate_size" || last.Value != 5632 {
		t.Errorf("hparams end with %+v, want shared_expert_intermediate_size 5632", last)
	}
	// Qwen2MoeConfig's own default layer_types: the even layers below max_window_layers slide
	// (not Qwen2's "from max_window_layers on")
	c, err = ParseConfig([]byte(strings.Replace(strings.Replace(cfg, `"use_sliding_window": false`, `"use_sliding_window": true`, 1), `"max_window_layers": 21`, `"max_window_layers": 5`, 1)))
	if err != nil || c.SlidingWindow != 32768 {
		t.Fatalf("qwen2_moe with its window: %+v, %v", c, err)
	}
	for l := 0; l < 8; l++ {
		want := 0
		if l%2 == 0 && l < 5 {
			want = 32768
		}
		if got := c.LayerWindow(l); got != want {
			t.Errorf("layer %d window %d, want %d", l, got, want)
		}
	}
	for edit, key := range map[string]string{
		`"decoder_sparse_step": 2`:                         "decoder_sparse_step",
		`"decoder_sparse_step": 1, "mlp_only_layers": [3]`: "mlp_only_layers",
		`"decoder_sparse_step": 1, "qkv_bias": false`:      "qkv_bias",
		`"decoder_sparse_step": 1, "num_local_experts": 8`: "differ",
	} {
		if _, err := ParseConfig([]byte(strings.Replace(cfg, `"decoder_sparse_step": 1`, edit, 1))); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: err %v, want one naming %s", edit, err, key)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(cfg, `"num_experts": 60`, `"num_local_experts": 60`, 1))); err == nil || !strings.Contains(err.Error(), "missing num_experts") {
		t.Errorf("qwen2_moe with num_local_experts alone (transformers ignores it and builds 60): %v", err)
	}
	if _, err := ParseConfig([]byte(strings.Replace(cfg, `"shared_expert_intermediate_size": 5632, `, "", 1))); err == nil || !strings.Contains(err.Error(), "missing shared_expert_intermediate_size") {
		t.Errorf("no shared_expert_intermediate_size: %v", err)
	}
}

func TestSlidingWindowRecorded(t *testing.T) {
	c, err := LoadConfig("../../golden/models/phi3-tiny")
	if err != nil || c.SlidingWindow != 2047 || c.LayerWindow(0) != 2047 || c.LayerWindow(1) != 2047 {
		t.Fatalf("%+v %v", c, err)
	}
}

// Qwen2's window applies with use_sliding_window only, to the layers from max_window_layers on
// (28 when absent) or to those its layer_types call sliding_attention, as transformers derives
// them; a malformed layer_types is an error naming it.
func TestQwen2WindowedLayers(t *testing.T) {
	on := `, "use_sliding_window": true, "sliding_window": 8`
	for _, c := range []struct {
		extra string
		want  [2]int // the windows of layers 0 and 1
	}{
		{"", [2]int{0, 0}},
		{`, "sliding_window": 8`, [2]int{0, 0}}, // use_sliding_window false
		{on + `, "max_window_layers": 1`, [2]int{0, 8}},
		{on + `, "max_window_layers": 0`, [2]int{8, 8}},
		{on, [2]int{0, 0}}, // max_window_layers absent: 28
		{on + `, "layer_types": ["sliding_attention", "full_attention"]`, [2]int{8, 0}},
	} {
		cfg, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", c.extra, 1)))
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		if got := [2]int{cfg.LayerWindow(0), cfg.LayerWindow(1)}; got != c.want {
			t.Errorf("%s: layer windows %v, want %v", c.extra, got, c.want)
		}
	}
	for extra, key := range map[string]string{
		on + `, "layer_types": ["full_attention"]`:                 "layer_types has 1 entries",
		on + `, "layer_types": ["full_attention", "chunked"]`:      `layer_types[1] = "chunked"`,
		`, "layer_types": ["full_attention", "sliding_attention"]`: "no window applies",
		on + `, "max_window_layers": -1`:                           "max_window_layers = -1",
	} {
		if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", extra, 1))); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", extra, err, key)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(strings.Replace(qwenCfg, "%s", "", 1)))
	f.Add([]byte(`{"model_type": "gpt2", "n_embd": 96, "n_layer": 2, "n_head": 3, "n_positions": 64, "vocab_size": 503}`))
	f.Add([]byte(`{"model_type": "phi3", "rope_parameters": {"rope_theta": 1e4}}`))
	f.Add([]byte(fmt.Sprintf(llamaCfg, `, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`)))
	f.Add([]byte(fmt.Sprintf(llamaCfg, `, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16, "mscale": 1, "mscale_all_dim": 0.5}`)))
	f.Add([]byte(`{"model_type": "phi3", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 64, "original_max_position_embeddings": 16, "rope_theta": 1e4, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1.5], "long_factor": [2, 3]}}`))
	f.Add([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}`, 1)))
	f.Add([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}`, 1)))
	f.Add([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": `+ctFP8Dynamic, 1)))
	f.Add([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": true, "sym": true}`, 1)))
	f.Add([]byte(strings.Replace(gemmaHub, "%s", "", 1)))
	f.Add([]byte(gemmaV5))
	f.Add([]byte(strings.Replace(gemma2Hub, "%s", "", 1)))
	f.Add([]byte(strings.Replace(qwen2MoEHub, "%s", "", 1)))
	f.Add([]byte(strings.Replace(qwen2MoEHub, "%s", `, "use_sliding_window": true, "layer_types": ["sliding_attention"]`, 1)))
	f.Add([]byte(strings.Replace(gemma2Hub, "%s", `, "attn_logit_softcapping": null, "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		var q struct {
			QC json.RawMessage `json:"quantization_config"`
		}
		if json.Unmarshal(data, &q) == nil && !isNull(q.QC) != (c.Quant != nil) {
			t.Fatalf("quantization_config %q parsed to %+v", q.QC, c.Quant)
		}
		if qc := c.Quant; qc != nil {
			g := map[QuantFormat]bool{QuantFP8Block: qc.GroupSize == 128, QuantFP8Channel: qc.GroupSize == 0,
				QuantAWQ: qc.GroupSize > 0, QuantGPTQ: qc.GroupSize > 0 || qc.GroupSize == -1}
			if !g[qc.Format] || (c.Family != "llama" && c.Family != "qwen2") {
				t.Fatalf("accepted quantization %+v for %s", qc, c.Family)
			}
		}
		// an explicit head_dim (Qwen3, Gemma 3) need not be hidden_size / heads
		if c.Hidden <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 ||
			c.Layers <= 0 || c.Vocab <= 0 || c.Intermediate <= 0 || !(c.NormEps > 0) || c.MaxPositions <= 0 {
			t.Fatalf("accepted an unusable config %+v from %q", c, data)
		}
		if c.Family != "gpt2" && (!(c.RopeTheta > 1) || c.HeadDim%2 != 0 || c.RopeDim != c.HeadDim) {
			t.Fatalf("bad rope %+v", c)
		}
		if s := c.RopeScaling; s != nil {
			tables := [][]float32{s.Divisor, s.Long}
			if len(s.Divisor) != c.RopeDim/2 || (s.Long != nil && (len(s.Long) != c.RopeDim/2 || s.LongFrom < 0)) ||
				!(s.AttentionFactor > 0) || math.IsInf(float64(s.AttentionFactor), 0) {
				t.Fatalf("bad rope scaling %+v", s)
			}
			for _, tab := range tables {
				for i, d := range tab {
					if !(d > 0) || math.IsInf(float64(d), 0) {
						t.Fatalf("divisor %d = %v in %+v", i, d, s)
					}
				}
			}
		}
		if c.Family == "gemma3" && (c.Activation != "gelu_pytorch_tanh" || !c.NormPlusOne || !(c.AttnScalar > 0) ||
			!(c.RopeLocalTheta > 1) || c.WindowedLayers == nil || len(*c.WindowedLayers) != c.Layers || c.SlidingWindow <= 0) {
			t.Fatalf("bad gemma3 config %+v", c)
		}
		if c.Family == "gemma2" && (c.Activation != "gelu_pytorch_tanh" || !c.NormPlusOne || !(c.AttnScalar > 0) || c.RopeLocalTheta != 0 ||
			c.WindowedLayers == nil || len(*c.WindowedLayers) != c.Layers || c.SlidingWindow <= 0 ||
			c.AttnSoftcap < 0 || c.FinalSoftcap < 0 || math.IsInf(float64(c.AttnSoftcap), 0) || math.IsInf(float64(c.FinalSoftcap), 0)) {
			t.Fatalf("bad gemma2 config %+v", c)
		}
		if c.Family != "gemma2" && (c.AttnSoftcap != 0 || c.FinalSoftcap != 0) {
			t.Fatalf("soft caps on a %s config %+v", c.Family, c)
		}
		want := map[string]string{"gpt2": "gelu_new", "gemma3": "gelu_pytorch_tanh", "gemma2": "gelu_pytorch_tanh"}[c.Family]
		if want == "" {
			want = "silu"
		}
		if c.Activation != want {
			t.Fatalf("activation %q for %s, want %q", c.Activation, c.Family, want)
		}
	})
}

// Missing and mis-shaped tensors are errors naming the tensor and both shapes.
func TestLoadWeightErrors(t *testing.T) {
	src := "../../golden/models/qwen2-tiny"
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for from, want := range map[string]string{
		`"num_hidden_layers": 2`:   "no tensor model.layers.2.input_layernorm.weight (want shape [224])",
		`"intermediate_size": 160`: "tensor model.layers.0.mlp.gate_proj.weight has shape [160,224], the config wants [161,224]",
	} {
		to := strings.NewReplacer("2", "3", "160", "161").Replace(from)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(string(cfg), from, to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
			t.Skip(err)
		}
		_, err := Load(cpu.New(), dir, 48)
		if err == nil || !strings.Contains(strings.ReplaceAll(err.Error(), " ", ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("%s -> %s: error %v, want %q", from, to, err, want)
		}
	}
}
