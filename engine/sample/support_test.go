package sample

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

func allowed(s *Support) []int {
	var out []int
	for t, a := range s.Allowed {
		if a {
			out = append(out, t)
		}
	}
	return out
}

func TestSupportGreedyAllowsEveryTiedMaximum(t *testing.T) {
	s, err := SupportOf([]float32{1, 4, 2, 4}, backend.SampleConfig{TopP: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := allowed(s); !slices.Equal(got, []int{1, 3}) || s.Settled || !slices.Equal(s.Tokens, []int{1}) {
		t.Errorf("allowed %v, tokens %v, settled %v: want [1 3], the spec's first [1], unsettled", got, s.Tokens, s.Settled)
	}
	s, _ = SupportOf([]float32{1, 4, 2, 3}, backend.SampleConfig{Temperature: 1, TopK: 1, TopP: 1})
	if got := allowed(s); !slices.Equal(got, []int{1}) || !s.Settled {
		t.Errorf("top_k 1: allowed %v, settled %v", got, s.Settled)
	}
}

func TestSupportTopKWidensOverATieAtTheCut(t *testing.T) {
	logits := []float32{5, 3, 3, 1, float32(math.Inf(-1))}
	s, _ := SupportOf(logits, backend.SampleConfig{Temperature: 1, TopK: 2, TopP: 1})
	if got := allowed(s); !slices.Equal(got, []int{0, 1, 2}) || s.Settled || !slices.Equal(s.Tokens, []int{0, 1}) {
		t.Errorf("allowed %v, tokens %v, settled %v", got, s.Tokens, s.Settled)
	}
	// top_k past the finite logits keeps them all and never the -inf.
	s, _ = SupportOf(logits, backend.SampleConfig{Temperature: 1, TopK: 9, TopP: 1})
	if got := allowed(s); !slices.Equal(got, []int{0, 1, 2, 3}) || !s.Settled {
		t.Errorf("top_k 9: allowed %v, settled %v", got, s.Settled)
	}
	sum := 0.0
	for _, p := range s.Probs {
		sum += p
	}
	if math.Abs(sum-1) > 1e-15 {
		t.Errorf("probabilities sum to %v", sum)
	}
}

// Weights 4, 2, 1, 0.5 (logits ln of them): top_p 0.8 reaches 0.8 of the mass exactly at the
// second rank, so a sampler's rounding decides the third; 0.7 settles at two.
func TestSupportTopPLeavesARankWithinTheSlackOpen(t *testing.T) {
	logits := []float32{float32(math.Log(4)), float32(math.Log(2)), 0, float32(math.Log(0.5))}
	s, _ := SupportOf(logits, backend.SampleConfig{Temperature: 1, TopP: 0.8})
	if got := allowed(s); !slices.Equal(got, []int{0, 1, 2}) || s.Settled {
		t.Errorf("p 0.8: allowed %v, settled %v; want the third rank open", got, s.Settled)
	}
	s, _ = SupportOf(logits, backend.SampleConfig{Temperature: 1, TopP: 0.7})
	if got := allowed(s); !slices.Equal(got, []int{0, 1}) || !s.Settled {
		t.Errorf("p 0.7: allowed %v, settled %v", got, s.Settled)
	}
	if want := []float64{4.0 / 6, 2.0 / 6}; math.Abs(s.Probs[0]-want[0]) > 1e-7 || math.Abs(s.Probs[1]-want[1]) > 1e-7 {
		t.Errorf("probabilities %v, want %v", s.Probs, want)
	}
}

// Fit on the spec's own sampler: its draws of real logits rows pass at every config tried
// (a correct sampler is not failed), and the same draws judged against another temperature,
// or with one rank too many, fail by far.
func TestFitAcceptsTheSpecsSamplerAndRejectsAnotherDistribution(t *testing.T) {
	set, err := golden.Load(filepath.Join("..", "..", "golden", "sampling", "phi3-v32064"))
	if err != nil {
		t.Fatal(err)
	}
	logits, err := set.Tensor("logits")
	if err != nil {
		t.Fatal(err)
	}
	vocab := logits.Shape[1]
	row := logits.F32[:vocab] // row 0: a trained model's spread
	for _, cfg := range []backend.SampleConfig{
		{Temperature: 1, TopP: 1},
		{Temperature: 0.7, TopK: 50, TopP: 0.9},
	} {
		s, err := SupportOf(row, cfg)
		if err != nil || !s.Settled {
			t.Fatalf("%+v: %v, settled %v", cfg, err, s.Settled)
		}
		draws := make([]int, 512)
		for i := range draws {
			c := cfg
			c.Seed, c.Step = 12345, uint64(i)
			r, err := Row(row, c, 0)
			if err != nil {
				t.Fatal(err)
			}
			draws[i] = r.Token
		}
		f, err := s.Fit(draws)
		if err != nil {
			t.Fatal(err)
		}
		if f.P < FitAlpha || f.Bins < 10 {
			t.Errorf("%+v: the spec's sampler fails its own distribution: %+v", cfg, f)
		}
		hot := cfg
		hot.Temperature *= 1.3
		other, _ := SupportOf(row, hot)
		if of, err := other.Fit(draws); err == nil && of.P >= FitAlpha {
			t.Errorf("%+v: draws at T judged against 1.3T pass: %+v", cfg, of)
		}
	}
	s, _ := SupportOf([]float32{2, 1, 0}, backend.SampleConfig{Temperature: 1, TopK: 2, TopP: 1})
	if _, err := s.Fit([]int{0, 1, 2}); err == nil || !strings.Contains(err.Error(), "token 2") {
		t.Errorf("a draw outside the kept set: %v", err)
	}
}
