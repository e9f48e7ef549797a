package model

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

func TestTopKTiesAndGap(t *testing.T) {
	ids, gap, rms := topK([]float32{1, 3, 3, -2, 2}, 2)
	if ids[0] != 1 || ids[1] != 2 || gap != 1 || math.Abs(rms-math.Sqrt(27.0/5)) > 1e-12 {
		t.Errorf("top 2 of [1 3 3 -2 2]: %v gap %v rms %v, want [1 2] (the lower index first), gap 1", ids, gap, rms)
	}
	if _, gap, _ := topK([]float32{1, 2}, 2); !math.IsInf(gap, 1) {
		t.Errorf("k = E: gap %v, want +Inf (no choice to make)", gap)
	}
}

// RoutingMargin is the generator's ROUTING_MARGIN: twice tolerances.yaml's calibration factor.
func TestRoutingMarginIsTwiceTheCalibrationFactor(t *testing.T) {
	tols, err := compare.LoadTolerances(filepath.Join("..", "..", "golden", "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if f := tols.TapCalibration.Factor; RoutingMargin != 2*f {
		t.Errorf("RoutingMargin %v, tap_calibration factor %v: want twice it", RoutingMargin, f)
	}
}

// wrongRouter routes each token's last choice to the next expert by logit (the k+1-th): a
// router that errs at every row, as a correct one may at an ambiguous row.
type wrongRouter struct{ *cpu.Backend }

func (w wrongRouter) MoERouter(weights, ids, logits backend.Buffer, k int, renormalize bool) error {
	if err := w.Backend.MoERouter(weights, ids, logits, k, renormalize); err != nil {
		return err
	}
	l, _ := w.Download(logits)
	it, _ := w.Download(ids)
	e := l.Shape[1]
	for r := 0; r < l.Shape[0]; r++ {
		next, _, _ := topK(l.Float32()[r*e:(r+1)*e], k+1)
		it.I32[r*k+k-1] = next[k]
	}
	return w.Write(ids, it)
}

// A row the guide covers follows the reference's experts, weighted by the engine's own logits:
// the sparse block of qwen3-moe-tiny under a router that errs at every row passes every
// tap when every row is guided (margin +Inf), and fails its ffn_out without guides.
// The committed sets are decisive: RoutingMargin guides no row of them.
func TestRouteGuidesFollowTheReference(t *testing.T) {
	tols, err := compare.LoadTolerances(filepath.Join("..", "..", "golden", "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qwen3-moe-tiny", "mixtral-tiny"} {
		set, err := golden.Load(filepath.Join("..", "..", "golden", "models", name))
		if err != nil {
			t.Fatal(err)
		}
		m, p, err := LoadSet(wrongRouter{cpu.New()}, set)
		if err != nil {
			t.Fatal(err)
		}
		if n, stop, err := m.FollowAmbiguousRoutes(set, false); err != nil || n != 0 {
			t.Fatalf("%s: %d rows guided at RoutingMargin (%v), want none: the committed sets are decisive", name, n, err)
		} else {
			stop()
		}
		failing := func() string {
			rows, err := CompareTaps(m, set, p, tols)
			if err != nil {
				t.Fatal(err)
			}
			if i := compare.FirstFailure(rows); i >= 0 {
				return rows[i].Name
			}
			return ""
		}
		if got := failing(); got != "prefill.layers.0.ffn_out" {
			t.Errorf("%s: a wrong router without guides fails first at %q, want prefill.layers.0.ffn_out", name, got)
		}
		all, err := routeGuides(set, m.Cfg.ExpertsPerToken, math.Inf(1))
		if err != nil {
			t.Fatal(err)
		}
		if want := m.Cfg.Layers * (1 + p.DecodeSteps); len(all) != want {
			t.Fatalf("%s: %d router_logits taps guided at an infinite margin, want every one (%d)", name, len(all), want)
		}
		m.routes = all
		if got := failing(); got != "" {
			t.Errorf("%s: a wrong router with every row guided fails at %s, want every tap to pass", name, got)
		}
		m.routes = nil
		m.Close()
	}
}
