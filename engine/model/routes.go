package model

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

// RoutingMargin is how far apart, in units of the calibrated error of a router_logits row, a
// token's k-th and next router logits must be for its choice of experts to be the engine's own
// business: twice golden/tolerances.yaml's tap_calibration factor (a correct backend may make 4x
// the calibrated error, in both logits), tools/gen-golden's ROUTING_MARGIN. Closer than that, a
// correct engine may choose the other expert and its block output then differs by a whole
// expert: such a row follows the reference's choice (routeGuide).
const RoutingMargin = 8

// routeGuide is the reference's choice of experts at the rows of one router_logits tap whose
// decision is closer than RoutingMargin: the pass that makes that tap overwrites its own choice
// there (followRoutes) and keeps it at every other row.
type routeGuide struct {
	rows []int     // the pass's rows (tokens) that follow the reference
	ids  [][]int32 // the reference's top k of each, largest logit first (ties: the lower index)
}

// routeGuides reads every router_logits tap of a mixture-of-experts set and its calibration
// and returns the guide of each tap with a row inside margin (RoutingMargin) (none for a set whose every
// decision is decisive, as the generator makes every synthetic set it commits). The reference's
// choice is the top k of its logits: the generator asserts that transformers' router chose
// exactly those (a softmax is monotone; fp32 near-ties that its exp could reorder are refused).
func routeGuides(set *golden.Set, k int, margin float64) (map[string]*routeGuide, error) {
	cal, err := set.Calibration()
	if err != nil {
		return nil, err
	}
	guides := map[string]*routeGuide{}
	for _, f := range set.Files(golden.RoleExpected) {
		if !strings.HasSuffix(f.Name, ".router_logits") {
			continue
		}
		t, err := set.Tensor(f.Name)
		if err != nil {
			return nil, err
		}
		e := t.Shape[len(t.Shape)-1]
		if k > e {
			return nil, fmt.Errorf("%s: tap %s has %d experts a row for %d a token", set.ID(), f.Name, e, k)
		}
		errRMS := cal.Taps[f.Name].MaxErrRMS
		vals := t.Float32()
		var g routeGuide
		for r := 0; r*e < len(vals); r++ {
			ids, gap, rms := topK(vals[r*e:(r+1)*e], k)
			if k < e && gap <= margin*errRMS*rms {
				g.rows = append(g.rows, r)
				g.ids = append(g.ids, ids)
			}
		}
		if len(g.rows) > 0 {
			guides[f.Name] = &g
		}
	}
	return guides, nil
}

// topK returns the k largest of row by index (descending, equal values the lower index
// first), the gap between the k-th and the next largest, and the row's root mean square.
func topK(row []float32, k int) ([]int32, float64, float64) {
	order := make([]int, len(row))
	var sq float64
	for i, v := range row {
		order[i] = i
		sq += float64(v) * float64(v)
	}
	sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
	ids := make([]int32, k)
	for j := range ids {
		ids[j] = int32(order[j])
	}
	gap := math.Inf(1)
	if k < len(row) {
		gap = float64(row[order[k-1]]) - float64(row[order[k]])
	}
	return ids, gap, math.Sqrt(sq / float64(len(row)))
}

// FollowAmbiguousRoutes makes the passes over the set's prompt and greedy tokens follow the
// reference's choice of experts at every routing decision inside RoutingMargin (routeGuides;
// with prefillOnly the prefill's alone, for passes whose decode steps feed other tokens than
// the reference's greedy ones) and returns how many rows follow it and the function that
// stops it. The guided passes run op by op (a captured graph replays the engine's own choice).
func (m *Model) FollowAmbiguousRoutes(set *golden.Set, prefillOnly bool) (rows int, stop func(), err error) {
	if m.Cfg.Experts == 0 {
		return 0, func() {}, nil
	}
	guides, err := routeGuides(set, m.Cfg.ExpertsPerToken, RoutingMargin)
	if err != nil {
		return 0, nil, err
	}
	for name, g := range guides {
		if prefillOnly && !strings.HasPrefix(name, "prefill.") {
			delete(guides, name)
			continue
		}
		rows += len(g.rows)
	}
	if len(guides) == 0 {
		return 0, func() {}, nil
	}
	m.routes = guides
	return rows, func() { m.routes = nil }, nil
}

// followRoutes overwrites the router's choice (ids i32 [T, k], weights f32 [T, k]) at the
// guide's rows with the reference's experts, weighted by the engine's own logits [T, E] as
// moe_router weighs a choice: softmax over all E experts (in float64 from the stored logits),
// renormalised over the chosen k where the config says so.
func (p *pass) followRoutes(g *routeGuide, logits, weights, ids backend.Buffer) error {
	lt, err := p.be.Download(logits)
	if err != nil {
		return err
	}
	wt, err := p.be.Download(weights)
	if err != nil {
		return err
	}
	it, err := p.be.Download(ids)
	if err != nil {
		return err
	}
	e, k := lt.Shape[1], it.Shape[1]
	lv := lt.Float32()
	for j, r := range g.rows {
		if r >= lt.Shape[0] {
			return fmt.Errorf("model: routing guide: row %d of a pass of %d tokens", r, lt.Shape[0])
		}
		row := lv[r*e : (r+1)*e]
		maxv := math.Inf(-1)
		for _, v := range row {
			maxv = math.Max(maxv, float64(v))
		}
		var sum, chosen float64
		for _, v := range row {
			sum += math.Exp(float64(v) - maxv)
		}
		for _, id := range g.ids[j] {
			chosen += math.Exp(float64(row[id])-maxv) / sum
		}
		for c, id := range g.ids[j] {
			w := math.Exp(float64(row[id])-maxv) / sum
			if p.m.Cfg.NormTopKProb {
				w /= chosen
			}
			it.I32[r*k+c] = id
			wt.F32[r*k+c] = float32(w)
		}
	}
	if err := p.mem.Write(ids, it); err != nil {
		return err
	}
	return p.mem.Write(weights, wt)
}
