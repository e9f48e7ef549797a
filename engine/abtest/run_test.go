package abtest

import (
	"path/filepath"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

// tanhForErf is the cpu backend with the tanh approximation where the exact (erf) GELU is
// asked for: a realistic slip, up to ~1e-3 off, that gelu's tolerance rejects.
type tanhForErf struct{ *cpu.Backend }

func (g tanhForErf) GELU(out, x backend.Buffer) error { return g.Backend.GELUTanh(out, x) }

func committedSets(t *testing.T, op string) ([]*golden.Set, *compare.Tolerances) {
	t.Helper()
	root := filepath.Join("..", "..", "golden")
	all, err := golden.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	var sets []*golden.Set
	for _, s := range all {
		if s.Manifest.Kind == golden.KindKernel && s.Manifest.Op == op && s.Manifest.Tier == "committed" {
			sets = append(sets, s)
		}
	}
	if len(sets) == 0 {
		t.Fatalf("no committed %s sets under %s", op, root)
	}
	tols, err := compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return sets, tols
}

func TestRunKernelSetsAcceptsTheSameBuild(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	cases, err := RunKernelSets(Side{Name: "cpu", Backend: cpu.New()}, Side{Name: "cpu", Backend: cpu.New()}, sets, tols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Judge("cpu", "cpu", cases, Options{BudgetMargin: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode() != ExitAccepted || r.Summary.Cases != len(sets) || r.Summary.Regressions != 0 {
		t.Fatalf("%s", r.Markdown())
	}
	for _, o := range r.Outcomes {
		if o.Baseline.Status != Pass || o.Baseline.Budget != o.Candidate.Budget || o.Speed != SpeedNone {
			t.Errorf("%s: %+v", o.ID, o)
		}
	}
}

func TestRunKernelSetsRejectsAWrongCandidate(t *testing.T) {
	sets, tols := committedSets(t, "gelu")
	cases, err := RunKernelSets(Side{Name: "cpu", Backend: cpu.New()}, Side{Name: "cpu+tanh-gelu", Backend: tanhForErf{cpu.New()}}, sets, tols, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Judge("cpu", "cpu+tanh-gelu", cases, Options{BudgetMargin: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode() != ExitRegression || r.Summary.Regressions == 0 {
		t.Fatalf("the tanh GELU passed as the erf GELU:\n%s", r.Markdown())
	}
}
