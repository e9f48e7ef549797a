package compare

import (
	"fmt"
	"math"
	"sort"
)

// logitChecks compares got and want as rows of logits over the last dimension: the mean
// KL(softmax(want) || softmax(got)) and, per requested k, the mean top-k overlap (with the
// limit's tie margin).
func logitChecks(g, w []float64, shape []int, tol Tolerance) []Check {
	n := shape[len(shape)-1]
	rows := len(g) / n
	var checks []Check
	if tol.MaxKL != nil {
		var kl float64
		for r := 0; r < rows; r++ {
			kl += KL(w[r*n:(r+1)*n], g[r*n:(r+1)*n])
		}
		checks = append(checks, upper("kl", kl/float64(rows), *tol.MaxKL))
	}
	for _, lim := range tol.TopK {
		var overlap float64
		for r := 0; r < rows; r++ {
			overlap += TopKAgreement(g[r*n:(r+1)*n], w[r*n:(r+1)*n], lim.K, lim.TieMargin)
		}
		checks = append(checks, lower(fmt.Sprintf("top%d", lim.K), overlap/float64(rows), lim.Min))
	}
	return checks
}

// KL returns KL(softmax(p) || softmax(q)) for two rows of logits, in nats, computed with
// log-sum-exp so large logits cannot overflow.
func KL(pLogits, qLogits []float64) float64 {
	lp, lq := logSoftmax(pLogits), logSoftmax(qLogits)
	var kl float64
	for i := range lp {
		if math.IsInf(lp[i], -1) {
			continue // p_i = 0 contributes nothing
		}
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return math.Max(kl, 0)
}

func logSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	lse := m + math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v - lse
	}
	return out
}

// TopK returns the indices of the k largest values, largest first; ties go to the lower
// index so the order is deterministic, and NaN ranks below every number. It selects in one
// pass, O(n·k) for small k (the logit checks take 1 to 5 of a 151936-entry vocabulary row: a
// full sort of every row was most of a full-size model's tap comparison), and sorts for large k.
func TopK(x []float64, k int) []int {
	k = max(0, min(k, len(x)))
	// above reports whether index a ranks before index b.
	above := func(a, b int) bool {
		va, vb := x[a], x[b]
		switch na, nb := math.IsNaN(va), math.IsNaN(vb); {
		case na || nb:
			return !na || (nb && a < b)
		case va != vb:
			return va > vb
		}
		return a < b
	}
	if k > 64 {
		idx := make([]int, len(x))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return above(idx[a], idx[b]) })
		return idx[:k]
	}
	best := make([]int, 0, k)
	for i := range x {
		if len(best) == k && (k == 0 || !above(i, best[k-1])) {
			continue
		}
		j := len(best)
		if j < k {
			best = append(best, i)
		} else {
			j = k - 1
		}
		for ; j > 0 && above(i, best[j-1]); j-- {
			best[j] = best[j-1]
		}
		best[j] = i
	}
	return best
}

// TopKAgreement is the fraction of topk(got) that the reference ranks in its own top k:
// an index agrees when it is in topk(want), or when tieMargin > 0 and want there exceeds
// want's k-th largest value minus tieMargin (a near tie the reference could have ordered
// either way). With tieMargin 0 it is |topk(got) ∩ topk(want)| / k.
func TopKAgreement(got, want []float64, k int, tieMargin float64) float64 {
	tg, tw := TopK(got, k), TopK(want, k)
	in := make(map[int]bool, len(tw))
	for _, i := range tw {
		in[i] = true
	}
	kth := want[tw[len(tw)-1]]
	agree := 0
	for _, i := range tg {
		if in[i] || (tieMargin > 0 && want[i] > kth-tieMargin) {
			agree++
		}
	}
	return float64(agree) / float64(len(tw))
}
