package model_test

import (
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/model"
)

// A served step's rows equal, bit for bit on the cpu backend, the model's own prefill of the
// same tokens: chunked, mixed with another sequence's decode, and started from shared pages.
func TestServedEqualsPrefill(t *testing.T) {
	_, m, _ := loadSet(t, "qwen2-tiny")
	V := m.Cfg.Vocab
	a := batchPrompts(V, 13)[0]
	b := append(append([]int32(nil), a[:8]...), batchPrompts(V, 0, 6)[1]...) // a's first 8, then its own
	want := func(ids []int32) []float32 {
		m.RequestTaps([]string{"logits"})
		defer m.RequestTaps(nil)
		if _, err := m.Prefill(ids); err != nil {
			t.Fatal(err)
		}
		return m.Taps()["prefill.logits"].F32
	}
	wantA, wantB := want(a), want(b)
	s, err := m.NewServed(model.ServedOptions{BlockSize: 4, Pages: 16, Seqs: 2, MaxLen: 32, MaxTokens: 32, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	row := func(step []float32, r int) []float32 { return step[r*V : (r+1)*V] }
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: logit %d is %g, the prefill's %g", what, i, got[i], want[i])
			}
		}
	}
	if err := s.Step([]model.Chunk{{Seq: 0, Tokens: a[:5]}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Step([]model.Chunk{{Seq: 0, Tokens: a[5:]}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Logits()
	if err != nil {
		t.Fatal(err)
	}
	same("a's last chunk", row(l.F32, len(a)-6), row(wantA, len(a)-1))
	if err := s.Share(1, 0, 8); err != nil {
		t.Fatal(err)
	}
	if got := s.Pages(1); len(got) != 2 || got[0] != s.Pages(0)[0] || got[1] != s.Pages(0)[1] {
		t.Fatalf("shared pages %v, a's %v", got, s.Pages(0))
	}
	// b's rest and a decode token of a, in one step
	if err := s.Step([]model.Chunk{{Seq: 1, Tokens: b[8:]}, {Seq: 0, Tokens: []int32{5}}}); err != nil {
		t.Fatal(err)
	}
	if l, err = s.Logits(); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < len(b)-8; r++ {
		same("b's row after the shared prefix", row(l.F32, r), row(wantB, 8+r))
	}
	if s.Len(0) != len(a)+1 || s.Len(1) != len(b) {
		t.Fatalf("lengths %d, %d: want %d, %d", s.Len(0), s.Len(1), len(a)+1, len(b))
	}
	s.Release(1)
	if s.Len(1) != 0 || len(s.Pages(0)) != 4 {
		t.Fatalf("after releasing b: its length %d, a's pages %v", s.Len(1), s.Pages(0))
	}
}

// Bad requests are errors that name what is wrong, never a pass.
func TestServedRefusals(t *testing.T) {
	_, m, _ := loadSet(t, "qwen2-tiny")
	for _, o := range []model.ServedOptions{
		{BlockSize: 3, Pages: 4, Seqs: 1, MaxLen: 8, MaxTokens: 8},
		{BlockSize: 512, Pages: 4, Seqs: 1, MaxLen: 8, MaxTokens: 8},
		{BlockSize: 4, Pages: 0, Seqs: 1, MaxLen: 8, MaxTokens: 8},
		{BlockSize: 4, Pages: 4, Seqs: 1, MaxLen: 1 << 20, MaxTokens: 8},
	} {
		if s, err := m.NewServed(o); err == nil {
			s.Close()
			t.Errorf("NewServed(%+v) accepted", o)
		}
	}
	s, err := m.NewServed(model.ServedOptions{BlockSize: 4, Pages: 3, Seqs: 2, MaxLen: 16, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	toks := func(n int) []int32 { return make([]int32, n) }
	for _, c := range []struct {
		chunks []model.Chunk
		want   string
	}{
		{nil, "0 chunks"},
		{[]model.Chunk{{Seq: 2, Tokens: toks(1)}}, "sequence 2"},
		{[]model.Chunk{{Seq: 0, Tokens: toks(1)}, {Seq: 0, Tokens: toks(1)}}, "two chunks"},
		{[]model.Chunk{{Seq: 0, Tokens: toks(17)}}, "cache length"},
		{[]model.Chunk{{Seq: 0, Tokens: toks(13)}}, "new pages"},
		{[]model.Chunk{{Seq: 0, Tokens: []int32{int32(m.Cfg.Vocab)}}}, "vocabulary"},
	} {
		err := s.Step(c.chunks)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Step(%d chunks): %v, want an error about %q", len(c.chunks), err, c.want)
		}
	}
	if err := s.Step([]model.Chunk{{Seq: 0, Tokens: toks(6)}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dst, src, n int
		want        string
	}{
		{1, 0, 6, "multiple of the block size"},
		{1, 0, 8, "at most its length"},
		{0, 0, 4, "another, empty sequence"},
		{1, 5, 4, "sequence 5"},
	} {
		if err := s.Share(c.dst, c.src, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Share(%d, %d, %d): %v, want an error about %q", c.dst, c.src, c.n, err, c.want)
		}
	}
}

// A served plan runs every position of every sequence exactly once, in order, each step with
// distinct sequences; a share is whole pages of a common prefix, short of the sharer's last
// prompt token, whose source wrote them in earlier steps; the same seed gives the same plan.
func TestPlanServedCoversEveryPosition(t *testing.T) {
	const steps, bs = 8, 4
	base := batchPrompts(384, 16, 5, 11, 1, 23, 8)
	seqs := make([]model.BatchSequence, len(base))
	for i, p := range base {
		if i == 4 || i == 5 { // 4 and 5 begin with sequence 0's first 13 and 6 tokens
			n := map[int]int{4: 13, 5: 6}[i]
			p = append(append([]int32(nil), base[0][:n]...), p[min(n, len(p)):]...)
		}
		seqs[i] = model.BatchSequence{Prompt: p, Tokens: make([]int32, steps+1)}
	}
	for seed := uint64(0); seed < 20; seed++ {
		pl := model.PlanServed(seqs, steps, bs, seed)
		if again := model.PlanServed(seqs, steps, bs, seed); again.String() != pl.String() || len(again.Steps) != len(pl.Steps) {
			t.Fatalf("seed %d: two plans differ: %s / %s", seed, pl, again)
		}
		next := make([]int, len(seqs))            // each sequence's next position
		written := make([]map[int]int, len(seqs)) // position -> step that wrote it
		for i := range seqs {
			written[i] = map[int]int{}
			if sh, ok := pl.Shares[i]; ok {
				src, n := sh[0], sh[1]
				if n%bs != 0 || n <= 0 || n > len(seqs[i].Prompt)-1 || n > len(seqs[src].Prompt) {
					t.Fatalf("seed %d: sequence %d shares %d tokens of %d", seed, i, n, src)
				}
				for p := 0; p < n; p++ {
					if seqs[i].Prompt[p] != seqs[src].Prompt[p] {
						t.Fatalf("seed %d: sequence %d shares position %d of %d, whose token differs", seed, i, p, src)
					}
				}
				next[i] = n
			}
		}
		for k, st := range pl.Steps {
			if len(st) == 0 {
				t.Fatalf("seed %d: step %d is empty", seed, k)
			}
			in := map[int]bool{}
			for _, ch := range st {
				if in[ch.Seq] {
					t.Fatalf("seed %d: step %d has two chunks of sequence %d", seed, k, ch.Seq)
				}
				in[ch.Seq] = true
				if sh, ok := pl.Shares[ch.Seq]; ok && next[ch.Seq] == sh[1] {
					for p := 0; p < sh[1]; p++ { // the source (or its own source) wrote them earlier
						src := sh[0]
						for s2, ok := pl.Shares[src]; ok && p < s2[1]; s2, ok = pl.Shares[src] {
							src = s2[0]
						}
						if w, ok := written[src][p]; !ok || w >= k {
							t.Fatalf("seed %d: sequence %d starts at step %d on position %d of %d, written at step %d (%v)", seed, ch.Seq, k, p, sh[0], w, ok)
						}
					}
				}
				for j := range ch.Tokens {
					written[ch.Seq][next[ch.Seq]+j] = k
				}
				next[ch.Seq] += len(ch.Tokens)
			}
		}
		for i, s := range seqs {
			if want := len(s.Prompt) + steps; next[i] != want {
				t.Fatalf("seed %d: sequence %d ran to position %d, want %d", seed, i, next[i], want)
			}
		}
	}
}
