package sample

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
)

const goodParams = `{"vocab": 5, "epsilon": 1e-9, "cases": [
 {"name": "greedy", "row": 0, "temperature": 0, "top_k": 0, "top_p": 1, "seed": 0, "step": 0, "token": 2,
  "u": null, "philox": null, "candidates": 5, "kept": 1, "margin": null, "near_tie": false, "alternatives": []},
 {"name": "drawn", "row": 1, "temperature": 1, "top_k": 0, "top_p": 0.5, "seed": 18446744073709551615, "step": 4294967301, "token": 3,
  "u": 0.5, "philox": [2147483648, 0, 7, 9], "candidates": 5, "kept": 2, "margin": 0.01, "near_tie": false, "alternatives": []}],
 "streams": [{"seed": 0, "step": 0, "row": 0, "n": 1, "words": [[1717299413, 3781805453, 3159862348, 2600524760]]}]}`

func TestParseGolden(t *testing.T) {
	p, err := ParseGolden([]byte(goodParams), 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Cases[1]; c.Seed != 1<<64-1 || c.Step != 1<<32+5 || c.U != 0.5 || c.Exact(1e-9) != true {
		t.Errorf("case decoded as %+v", c)
	}
	if !p.Cases[0].Exact(1e-9) || p.Cases[0].Margin != nil {
		t.Errorf("greedy case: margin null must mean exact: %+v", p.Cases[0])
	}
	for name, edit := range map[string][2]string{
		"unknown key":        {`"near_tie": false, "alternatives": []}]`, `"near_tie": false, "alternatives": [], "x": 1}]`},
		"missing key":        {`"margin": null, `, ``},
		"vocab mismatch":     {`"vocab": 5`, `"vocab": 6`},
		"row out of range":   {`"row": 1`, `"row": 2`},
		"bad top_p":          {`"top_p": 0.5`, `"top_p": 0`},
		"token out of vocab": {`"token": 3`, `"token": 5`},
		"three words":        {`[2147483648, 0, 7, 9]`, `[2147483648, 0, 7]`},
		"u not of words":     {`"u": 0.5`, `"u": 0.25`},
		"stream length":      {`"n": 1`, `"n": 2`},
		"negative margin":    {`"margin": 0.01`, `"margin": -1`},
		"not json":           {`{"vocab"`, `{vocab`},
		"seed overflow":      {`18446744073709551615`, `18446744073709551616`},
	} {
		bad := strings.Replace(goodParams, edit[0], edit[1], 1)
		if bad == goodParams {
			t.Fatalf("%s: edit did not apply", name)
		}
		if _, err := ParseGolden([]byte(bad), 2, 5); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func FuzzParseGolden(f *testing.F) {
	f.Add([]byte(goodParams), 2, 5)
	f.Add([]byte(`{"vocab": 1, "epsilon": 0.5, "cases": [], "streams": []}`), 1, 1)
	f.Fuzz(func(t *testing.T, data []byte, rows, vocab int) {
		p, err := ParseGolden(data, rows, vocab)
		if err != nil {
			return
		}
		for _, c := range p.Cases {
			if c.Row < 0 || c.Row >= rows || c.Token < 0 || c.Token >= vocab || (c.Temperature > 0 && len(c.Philox) != 4) {
				t.Fatalf("accepted an invalid case %+v", c)
			}
		}
	})
}

// The committed sampling sets, drawn by this package: the Go implementation against the
// Python reference, without any backend.
func TestCommittedSetsAgree(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("..", "..", "golden", "sampling", "*"))
	if len(dirs) < 3 {
		t.Fatalf("found %d sampling sets, want 3", len(dirs))
	}
	for _, dir := range dirs {
		set, err := golden.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := set.Tensor("logits")
		if err != nil {
			t.Fatal(err)
		}
		rows, vocab := logits.Shape[0], logits.Shape[1]
		p, err := ParseGolden(set.Manifest.Params, rows, vocab)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, c := range p.Cases {
			cfg := backend.SampleConfig{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, Seed: c.Seed, Step: c.Step}
			r, err := Row(logits.F32[c.Row*vocab:(c.Row+1)*vocab], cfg, uint32(c.Row))
			if err != nil {
				t.Errorf("%s %s: %v", set.ID(), c.Name, err)
				continue
			}
			if c.Temperature > 0 && (r.Words != [4]uint32(c.Philox) || r.U != c.U) {
				t.Errorf("%s %s: words %08x u %v, reference %08x %v", set.ID(), c.Name, r.Words, r.U, c.Philox, c.U)
			}
			if c.Exact(p.Epsilon) && r.Token != c.Token {
				t.Errorf("%s %s: token %d, reference %d (margin %v)", set.ID(), c.Name, r.Token, c.Token, c.Margin)
			}
			if !c.Exact(p.Epsilon) && !slices.Contains(c.Alternatives, r.Token) {
				t.Errorf("%s %s: near tie: token %d not in %v", set.ID(), c.Name, r.Token, c.Alternatives)
			}
			if r.Candidates != c.Candidates && c.Temperature > 0 || r.Kept != c.Kept && c.Temperature > 0 {
				t.Errorf("%s %s: n %d n' %d, reference %d %d", set.ID(), c.Name, r.Candidates, r.Kept, c.Candidates, c.Kept)
			}
			if c.Margin != nil && c.Temperature > 0 && math.Abs(r.Margin-*c.Margin) > 1e-9 {
				t.Errorf("%s %s: margin %v, reference %v", set.ID(), c.Name, r.Margin, *c.Margin)
			}
		}
		for _, st := range p.Streams {
			for i, w := range st.Words {
				if got := Words(st.Seed, st.Step+uint64(i), st.Row); got != [4]uint32(w) {
					t.Errorf("%s stream seed %d step %d+%d row %d: %08x, reference %08x", set.ID(), st.Seed, st.Step, i, st.Row, got, w)
				}
			}
		}
	}
}
