package sample

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// FitAlpha is the p-value below which draws are judged not to follow the reference: a correct
// sampler fails one test in a million, so the hundred-odd tests of a run on the committed sets
// keep a false failure below one run in ten thousand, while a wrong temperature or a nucleus cut
// one rank off gives p-values far below it at a few hundred draws (docs/sampling.md).
const FitAlpha = 1e-6

// MinExpected is the fewest draws a chi-square bin is made to expect. The textbook 5 is enough
// at the usual 5%, not at FitAlpha: simulated at 512 draws over real rows, Pearson's statistic
// with bins of 5 exceeds the chi-square law's 1e-5 point three times as often as it should; with
// bins of 20, 1.5 times.
const MinExpected = 20

// Fit is Pearson's chi-square test of a row's draws against its Support's probabilities.
type Fit struct {
	Draws     int
	Bins      int     // ranks grouped so that each expects >= MinExpected draws
	ChiSquare float64 // the statistic
	P         float64 // its upper-tail probability with Bins-1 degrees of freedom (1 with one bin)
	Worst     string  // the bin that contributes most, for the failure message
}

// Fit tests draws against s.Probs. Consecutive ranks are grouped until each group expects at
// least MinExpected draws (a short last group joins the one before), so the test sees the head
// of the distribution rank by rank and the tail in pooled groups. A draw outside s.Tokens is
// an error: the support check's business, and with it no test is meaningful.
func (s *Support) Fit(draws []int) (Fit, error) {
	n := float64(len(draws))
	rank := make(map[int]int, len(s.Tokens))
	for i, t := range s.Tokens {
		rank[t] = i
	}
	// binOf[i]: rank i's bin; expected[b] the bin's expected count.
	binOf := make([]int, len(s.Tokens))
	var expected []float64
	var first []int // first rank of each bin
	open := 0.0
	for i, p := range s.Probs {
		if len(expected) == 0 || open >= MinExpected {
			expected = append(expected, 0)
			first = append(first, i)
			open = 0
		}
		b := len(expected) - 1
		binOf[i] = b
		expected[b] += n * p
		open += n * p
	}
	if last := len(expected) - 1; last > 0 && expected[last] < MinExpected {
		for i := first[last]; i < len(binOf); i++ {
			binOf[i] = last - 1
		}
		expected[last-1] += expected[last]
		expected, first = expected[:last], first[:last]
	}
	observed := make([]float64, len(expected))
	for _, t := range draws {
		r, ok := rank[t]
		if !ok {
			return Fit{}, fmt.Errorf("token %d is not in the reference's kept set of %d", t, len(s.Tokens))
		}
		observed[binOf[r]]++
	}
	f := Fit{Draws: len(draws), Bins: len(expected), P: 1}
	worst, worstBin := -1.0, 0
	for b, e := range expected {
		d := (observed[b] - e) * (observed[b] - e) / e
		f.ChiSquare += d
		if d > worst {
			worst, worstBin = d, b
		}
	}
	if f.Bins > 1 {
		f.P = distuv.ChiSquared{K: float64(f.Bins - 1)}.Survival(f.ChiSquare)
	}
	lo := first[worstBin]
	hi := len(s.Tokens) - 1
	if worstBin+1 < len(first) {
		hi = first[worstBin+1] - 1
	}
	f.Worst = fmt.Sprintf("ranks %d-%d (first token %d, p %.4g): %v draws, %.1f expected",
		lo, hi, s.Tokens[lo], s.Probs[lo], observed[worstBin], expected[worstBin])
	if math.IsNaN(f.P) {
		f.P = 0
	}
	return f, nil
}
