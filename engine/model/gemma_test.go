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
