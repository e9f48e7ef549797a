package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestApplyNeedsExactlyOneOccurrence(t *testing.T) {
	m := Mutant{ID: "go-x", File: "engine/x.go", Original: "a + b", Replacement: "a - b"}
	for _, c := range []struct {
		src, want string
		count     int // occurrences, for the error message
	}{
		{"return a + b\n", "return a - b\n", 1},
		{"return a * b\n", "", 0},
		{"x := a + b\ny := a + b\n", "", 2},
	} {
		got, err := m.Apply([]byte(c.src))
		if c.want == "" {
			if err == nil {
				t.Errorf("%q: applied although the snippet occurs %d times", c.src, c.count)
			} else if !strings.Contains(err.Error(), fmt.Sprintf("occurs %d times", c.count)) {
				t.Errorf("%q: error %q does not say how often the snippet occurs", c.src, err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.src, got, err, c.want)
		}
	}
}

func TestCatalogueIsValid(t *testing.T) {
	if err := validate(catalogue); err != nil {
		t.Fatal(err)
	}
	n := map[Side]int{}
	for _, m := range catalogue {
		n[m.Side]++
	}
	if n[SideGo]+n[SideCUDA] < 30 || n[SideGo] <= n[SideCUDA] {
		t.Errorf("catalogue has %d Go and %d CUDA mutants: want at least 30, most of them Go", n[SideGo], n[SideCUDA])
	}
}

// The catalogue must not rot: every mutant applies to the tree this test runs in. A change
// that moves or rewrites a mutated line fails here, in `make test`, not in a later mutation
// run that would otherwise report the mutant as not applicable.
func TestCatalogueAppliesToThisTree(t *testing.T) {
	root, err := findRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range applyAll(root, catalogue) {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestValidateRejectsMalformedMutants(t *testing.T) {
	good := Mutant{ID: "go-ok", Side: SideGo, File: "engine/sample/sample.go", Original: "a", Replacement: "b", Bug: "a bug"}
	if err := validate([]Mutant{good}); err != nil {
		t.Fatalf("a well-formed mutant is refused: %v", err)
	}
	for what, m := range map[string]Mutant{
		"id without its side": {ID: "ok", Side: SideGo, File: good.File, Original: "a", Replacement: "b", Bug: "x"},
		"unknown side":        {ID: "go-x", Side: "rust", File: good.File, Original: "a", Replacement: "b", Bug: "x"},
		"Go outside engine/":  {ID: "go-x", Side: SideGo, File: "cmd/touchstone/main.go", Original: "a", Replacement: "b", Bug: "x"},
		"Go test file":        {ID: "go-x", Side: SideGo, File: "engine/sample/sample_test.go", Original: "a", Replacement: "b", Bug: "x"},
		"CUDA outside cuda/":  {ID: "cuda-x", Side: SideCUDA, File: "engine/x.cu", Original: "a", Replacement: "b", Bug: "x"},
		"path escaping":       {ID: "go-x", Side: SideGo, File: "engine/../x.go", Original: "a", Replacement: "b", Bug: "x"},
		"blank snippet":       {ID: "go-x", Side: SideGo, File: good.File, Original: " ", Replacement: "b", Bug: "x"},
		"no-op edit":          {ID: "go-x", Side: SideGo, File: good.File, Original: "a", Replacement: "a", Bug: "x"},
		"multi-line bug":      {ID: "go-x", Side: SideGo, File: good.File, Original: "a", Replacement: "b", Bug: "x\ny"},
		"unknown suite":       {ID: "go-x", Side: SideGo, File: good.File, Original: "a", Replacement: "b", Bug: "x", Suites: []string{"kernel"}},
		"bad focus":           {ID: "go-x", Side: SideGo, File: good.File, Original: "a", Replacement: "b", Bug: "x", Focus: "bf16-("},
	} {
		if err := validate([]Mutant{m}); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	if err := validate([]Mutant{good, good}); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate ids: %v", err)
	}
}

func TestSelectMutants(t *testing.T) {
	cat := []Mutant{{ID: "go-a-one", Side: SideGo}, {ID: "go-b", Side: SideGo}, {ID: "cuda-a", Side: SideCUDA}}
	ids := func(ms []Mutant) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.ID)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct{ side, only, want string }{
		{"go", "", "go-a-one,go-b"},
		{"cuda", "", "cuda-a"},
		{"all", "", "go-a-one,go-b,cuda-a"},
		{"go", "go-a.*", "go-a-one"},
		{"go", "go-a, go-b", "go-b"}, // whole ids: go-a is not go-a-one
		{"all", ".*-a.*", "go-a-one,cuda-a"},
	} {
		ms, err := selectMutants(cat, c.side, c.only)
		if err != nil || ids(ms) != c.want {
			t.Errorf("side %s, only %q: got %s, %v; want %s", c.side, c.only, ids(ms), err, c.want)
		}
	}
	if _, err := selectMutants(cat, "go", "nothing"); err == nil {
		t.Error("an -only that matches nothing is accepted")
	}
	if _, err := selectMutants(cat, "go", "("); err == nil {
		t.Error("a bad regular expression is accepted")
	}
}

func TestLabelFilter(t *testing.T) {
	if got := labelFilter("", false); got != "!slow && !benchmark" {
		t.Errorf("no labels: %q", got)
	}
	if got := labelFilter("op:rope || op:gemm", false); got != "(!slow && !benchmark) && (op:rope || op:gemm)" {
		t.Errorf("labels: %q", got)
	}
	if got := (Mutant{Labels: "op:attention_decode", FullTier: true}).filter(); got != "(!benchmark) && (op:attention_decode)" {
		t.Errorf("full tier: %q", got)
	}
}

func TestPlantRestoresTheFile(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "engine", "x.go")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	orig := "package x\n\nfunc f(a, b int) int { return a + b }\n"
	if err := os.WriteFile(p, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Mutant{ID: "go-x", File: "engine/x.go", Original: "a + b", Replacement: "a - b"}
	restore, err := plant(root, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !strings.Contains(string(got), "a - b") {
		t.Errorf("planted file: %q", got)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != orig {
		t.Errorf("restored file: %q", got)
	}
	m.Original = "a * b"
	if _, err := plant(root, m); err == nil {
		t.Error("planted a mutant whose snippet does not occur")
	}
}

func TestCopyTreeSkipsAndKeepsTimes(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, f := range []string{"go.mod", "golden/kernels/x.npy", "golden/.cache/big.npy", "build/obj.o", "cuda/build/lib.so", "cuda/kernels/a.cu"} {
		p := filepath.Join(src, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyTree(src, dst, skipInCopy); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{"go.mod": true, "golden/kernels/x.npy": true, "cuda/kernels/a.cu": true,
		"golden/.cache/big.npy": false, "build/obj.o": false, "cuda/build/lib.so": false} {
		info, err := os.Stat(filepath.Join(dst, filepath.FromSlash(f)))
		if (err == nil) != want {
			t.Errorf("%s: copied = %v, want %v", f, err == nil, want)
		}
		if err == nil && !info.ModTime().Equal(old) {
			t.Errorf("%s: modification time %v, want %v (make compares them)", f, info.ModTime(), old)
		}
	}
}
