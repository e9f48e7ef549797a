package model_test

import (
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/model"
)

// batchPrompts are ragged prompts over the vocabulary: different lengths and contents, so a
// sequence that read another's cache slot would see other keys.
func batchPrompts(vocab int, lens ...int) [][]int32 {
	var out [][]int32
	for s, n := range lens {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32((7*i + 31*s + 5) % vocab)
		}
		out = append(out, ids)
	}
	return out
}

// A batched decode computes each sequence as the model's own decode does: on the cpu backend
// every row's logits equal, bit for bit, those of the sequence run alone through Prefill and
// Decode (which use the fused single-token ops), at every step, for every family.
func TestBatchDecodeEqualsSingleSequences(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "gpt2-tiny", "phi3.5-tiny"} {
		t.Run(name, func(t *testing.T) {
			_, m, _ := loadSet(t, name)
			prompts := batchPrompts(m.Cfg.Vocab, 16, 5, 11, 1)
			const steps = 6
			feed := func(s, j int) int32 { return int32((13*j + 3*s + 1) % m.Cfg.Vocab) }
			// alone[s][j]: sequence s's logits after step j (j = 0: after its prefill).
			alone := make([][][]float32, len(prompts))
			for s, ids := range prompts {
				l, err := m.Prefill(ids)
				if err != nil {
					t.Fatal(err)
				}
				alone[s] = append(alone[s], l.F32)
				for j := 0; j < steps; j++ {
					if l, err = m.Decode(feed(s, j)); err != nil {
						t.Fatal(err)
					}
					alone[s] = append(alone[s], l.F32)
				}
			}
			b, err := m.NewBatch(len(prompts), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			V := m.Cfg.Vocab
			check := func(j int) {
				l, err := b.Logits()
				if err != nil {
					t.Fatal(err)
				}
				for s := range prompts {
					got, want := l.F32[s*V:(s+1)*V], alone[s][j]
					for k := range want {
						if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
							t.Fatalf("sequence %d after step %d: logit %d = %g in the batch, %g alone", s, j, k, got[k], want[k])
						}
					}
				}
			}
			for s, ids := range prompts {
				if err := b.Prefill(s, ids); err != nil {
					t.Fatal(err)
				}
			}
			check(0)
			for j := 0; j < steps; j++ {
				toks := make([]int32, len(prompts))
				for s := range toks {
					toks[s] = feed(s, j)
				}
				if err := b.Decode(toks); err != nil {
					t.Fatal(err)
				}
				check(j + 1)
			}
		})
	}
}

// Bad requests are refused by name, before anything runs.
func TestBatchRefusesBadRequests(t *testing.T) {
	_, m, _ := loadSet(t, "qwen2-tiny")
	if _, err := m.NewBatch(65, 0); err == nil || !strings.Contains(err.Error(), "1..64") {
		t.Errorf("NewBatch(65): %v", err)
	}
	b, err := m.NewBatch(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"decode before prefill", b.Decode([]int32{1, 2}), "before its prefill"},
		{"prefill of sequence 2", b.Prefill(2, []int32{1}), "sequence 2 in a batch of 2"},
		{"token outside the vocabulary", b.Prefill(0, []int32{int32(m.Cfg.Vocab)}), "outside the vocabulary"},
		{"a prompt longer than the cache", b.Prefill(1, make([]int32, m.MaxLen+1)), "exceed the cache length"},
		{"one token for two sequences", b.Decode([]int32{1}), "1 tokens for a batch of 2"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.what, tc.err, tc.want)
		}
	}
}

var _ = model.MaxBatch
