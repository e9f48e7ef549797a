package model_test

import (
	"os"
	"path/filepath"
	"testing"
)

// Every committed synthetic set records how its output rows were peaked, and keeps the promise
// the construction makes: every greedy and seeded step is decisive (reference margin at least
// margin_epsilon), so its token checks decide all 32 steps.
func TestCommittedSetsArePeaked(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join("..", "..", "golden", "models"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		set, m, p := loadSet(t, d.Name())
		if p.Source != "synthetic" {
			continue
		}
		pk := p.Peak
		if pk == nil {
			t.Errorf("%s: a synthetic set without params.peak", d.Name())
			continue
		}
		head := "lm_head.weight"
		if m.Cfg.TiedHead {
			head = map[bool]string{true: "transformer.wte.weight", false: "model.embed_tokens.weight"}[p.Family == "gpt2"]
		}
		if pk.Tensor != head {
			t.Errorf("%s: params.peak.tensor %q, want %q", d.Name(), pk.Tensor, head)
		}
		for i, r := range pk.Rows {
			if r < 0 || int(r) >= m.Cfg.Vocab || (i > 0 && r <= pk.Rows[i-1]) {
				t.Errorf("%s: params.peak.rows[%d] = %d: want ascending ids below %d", d.Name(), i, r, m.Cfg.Vocab)
			}
		}
		for _, name := range []string{"greedy_top2_margin", "sample_margin"} {
			margins, err := set.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range margins.F32 {
				if float64(v) < p.MarginEpsilon {
					t.Errorf("%s: %s[%d] = %g is below the margin epsilon %g", d.Name(), name, j, v, p.MarginEpsilon)
				}
			}
		}
	}
}
