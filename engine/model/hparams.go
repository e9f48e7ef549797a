package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/golden"
)

// HParam is one hyper-parameter as the loader derived it from config.json, under the name the
// model sets record it by (params.hparams, docs/golden-format.md). Value is an int, a float32
// (what the kernels take), a string, a bool, a FreqList, a []string, or nil where the family has no such
// parameter.
type HParam struct {
	Name  string
	Value any
}

// HParams lists every hyper-parameter the forward depends on, as c holds it. Taps alone do not
// pin them: at activations of rms ~1 an RMSNorm eps of 1e-6 instead of 1e-5 moves no tap out
// of tolerance, so each is compared by name with the reference's own (CheckHParams).
func (c *Config) HParams() []HParam {
	rope := c.RopeTheta != 0
	ifRope := func(v any) any {
		if rope {
			return v
		}
		return nil
	}
	var partial any
	if rope && c.HeadDim > 0 {
		partial = float32(c.RopeDim) / float32(c.HeadDim)
	}
	var window any
	if c.SlidingWindow > 0 {
		window = c.SlidingWindow
	}
	// RoPE scaling: the inverse frequencies themselves, not the recipe's keys, so a misread
	// recipe (a band edge, a ramp, the factor tables) is named whatever key it came from.
	var ropeType, invFreq, longInvFreq, factor, longFrom any
	if rope {
		ropeType, factor = "default", float32(1)
		invFreq = c.invFreqs(0)
		if s := c.RopeScaling; s != nil {
			ropeType, factor = s.Type, s.AttentionFactor
			if s.Long != nil {
				longInvFreq, longFrom = c.invFreqs(s.LongFrom), s.LongFrom
			}
		}
	}
	hp := []HParam{
		{"hidden_size", c.Hidden},
		{"num_layers", c.Layers},
		{"num_heads", c.Heads},
		{"num_kv_heads", c.KVHeads},
		{"head_dim", c.HeadDim},
		{"intermediate_size", c.Intermediate},
		{"vocab_size", c.Vocab},
		{"max_positions", c.MaxPositions},
		{"norm_eps", c.NormEps},
		{"rope_theta", ifRope(c.RopeTheta)},
		{"rope_type", ropeType},
		{"rotary_dim", ifRope(c.RopeDim)},
		{"partial_rotary_factor", partial},
		{"tied_head", c.TiedHead},
		{"activation", c.Activation},
		{"sliding_window", window},
		{"rope_inv_freq", invFreq},
		{"rope_long_inv_freq", longInvFreq},
		{"rope_attention_factor", factor},
		{"rope_long_from", longFrom},
	}
	if c.Experts > 0 {
		// Recorded only for mixture-of-experts sets, so the dense families' sets stay as they
		// are: the experts, the top k, and whether the chosen weights are renormalised.
		hp = append(hp, HParam{"num_experts", c.Experts}, HParam{"num_experts_per_tok", c.ExpertsPerToken},
			HParam{"norm_topk_prob", c.NormTopKProb})
		if c.SharedIntermediate > 0 {
			hp = append(hp, HParam{"shared_expert_intermediate_size", c.SharedIntermediate})
		}
	}
	if c.Family == "gemma3" || c.Family == "gemma2" {
		// Recorded only for Gemma sets: Gemma 3's sliding layers' RoPE (the entries above are the
		// global layers'; Gemma 2 has one RoPE), the scores' scalar, the embedding's scale, each
		// layer's type, and Gemma 2's soft caps (null for none).
		types := make([]string, c.Layers)
		for i := range types {
			types[i] = "full_attention"
			if c.LayerWindow(i) > 0 {
				types[i] = "sliding_attention"
			}
		}
		if c.Family == "gemma3" {
			local := make(FreqList, c.RopeDim/2)
			for i := range local {
				local[i] = InvFreq(c.RopeLocalTheta, c.RopeDim, i, nil, 0)
			}
			hp = append(hp, HParam{"rope_local_theta", c.RopeLocalTheta}, HParam{"rope_local_inv_freq", local})
		}
		hp = append(hp, HParam{"query_pre_attn_scalar", c.AttnScalar}, HParam{"embed_scale", c.EmbedScale},
			HParam{"layer_types", types})
		if c.Family == "gemma2" {
			hp = append(hp, HParam{"attn_logit_softcapping", capOrNil(c.AttnSoftcap)},
				HParam{"final_logit_softcapping", capOrNil(c.FinalSoftcap)})
		}
	}
	return hp
}

// FreqList is a list of inverse frequencies, equal to the reference's to FreqListRtol: the
// reference computes them in fp32 (a few ulps from its pow and blend), the loader in float64,
// and a misread recipe moves a pair by far more (a band edge or ramp step by >= 1e-3).
type FreqList []float64

// FreqListRtol is the relative tolerance of a FreqList comparison.
const FreqListRtol = 1e-5

// invFreqs is every rotated pair's inverse frequency for a token at pos.
func (c *Config) invFreqs(pos int) FreqList {
	f := make(FreqList, c.RopeDim/2)
	for i := range f {
		f[i] = InvFreq(c.RopeTheta, c.RopeDim, i, c.RopeScaling, pos)
	}
	return f
}

// CheckHParams compares the reference's hyper-parameters recorded in the set (p.HParams) with
// those of m.Cfg, one by one by name. Every mismatch is named with both values; a name on one
// side only is an error too (a set from another generator version, or an engine that checks
// less than the reference records).
func CheckHParams(m *Model, set *golden.Set, p *SetParams) error {
	if p.HParams == nil {
		return errNoHParams(set)
	}
	var errs []string
	known := map[string]bool{}
	for _, h := range m.Cfg.HParams() {
		known[h.Name] = true
		raw, ok := p.HParams[h.Name]
		if !ok {
			errs = append(errs, fmt.Sprintf("hyper-parameter %s: not recorded by the reference (regenerate the set)", h.Name))
			continue
		}
		if fl, ok := h.Value.(FreqList); ok {
			if d := fl.diff(raw); d != "" {
				errs = append(errs, fmt.Sprintf("hyper-parameter %s: %s", h.Name, d))
			}
			continue
		}
		if !sameHParam(raw, h.Value) {
			errs = append(errs, fmt.Sprintf("hyper-parameter %s: the reference (transformers) has %s, the loader derived %s",
				h.Name, bytes.TrimSpace(raw), formatHParam(h.Value)))
		}
	}
	var unknown []string
	for name := range p.HParams {
		if !known[name] {
			unknown = append(unknown, fmt.Sprintf("hyper-parameter %s: recorded by the reference, unknown to the loader (update engine/model/hparams.go)", name))
		}
	}
	slices.Sort(unknown)
	if errs = append(errs, unknown...); len(errs) > 0 {
		return fmt.Errorf("%s: %s", set.ID(), strings.Join(errs, "; "))
	}
	return nil
}

// sameHParam reports whether the recorded JSON value equals the loader's got, of the same
// kind: a number for an int or a float32, null for nil.
func sameHParam(raw json.RawMessage, got any) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		return false
	}
	n, isNum := want.(json.Number)
	switch g := got.(type) {
	case nil:
		return want == nil
	case int:
		v, err := n.Int64()
		return isNum && err == nil && v == int64(g)
	case float32:
		// The kernels take the value as float32: compare there, so 1e-05 (a float64 in JSON)
		// equals the loader's float32(1e-05), and 1e-06 does not.
		v, err := n.Float64()
		return isNum && err == nil && float32(v) == g
	case string, bool:
		return want == got
	case []string:
		list, ok := want.([]any)
		if !ok || len(list) != len(g) {
			return false
		}
		for i, v := range list {
			if v != g[i] {
				return false
			}
		}
		return true
	case FreqList:
		return g.diff(raw) == ""
	}
	return false
}

// diff compares the recorded JSON list with f: "" when equal to FreqListRtol, else what
// differs first (the length, or the first pair with both values).
func (f FreqList) diff(raw json.RawMessage) string {
	var want []float64
	if err := json.Unmarshal(raw, &want); err != nil {
		return fmt.Sprintf("the reference (transformers) has %s, the loader derived %d inverse frequencies", bytes.TrimSpace(raw), len(f))
	}
	if len(want) != len(f) {
		return fmt.Sprintf("the reference (transformers) has %d inverse frequencies, the loader derived %d", len(want), len(f))
	}
	for i, w := range want {
		if !(math.Abs(w-f[i]) <= FreqListRtol*math.Abs(f[i])) {
			return fmt.Sprintf("pair %d: the reference (transformers) has %.9g, the loader derived %.9g (relative tolerance %g)", i, w, f[i], FreqListRtol)
		}
	}
	return ""
}

func formatHParam(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case string:
		return strconv.Quote(x)
	case FreqList:
		parts := make([]string, len(x))
		for i, v := range x {
			parts[i] = strconv.FormatFloat(v, 'g', 8, 64)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// errNoHParams is the error for a set generated before params.hparams existed.
func errNoHParams(set *golden.Set) error {
	return fmt.Errorf("%s: params has no hparams (the reference's hyper-parameters): the set predates them; regenerate it (make golden for the committed sets, make golden-full or gen-golden models --checkpoint for the others)", set.ID())
}

// capOrNil is a soft cap as the reference's config holds it: the value, or null for none.
func capOrNil(v float32) any {
	if v == 0 {
		return nil
	}
	return v
}
