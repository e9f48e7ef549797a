package model

import (
	"math"
	"strings"
	"testing"
)

// gemmaHub is google/gemma-3-1b-it's config.json as the hub publishes it, cut to 6 layers and a
// 4B-style linear scaling (%s: extra keys).
const gemmaHub = `{"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 6,
 "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912,
 "vocab_size": 262144, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
 "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256, "rope_theta": 1000000,
 "rope_local_base_freq": 10000, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
 "sliding_window": 512, "sliding_window_pattern": 6, "attn_logit_softcapping": null,
 "final_logit_softcapping": null, "torch_dtype": "bfloat16"%s}`

// gemmaV5 is the same model as transformers 5 saves it: layer_types and rope_parameters by layer
// type.
const gemmaV5 = `{"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 6,
 "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912,
 "vocab_size": 262144, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
 "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
 "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
 "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
   "sliding_attention", "full_attention"], "sliding_window": 512, "tie_word_embeddings": true,
 "dtype": "bfloat16"}`

func TestParseGemma3BothForms(t *testing.T) {
	for name, text := range map[string]string{"hub": strings.Replace(gemmaHub, "%s", "", 1), "transformers 5": gemmaV5} {
		c, err := ParseConfig([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Family != "gemma3" || !c.TiedHead || !c.NormPlusOne || !c.PostNorms || c.Activation != "gelu_pytorch_tanh" {
			t.Errorf("%s: %+v", name, c)
		}
		if c.RopeTheta != 1e6 || c.RopeLocalTheta != 1e4 || c.RopeScaling == nil || c.RopeScaling.Type != "linear" || c.RopeScaling.Divisor[0] != 8 {
			t.Errorf("%s: RoPE %v %v %+v", name, c.RopeTheta, c.RopeLocalTheta, c.RopeScaling)
		}
		for i := 0; i < 6; i++ {
			theta, s := c.LayerRope(i)
			sliding := i != 5
			if (c.LayerWindow(i) == 512) != sliding || (theta == 1e4) != sliding || (s == nil) != sliding {
				t.Errorf("%s: layer %d: window %d, theta %v, scaling %v", name, i, c.LayerWindow(i), theta, s)
			}
		}
		if want := float32(1 / 16.0); c.AttnScale() != want {
			t.Errorf("%s: attention scale %v, want %v", name, c.AttnScale(), want)
		}
		if c.EmbedScale != float32(math.Sqrt(1152)) || c.embedScale() != 34 {
			t.Errorf("%s: embed scale %v, in bf16 %v (want sqrt(1152) and 34)", name, c.EmbedScale, c.embedScale())
		}
	}
}

func TestParseGemma3RefusesByName(t *testing.T) {
	for extra, want := range map[string]string{
		`, "attn_logit_softcapping": 50.0`:           "attn_logit_softcapping = 50.0 is not implemented",
		`, "use_bidirectional_attention": true`:      "use_bidirectional_attention = true",
		`, "hidden_activation": "gelu"`:              `hidden_activation = "gelu" is not implemented`,
		`, "sliding_window": null`:                   "sliding_window = absent",
		`, "sliding_window_pattern": 0`:              "sliding_window_pattern = 0",
		`, "query_pre_attn_scalar": 0`:               "query_pre_attn_scalar = 0",
		`, "attention_bias": true`:                   "attention_bias = true is not implemented",
		`, "rope_scaling": {"rope_type": "dynamic"}`: `rope_type = "dynamic" is not implemented`,
	} {
		// a later duplicate key wins in encoding/json: each extra overrides the base's value
		_, err := ParseConfig([]byte(strings.Replace(gemmaHub, "%s", extra, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", extra, err, want)
		}
	}
	scaledLocal := strings.Replace(gemmaV5, `"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}`,
		`"sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}`, 1)
	if _, err := ParseConfig([]byte(scaledLocal)); err == nil || !strings.Contains(err.Error(), "sliding_attention.rope_type") {
		t.Errorf("a scaled sliding RoPE: %v", err)
	}
}

// gemma2Hub is google/gemma-2-2b's config.json as the hub publishes it, cut to 4 layers (%s:
// extra keys).
const gemma2Hub = `{"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 2304,
 "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
 "intermediate_size": 9216, "vocab_size": 256000, "max_position_embeddings": 8192,
 "rms_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
 "query_pre_attn_scalar": 256, "rope_theta": 10000.0, "sliding_window": 4096,
 "cache_implementation": "hybrid", "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
 "torch_dtype": "float32"%s}`

func TestParseGemma2(t *testing.T) {
	c, err := ParseConfig([]byte(strings.Replace(gemma2Hub, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Family != "gemma2" || !c.TiedHead || !c.NormPlusOne || !c.PostNorms || c.Activation != "gelu_pytorch_tanh" {
		t.Errorf("%+v", c)
	}
	if c.AttnSoftcap != 50 || c.FinalSoftcap != 30 || c.RopeTheta != 1e4 || c.RopeLocalTheta != 0 || c.RopeScaling != nil {
		t.Errorf("caps %v %v, RoPE %v %v %+v", c.AttnSoftcap, c.FinalSoftcap, c.RopeTheta, c.RopeLocalTheta, c.RopeScaling)
	}
	for i := 0; i < 4; i++ {
		theta, s := c.LayerRope(i)
		sliding := i%2 == 0 // Gemma2Config: layer i slides when (i + 1) % 2 != 0
		if (c.LayerWindow(i) == 4096) != sliding || theta != 1e4 || s != nil {
			t.Errorf("layer %d: window %d, theta %v, scaling %v", i, c.LayerWindow(i), theta, s)
		}
	}
	if c.AttnScale() != 1/16.0 || c.EmbedScale != float32(math.Sqrt(2304)) || c.embedScale() != 48 {
		t.Errorf("scale %v, embed scale %v (%v as stored)", c.AttnScale(), c.EmbedScale, c.embedScale())
	}
	// Gemma2Config's defaults where the keys are absent; null caps mean none; layer_types wins.
	bare := `{"model_type": "gemma2", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
	 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64, "head_dim": 32%s}`
	if c, err = ParseConfig([]byte(strings.Replace(bare, "%s", "", 1))); err != nil {
		t.Fatal(err)
	}
	if c.AttnSoftcap != 50 || c.FinalSoftcap != 30 || c.SlidingWindow != 4096 || c.RopeTheta != 1e4 || c.AttnScale() != 1/16.0 {
		t.Errorf("defaults: %+v", c)
	}
	nulls := `, "attn_logit_softcapping": null, "final_logit_softcapping": null, "layer_types": ["full_attention", "sliding_attention", "full_attention"], "sliding_window": 8`
	if c, err = ParseConfig([]byte(strings.Replace(bare, "%s", nulls, 1))); err != nil {
		t.Fatal(err)
	}
	if c.AttnSoftcap != 0 || c.FinalSoftcap != 0 || c.LayerWindow(0) != 0 || c.LayerWindow(1) != 8 {
		t.Errorf("null caps and layer_types: %+v", c)
	}
	for _, name := range []string{"attn_logit_softcapping", "final_logit_softcapping"} {
		hp := map[string]any{}
		for _, p := range c.HParams() {
			hp[p.Name] = p.Value
		}
		if v, ok := hp[name]; !ok || v != nil {
			t.Errorf("hparams.%s = %v (present %v), want null", name, v, ok)
		}
	}
}

func TestParseGemma2RefusesByName(t *testing.T) {
	for extra, want := range map[string]string{
		`, "attn_logit_softcapping": 0`:     "attn_logit_softcapping = 0: must be finite and > 0",
		`, "final_logit_softcapping": -30`:  "final_logit_softcapping = -30",
		`, "final_logit_softcapping": "30"`: `final_logit_softcapping = "30": want a number or null`,
		`, "attn_logit_softcapping": 1e39`:  "attn_logit_softcapping = 1e+39",
		`, "sliding_window": 0`:             "sliding_window = 0",
		`, "hidden_activation": "gelu"`:     `hidden_act = "gelu_pytorch_tanh" beside hidden_activation = "gelu"`,
		`, "attention_bias": true`:          "attention_bias = true is not implemented for gemma2",
		`, "query_pre_attn_scalar": -1`:     "query_pre_attn_scalar = -1",
		`, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm"}`: `model_type "gemma2" is not implemented`,
	} {
		_, err := ParseConfig([]byte(strings.Replace(gemma2Hub, "%s", extra, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", extra, err, want)
		}
	}
}
