package model

import (
	"math"
	"strings"
	"testing"
)

func TestTokenTally(t *testing.T) {
	const eps = 0.5
	var greedy []GreedyStep
	for j := 0; j < 12; j++ {
		greedy = append(greedy, GreedyStep{Step: j, Margin: 1})
	}
	greedy[3].Margin = 0.1 // a near-tie that both sides resolved alike: compared, not decisive
	// A free-running check that stopped after 12 of 32 steps decided 11: inconclusive.
	g := GreedyTally(greedy, eps, 32)
	if g.Decisive != 11 || g.Compared != 12 || !g.Inconclusive() {
		t.Fatalf("greedy tally %+v", g)
	}
	if s := g.String(); !strings.Contains(s, "11 of 32 steps decisive (12 compared)") || !strings.Contains(s, "the 24 a conclusive check needs") {
		t.Errorf("greedy tally reads %q", s)
	}
	var sampled []SampledStep
	for j := 0; j < 32; j++ {
		m := 2.0
		if j%4 == 0 {
			m = 0.4 // 8 near-ties
		}
		sampled = append(sampled, SampledStep{Step: j, Margin: m})
	}
	sampled[1].Margin = math.Inf(1) // no decision to make: any other token fails
	s := SampledTally(sampled, eps, 32)
	if s.Decisive != 24 || s.Inconclusive() || s.String() != "24 of 32 steps decisive" {
		t.Fatalf("sampled tally %+v %q", s, s.String())
	}
	sampled[2].Margin = 0.2
	if s := SampledTally(sampled, eps, 32); !s.Inconclusive() {
		t.Fatalf("23 of 32 decisive is conclusive: %+v", s)
	}
	if MinDecisive(32) != 24 || MinDecisive(1) != 1 || MinDecisive(0) != 0 {
		t.Errorf("MinDecisive: %d %d %d", MinDecisive(32), MinDecisive(1), MinDecisive(0))
	}
	b := BatchTally([]BatchTokenStep{{Margin: 1}, {Margin: 0.1}, {Margin: 3}, {Margin: 0.7}}, eps)
	if b.Decisive != 3 || b.Steps != 4 || b.Inconclusive() {
		t.Errorf("batch tally %+v", b)
	}
}
