package compare

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var tapParts = regexp.MustCompile(`^(prefill|decode\.\d+)\.(?:layers\.(\d+)\.)?(.+)$`)

// TapPlace splits a canonical tap name into its pass ("prefill", "decode.3"), its layer (-1
// for the taps outside the layers: embed, final_norm, logits) and its kind. ok is false for a
// name of another form.
func TapPlace(name string) (pass string, layer int, kind string, ok bool) {
	m := tapParts.FindStringSubmatch(name)
	if m == nil {
		return "", -1, TapKind(name), false
	}
	layer = -1
	if m[2] != "" {
		layer, _ = strconv.Atoi(m[2])
	}
	return m[1], layer, m[3], true
}

// LayerDiffSummary is the triage view of a layer diff (rows in forward order): the verdict with
// the first tap out of tolerance (named with the op that computes it, by opOf when not nil) and
// its metrics, the worst tap of each layer in prefill and over the decode steps, and one line per
// tap kind over every layer and pass. LayerDiffTable is the full listing.
func LayerDiffSummary(rows []TapResult, opOf func(tap string) string) string {
	var b strings.Builder
	first := FirstFailure(rows)
	failed := 0
	worst := -1
	for i, r := range rows {
		if !r.Result.Pass() {
			failed++
		}
		if worst < 0 || budget(r) > budget(rows[worst]) {
			worst = i
		}
	}
	op := func(name string) string {
		if opOf == nil {
			return ""
		}
		return " [" + opOf(name) + "]"
	}
	switch {
	case len(rows) == 0:
		return "no taps compared\n"
	case first >= 0:
		fmt.Fprintf(&b, "FAIL: %d of %d taps out of tolerance; the first in forward order is where to look (the later ones may inherit its error):\n  %s%s\n  (%s)\n%s\n",
			failed, len(rows), rows[first].Name, op(rows[first].Name), rows[first].Tol.Why, indent(rows[first].Result.Table(), "  "))
	default:
		fmt.Fprintf(&b, "PASS: all %d taps within tolerance; the most budget used: %s%s, %s\n\n", len(rows), rows[worst].Name, op(rows[worst].Name), pct(budget(rows[worst])))
	}
	b.WriteString(worstPerLayer(rows))
	b.WriteString("\n")
	b.WriteString(perKind(rows))
	return b.String()
}

// budget is a row's headline: the largest share of a limit used by any check.
func budget(r TapResult) float64 {
	v := r.Result.MaxBudget()
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

func pct(v float64) string {
	if math.IsInf(v, 1) || v > 1e6 {
		return ">1e8%"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return pre + strings.Join(lines, "\n"+pre)
}

// worstPerLayer tabulates, for each layer (and the taps outside the layers), the prefill tap
// using the most budget and the decode step's tap using the most over all stored steps.
func worstPerLayer(rows []TapResult) string {
	type cell struct {
		name string
		b    float64
		fail bool
	}
	type line struct{ prefill, decode cell }
	lines := map[string]*line{}
	var order []string
	hasDecode := false
	for _, r := range rows {
		pass, layer, kind, ok := TapPlace(r.Name)
		if !ok {
			continue
		}
		key := kind // embed, final_norm, logits: a line each
		if layer >= 0 {
			key = fmt.Sprintf("layer %d", layer)
		}
		l := lines[key]
		if l == nil {
			l = &line{prefill: cell{b: -1}, decode: cell{b: -1}}
			lines[key] = l
			order = append(order, key)
		}
		c := &l.prefill
		label := kind
		if pass != "prefill" {
			c, label, hasDecode = &l.decode, strings.TrimPrefix(pass, "decode.")+": "+kind, true
		}
		if v := budget(r); v > c.b {
			*c = cell{name: label, b: v}
		}
		c.fail = c.fail || !r.Result.Pass()
	}
	var b strings.Builder
	b.WriteString("worst tap of each layer (budget: the share of its limit used; ! out of tolerance)\n")
	if hasDecode {
		fmt.Fprintf(&b, "  %-12s %-26s %-32s\n", "", "prefill", "decode (step: tap)")
	} else {
		fmt.Fprintf(&b, "  %-12s %-26s\n", "", "prefill")
	}
	show := func(c cell) string {
		if c.b < 0 {
			return "-"
		}
		mark := ""
		if c.fail {
			mark = "!"
		}
		return fmt.Sprintf("%s%s %s", mark, c.name, pct(c.b))
	}
	for _, k := range order {
		l := lines[k]
		s := fmt.Sprintf("  %-12s %-26s", k, show(l.prefill))
		if hasDecode {
			s += " " + show(l.decode)
		}
		b.WriteString(strings.TrimRight(s, " ") + "\n")
	}
	return b.String()
}

// perKind collapses the rows by tap kind: how many, how many out of tolerance, the median and
// the worst budget with the tap that used it. Kinds are in first-seen (forward) order.
func perKind(rows []TapResult) string {
	type agg struct {
		budgets []float64
		failed  int
		worst   string
		wb      float64
	}
	kinds := map[string]*agg{}
	var order []string
	for _, r := range rows {
		k := TapKind(r.Name)
		a := kinds[k]
		if a == nil {
			a = &agg{wb: -1}
			kinds[k] = a
			order = append(order, k)
		}
		v := budget(r)
		a.budgets = append(a.budgets, v)
		if !r.Result.Pass() {
			a.failed++
		}
		if v > a.wb {
			a.worst, a.wb = r.Name, v
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "by tap kind, over every layer and pass\n  %-12s %5s %6s %10s %10s  %s\n", "kind", "taps", "failed", "median", "worst", "worst tap")
	for _, k := range order {
		a := kinds[k]
		s := append([]float64(nil), a.budgets...)
		sort.Float64s(s)
		fmt.Fprintf(&b, "  %-12s %5d %6d %10s %10s  %s\n", k, len(s), a.failed, pct(s[len(s)/2]), pct(a.wb), a.worst)
	}
	return b.String()
}
