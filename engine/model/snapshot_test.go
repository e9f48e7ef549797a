package model_test

import (
	"path/filepath"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// A model restored from its snapshot after a broken variant passes every tap again, with
// the configuration and weight references it was loaded with: what lets one load serve every
// spec of a set.
func TestSnapshotUndoesABrokenVariant(t *testing.T) {
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", "qwen2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	tols, err := compare.LoadTolerances(filepath.Join("..", "..", "golden", "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, p, err := model.LoadSet(cpu.New(), set)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	firstFailure := func() int {
		t.Helper()
		rows, err := model.CompareTaps(m, set, p, tols)
		if err != nil {
			t.Fatal(err)
		}
		return compare.FirstFailure(rows)
	}
	theta, bk, fused := m.Cfg.RopeTheta, m.Layers[1].Attn.Bk, m.Fused
	restore := m.Snapshot()
	m.Cfg.RopeTheta = 1e4
	a := m.Layers[1].Attn
	a.Bk, a.Bv = a.Bv, a.Bk
	m.Fused = !fused
	if firstFailure() < 0 {
		t.Fatal("the broken variant passed every tap")
	}
	m.Layers = m.Layers[:1]
	restore()
	if m.Cfg.RopeTheta != theta || m.Layers[1].Attn.Bk != bk || m.Fused != fused || m.Pos() != 0 {
		t.Fatalf("not restored: theta %v, fused %v, pos %d", m.Cfg.RopeTheta, m.Fused, m.Pos())
	}
	if i := firstFailure(); i >= 0 {
		t.Fatalf("tap %d fails after the restore", i)
	}
}
