// Package model loads Hugging Face checkpoints (config.json + safetensors) of the Llama (and
// Mistral), Qwen2, Qwen3, Qwen3-MoE, Qwen2-MoE, Mixtral, Gemma 2 and 3, Phi-3 and GPT-2 families
// and runs their forward passes, prefill and KV-cached decode, on any backend.Backend, copying
// named activations (taps) to the host when asked for them.
package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Config is what a forward pass needs from config.json, the same fields for every family.
type Config struct {
	Family       string // "llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "gemma2", "gemma3", "phi3" or "gpt2": the layers' structure (familyOf)
	ModelType    string // config.json's model_type (mistral is the llama family with a window)
	Hidden       int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	Vocab        int
	NormEps      float32      // rms_norm_eps (qwen2, phi3) or layer_norm_epsilon (gpt2)
	RopeTheta    float32      // 0 for gpt2 (learned absolute positions)
	RopeDim      int          // leading dims of each head that RoPE rotates (HeadDim: full rotary); 0 for gpt2
	RopeScaling  *RopeScaling // llama3, yarn or longrope; nil for the default RoPE (and gpt2)
	Activation   string       // the MLP's: "silu" (gated, SwiGLU) or "gelu_new" (GELU, tanh form)
	TiedHead     bool         // logits use the token embedding matrix
	MaxPositions int
	AttnBias     bool // q/k/v projections carry biases
	// SlidingWindow is the number of most recent keys a query may see in the layers that
	// WindowedLayers marks (nil: every layer); 0 means unlimited. Phi-3 windows every layer;
	// Qwen2 (with use_sliding_window) the layers its layer_types call "sliding_attention",
	// by default those from max_window_layers on, as transformers' Qwen2Config derives them.
	// A pointer, as RopeScaling is, so that a Config stays comparable (graph.go's capture key).
	SlidingWindow  int
	WindowedLayers *LayerSet
	// DType is the storage dtype the model runs in (weights, activations, KV cache; the
	// logits stay fp32): BF16 when config.json says torch_dtype (transformers 5: dtype)
	// "bfloat16", as most hub checkpoints do, else F16 (float16, and float32 checkpoints, which
	// run in fp16). A golden set overrides it with its own params.dtype (LoadSet). The zero
	// value (a Config built by hand) means F16.
	DType tensor.DType
	// Quant is the quantized checkpoint's format (quantization_config); nil for a 16- or
	// 32-bit checkpoint.
	Quant *Quant
	// Experts and ExpertsPerToken make every layer's MLP a sparse mixture of experts (Mixtral's
	// num_local_experts and num_experts_per_tok): a router picks ExpertsPerToken of Experts
	// SwiGLU experts of width Intermediate per token, their softmax weights renormalised to sum
	// to 1 when NormTopKProb (always for Mixtral). 0 for a dense MLP.
	Experts, ExpertsPerToken int
	NormTopKProb             bool
	// SharedIntermediate is the width of the shared expert that Qwen2-MoE's sparse block runs
	// on every token beside the routed ones (shared_expert_intermediate_size), its output scaled
	// by sigmoid(x · shared_expert_gate); 0 for none.
	SharedIntermediate int
	// Gemma 3 (gemma.go): EmbedScale multiplies the embedding (sqrt(hidden_size); 0: none),
	// AttnScalar replaces head_dim in the scores' scale (query_pre_attn_scalar; 0: head_dim),
	// NormPlusOne makes every norm weight 1 + w, PostNorms adds a norm after attention and
	// after the MLP, RopeLocalTheta is the sliding layers' RoPE base (0: the model's).
	EmbedScale, AttnScalar float32
	NormPlusOne, PostNorms bool
	RopeLocalTheta         float32
	// Gemma 2: AttnSoftcap caps the attention scores (attn_logit_softcapping), FinalSoftcap the
	// logits (final_logit_softcapping): cap · tanh(x / cap); 0 for none.
	AttnSoftcap, FinalSoftcap float32
}

// familyOf maps config.json's model_type to the family whose layers it has: the weight table
// and forward it runs with (tools/gen-golden's FAMILY_OF_MODEL_TYPE is the same mapping).
var familyOf = map[string]string{"llama": "llama", "qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2", "mistral": "llama", "qwen3": "qwen3", "mixtral": "mixtral", "qwen3_moe": "qwen3_moe", "qwen2_moe": "qwen2_moe", "gemma3_text": "gemma3", "gemma2": "gemma2"}

// rawConfig holds the config.json keys of all three families; pointers tell absent from zero.
type rawConfig struct {
	ModelType string `json:"model_type"`
	// qwen2 / phi3
	HiddenSize           *int            `json:"hidden_size"`
	NumHiddenLayers      *int            `json:"num_hidden_layers"`
	NumAttentionHeads    *int            `json:"num_attention_heads"`
	NumKeyValueHeads     *int            `json:"num_key_value_heads"`
	IntermediateSize     *int            `json:"intermediate_size"`
	RMSNormEps           *float64        `json:"rms_norm_eps"`
	RopeTheta            *float64        `json:"rope_theta"`
	RopeParameters       json.RawMessage `json:"rope_parameters"`
	RopeScaling          json.RawMessage `json:"rope_scaling"`
	PartialRotaryFactor  *float64        `json:"partial_rotary_factor"`
	HeadDimKey           *int            `json:"head_dim"`
	HiddenAct            *string         `json:"hidden_act"`
	UseSlidingWindow     *bool           `json:"use_sliding_window"`
	SlidingWindow        *int            `json:"sliding_window"`
	MaxWindowLayers      *int            `json:"max_window_layers"`
	LayerTypes           []string        `json:"layer_types"`
	MaxPositionEmbed     *int            `json:"max_position_embeddings"`
	AttentionBias        *bool           `json:"attention_bias"`
	MLPBias              *bool           `json:"mlp_bias"`
	OriginalMaxPositions *int            `json:"original_max_position_embeddings"`
	// mixtral; qwen3_moe (num_experts and the rest)
	NumLocalExperts     *int  `json:"num_local_experts"`
	NumExpertsPerTok    *int  `json:"num_experts_per_tok"`
	NumExperts          *int  `json:"num_experts"`
	MoEIntermediateSize *int  `json:"moe_intermediate_size"`
	NormTopKProb        *bool `json:"norm_topk_prob"`
	DecoderSparseStep   *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int `json:"mlp_only_layers"`
	// qwen2_moe
	SharedExpertIntermediate *int  `json:"shared_expert_intermediate_size"`
	QKVBias                  *bool `json:"qkv_bias"`
	// gpt2
	NEmbd                 *int     `json:"n_embd"`
	NLayer                *int     `json:"n_layer"`
	NHead                 *int     `json:"n_head"`
	NInner                *int     `json:"n_inner"`
	NPositions            *int     `json:"n_positions"`
	LayerNormEpsilon      *float64 `json:"layer_norm_epsilon"`
	ActivationFunction    *string  `json:"activation_function"`
	ScaleAttnWeights      *bool    `json:"scale_attn_weights"`
	ScaleAttnByInverseIdx *bool    `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcastAttn  *bool    `json:"reorder_and_upcast_attn"`
	TieWordEmbeddings     *bool    `json:"tie_word_embeddings"`
	VocabSize             *int     `json:"vocab_size"`
	// both families: the checkpoint's dtype (transformers 5 writes "dtype", older ones
	// "torch_dtype")
	TorchDType *string `json:"torch_dtype"`
	DTypeKey   *string `json:"dtype"`
	// any family: a quantized checkpoint's format (parseQuant)
	QuantizationConfig json.RawMessage `json:"quantization_config"`
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func isNull(m json.RawMessage) bool {
	t := bytes.TrimSpace(m)
	return len(t) == 0 || string(t) == "null"
}

// ParseConfig parses a config.json. Options this engine does not implement (partial rotary,
// a sliding window, another activation, a quantized checkpoint's quantization_config) are
// errors naming the key, never silently ignored.
func ParseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	var err error
	need := func(key string, p *int) int {
		if err != nil {
			return 0
		}
		if p == nil {
			err = fmt.Errorf("config: missing %s", key)
			return 0
		}
		if *p <= 0 || *p > 1<<24 {
			err = fmt.Errorf("config: %s = %d: must be in 1..%d", key, *p, 1<<24)
			return 0
		}
		return *p
	}
	eps := func(key string, p *float64, def float64) float32 {
		v := def
		if p != nil {
			v = *p
		}
		if err == nil && (!(v > 0) || v > 1 || math.IsNaN(v)) {
			err = fmt.Errorf("config: %s = %v: must be in (0, 1]", key, v)
		}
		return float32(v)
	}
	if r.ModelType == "gemma3_text" || r.ModelType == "gemma2" {
		return parseGemmaConfig(data, &r)
	}
	if c.Quant, err = parseQuant(r.QuantizationConfig); err != nil {
		return nil, err
	}
	if c.Quant != nil && r.ModelType != "llama" && r.ModelType != "qwen2" {
		return nil, fmt.Errorf("config: quantization_config (%s) with model_type %q is not implemented: quantized checkpoints run for llama and qwen2", c.Quant.Format, r.ModelType)
	}
	c.ModelType = r.ModelType
	c.Family = familyOf[r.ModelType]
	switch r.ModelType {
	case "llama", "qwen2", "phi3", "mistral", "qwen3", "mixtral", "qwen3_moe", "qwen2_moe":
		c.Hidden = need("hidden_size", r.HiddenSize)
		c.Layers = need("num_hidden_layers", r.NumHiddenLayers)
		c.Heads = need("num_attention_heads", r.NumAttentionHeads)
		c.KVHeads = c.Heads
		if r.NumKeyValueHeads != nil {
			c.KVHeads = need("num_key_value_heads", r.NumKeyValueHeads)
		}
		c.Intermediate = need("intermediate_size", r.IntermediateSize)
		c.Vocab = need("vocab_size", r.VocabSize)
		c.MaxPositions = need("max_position_embeddings", r.MaxPositionEmbed)
		c.NormEps = eps("rms_norm_eps", r.RMSNormEps, 1e-6)
		switch r.ModelType {
		case "mixtral":
			c.Experts = need("num_local_experts", r.NumLocalExperts)
			c.ExpertsPerToken = need("num_experts_per_tok", r.NumExpertsPerTok)
			c.NormTopKProb = true // MixtralTopKRouter always renormalises
		case "qwen3_moe", "qwen2_moe":
			// Every layer sparse (Qwen3-30B-A3B, Qwen3-235B-A22B): the experts' width is
			// moe_intermediate_size; intermediate_size would be a dense layer's, and there is none.
			// The published configs say num_experts; transformers 5's save_pretrained writes
			// Qwen3-MoE's as num_local_experts. Either, or both when equal. Qwen2MoeConfig has no
			// such mapping (a num_local_experts alone is ignored and transformers builds its
			// default 60 experts), so a qwen2_moe config must say num_experts.
			experts := r.NumExperts
			switch {
			case experts == nil && r.ModelType == "qwen3_moe":
				experts = r.NumLocalExperts
			case experts != nil && r.NumLocalExperts != nil && *r.NumLocalExperts != *experts && err == nil:
				err = fmt.Errorf("config: num_experts = %d and num_local_experts = %d differ", *experts, *r.NumLocalExperts)
			}
			c.Experts = need("num_experts", experts)
			c.ExpertsPerToken = need("num_experts_per_tok", r.NumExpertsPerTok)
			c.Intermediate = need("moe_intermediate_size", r.MoEIntermediateSize)
			c.NormTopKProb = r.NormTopKProb != nil && *r.NormTopKProb // transformers' default: false
			if r.ModelType == "qwen2_moe" {
				// Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B: a shared expert on every token beside the
				// routed ones, gated by sigmoid(x · shared_expert_gate)
				c.SharedIntermediate = need("shared_expert_intermediate_size", r.SharedExpertIntermediate)
				if err == nil && r.QKVBias != nil && !*r.QKVBias {
					err = fmt.Errorf("config: qkv_bias = false is not implemented for qwen2_moe (its q, k and v projections carry biases)")
				}
			}
			if err == nil && r.DecoderSparseStep != nil && *r.DecoderSparseStep != 1 {
				err = fmt.Errorf("config: decoder_sparse_step = %d is not implemented (1: every layer sparse)", *r.DecoderSparseStep)
			}
			if err == nil && len(r.MLPOnlyLayers) > 0 {
				err = fmt.Errorf("config: mlp_only_layers = %v is not implemented (every layer sparse)", r.MLPOnlyLayers)
			}
		}
		if c.Experts > 0 {
			key := "num_local_experts"
			if r.ModelType == "qwen3_moe" || r.ModelType == "qwen2_moe" {
				key = "num_experts"
			}
			if err == nil && c.ExpertsPerToken > c.Experts {
				err = fmt.Errorf("config: num_experts_per_tok = %d: must be at most %s = %d", c.ExpertsPerToken, key, c.Experts)
			}
			if err == nil && c.Experts > backend.MaxMoEExperts {
				err = fmt.Errorf("config: %s = %d: at most %d (moe_router)", key, c.Experts, backend.MaxMoEExperts)
			}
		}
		if err != nil {
			return nil, err
		}
		theta, e := ropeTheta(&r)
		if e != nil {
			return nil, e
		}
		c.RopeTheta = theta
		if r.PartialRotaryFactor != nil && *r.PartialRotaryFactor != 1 {
			return nil, fmt.Errorf("config: partial_rotary_factor = %v is not implemented (full rotary only)", *r.PartialRotaryFactor)
		}
		if r.HiddenAct != nil && *r.HiddenAct != "silu" {
			return nil, fmt.Errorf("config: hidden_act = %q is not implemented (silu only)", *r.HiddenAct)
		}
		c.Activation = "silu" // transformers' default for these families
		// transformers' Llama, Mistral, Qwen2 and Qwen3 attention take head_dim when the config
		// gives one (Qwen3-0.6B and 4B: 128 where hidden_size / heads is 64 and 80); Phi-3's
		// derives it from the hidden size.
		if r.HeadDimKey != nil {
			if r.ModelType == "phi3" && *r.HeadDimKey*c.Heads != c.Hidden {
				return nil, fmt.Errorf("config: head_dim = %d differs from hidden_size/num_attention_heads = %d: not implemented for phi3", *r.HeadDimKey, c.Hidden/c.Heads)
			}
			if *r.HeadDimKey <= 0 {
				return nil, fmt.Errorf("config: head_dim = %d: must be positive", *r.HeadDimKey)
			}
			c.HeadDim = *r.HeadDimKey
		}
		c.AttnBias = r.ModelType == "qwen2" || r.ModelType == "qwen2_moe"
		if r.AttentionBias != nil && *r.AttentionBias && !c.AttnBias {
			// Llama's would bias o_proj too, Phi-3's its fused qkv_proj: neither is wired.
			return nil, fmt.Errorf("config: attention_bias = true is not implemented for %s", r.ModelType)
		}
		if r.MLPBias != nil && *r.MLPBias {
			return nil, fmt.Errorf("config: mlp_bias = true is not implemented for %s", r.ModelType)
		}
		// Qwen2, Qwen3 and Qwen2-MoE apply their window only with use_sliding_window; Phi-3, Mistral and
		// Mixtral always do (a null sliding_window, as Mistral v0.3 and Mixtral publish it, is no
		// window).
		if r.SlidingWindow != nil && (r.ModelType == "phi3" || r.ModelType == "mistral" || r.ModelType == "mixtral" || (r.UseSlidingWindow != nil && *r.UseSlidingWindow)) {
			if *r.SlidingWindow <= 0 {
				return nil, fmt.Errorf("config: sliding_window = %d: must be positive", *r.SlidingWindow)
			}
			c.SlidingWindow = *r.SlidingWindow
			// Qwen3-MoE's attention windows every layer (transformers reads neither layer_types nor
			// max_window_layers for it); Qwen2's and Qwen3's the layers those name.
			var err error
			switch r.ModelType {
			case "qwen2", "qwen3":
				c.WindowedLayers, err = qwen2WindowedLayers(&r, c.Layers)
			case "qwen2_moe":
				c.WindowedLayers, err = qwen2MoEWindowedLayers(&r, c.Layers)
			}
			if err != nil {
				return nil, err
			}
		} else if len(r.LayerTypes) > 0 && slices.Contains(r.LayerTypes, "sliding_attention") {
			return nil, fmt.Errorf("config: layer_types has sliding_attention layers but no window applies (sliding_window %v, use_sliding_window %v)", ptrString(r.SlidingWindow), ptrString(r.UseSlidingWindow))
		}
		c.TiedHead = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	case "gpt2":
		c.Hidden = need("n_embd", r.NEmbd)
		c.Layers = need("n_layer", r.NLayer)
		c.Heads = need("n_head", r.NHead)
		c.KVHeads = c.Heads
		c.Vocab = need("vocab_size", r.VocabSize)
		c.MaxPositions = need("n_positions", r.NPositions)
		c.Intermediate = 4 * c.Hidden
		if r.NInner != nil {
			c.Intermediate = need("n_inner", r.NInner)
		}
		c.NormEps = eps("layer_norm_epsilon", r.LayerNormEpsilon, 1e-5)
		if err != nil {
			return nil, err
		}
		if r.ActivationFunction != nil && *r.ActivationFunction != "gelu_new" {
			return nil, fmt.Errorf("config: activation_function = %q is not implemented (gelu_new only)", *r.ActivationFunction)
		}
		c.Activation = "gelu_new"
		for key, p := range map[string]*bool{"scale_attn_weights": r.ScaleAttnWeights} {
			if p != nil && !*p {
				return nil, fmt.Errorf("config: %s = false is not implemented", key)
			}
		}
		for key, p := range map[string]*bool{"scale_attn_by_inverse_layer_idx": r.ScaleAttnByInverseIdx, "reorder_and_upcast_attn": r.ReorderAndUpcastAttn} {
			if p != nil && *p {
				return nil, fmt.Errorf("config: %s = true is not implemented", key)
			}
		}
		c.AttnBias = true
		c.TiedHead = r.TieWordEmbeddings == nil || *r.TieWordEmbeddings
	case "":
		return nil, fmt.Errorf("config: missing model_type")
	default:
		return nil, fmt.Errorf("config: model_type %q is not implemented (llama, qwen2, qwen3, qwen3_moe, qwen2_moe, phi3, gpt2, mistral, mixtral, gemma2, gemma3_text)", r.ModelType)
	}
	if c.HeadDim == 0 && c.Hidden%c.Heads != 0 {
		return nil, fmt.Errorf("config: hidden size %d is not a multiple of the %d heads", c.Hidden, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("config: num_key_value_heads = %d does not divide num_attention_heads = %d", c.KVHeads, c.Heads)
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.DType, err = storageDType(&r); err != nil {
		return nil, err
	}
	if c.RopeTheta != 0 {
		if c.HeadDim%2 != 0 {
			return nil, fmt.Errorf("config: head dim %d is odd: RoPE needs pairs", c.HeadDim)
		}
		c.RopeDim = c.HeadDim // partial rotary was refused above
		if c.RopeScaling, err = parseRopeScaling(&r, &c); err != nil {
			return nil, err
		}
	} else if !isNull(r.RopeScaling) {
		return nil, fmt.Errorf("config: rope_scaling = %s: %s has no RoPE", bytes.TrimSpace(r.RopeScaling), c.Family)
	}
	return &c, nil
}

// ropeTheta reads rope_theta, or rope_parameters.rope_theta as transformers 5 saves it. The
// other RoPE keys are parseRopeScaling's; a rope_parameters beside rope_scaling may carry
// nothing else (transformers would drop it for rope_scaling's).
func ropeTheta(r *rawConfig) (float32, error) {
	var theta *float64
	if !isNull(r.RopeParameters) {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(r.RopeParameters, &p); err != nil {
			return 0, fmt.Errorf("config: rope_parameters: %w", err)
		}
		for k, v := range p {
			switch {
			case k == "rope_theta":
				var f float64
				if err := json.Unmarshal(v, &f); err != nil {
					return 0, fmt.Errorf("config: rope_parameters.rope_theta: %w", err)
				}
				theta = &f
			case k == "rope_type" && string(bytes.TrimSpace(v)) == `"default"`:
			case !isNull(r.RopeScaling):
				return 0, fmt.Errorf("config: rope_parameters.%s beside rope_scaling: give the RoPE scaling in one of them", k)
			}
		}
	}
	if r.RopeTheta != nil {
		if theta != nil && *theta != *r.RopeTheta {
			return 0, fmt.Errorf("config: rope_theta = %v disagrees with rope_parameters.rope_theta = %v", *r.RopeTheta, *theta)
		}
		theta = r.RopeTheta
	}
	if theta == nil {
		return 0, fmt.Errorf("config: missing rope_theta (or rope_parameters.rope_theta)")
	}
	if !(*theta > 1) || math.IsInf(*theta, 0) || *theta > math.MaxFloat32 {
		return 0, fmt.Errorf("config: rope_theta = %v: must be finite and > 1", *theta)
	}
	return float32(*theta), nil
}

// parseGemmaConfig is ParseConfig of a gemma3_text or gemma2 config (gemma.go).
func parseGemmaConfig(data []byte, r *rawConfig) (*Config, error) {
	c := Config{ModelType: r.ModelType, Family: familyOf[r.ModelType]}
	q, err := parseQuant(r.QuantizationConfig)
	if err != nil {
		return nil, err
	}
	if q != nil {
		return nil, fmt.Errorf("config: quantization_config (%s) with model_type %q is not implemented: quantized checkpoints run for llama and qwen2", q.Format, r.ModelType)
	}
	if err := parseGemma(data, r, &c); err != nil {
		return nil, err
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("config: num_key_value_heads = %d does not divide num_attention_heads = %d", c.KVHeads, c.Heads)
	}
	if c.DType, err = storageDType(r); err != nil {
		return nil, err
	}
	return &c, nil
}

// storageDType maps config.json's torch_dtype (or dtype) to the dtype the model runs in (see
// Config.DType). A name that is not a floating dtype transformers knows is an error naming it.
func storageDType(r *rawConfig) (tensor.DType, error) {
	key, v := "torch_dtype", r.TorchDType
	if v == nil {
		key, v = "dtype", r.DTypeKey
	}
	if v == nil {
		return tensor.F16, nil
	}
	switch *v {
	case "bfloat16":
		return tensor.BF16, nil
	case "float16", "float32", "auto":
		return tensor.F16, nil
	}
	return tensor.Invalid, fmt.Errorf("config: %s = %q: want bfloat16, float16 or float32", key, *v)
}

// StorageDType is the run dtype of c: F16 for a Config without one.
func (c *Config) StorageDType() tensor.DType {
	if c.DType == tensor.Invalid {
		return tensor.F16
	}
	return c.DType
}

// qwen2WindowedLayers is which of n layers a Qwen2 window applies to: its layer_types when given
// ("sliding_attention" or "full_attention", one a layer), else the layers from max_window_layers
// on (transformers' default for an absent key: 28).
func qwen2WindowedLayers(r *rawConfig, n int) (*LayerSet, error) {
	if len(r.LayerTypes) > 0 {
		return layerTypesWindowed(r.LayerTypes, n)
	}
	out := make(LayerSet, n)
	from := 28
	if r.MaxWindowLayers != nil {
		from = *r.MaxWindowLayers
	}
	if from < 0 {
		return nil, fmt.Errorf("config: max_window_layers = %d: must be >= 0", from)
	}
	for i := range out {
		out[i] = i >= from
	}
	return &out, nil
}

// qwen2MoEWindowedLayers is qwen2WindowedLayers for Qwen2-MoE, whose config derives its default
// layer_types otherwise (Qwen2MoeConfig): the even layers below max_window_layers slide (index
// i with (i + 1) odd and i < max_window_layers), the others attend to everything.
func qwen2MoEWindowedLayers(r *rawConfig, n int) (*LayerSet, error) {
	if len(r.LayerTypes) > 0 {
		return layerTypesWindowed(r.LayerTypes, n)
	}
	below := 28
	if r.MaxWindowLayers != nil {
		below = *r.MaxWindowLayers
	}
	if below < 0 {
		return nil, fmt.Errorf("config: max_window_layers = %d: must be >= 0", below)
	}
	out := make(LayerSet, n)
	for i := range out {
		out[i] = i%2 == 0 && i < below
	}
	return &out, nil
}

// layerTypesWindowed reads config.json's layer_types: the "sliding_attention" layers slide.
func layerTypesWindowed(types []string, n int) (*LayerSet, error) {
	if len(types) != n {
		return nil, fmt.Errorf("config: layer_types has %d entries for %d layers", len(types), n)
	}
	out := make(LayerSet, n)
	for i, t := range types {
		switch t {
		case "sliding_attention":
			out[i] = true
		case "full_attention":
		default:
			return nil, fmt.Errorf("config: layer_types[%d] = %q: want \"full_attention\" or \"sliding_attention\"", i, t)
		}
	}
	return &out, nil
}

// LayerSet marks layers by index.
type LayerSet []bool

// LayerWindow is layer i's sliding window (0: none).
func (c *Config) LayerWindow(i int) int {
	if c.SlidingWindow <= 0 {
		return 0
	}
	if w := c.WindowedLayers; w != nil && (i >= len(*w) || !(*w)[i]) {
		return 0
	}
	return c.SlidingWindow
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
