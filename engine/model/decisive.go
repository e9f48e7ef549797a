package model

import (
	"fmt"
	"math"
)

// MinDecisiveShare is the share of a token check's steps that must be decisive for its
// verdict to mean anything. A step is decisive where the reference's margin is at least the
// set's margin_epsilon: there any token but the reference's is a failure. Below it (a near-tie
// that a legitimate rounding may flip) the step decides nothing, and comparison of a free-running
// generation stops at the first such difference. A check that decides fewer than this share of
// the steps it was asked to compare is INCONCLUSIVE: flat logits, not evidence (docs/usage.md,
// "Verdicts").
const MinDecisiveShare = 0.75

// TokenTally is what a token check decided: of Steps asked, how many were compared (a
// free-running generation stops at an accepted near-tie) and how many of those were decisive.
type TokenTally struct {
	Steps, Compared, Decisive int
}

// MinDecisive is the least number of decisive steps of a conclusive check of n steps.
func MinDecisive(n int) int { return int(math.Ceil(MinDecisiveShare * float64(n))) }

// Inconclusive reports whether the check decided fewer than MinDecisiveShare of its steps.
func (t TokenTally) Inconclusive() bool { return t.Decisive < MinDecisive(t.Steps) }

// String is the tally as the reports print it: "31 of 32 steps decisive (30 compared)".
func (t TokenTally) String() string {
	s := fmt.Sprintf("%d of %d steps decisive", t.Decisive, t.Steps)
	if t.Compared < t.Steps {
		s += fmt.Sprintf(" (%d compared)", t.Compared)
	}
	if t.Inconclusive() {
		s += fmt.Sprintf(", fewer than the %d a conclusive check needs", MinDecisive(t.Steps))
	}
	return s
}

// tally counts, of the compared steps, those whose reference margin reaches epsilon; n is the
// number of steps the check was asked to compare.
func tally[S any](steps []S, margin func(S) float64, epsilon float64, n int) TokenTally {
	t := TokenTally{Steps: n, Compared: len(steps)}
	for _, s := range steps {
		if margin(s) >= epsilon {
			t.Decisive++
		}
	}
	return t
}

// GreedyTally tallies a greedy check of n steps from the steps Greedy compared.
func GreedyTally(steps []GreedyStep, epsilon float64, n int) TokenTally {
	return tally(steps, func(s GreedyStep) float64 { return s.Margin }, epsilon, n)
}

// SampledTally tallies a seeded check of n steps from the steps Seeded or
// SeededTeacherForced compared. A step without a decision (+Inf margin: the config leaves one
// token) counts as decisive: any other token is a failure there.
func SampledTally(steps []SampledStep, epsilon float64, n int) TokenTally {
	return tally(steps, func(s SampledStep) float64 { return s.Margin }, epsilon, n)
}

// BatchTally tallies a batch set's greedy choices: every sequence at every point, each a
// step.
func BatchTally(steps []BatchTokenStep, epsilon float64) TokenTally {
	return tally(steps, func(s BatchTokenStep) float64 { return s.Margin }, epsilon, len(steps))
}
