package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// prefillThenDecode prefills prompt, greedy-decodes steps tokens and returns every logit row.
func prefillThenDecode(t *testing.T, m *model.Model, prompt []int32, steps int) [][]float32 {
	t.Helper()
	l, err := m.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]float32{l.F32}
	for range steps {
		best := 0
		for i, v := range rows[len(rows)-1] {
			if v > rows[len(rows)-1][best] {
				best = i
			}
		}
		l, err := m.Decode(int32(best))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, l.F32)
	}
	return rows
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// A prefill replayed from a graph computes what it does op by op, bit for bit, and leaves the
// same KV cache (the decode steps after it agree too): with another prompt of the captured
// length, and after prompts of other lengths have been captured and dropped.
func TestPrefillReplayedFromAGraph(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "gpt2-tiny"} {
		dir := filepath.Join("..", "..", "golden", "models", name)
		m, err := model.Load(cpu.New(), dir, 32)
		if err != nil {
			t.Fatal(err)
		}
		a, b := []int32{5, 9, 2, 7, 1, 3}, []int32{8, 8, 1, 4, 6, 2}
		m.UseGraphs(false)
		wantA, wantB := prefillThenDecode(t, m, a, 3), prefillThenDecode(t, m, b, 3)
		if sameBits(wantA, wantB) {
			t.Fatalf("%s: two prompts give the same logits: the check below would prove nothing", name)
		}
		m.UseGraphs(true)
		for i, run := range []struct {
			prompt   []int32
			want     [][]float32
			replayed int // prefills replayed so far
		}{
			{a, wantA, 0}, // seen: op by op
			{b, wantB, 1}, // the second of length 6: captured, then launched
			{a, wantA, 2}, // replayed with another prompt than the captured one
			{b, wantB, 3},
		} {
			got := prefillThenDecode(t, m, run.prompt, 3)
			if !sameBits(got, run.want) {
				t.Errorf("%s: run %d: logits differ from the op-by-op run's", name, i)
			}
			if m.PrefillReplays() != run.replayed {
				t.Errorf("%s: run %d: %d prefills replayed, want %d", name, i, m.PrefillReplays(), run.replayed)
			}
		}
		// Five more lengths, each twice (captured on the second): the oldest graphs are dropped
		// to keep at most four, and length 6 still computes the same after.
		for n := 1; n <= 5; n++ {
			for range 2 {
				if _, err := m.Prefill(a[:n]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := prefillThenDecode(t, m, a, 3); !sameBits(got, wantA) {
			t.Errorf("%s: after other lengths were captured, length 6 differs from op by op", name)
		}
		// Taps need host copies between ops: a prefill with taps is never replayed.
		before := m.PrefillReplays()
		m.RequestTaps([]string{"embed"})
		if _, err := m.Prefill(a); err != nil {
			t.Fatal(err)
		}
		if len(m.Taps()) != 1 || m.PrefillReplays() != before {
			t.Errorf("%s: a prefill with a tap requested was replayed or lost its tap", name)
		}
		m.Close()
	}
}
