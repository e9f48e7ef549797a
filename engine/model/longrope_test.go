package model_test

import (
	"slices"
	"testing"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// LongRoPE switches tables by the length a forward call covers, as transformers does
// (seq_len = max position + 1 > original): a prefill longer than phi3.5-tiny's original
// context (20) rotates every token with the long factors, position 0 included; one of 20
// tokens uses the short ones throughout. The committed set covers the decode-time switch
// (its step at position 20); this covers the prefill, which no set reaches.
func TestLongRopePrefillSwitchesForTheWholeCall(t *testing.T) {
	_, m, _ := loadSet(t, "phi3.5-tiny")
	s := m.Cfg.RopeScaling
	if s == nil || s.Long == nil || s.LongFrom != 20 {
		t.Fatalf("phi3.5-tiny's scaling: %+v", s)
	}
	be := cpu.New()
	for _, tc := range []struct {
		tokens int
		table  []float32
	}{{24, s.Long}, {20, s.Divisor}} {
		ids := make([]int32, tc.tokens)
		for i := range ids {
			ids[i] = int32(3 * i % m.Cfg.Vocab)
		}
		m.Reset()
		m.RequestTaps([]string{"layers.0.k", "layers.0.k_rope"})
		if _, err := m.Prefill(ids); err != nil {
			t.Fatal(err)
		}
		taps := m.Taps()
		k, got := taps["prefill.layers.0.k"], taps["prefill.layers.0.k_rope"]
		// The expected rotation: the CPU rope with the one table for every position.
		half := make([]float16.Float16, k.Len())
		for i, v := range k.F32 {
			half[i] = float16.Fromfloat32(v)
		}
		x, err := be.Upload(tensor.FromF16(k.Shape, half))
		if err != nil {
			t.Fatal(err)
		}
		pos := make([]int32, tc.tokens)
		for i := range pos {
			pos[i] = int32(i)
		}
		p, _ := be.Upload(tensor.FromI32([]int{tc.tokens}, pos))
		div, _ := be.Upload(tensor.FromF32([]int{len(tc.table)}, tc.table))
		out, _ := be.Alloc(tensor.F16, k.Shape...)
		cfg := backend.RoPEConfig{HeadDim: m.Cfg.HeadDim, RopeDim: m.Cfg.RopeDim, FreqBase: m.Cfg.RopeTheta,
			FreqDivisor: div, AttentionFactor: s.AttentionFactor}
		if err := be.RoPE(out, x, p, cfg); err != nil {
			t.Fatal(err)
		}
		want, err := be.Download(out)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(want.Float32(), got.F32) {
			t.Errorf("%d-token prefill: k_rope is not the rotation with the %s table at every position", tc.tokens,
				map[bool]string{true: "long", false: "short"}[tc.tokens > 20])
		}
	}
}
