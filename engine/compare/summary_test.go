package compare

import (
	"strings"
	"testing"
)

func TestTapPlace(t *testing.T) {
	for _, c := range []struct {
		name, pass, kind string
		layer            int
		ok               bool
	}{
		{"prefill.embed", "prefill", "embed", -1, true},
		{"prefill.layers.12.q_rope", "prefill", "q_rope", 12, true},
		{"decode.3.layers.0.attn", "decode.3", "attn", 0, true},
		{"decode.10.logits", "decode.10", "logits", -1, true},
		{"layers.1.q", "", "q", -1, false},
	} {
		pass, layer, kind, ok := TapPlace(c.name)
		if pass != c.pass || layer != c.layer || kind != c.kind || ok != c.ok {
			t.Errorf("TapPlace(%q) = %q %d %q %v, want %q %d %q %v", c.name, pass, layer, kind, ok, c.pass, c.layer, c.kind, c.ok)
		}
	}
}

// summaryRows is a two-layer prefill and one decode step, each tap with the given error.
func summaryRows(t *testing.T, errs map[string]float32) []TapResult {
	t.Helper()
	tol := Tolerance{Atol: ptr(0.1), Rtol: ptr(0), Why: "test limit"}
	var rows []TapResult
	for _, pass := range []string{"prefill", "decode.0"} {
		names := []string{pass + ".embed"}
		for l := 0; l < 2; l++ {
			for _, k := range []string{"q", "attn", "ffn_out"} {
				names = append(names, pass+".layers."+string(rune('0'+l))+"."+k)
			}
		}
		names = append(names, pass+".logits")
		for _, n := range names {
			r, err := Compare(f32(1+errs[n], 2), f32(1, 2), tol)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, TapResult{Name: n, Tol: tol, Result: r})
		}
	}
	return rows
}

func TestLayerDiffSummary(t *testing.T) {
	rows := summaryRows(t, map[string]float32{"prefill.layers.1.attn": 0.5, "prefill.layers.1.ffn_out": 0.6, "decode.0.layers.0.q": 0.05})
	op := func(name string) string { return "op of " + TapKind(name) }
	s := LayerDiffSummary(rows, op)
	for _, want := range []string{
		"FAIL: 2 of 16 taps out of tolerance", "prefill.layers.1.attn [op of attn]", "(test limit)", "allclose",
		"layer 0      q 0.0%", "0: q 50.0%", "layer 1      !ffn_out 600.0%",
		"attn             4      1", "prefill.layers.1.ffn_out",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "\n") > 30 {
		t.Errorf("summary of 16 taps has %d lines:\n%s", strings.Count(s, "\n"), s)
	}
	pass := LayerDiffSummary(summaryRows(t, map[string]float32{"decode.0.layers.1.q": 0.05}), nil)
	if !strings.Contains(pass, "PASS: all 16 taps within tolerance; the most budget used: decode.0.layers.1.q, 50.0%") {
		t.Errorf("passing summary:\n%s", pass)
	}
}
