package model_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// TestGoldenTapsSmoke runs each committed tiny model's prefill and first decode step on the
// CPU backend and checks every tap's cosine with the reference: a fast engine-level check;
// suites/models holds the reviewed tolerances.
func TestGoldenTapsSmoke(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "phi3-tiny", "gpt2-tiny"} {
		t.Run(name, func(t *testing.T) {
			set, err := golden.Load(filepath.Join("..", "..", "golden", "models", name))
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(cpu.New(), set.Dir, 48)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var names []string
			for _, f := range set.Files("expected") {
				if len(f.Name) > 8 && f.Name[:8] == "prefill." {
					names = append(names, f.Name[8:])
				}
			}
			m.RequestTaps(names)
			ids, err := set.Tensor("prompt_ids")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Prefill(ids.I32); err != nil {
				t.Fatal(err)
			}
			toks, err := set.Tensor("greedy_tokens")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Decode(toks.I32[0]); err != nil {
				t.Fatal(err)
			}
			taps := m.Taps()
			cos := 0.9999
			tol := compare.Tolerance{MinCosine: &cos}
			for _, f := range set.Files("expected") {
				got, ok := taps[f.Name]
				if !ok {
					continue
				}
				want, err := set.Tensor(f.Name)
				if err != nil {
					t.Fatal(err)
				}
				r, err := compare.Compare(got, want, tol)
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				if testing.Verbose() {
					fmt.Printf("%-32s %v\n", f.Name, r.Checks[len(r.Checks)-1].Value)
				}
				if !r.Pass() {
					t.Errorf("%s:\n%s", f.Name, r.Table())
				}
			}
			if len(taps) != len(names)*2 {
				t.Errorf("captured %d taps, want %d", len(taps), 2*len(names))
			}
		})
	}
}

// Seeded sampling is compared for real: with a wrong seed the teacher-forced comparison finds
// steps whose margin is far above epsilon drawing other tokens, and rejects the run. The
// free-running comparison cannot be that strict: here the wrong seed first differs at step 0,
// whose reference margin (0.096) is below epsilon (0.1), so it stops there, accepted; it
// must at least not report all 32 tokens equal.
func TestSeededRejectsAWrongSeed(t *testing.T) {
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", "qwen2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	m, p, err := model.LoadSet(cpu.New(), set)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := model.SeededTeacherForced(m, set, p); err != nil {
		t.Fatalf("the right seed: %v", err)
	}
	// The synthetic logits are peaked (as a trained model's), so another seed changes the draw
	// only at the few steps where tokens compete, and there the reference's own draw is often
	// near an interval edge (a margin below epsilon, where either token passes). So a wrong seed
	// must be rejected wherever it draws another token at a decisive step, accepted only where
	// every difference is at a near-tie, and most wrong seeds must be rejected.
	seed, rejected := p.Sample.Seed, 0
	for d := uint64(1); d <= 4; d++ {
		p.Sample.Seed = seed + d
		steps, err := model.SeededTeacherForced(m, set, p)
		if err != nil {
			rejected++
			continue
		}
		for _, st := range steps {
			if st.Got != st.Want && !(st.Accepted && st.Margin < p.MarginEpsilon) {
				t.Errorf("seed+%d: step %d drew %d, reference %d at margin %.3g (epsilon %g), and passed", d, st.Step, st.Got, st.Want, st.Margin, p.MarginEpsilon)
			}
		}
	}
	if rejected < 2 {
		t.Errorf("teacher-forced comparison rejected %d of 4 wrong seeds", rejected)
	}
	p.Sample.Seed = seed + 2
	steps, err := model.Seeded(m, set, p)
	if err == nil && len(steps) == p.Sample.Tokens && !steps[len(steps)-1].Accepted {
		t.Error("free-running comparison reported a wrong seed's tokens all equal")
	}
}

// A bf16 set is judged only with the model running in bf16, and an fp16 set in fp16: running a
// set in the other dtype would judge it by the other dtype's limits, and is refused by name.
func TestCompareTapsRefusesTheOtherDType(t *testing.T) {
	for name, other := range map[string]tensor.DType{"llama3-tiny-bf16": tensor.F16, "qwen2-tiny": tensor.BF16} {
		set, err := golden.Load(filepath.Join("..", "..", "golden", "models", name))
		if err != nil {
			t.Fatal(err)
		}
		own, p, err := model.LoadSet(cpu.New(), set)
		if err != nil {
			t.Fatal(err)
		}
		own.Close()
		m, err := model.LoadAs(cpu.New(), set.Dir, 48, other)
		if err != nil {
			t.Fatal(err)
		}
		_, err = model.CompareTaps(m, set, p, nil)
		m.Close()
		if err == nil || !strings.Contains(err.Error(), "calibration is of a") {
			t.Errorf("%s run in %s: err %v, want a refusal naming the calibration's dtype", name, other, err)
		}
	}
}
