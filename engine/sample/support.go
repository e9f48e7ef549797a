package sample

import (
	"math"
	"sort"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// TopPSlack is how close, relative to the candidates' mass, a prefix sum may come to the top-p
// threshold and still leave its rank's fate open. A sampler with its own arithmetic sums fp32
// probabilities in its own order (FlashInfer's pivots, torch's cumsum over a sorted row), each
// weight off by a few fp32 ulps of its exponent and the sum by about log2(vocab) roundings: 1e-5
// of the mass at most over 151936 tokens. 1e-4 keeps a tenfold margin over that and still
// settles the boundary of every nucleus whose next token holds more than 0.01% of the mass,
// the only ones a misplaced cut can be seen in by drawing.
const TopPSlack = 1e-4

// Support is what any correct sampler may draw from one row of logits under one config,
// whatever its random numbers: the reference for samplers that do not draw docs/sampling.md's
// Philox stream (another library's kernel behind an external adapter), whose tokens can be
// judged only by where they fall and how often.
type Support struct {
	// Allowed[t] says token t may be drawn: the reference's kept set, widened by the ties a
	// top-k or top-p cut may fall on either side of and by the ranks within TopPSlack of the
	// top-p threshold.
	Allowed []bool
	// Tokens are the reference's kept set in its order (docs/sampling.md) and Probs their
	// probabilities renormalised over it (fp64).
	Tokens []int
	Probs  []float64
	// Settled says the kept set has no open boundary (no tie across a cut, no prefix sum
	// within TopPSlack of the threshold): Allowed holds exactly Tokens, and the draws of a
	// correct sampler follow Probs.
	Settled bool
}

// SupportOf computes the support of one row of logits under cfg, with the spec's fp64
// arithmetic.
func SupportOf(logits []float32, cfg backend.SampleConfig) (*Support, error) {
	return supportOrdered(logits, Order(logits), cfg) // which validates before reading the order
}

// supportOrdered is SupportOf with the row's Order computed by the caller.
func supportOrdered(logits []float32, order []int, cfg backend.SampleConfig) (*Support, error) {
	if err := Validate(cfg, 0, logits); err != nil {
		return nil, err
	}
	s := &Support{Allowed: make([]bool, len(logits))}
	if cfg.Temperature == 0 || cfg.TopK == 1 {
		// Greedy: the maximum, whichever of its ties a sampler takes (the spec takes the first).
		best := order[0]
		ties := 0
		for t, v := range logits {
			if v == logits[best] {
				s.Allowed[t] = true
				ties++
			}
		}
		s.Tokens, s.Probs, s.Settled = []int{best}, []float64{1}, ties == 1
		return s, nil
	}
	value := func(rank int) float32 { return logits[order[rank]] }
	finite := len(order)
	for finite > 0 && math.IsInf(float64(value(finite-1)), -1) {
		finite-- // -inf sorts last
	}
	// Top-k: the spec keeps the first k in its order; a sampler may keep any of the logits
	// tied with the k-th, or all of them.
	n, nWide := finite, finite
	if cfg.TopK > 0 && cfg.TopK < finite {
		n, nWide = cfg.TopK, cfg.TopK
		for nWide < finite && value(nWide) == value(n-1) {
			nWide++
		}
	}
	m, temp := float64(value(0)), float64(cfg.Temperature)
	cum := make([]float64, nWide) // cum[i]: the mass of ranks 0..i
	sum := 0.0
	for i := range cum {
		sum += math.Exp((float64(value(i)) - m) / temp)
		cum[i] = sum
	}
	mass := cum[n-1]
	kept, keptLo, keptHi := n, n, nWide
	if p := float64(cfg.TopP); p < 1 {
		thr := p * mass
		// A rank is kept when the mass before it is below the threshold (the spec's cut: the
		// smallest prefix reaching it). Within the slack its fate is the sampler's rounding.
		before := func(i int) float64 {
			if i == 0 {
				return 0
			}
			return cum[i-1]
		}
		kept = sort.Search(n, func(i int) bool { return before(i) >= thr })
		keptLo = sort.Search(n, func(i int) bool { return before(i) >= thr-TopPSlack*mass })
		// A sampler that keeps every tie of the top-k cut has a little more mass to cut.
		wide := cum[nWide-1]
		keptHi = sort.Search(nWide, func(i int) bool { return before(i) >= p*wide+TopPSlack*wide })
		keptLo = max(keptLo, 1)
		// A tie straddling the cut may be kept whole.
		for keptHi < nWide && value(keptHi) == value(keptHi-1) {
			keptHi++
		}
		for keptLo > 1 && value(keptLo-1) == value(keptLo) {
			keptLo--
		}
	}
	for i := 0; i < keptHi; i++ {
		s.Allowed[order[i]] = true
	}
	s.Tokens = append([]int(nil), order[:kept]...)
	s.Probs = make([]float64, kept)
	prev := 0.0
	for i := range s.Probs {
		s.Probs[i] = (cum[i] - prev) / cum[kept-1]
		prev = cum[i]
	}
	s.Settled = keptLo == kept && keptHi == kept
	return s, nil
}
