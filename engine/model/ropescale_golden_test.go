package model_test

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// The loader's RoPE-scaling tables for the published configs equal the divisor tables of the
// committed rope cases, which the reference script computes in fp64 from the same configs and
// checks against transformers' own inverse frequencies (tools/gen-golden/common/rope_scaling.py): the
// engine's recipe is the reference's, pair by pair, to one fp32 ulp.
func TestRopeScalingMatchesTheReferenceTables(t *testing.T) {
	llama := func(hidden, factor int) string {
		return fmt.Sprintf(`{"model_type": "llama", "hidden_size": %d, "num_hidden_layers": 1, "num_attention_heads": 32,
		 "num_key_value_heads": 8, "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 131072,
		 "rope_theta": 500000.0, "rope_scaling": {"factor": %d.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
		 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}`, hidden, factor)
	}
	qwenYarn := `{"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 1, "num_attention_heads": 28,
	 "num_key_value_heads": 4, "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 32768,
	 "rope_theta": 1000000.0, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}}`
	for _, tc := range []struct{ set, config string }{
		{"llama3.1-8b-llama3_pos131064-131071", llama(4096, 8)},
		{"llama3.2-1b-llama3_ragged-pos0-to-131071", llama(2048, 32)},
		{"qwen2.5-7b-yarn4_pos131064-131071", qwenYarn},
		{"outliers-qwen2.5-7b-yarn4-d128_pos131068-131071", qwenYarn},
	} {
		set, want := ropeCase(t, tc.set)
		c, err := model.ParseConfig([]byte(tc.config))
		if err != nil {
			t.Fatal(err)
		}
		checkTables(t, tc.set, c, set, want)
	}
	// Phi-3.5-mini's LongRoPE: the factor lists are the config's (the case's tables), the
	// attention factor and the switch derive from the context lengths.
	set, want := ropeCase(t, "phi3.5-mini-longrope_switch-ragged")
	short, long := tableOf(t, set, "freq_divisor"), tableOf(t, set, "long_divisor")
	list := func(v []float32) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	c, err := model.ParseConfig([]byte(fmt.Sprintf(`{"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 1,
	 "num_attention_heads": 32, "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 131072,
	 "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
	 "rope_scaling": {"rope_type": "longrope", "short_factor": %s, "long_factor": %s}}`, list(short), list(long))))
	if err != nil {
		t.Fatal(err)
	}
	checkTables(t, "phi3.5-mini-longrope_switch-ragged", c, set, want)
}

type ropeCaseParams struct {
	FreqBase        float32  `json:"freq_base"`
	RopeDim         int      `json:"rope_dim"`
	HeadDim         int      `json:"head_dim"`
	AttentionFactor *float32 `json:"attention_factor,omitempty"`
	LongFrom        *int     `json:"long_from,omitempty"`
}

func ropeCase(t *testing.T, name string) (*golden.Set, ropeCaseParams) {
	t.Helper()
	set, err := golden.Load(filepath.Join("..", "..", "golden", "kernels", "rope", name))
	if err != nil {
		t.Fatal(err)
	}
	var p ropeCaseParams
	if err := set.DecodeParams(&p); err != nil {
		t.Fatal(err)
	}
	return set, p
}

func tableOf(t *testing.T, set *golden.Set, name string) []float32 {
	t.Helper()
	x, err := set.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	return x.F32
}

func checkTables(t *testing.T, name string, c *model.Config, set *golden.Set, want ropeCaseParams) {
	t.Helper()
	s := c.RopeScaling
	if s == nil || c.RopeTheta != want.FreqBase || c.RopeDim != want.RopeDim {
		t.Fatalf("%s: config parsed to %+v", name, c)
	}
	if want.AttentionFactor == nil || s.AttentionFactor != *want.AttentionFactor {
		t.Errorf("%s: attention factor %v, the case has %v", name, s.AttentionFactor, want.AttentionFactor)
	}
	if (want.LongFrom == nil) != (s.Long == nil) || (want.LongFrom != nil && *want.LongFrom != s.LongFrom) {
		t.Errorf("%s: long table from %d (%v), the case: %v", name, s.LongFrom, s.Long != nil, want.LongFrom)
	}
	tables := map[string][]float32{"freq_divisor": s.Divisor}
	if s.Long != nil {
		tables["long_divisor"] = s.Long
	}
	for input, got := range tables {
		ref := tableOf(t, set, input)
		if len(ref) != len(got) {
			t.Fatalf("%s: %s has %d pairs, the loader %d", name, input, len(ref), len(got))
		}
		var bad []string
		for i := range ref {
			if ulps := math.Abs(float64(got[i]-ref[i])) / ulp32(ref[i]); ulps > 1 {
				bad = append(bad, fmt.Sprintf("pair %d: %v, the reference %v", i, got[i], ref[i]))
			}
		}
		if bad != nil {
			t.Errorf("%s: %s: %s", name, input, strings.Join(bad, "; "))
		}
	}
}

func ulp32(v float32) float64 {
	return float64(math.Nextafter32(v, float32(math.Inf(1))) - v)
}
