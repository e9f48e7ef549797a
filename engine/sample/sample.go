package sample

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Result is one row's token with what the draw saw.
type Result struct {
	Token      int
	U          float64   // the uniform (0 for greedy, which draws none)
	Words      [4]uint32 // the Philox words behind U
	Candidates int       // n: ranks left after top-k and dropping -inf
	Kept       int       // n': the nucleus after top-p
	// Margin is the smaller of the draw and top-p margins of docs/sampling.md: how close,
	// relative to the kept mass, the decision came to a prefix-sum boundary. +Inf when no
	// floating-point decision was made (greedy, or a nucleus of one).
	Margin float64
}

// Validate checks a config and one row of logits as docs/sampling.md requires, naming the
// op, the argument and the value.
func Validate(cfg backend.SampleConfig, row int, logits []float32) error {
	t, p := float64(cfg.Temperature), float64(cfg.TopP)
	bad := func(arg, value, reason string) error {
		return &backend.ArgError{Op: "sample", Arg: arg, Value: value, Reason: reason}
	}
	f32 := func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }
	switch {
	case len(logits) == 0:
		return bad("vocab", "0", "must be >= 1")
	case !(t >= 0) || math.IsInf(t, 0):
		return bad("temperature", f32(cfg.Temperature), "must be 0 (greedy) or positive and finite")
	case cfg.TopK < 0:
		return bad("top_k", strconv.Itoa(cfg.TopK), "must be 0 (off) or positive")
	case !(p > 0 && p <= 1):
		return bad("top_p", f32(cfg.TopP), "must be in (0, 1]")
	}
	finite := false
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 1) {
			return bad(fmt.Sprintf("logits[%d][%d]", row, i), f32(v), "must be finite or -inf")
		}
		finite = finite || !math.IsInf(float64(v), -1)
	}
	if !finite {
		return bad(fmt.Sprintf("logits[%d]", row), "all -inf", "a row needs at least one finite logit")
	}
	return nil
}

// Row samples one row of logits (row r of its batch, which selects the Philox counter).
func Row(logits []float32, cfg backend.SampleConfig, row uint32) (Result, error) {
	if err := Validate(cfg, int(row), logits); err != nil {
		return Result{}, err
	}
	if cfg.Temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return Result{Token: best, Candidates: 1, Kept: 1, Margin: math.Inf(1)}, nil
	}
	w := Words(cfg.Seed, cfg.Step, row)
	res := pick(logits, cfg, UniformOf(w))
	res.Words = w
	return res, nil
}

// pick runs steps 2 to 7 of the spec (validated logits, temperature > 0) with the uniform u.
func pick(logits []float32, cfg backend.SampleConfig, u float64) Result {
	order := Order(logits)
	n := len(order)
	if cfg.TopK > 0 && cfg.TopK < n {
		n = cfg.TopK
	}
	for n > 0 && math.IsInf(float64(logits[order[n-1]]), -1) {
		n-- // -inf sorts last, so the finite candidates are a prefix
	}
	m, temp := float64(logits[order[0]]), float64(cfg.Temperature)
	cum := make([]float64, n)
	s := 0.0
	for i := 0; i < n; i++ {
		s += math.Exp((float64(logits[order[i]]) - m) / temp)
		cum[i] = s
	}
	kept, toppMargin := n, math.Inf(1)
	if p := float64(cfg.TopP); p < 1 {
		thr := p * s
		kept = sort.Search(n, func(i int) bool { return cum[i] >= thr }) + 1
		if kept > n { // unreachable with p < 1 unless rounding; keep every candidate
			kept = n
		}
		toppMargin = math.Abs(cum[kept-1]-thr) / s
		if kept > 1 {
			toppMargin = math.Min(toppMargin, math.Abs(cum[kept-2]-thr)/s)
		}
	}
	total := cum[kept-1]
	target := u * total
	rank := sort.Search(kept, func(i int) bool { return cum[i] > target })
	if rank == kept {
		rank = kept - 1
	}
	res := Result{Token: order[rank], U: u, Candidates: n, Kept: kept, Margin: math.Inf(1)}
	if kept > 1 {
		lo := 0.0
		if rank > 0 {
			lo = cum[rank-1]
		}
		res.Margin = math.Min(math.Min(target-lo, cum[rank]-target)/total, toppMargin)
	}
	return res
}

// Order is the canonical order of docs/sampling.md: indices by logit, largest first, equal
// logits (-0 and +0 included) by ascending index; -inf last.
func Order(logits []float32) []int {
	order := make([]int, len(logits))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	return order
}
