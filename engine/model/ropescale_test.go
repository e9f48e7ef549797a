package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// llamaCfg is a Llama config with the rope dict given by the caller (%s).
const llamaCfg = `{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
 "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "rms_norm_eps": 1e-5,
 "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": false%s}`

func parseWith(t *testing.T, extra string) (*Config, error) {
	t.Helper()
	return ParseConfig([]byte(fmt.Sprintf(llamaCfg, extra)))
}

func TestRopeScalingRefusals(t *testing.T) {
	for extra, want := range map[string]string{
		`, "rope_scaling": {"rope_type": "dynamic", "factor": 2}`:                                                                                        `rope_scaling.rope_type = "dynamic" is not implemented`,
		`, "rope_scaling": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 4, "original_max_position_embeddings": 8192}`:                        "rope_scaling.low_freq_factor is missing",
		`, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 8192}`:  "high_freq_factor = 1: must exceed low_freq_factor (4)",
		`, "rope_scaling": {"rope_type": "llama3", "factor": -8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}`: "rope_scaling.factor = -8: must be finite and > 0",
		`, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 0}`:     "original_max_position_embeddings = 0: must be positive",
		`, "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768, "short_factor": [1]}`:                           `rope_scaling.short_factor is not implemented for rope_type "yarn"`,
		`, "rope_scaling": {"rope_type": "yarn", "type": "llama3", "factor": 4}`:                                                                         `rope_scaling.rope_type = "yarn" disagrees with rope_scaling.type = "llama3"`,
		`, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 2], "long_factor": [1, 2], "original_max_position_embeddings": 4096}`:           "rope_scaling.short_factor has 2 values: must have one per rotated pair (64)",
		`, "rope_scaling": {"rope_type": "longrope", "long_factor": [1], "original_max_position_embeddings": 4096}`:                                      "rope_scaling.short_factor is missing",
		`, "rope_scaling": {"rope_type": "yarn", "factor": 4}, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "yarn"}`:                         "rope_parameters.rope_type beside rope_scaling",
		`, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "dynamic", "factor": 2}`:                                                             `rope_parameters.rope_type = "dynamic" is not implemented`,
		`, "rope_scaling": {"rope_type": "yarn", "factor": "four"}`:                                                                                      "rope_scaling",
		`, "attention_bias": true`: "attention_bias = true is not implemented for llama",
		`, "mlp_bias": true`:       "mlp_bias = true is not implemented for llama",
	} {
		_, err := parseWith(t, extra)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", extra, err, want)
		}
	}
	longrope := func(i int, v string) string {
		f := make([]string, 64)
		for j := range f {
			f[j] = "1.5"
		}
		f[i] = v
		return fmt.Sprintf(`, "rope_scaling": {"rope_type": "longrope", "short_factor": [%s], "long_factor": [%s], "original_max_position_embeddings": 4096}`,
			strings.Join(f, ","), strings.Join(f, ","))
	}
	for v, want := range map[string]string{"0": "short_factor[7] = 0: must be finite and > 0", "-2": "short_factor[7] = -2", "null": "short_factor[7] = null", "1e-60": "short_factor[7] = 1e-60"} {
		if _, err := parseWith(t, longrope(7, v)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("short_factor[7] = %s: error %v, want %q", v, err, want)
		}
	}
	if _, err := ParseConfig([]byte(`{"model_type": "gpt2", "n_embd": 96, "n_layer": 2, "n_head": 3, "n_positions": 64, "vocab_size": 503, "rope_scaling": {"rope_type": "yarn"}}`)); err == nil || !strings.Contains(err.Error(), "gpt2 has no RoPE") {
		t.Errorf("gpt2 with rope_scaling: %v", err)
	}
}

// Llama 3's bands: the fastest pairs keep their frequency, the slowest are divided by the
// factor, and the blend between is monotone and continuous (no pair jumps at a band edge).
func TestLlama3Divisors(t *testing.T) {
	c, err := parseWith(t, `, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`)
	if err != nil {
		t.Fatal(err)
	}
	s := c.RopeScaling
	if s == nil || s.Type != "llama3" || len(s.Divisor) != 64 || s.Long != nil || s.AttentionFactor != 1 || s.Original != 8192 {
		t.Fatalf("%+v", s)
	}
	if s.Divisor[0] != 1 || s.Divisor[63] != 8 {
		t.Errorf("first and last divisors %v %v, want 1 and 8", s.Divisor[0], s.Divisor[63])
	}
	medium := 0
	for i := 1; i < 64; i++ {
		if s.Divisor[i] < s.Divisor[i-1] {
			t.Errorf("divisor %d = %v < divisor %d = %v", i, s.Divisor[i], i-1, s.Divisor[i-1])
		}
		if s.Divisor[i] > 1 && s.Divisor[i] < 8 {
			medium++
		}
	}
	if medium == 0 {
		t.Error("no pair in the smoothed band")
	}
	// Continuity at the edges: the blend's weight at wavelength original/low is 0 (divisor =
	// factor), at original/high 1 (divisor 1).
	for _, edge := range []struct{ wavelen, want float64 }{{8192, 8}, {2048, 1}} {
		base := func(int) float64 { return 2 * math.Pi / edge.wavelen }
		if got := llama3Divisors(1, base, 8, 1, 4, 8192)[0]; math.Abs(float64(got)-edge.want) > 1e-6 {
			t.Errorf("wavelength %v: divisor %v, want %v", edge.wavelen, got, edge.want)
		}
	}
}

// YaRN: a ramp from 1 (extrapolated pairs) to the factor (interpolated), and the attention
// temperature 0.1 ln(factor) + 1; Qwen2.5's recipe serves factor x original positions.
func TestYarnDivisorsAndLimit(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 2, "num_attention_heads": 28,
	 "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
	 "rope_theta": 1000000.0, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.RopeScaling
	if s == nil || s.Type != "yarn" || len(s.Divisor) != 64 || s.AttentionFactor != float32(0.1*math.Log(4)+1) {
		t.Fatalf("%+v", s)
	}
	if s.Divisor[0] != 1 || s.Divisor[63] != 4 {
		t.Errorf("first and last divisors %v %v, want 1 and 4", s.Divisor[0], s.Divisor[63])
	}
	for i := 1; i < 64; i++ {
		if s.Divisor[i] < s.Divisor[i-1] {
			t.Errorf("divisor %d = %v < divisor %d = %v", i, s.Divisor[i], i-1, s.Divisor[i-1])
		}
	}
	if n, why := c.PositionLimit(); n != 131072 || !strings.Contains(why, "YaRN") {
		t.Errorf("position limit %d (%s), want 131072", n, why)
	}
	if n, _ := (&Config{MaxPositions: 4096}).PositionLimit(); n != 4096 {
		t.Errorf("unscaled limit %d", n)
	}
}

// LongRoPE: the two factor lists as fp32, the switch at the original context, the attention
// factor from the context ratio; InvFreq picks the table by position.
func TestLongRopeTables(t *testing.T) {
	short, long := make([]string, 64), make([]string, 64)
	for i := range short {
		short[i], long[i] = fmt.Sprint(1+0.01*float64(i)), fmt.Sprint(1+float64(i))
	}
	c, err := ParseConfig([]byte(fmt.Sprintf(`{"model_type": "phi3", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
	 "intermediate_size": 8192, "vocab_size": 32064, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
	 "rope_theta": 10000.0, "rope_scaling": {"rope_type": "longrope", "short_factor": [%s], "long_factor": [%s]}}`,
		strings.Join(short, ","), strings.Join(long, ","))))
	if err != nil {
		t.Fatal(err)
	}
	s := c.RopeScaling
	want := float32(math.Sqrt(1 + math.Log(32)/math.Log(4096)))
	if s == nil || s.LongFrom != 4096 || s.Original != 4096 || s.AttentionFactor != want || s.Divisor[3] != float32(1.03) || s.Long[3] != 4 {
		t.Fatalf("%+v", s)
	}
	plain := InvFreq(1e4, 128, 5, nil, 0)
	if got := InvFreq(1e4, 128, 5, s, 4095); got != plain/float64(float32(1.05)) {
		t.Errorf("position 4095: %v, want the short table's %v", got, plain/float64(float32(1.05)))
	}
	if got := InvFreq(1e4, 128, 5, s, 4096); got != plain/6 {
		t.Errorf("position 4096: %v, want the long table's %v", got, plain/6)
	}
	// The recorded hyper-parameters name both tables and the switch.
	hp := map[string]any{}
	for _, h := range c.HParams() {
		hp[h.Name] = h.Value
	}
	if hp["rope_type"] != "longrope" || hp["rope_long_from"] != 4096 || hp["rope_attention_factor"] != want ||
		len(hp["rope_inv_freq"].(FreqList)) != 64 || len(hp["rope_long_inv_freq"].(FreqList)) != 64 {
		t.Errorf("hparams %v", hp)
	}
}

// A FreqList equals the reference's within FreqListRtol and names the first pair that does not.
func TestFreqListDiff(t *testing.T) {
	f := FreqList{1, 0.5, 1e-4}
	raw := func(v ...float64) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	if d := f.diff(raw(1, 0.5*(1+5e-6), 1e-4*(1-5e-6))); d != "" {
		t.Errorf("within tolerance: %s", d)
	}
	if d := f.diff(raw(1, 0.5, 1e-4*(1+3e-5))); !strings.Contains(d, "pair 2") {
		t.Errorf("pair 2 off by 3e-5: %q", d)
	}
	if d := f.diff(raw(1, 0.5)); !strings.Contains(d, "2 inverse frequencies, the loader derived 3") {
		t.Errorf("length: %q", d)
	}
	if d := f.diff(json.RawMessage(`null`)); d == "" {
		t.Error("null accepted")
	}
}

// Phi3Config reads the older "su" and "yarn" spellings as LongRoPE, as transformers does.
func TestPhi3OlderLongRopeSpellings(t *testing.T) {
	for _, typ := range []string{"su", "yarn", "longrope"} {
		c, err := ParseConfig([]byte(fmt.Sprintf(`{"model_type": "phi3", "hidden_size": 8, "num_hidden_layers": 1,
		 "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 64,
		 "original_max_position_embeddings": 16, "rope_theta": 1e4,
		 "rope_scaling": {"type": %q, "short_factor": [1, 1.5], "long_factor": [2, 3]}}`, typ)))
		if err != nil || c.RopeScaling == nil || c.RopeScaling.Type != "longrope" || c.RopeScaling.LongFrom != 16 {
			t.Errorf("phi3 type %q: %+v %v", typ, c, err)
		}
	}
}
