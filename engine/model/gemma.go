package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Gemma 3 text (model_type gemma3_text, transformers' Gemma3ForCausalLM): Llama's attention
// with q_norm and k_norm over each head, the scores scaled by query_pre_attn_scalar^-0.5, every
// norm x / rms(x) (1 + w), a norm after attention and after the MLP as well as before them,
// GeGLU with the tanh GELU, the embedding times sqrt(hidden_size), sliding-window layers with
// their own RoPE base beside global ones, a tied head by default.
//
// Gemma 2 (model_type gemma2, Gemma2ForCausalLM) is the same layer without q_norm and k_norm,
// with one RoPE base for every layer, every other layer sliding (the even ones), and soft-capping
// where Gemma 3 has none: the attention scores capped at attn_logit_softcapping (cap ·
// tanh(s / cap) before the mask, default 50) and the logits at final_logit_softcapping
// (default 30).

// gemmaRaw holds the config.json keys only Gemma reads.
type gemmaRaw struct {
	HiddenActivation      *string         `json:"hidden_activation"`
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	RopeLocalBaseFreq     *float64        `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int            `json:"sliding_window_pattern"`
	AttnLogitSoftcapping  json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping json.RawMessage `json:"final_logit_softcapping"`
	Bidirectional         *bool           `json:"use_bidirectional_attention"`
}

// gemma3Defaults are Gemma3TextConfig's defaults for keys a config may leave out.
const (
	gemma3GlobalTheta   = 1e6
	gemma3LocalTheta    = 1e4
	gemma3WindowPattern = 6
	gemma3HeadDim       = 256
	gemma3AttnScalar    = 256
)

// gemma2Defaults are Gemma2Config's.
const (
	gemma2Theta    = 1e4
	gemma2Window   = 4096
	gemma2AttnCap  = 50
	gemma2FinalCap = 30
)

// parseGemma fills c from a gemma3_text or gemma2 config (c.Family says which): the widths
// (r's common keys), then Gemma's own.
func parseGemma(data []byte, r *rawConfig, c *Config) error {
	var g gemmaRaw
	if err := json.Unmarshal(data, &g); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var err error
	need := func(key string, p *int, def int) int {
		v := def
		if p != nil {
			v = *p
		}
		if err == nil && (v <= 0 || v > 1<<24) {
			if p == nil && def == 0 {
				err = fmt.Errorf("config: missing %s", key)
			} else {
				err = fmt.Errorf("config: %s = %d: must be in 1..%d", key, v, 1<<24)
			}
		}
		return v
	}
	c.Hidden = need("hidden_size", r.HiddenSize, 0)
	c.Layers = need("num_hidden_layers", r.NumHiddenLayers, 0)
	c.Heads = need("num_attention_heads", r.NumAttentionHeads, 0)
	c.KVHeads = need("num_key_value_heads", r.NumKeyValueHeads, c.Heads)
	c.HeadDim = need("head_dim", r.HeadDimKey, gemma3HeadDim) // Gemma2Config's default too
	c.Intermediate = need("intermediate_size", r.IntermediateSize, 0)
	c.Vocab = need("vocab_size", r.VocabSize, 0)
	c.MaxPositions = need("max_position_embeddings", r.MaxPositionEmbed, 0)
	if err != nil {
		return err
	}
	eps := 1e-6
	if r.RMSNormEps != nil {
		eps = *r.RMSNormEps
	}
	if !(eps > 0) || eps > 1 {
		return fmt.Errorf("config: rms_norm_eps = %v: must be in (0, 1]", eps)
	}
	c.NormEps = float32(eps)
	if err := gemmaSoftcaps(&g, c); err != nil {
		return err
	}
	if g.Bidirectional != nil && *g.Bidirectional {
		return fmt.Errorf("config: use_bidirectional_attention = true is not implemented (causal attention only)")
	}
	act := "gelu_pytorch_tanh"
	if g.HiddenActivation != nil {
		act = *g.HiddenActivation
	}
	if r.HiddenAct != nil && *r.HiddenAct != act {
		return fmt.Errorf("config: hidden_act = %q beside hidden_activation = %q: Gemma 3 reads hidden_activation", *r.HiddenAct, act)
	}
	if act != "gelu_pytorch_tanh" {
		return fmt.Errorf("config: hidden_activation = %q is not implemented (gelu_pytorch_tanh only)", act)
	}
	c.Activation = act
	for key, p := range map[string]*bool{"attention_bias": r.AttentionBias, "mlp_bias": r.MLPBias} {
		if p != nil && *p {
			return fmt.Errorf("config: %s = true is not implemented for %s", key, c.ModelType)
		}
	}
	if r.PartialRotaryFactor != nil && *r.PartialRotaryFactor != 1 {
		return fmt.Errorf("config: partial_rotary_factor = %v is not implemented (full rotary only)", *r.PartialRotaryFactor)
	}
	scalar := float64(gemma3AttnScalar)
	if g.QueryPreAttnScalar != nil {
		scalar = *g.QueryPreAttnScalar
	}
	if !(scalar > 0) || math.IsInf(scalar, 0) {
		return fmt.Errorf("config: query_pre_attn_scalar = %v: must be finite and > 0", scalar)
	}
	c.AttnScalar = float32(scalar)
	c.EmbedScale = float32(math.Sqrt(float64(c.Hidden)))
	c.NormPlusOne, c.PostNorms = true, true
	c.TiedHead = r.TieWordEmbeddings == nil || *r.TieWordEmbeddings // Gemma3TextConfig's default
	if err := gemmaWindows(r, &g, c); err != nil {
		return err
	}
	if c.Family == "gemma2" {
		// One RoPE for every layer (Gemma2RotaryEmbedding): rope_theta (default 1e4) and
		// whatever scaling the config asks for.
		c.RopeDim = c.HeadDim
		if c.HeadDim%2 != 0 {
			return fmt.Errorf("config: head dim %d is odd: RoPE needs pairs", c.HeadDim)
		}
		var err error
		if c.RopeTheta, err = ropeTheta(r); err != nil {
			if r.RopeTheta != nil || !isNull(r.RopeParameters) {
				return err
			}
			c.RopeTheta = gemma2Theta
		}
		c.RopeScaling, err = parseRopeScaling(r, c)
		return err
	}
	return gemmaRope(r, &g, c)
}

// gemmaSoftcaps reads the soft caps: Gemma 2's (null for none; absent, Gemma2Config's defaults
// 50 and 30), and Gemma 3's, which publishes null and runs none (a number is refused).
func gemmaSoftcaps(g *gemmaRaw, c *Config) error {
	for _, k := range []struct {
		key string
		raw json.RawMessage
		def float64
		dst *float32
	}{
		{"attn_logit_softcapping", g.AttnLogitSoftcapping, gemma2AttnCap, &c.AttnSoftcap},
		{"final_logit_softcapping", g.FinalLogitSoftcapping, gemma2FinalCap, &c.FinalSoftcap},
	} {
		if c.Family != "gemma2" {
			if !isNull(k.raw) {
				return fmt.Errorf("config: %s = %s is not implemented for %s (its published configs say null; Gemma 2's soft-capping runs as model_type gemma2)", k.key, bytes.TrimSpace(k.raw), c.ModelType)
			}
			continue
		}
		v := k.def
		if k.raw != nil {
			if isNull(k.raw) {
				continue // no cap
			}
			if err := json.Unmarshal(k.raw, &v); err != nil {
				return fmt.Errorf("config: %s = %s: want a number or null", k.key, bytes.TrimSpace(k.raw))
			}
		}
		if !(v > 0) || math.IsInf(v, 0) || v > math.MaxFloat32 {
			return fmt.Errorf("config: %s = %v: must be finite and > 0 (null for none)", k.key, v)
		}
		*k.dst = float32(v)
	}
	return nil
}

// gemmaWindows reads which layers slide: layer_types, else (Gemma 3) every
// sliding_window_pattern-th layer (default 6) global and the rest sliding, as Gemma3TextConfig
// derives them, or (Gemma 2) the even layers sliding, as Gemma2Config does.
func gemmaWindows(r *rawConfig, g *gemmaRaw, c *Config) error {
	w := r.SlidingWindow
	if w == nil && c.Family == "gemma2" {
		def := gemma2Window
		w = &def
	}
	if w == nil || *w <= 0 {
		return fmt.Errorf("config: sliding_window = %s: %s's sliding layers need a positive window", ptrString(r.SlidingWindow), c.ModelType)
	}
	c.SlidingWindow = *w
	if len(r.LayerTypes) > 0 {
		var err error
		c.WindowedLayers, err = qwen2WindowedLayers(r, c.Layers)
		return err
	}
	n := gemma3WindowPattern
	if c.Family == "gemma2" {
		n = 2 // layer i slides when (i + 1) % 2 != 0
	} else if g.SlidingWindowPattern != nil {
		n = *g.SlidingWindowPattern
	}
	if n <= 0 {
		return fmt.Errorf("config: sliding_window_pattern = %d: must be positive", n)
	}
	set := make(LayerSet, c.Layers)
	for i := range set {
		set[i] = (i+1)%n != 0
	}
	c.WindowedLayers = &set
	return nil
}

// gemmaRope reads the global layers' RoPE (c.RopeTheta, c.RopeScaling) and the sliding ones'
// base (c.RopeLocalTheta): transformers 5's rope_parameters keyed by layer type, or the hub's
// rope_theta, rope_scaling (the global layers') and rope_local_base_freq.
func gemmaRope(r *rawConfig, g *gemmaRaw, c *Config) error {
	c.RopeDim = c.HeadDim
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: head dim %d is odd: RoPE needs pairs", c.HeadDim)
	}
	theta := func(key string, p *float64, def float64) (float32, error) {
		v := def
		if p != nil {
			v = *p
		}
		if !(v > 1) || math.IsInf(v, 0) || v > math.MaxFloat32 {
			return 0, fmt.Errorf("config: %s = %v: must be finite and > 1", key, v)
		}
		return float32(v), nil
	}
	var byType map[string]json.RawMessage
	if !isNull(r.RopeParameters) {
		if err := json.Unmarshal(r.RopeParameters, &byType); err != nil {
			return fmt.Errorf("config: rope_parameters: %w", err)
		}
		_, full := byType["full_attention"]
		_, sliding := byType["sliding_attention"]
		if !full && !sliding {
			byType = nil // a flat dict: the global layers' parameters
		}
	}
	var err error
	if byType != nil {
		for k := range byType {
			if k != "full_attention" && k != "sliding_attention" {
				return fmt.Errorf("config: rope_parameters.%s: want full_attention and sliding_attention", k)
			}
		}
		if !isNull(r.RopeScaling) {
			return fmt.Errorf("config: rope_scaling beside rope_parameters by layer type: give the RoPE scaling in one of them")
		}
		read := func(typ string, def float64) (float32, *RopeScaling, error) {
			key := "rope_parameters." + typ
			var p struct {
				Theta *float64 `json:"rope_theta"`
			}
			if raw := byType[typ]; !isNull(raw) {
				if err := json.Unmarshal(raw, &p); err != nil {
					return 0, nil, fmt.Errorf("config: %s: %w", key, err)
				}
			}
			t, err := theta(key+".rope_theta", p.Theta, def)
			if err != nil || isNull(byType[typ]) {
				return t, nil, err
			}
			cc := *c
			cc.RopeTheta = t
			s, err := parseRopeDict(key, byType[typ], r, &cc)
			return t, s, err
		}
		if c.RopeTheta, c.RopeScaling, err = read("full_attention", gemma3GlobalTheta); err != nil {
			return err
		}
		var local *RopeScaling
		if c.RopeLocalTheta, local, err = read("sliding_attention", gemma3LocalTheta); err != nil {
			return err
		}
		if local != nil {
			return fmt.Errorf("config: rope_parameters.sliding_attention.rope_type = %q is not implemented (the sliding layers' RoPE is unscaled)", local.Type)
		}
		return nil
	}
	if c.RopeTheta, err = ropeTheta(r); err != nil {
		if r.RopeTheta != nil || !isNull(r.RopeParameters) {
			return err
		}
		c.RopeTheta = gemma3GlobalTheta // Gemma3TextConfig's default
	}
	if c.RopeLocalTheta, err = theta("rope_local_base_freq", g.RopeLocalBaseFreq, gemma3LocalTheta); err != nil {
		return err
	}
	c.RopeScaling, err = parseRopeScaling(r, c)
	return err
}

// LayerRope is layer i's RoPE base and scaling: Gemma 3's sliding layers take their own base,
// unscaled; every other layer (and every Gemma 2 layer) the model's.
func (c *Config) LayerRope(i int) (float32, *RopeScaling) {
	if c.RopeLocalTheta != 0 && c.LayerWindow(i) > 0 {
		return c.RopeLocalTheta, nil
	}
	return c.RopeTheta, c.RopeScaling
}

// AttnScale is the attention's score scale: query_pre_attn_scalar^-0.5 where the config gives
// one (Gemma), else head_dim^-0.5.
func (c *Config) AttnScale() float32 {
	if c.AttnScalar > 0 {
		return float32(1 / math.Sqrt(float64(c.AttnScalar)))
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// embedScale is the embedding's multiplier as the model applies it: EmbedScale rounded to the
// storage dtype (transformers' embed_scale.to(weight dtype)), or 1.
func (c *Config) embedScale() float32 {
	if c.EmbedScale == 0 {
		return 1
	}
	return tensor.Round(c.StorageDType(), c.EmbedScale)
}
