package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// RopeScaling is a RoPE scaling recipe turned into what the rope kernel takes
// (backend.RoPEConfig): a divisor of each pair's inverse frequency, LongRoPE's second table
// and the position it takes over from, and the factor on the rotated pairs. The tables are
// computed here in float64 from the config, as transformers' modeling_rope_utils defines them,
// and rounded to fp32 once (the kernel's input; it forms the quotient in double).
type RopeScaling struct {
	Type            string    // "linear", "llama3", "yarn" or "longrope"
	Divisor         []float32 // [RopeDim/2]: inv_freq_i = theta^(-2i/RopeDim) / Divisor[i]
	Long            []float32 // longrope: the long factors' table, else nil
	LongFrom        int       // longrope: positions >= LongFrom use Long (transformers: seq_len > original)
	AttentionFactor float32   // multiplies cos and sin (1: none)
	// Original is original_max_position_embeddings, the pretraining context the recipe extends.
	Original int
	Factor   float64 // the recipe's context factor (given, or max_position_embeddings / Original)
}

// PositionLimit is the longest sequence the model serves and where that limit comes from:
// max_position_embeddings, except for YaRN, whose recipe extends the original context by its
// factor without always raising max_position_embeddings (Qwen2.5's YaRN: 32768 and factor 4
// serve 131072 positions, as vLLM derives them).
func (c *Config) PositionLimit() (int, string) {
	if s := c.RopeScaling; s != nil && s.Type == "yarn" {
		if v := s.Factor * float64(s.Original); v > float64(c.MaxPositions) {
			return int(min(v, 1<<30)), fmt.Sprintf("YaRN: factor %g x original_max_position_embeddings %d", s.Factor, s.Original)
		}
	}
	return c.MaxPositions, "max_position_embeddings"
}

// InvFreq is pair i's inverse frequency for a token at pos, in float64, as the kernels
// compute it: theta^(-2i/rotary) / divisor. scaling may be nil (plain RoPE).
func InvFreq(theta float32, rotary, i int, scaling *RopeScaling, pos int) float64 {
	f := math.Pow(float64(theta), -float64(2*i)/float64(rotary))
	if scaling == nil {
		return f
	}
	div := scaling.Divisor
	if scaling.Long != nil && pos >= scaling.LongFrom {
		div = scaling.Long
	}
	return f / float64(div[i])
}

// ropeParams is the union of transformers' RoPE parameter keys of the types implemented here.
// Every key of the dict must be known (parseRopeScaling): a recipe the engine half-reads is a
// wrong forward.
type ropeParams struct {
	RopeType       *string    `json:"rope_type"`
	Type           *string    `json:"type"` // the hub's older spelling of rope_type
	Theta          *float64   `json:"rope_theta"`
	Partial        *float64   `json:"partial_rotary_factor"`
	Factor         *float64   `json:"factor"`
	Original       *int       `json:"original_max_position_embeddings"`
	LowFreqFactor  *float64   `json:"low_freq_factor"`
	HighFreqFactor *float64   `json:"high_freq_factor"`
	AttnFactor     *float64   `json:"attention_factor"`
	BetaFast       *float64   `json:"beta_fast"`
	BetaSlow       *float64   `json:"beta_slow"`
	Mscale         *float64   `json:"mscale"`
	MscaleAllDim   *float64   `json:"mscale_all_dim"`
	Truncate       *bool      `json:"truncate"`
	ShortFactor    []*float64 `json:"short_factor"`
	LongFactor     []*float64 `json:"long_factor"`
}

// keysOf lists which keys each rope_type accepts besides rope_type/type, rope_theta and
// partial_rotary_factor (transformers' _validate_*_rope_parameters).
var ropeTypeKeys = map[string][]string{
	"default":  {},
	"linear":   {"factor"},
	"llama3":   {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
	"yarn":     {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"},
	"longrope": {"factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor"},
}

// ropeSource is where the RoPE parameters came from: rope_scaling (the hub's key, which
// transformers prefers when both are present) or rope_parameters (what transformers 5 saves).
func ropeSource(r *rawConfig) (string, json.RawMessage) {
	if !isNull(r.RopeScaling) {
		return "rope_scaling", r.RopeScaling
	}
	return "rope_parameters", r.RopeParameters
}

// parseRopeScaling reads the scaling recipe of c (Hidden, Heads, HeadDim, MaxPositions and
// RopeDim set) from rope_scaling or rope_parameters; nil for the default RoPE. Types other
// than llama3, yarn and longrope, unknown keys and unusable values are errors naming the key.
func parseRopeScaling(r *rawConfig, c *Config) (*RopeScaling, error) {
	key, raw := ropeSource(r)
	if isNull(raw) {
		return nil, nil
	}
	return parseRopeDict(key, raw, r, c)
}

// parseRopeDict reads one RoPE parameter dict (raw, named key in errors) for c's RopeTheta and
// RopeDim: nil for the default RoPE.
func parseRopeDict(key string, raw json.RawMessage, r *rawConfig, c *Config) (*RopeScaling, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("config: %s: %w", key, err)
	}
	var p ropeParams
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("config: %s: %w", key, err)
	}
	typ := "default"
	switch {
	case p.RopeType != nil && p.Type != nil && *p.RopeType != *p.Type:
		return nil, fmt.Errorf("config: %s.rope_type = %q disagrees with %s.type = %q", key, *p.RopeType, key, *p.Type)
	case p.RopeType != nil:
		typ = *p.RopeType
	case p.Type != nil:
		typ = *p.Type
	}
	// Phi3Config reads its older spellings "su" and "yarn" as LongRoPE (and only default and
	// longrope are Phi-3 types there).
	if c.Family == "phi3" && (typ == "su" || typ == "yarn") {
		typ = "longrope"
	}
	allowed, ok := ropeTypeKeys[typ]
	if !ok {
		return nil, fmt.Errorf("config: %s.rope_type = %q is not implemented (default, linear, llama3, yarn, longrope)", key, typ)
	}
	for k := range keys {
		switch {
		case k == "rope_type" || k == "type" || k == "rope_theta" || k == "partial_rotary_factor":
		case slices.Contains(allowed, k):
		default:
			return nil, fmt.Errorf("config: %s.%s is not implemented for rope_type %q", key, k, typ)
		}
	}
	if p.Partial != nil && *p.Partial != 1 {
		return nil, fmt.Errorf("config: %s.partial_rotary_factor = %v is not implemented", key, *p.Partial)
	}
	if typ == "default" {
		return nil, nil
	}
	bad := func(name string, v any, why string) error {
		return fmt.Errorf("config: %s.%s = %v: %s", key, name, v, why)
	}
	// original_max_position_embeddings: a top-level key wins (Phi-3 keeps it there), then the
	// dict's, then max_position_embeddings (transformers' standardize_rope_params).
	s := &RopeScaling{Type: typ, Original: c.MaxPositions, AttentionFactor: 1}
	switch {
	case r.OriginalMaxPositions != nil:
		s.Original = *r.OriginalMaxPositions
		if s.Original <= 0 {
			return nil, fmt.Errorf("config: original_max_position_embeddings = %d: must be positive", s.Original)
		}
	case p.Original != nil:
		s.Original = *p.Original
		if s.Original <= 0 {
			return nil, bad("original_max_position_embeddings", s.Original, "must be positive")
		}
	}
	finitePos := func(name string, v *float64) error {
		if v != nil && (!(*v > 0) || math.IsInf(*v, 0)) {
			return bad(name, *v, "must be finite and > 0")
		}
		return nil
	}
	for name, v := range map[string]*float64{"factor": p.Factor, "low_freq_factor": p.LowFreqFactor,
		"high_freq_factor": p.HighFreqFactor, "attention_factor": p.AttnFactor, "beta_fast": p.BetaFast,
		"beta_slow": p.BetaSlow, "mscale": p.Mscale, "mscale_all_dim": p.MscaleAllDim} {
		if err := finitePos(name, v); err != nil {
			return nil, err
		}
	}
	half := c.RopeDim / 2
	base := func(i int) float64 { return math.Pow(float64(c.RopeTheta), -float64(2*i)/float64(c.RopeDim)) }
	// factor: given, or the context ratio (yarn and longrope derive it so when it is absent).
	factor := float64(c.MaxPositions) / float64(s.Original)
	if p.Factor != nil {
		factor = *p.Factor
	}
	s.Factor = factor
	switch typ {
	case "linear":
		// transformers' _compute_linear_scaling_rope_parameters: every inverse frequency / factor
		if p.Factor == nil {
			return nil, fmt.Errorf("config: %s.factor is missing (rope_type linear needs it)", key)
		}
		s.Divisor = make([]float32, half)
		for i := range s.Divisor {
			s.Divisor[i] = float32(factor)
		}
	case "llama3":
		for name, v := range map[string]*float64{"factor": p.Factor, "low_freq_factor": p.LowFreqFactor, "high_freq_factor": p.HighFreqFactor} {
			if v == nil {
				return nil, fmt.Errorf("config: %s.%s is missing (rope_type llama3 needs it)", key, name)
			}
		}
		if p.Original == nil && r.OriginalMaxPositions == nil {
			return nil, fmt.Errorf("config: %s.original_max_position_embeddings is missing (rope_type llama3 needs it)", key)
		}
		if *p.HighFreqFactor <= *p.LowFreqFactor {
			return nil, bad("high_freq_factor", *p.HighFreqFactor, fmt.Sprintf("must exceed low_freq_factor (%v)", *p.LowFreqFactor))
		}
		s.Divisor = llama3Divisors(half, base, factor, *p.LowFreqFactor, *p.HighFreqFactor, float64(s.Original))
	case "yarn":
		if p.Factor == nil && p.Original == nil && r.OriginalMaxPositions == nil {
			return nil, fmt.Errorf("config: %s.factor is missing (rope_type yarn needs it)", key)
		}
		betaFast, betaSlow := 32.0, 1.0
		if p.BetaFast != nil {
			betaFast = *p.BetaFast
		}
		if p.BetaSlow != nil {
			betaSlow = *p.BetaSlow
		}
		truncate := p.Truncate == nil || *p.Truncate
		s.Divisor = yarnDivisors(c.RopeDim, float64(c.RopeTheta), factor, betaFast, betaSlow, float64(s.Original), truncate)
		switch {
		case p.AttnFactor != nil:
			s.AttentionFactor = float32(*p.AttnFactor)
		case p.Mscale != nil && p.MscaleAllDim != nil:
			s.AttentionFactor = float32(yarnMscale(factor, *p.Mscale) / yarnMscale(factor, *p.MscaleAllDim))
		default:
			s.AttentionFactor = float32(yarnMscale(factor, 1))
		}
	case "longrope":
		var err error
		if s.Divisor, err = ropeFactors(key, "short_factor", p.ShortFactor, half); err != nil {
			return nil, err
		}
		if s.Long, err = ropeFactors(key, "long_factor", p.LongFactor, half); err != nil {
			return nil, err
		}
		s.LongFrom = s.Original
		switch {
		case p.AttnFactor != nil:
			s.AttentionFactor = float32(*p.AttnFactor)
		case factor <= 1:
			s.AttentionFactor = 1
		default:
			s.AttentionFactor = float32(math.Sqrt(1 + math.Log(factor)/math.Log(float64(s.Original))))
		}
	}
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, bad("factor", factor, "must be finite and > 0")
	}
	if a := s.AttentionFactor; !(a > 0) || math.IsInf(float64(a), 0) {
		return nil, fmt.Errorf("config: %s (rope_type %s): the attention factor is %v in fp32: must be finite and > 0", key, typ, a)
	}
	for i, d := range s.Divisor {
		if !(d > 0) || math.IsInf(float64(d), 0) {
			return nil, fmt.Errorf("config: %s (rope_type %s): pair %d's divisor is %v: the recipe gives no usable frequency", key, typ, i, d)
		}
	}
	return s, nil
}

// llama3Divisors: Llama 3.1's recipe. Pairs whose wavelength is shorter than
// original/high_freq_factor keep their frequency, longer than original/low_freq_factor are
// divided by factor, and in between blend the two smoothly.
func llama3Divisors(half int, base func(int) float64, factor, low, high, original float64) []float32 {
	div := make([]float32, half)
	lowWavelen, highWavelen := original/low, original/high
	for i := range div {
		wavelen := 2 * math.Pi / base(i)
		switch {
		case wavelen < highWavelen:
			div[i] = 1
		case wavelen > lowWavelen:
			div[i] = float32(factor)
		default:
			s := (original/wavelen - low) / (high - low)
			div[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	return div
}

// yarnDivisors: YaRN's ramp between extrapolation (pairs that rotate more than beta_fast
// times over the original context keep their frequency) and interpolation (fewer than
// beta_slow times: divided by factor), over the dims transformers' find_correction_range gives.
func yarnDivisors(dim int, theta, factor, betaFast, betaSlow, original float64, truncate bool) []float32 {
	correction := func(rotations float64) float64 {
		return float64(dim) * math.Log(original/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := correction(betaFast), correction(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001 // transformers' guard against a zero-width ramp
	}
	div := make([]float32, dim/2)
	for i := range div {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extrapolation := 1 - ramp
		div[i] = float32(1 / ((1-extrapolation)/factor + extrapolation))
	}
	return div
}

// yarnMscale is YaRN's attention temperature 0.1·mscale·ln(scale) + 1 (1 for scale <= 1).
func yarnMscale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

// ropeFactors checks a LongRoPE factor list: one finite positive value per rotated pair,
// rounded to fp32 as transformers holds them.
func ropeFactors(key, name string, vals []*float64, half int) ([]float32, error) {
	if vals == nil {
		return nil, fmt.Errorf("config: %s.%s is missing (rope_type longrope needs it)", key, name)
	}
	if len(vals) != half {
		return nil, fmt.Errorf("config: %s.%s has %d values: must have one per rotated pair (%d)", key, name, len(vals), half)
	}
	out := make([]float32, half)
	for i, v := range vals {
		if v == nil || !(*v > 0) || math.IsInf(*v, 0) || float32(*v) == 0 {
			s := "null"
			if v != nil {
				s = fmt.Sprint(*v)
			}
			return nil, fmt.Errorf("config: %s.%s[%d] = %s: must be finite and > 0", key, name, i, s)
		}
		out[i] = float32(*v)
	}
	return out, nil
}

// String names the recipe for reports: "longrope (original 4096, attention factor 1.19, long
// factors from position 4096)".
func (s *RopeScaling) String() string {
	if s == nil {
		return "default"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (original %d, attention factor %g", s.Type, s.Original, s.AttentionFactor)
	if s.Long != nil {
		fmt.Fprintf(&b, ", long factors from position %d", s.LongFrom)
	}
	b.WriteString(")")
	return b.String()
}
