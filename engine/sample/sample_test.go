package sample

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// The Random123 known answers (tests/kat_vectors, "philox4x32 10"), as docs/sampling.md lists.
func TestPhiloxKnownAnswers(t *testing.T) {
	cases := []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		if got := Philox4x32x10(c.ctr, c.key); got != c.want {
			t.Errorf("philox(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
	if got := Words(0, 0, 0); got != cases[0].want {
		t.Errorf("Words(0, 0, 0) = %08x: seed/step/row must map to key (0,0), counter (0,0,0,0)", got)
	}
	// seed and step split into low and high words.
	if got, want := Words(0x299f31d0a4093822, 0x85a308d3243f6a88, 0x13198a2e), Philox4x32x10([4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0}, [2]uint32{0xa4093822, 0x299f31d0}); got != want {
		t.Errorf("Words layout: %08x, want %08x", got, want)
	}
}

func TestUniformIsExact53Bits(t *testing.T) {
	if u := UniformOf([4]uint32{0xffffffff, 0xffffffff, 0, 0}); u != 1-0x1p-53 {
		t.Errorf("largest uniform %v, want 1-2^-53", u)
	}
	if u := UniformOf([4]uint32{0, 0x3f, 0, 0}); u != 0 {
		t.Errorf("low 6 bits of x1 must be dropped: %v", u)
	}
	if u := UniformOf([4]uint32{1 << 5, 0, 0, 0}); u != 0x1p-27 {
		t.Errorf("x0>>5 is the high part: %v", u)
	}
}

// The worked example of docs/sampling.md.
func TestWorkedExample(t *testing.T) {
	logits := []float32{1, 3, 3, float32(math.Inf(-1)), 2}
	r := pick(logits, backend.SampleConfig{Temperature: 1, TopK: 3, TopP: 0.9}, 0.5)
	if r.Token != 2 || r.Candidates != 3 || r.Kept != 3 {
		t.Fatalf("got token %d (n=%d, n'=%d), want 2 (3, 3)", r.Token, r.Candidates, r.Kept)
	}
	s := 2 + math.Exp(-1)
	// the top-p margin |2 - 0.9 S| / S = 0.0554 is below the draw margin (0.5 S - 1) / S = 0.0777.
	if want := (float64(float32(0.9))*s - 2) / s; math.Abs(r.Margin-want) > 1e-12 {
		t.Errorf("margin %v, want %v", r.Margin, want)
	}
}

func TestGreedyAndTies(t *testing.T) {
	ninf := float32(math.Inf(-1))
	logits := []float32{ninf, 2, 5, 5, -1}
	r, err := Row(logits, backend.SampleConfig{TopP: 1}, 0)
	if err != nil || r.Token != 2 || !math.IsInf(r.Margin, 1) {
		t.Fatalf("greedy: %+v %v, want token 2 (lowest index of the tie)", r, err)
	}
	// top_k 1 is greedy whatever the draw.
	for step := uint64(0); step < 50; step++ {
		r, err := Row(logits, backend.SampleConfig{Temperature: 1, TopK: 1, TopP: 1, Seed: 7, Step: step}, 0)
		if err != nil || r.Token != 2 {
			t.Fatalf("top_k 1 step %d: %+v %v", step, r, err)
		}
	}
	// -0 and +0 tie: the lower index comes first.
	if o := Order([]float32{float32(math.Copysign(0, -1)), 0, ninf, 1}); o[0] != 3 || o[1] != 0 || o[2] != 1 || o[3] != 2 {
		t.Errorf("order %v, want [3 0 1 2]", o)
	}
	// A tiny temperature behaves as greedy; -inf is never drawn.
	for step := uint64(0); step < 50; step++ {
		r, err := Row(logits, backend.SampleConfig{Temperature: 1e-3, TopP: 1, Seed: 1, Step: step}, 0)
		if err != nil || (r.Token != 2 && r.Token != 3) {
			t.Fatalf("T=1e-3 step %d: %+v %v", step, r, err)
		}
	}
}

// A tiny top_p keeps only rank 0.
func TestTopPNucleusOfOne(t *testing.T) {
	r, err := Row([]float32{0, 1, 2, 3}, backend.SampleConfig{Temperature: 1, TopP: 1e-6, Seed: 3}, 0)
	if err != nil || r.Token != 3 || r.Kept != 1 || !math.IsInf(r.Margin, 1) {
		t.Fatalf("%+v %v", r, err)
	}
}

// Draw frequencies follow the tempered, truncated distribution.
func TestFrequencies(t *testing.T) {
	logits := []float32{0, 1, 2, -5, float32(math.Inf(-1))}
	cfg := backend.SampleConfig{Temperature: 0.7, TopK: 3, TopP: 1, Seed: 42}
	counts := make([]int, len(logits))
	const n = 20000
	for step := uint64(0); step < n; step++ {
		cfg.Step = step
		r, err := Row(logits, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		counts[r.Token]++
	}
	z := 0.0
	for _, l := range logits[:3] {
		z += math.Exp(float64(l) / 0.7)
	}
	for i, l := range logits[:3] {
		p := math.Exp(float64(l)/0.7) / z
		sigma := math.Sqrt(n * p * (1 - p))
		if d := math.Abs(float64(counts[i]) - n*p); d > 5*sigma {
			t.Errorf("token %d: %d draws, expected %.0f ± %.0f", i, counts[i], n*p, sigma)
		}
	}
	if counts[3] != 0 || counts[4] != 0 {
		t.Errorf("tokens outside top-k drawn: %v", counts)
	}
}

func TestInvalid(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	ok := backend.SampleConfig{Temperature: 1, TopP: 1}
	cases := []struct {
		cfg    backend.SampleConfig
		logits []float32
		arg    string
	}{
		{ok, nil, "vocab"},
		{backend.SampleConfig{Temperature: -1, TopP: 1}, []float32{1}, "temperature"},
		{backend.SampleConfig{Temperature: nan, TopP: 1}, []float32{1}, "temperature"},
		{backend.SampleConfig{Temperature: inf, TopP: 1}, []float32{1}, "temperature"},
		{backend.SampleConfig{Temperature: 1, TopK: -1, TopP: 1}, []float32{1}, "top_k"},
		{backend.SampleConfig{Temperature: 1, TopP: 0}, []float32{1}, "top_p"},
		{backend.SampleConfig{Temperature: 1, TopP: 1.5}, []float32{1}, "top_p"},
		{backend.SampleConfig{Temperature: 1, TopP: nan}, []float32{1}, "top_p"},
		{ok, []float32{1, nan}, "logits[0][1]"},
		{ok, []float32{inf, 1}, "logits[0][0]"},
		{backend.SampleConfig{TopP: 1}, []float32{float32(math.Inf(-1))}, "logits[0]"},
	}
	for _, c := range cases {
		_, err := Row(c.logits, c.cfg, 0)
		var ae *backend.ArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg || ae.Op != "sample" || !strings.Contains(err.Error(), "sample") {
			t.Errorf("%+v %v: got %v, want an ArgError for %s", c.cfg, c.logits, err, c.arg)
		}
	}
}
