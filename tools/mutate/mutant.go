package main

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Side is where a mutant lives and where it can run.
type Side string

const (
	// SideGo mutants edit the Go engine and run on the CPU backend (CI).
	SideGo Side = "go"
	// SideCUDA mutants edit cuda/ and run on a GPU host against the precompiled suites.
	SideCUDA Side = "cuda"
)

// Mutant is one planted bug: a deterministic edit of one source file.
type Mutant struct {
	// ID is stable and unique: reports and -only name mutants by it.
	ID   string
	Side Side
	// File is the edited file, slash-separated, relative to the repository root.
	File string
	// Original must occur exactly once in File, so that a source change that moves or
	// rewrites it fails the run instead of silently testing nothing.
	Original    string
	Replacement string
	// Bug is the one-line bug class, as a reviewer would describe it.
	Bug string
	// Suites are the suites expected to catch it (suites/<name> on the Go side,
	// dist/bin/<name>.test on the CUDA side); nil means every suite.
	Suites []string
	// Labels is a Ginkgo label filter narrowing those suites for speed, ANDed with the
	// committed-tier filter; "" runs every committed spec of them.
	Labels string
	// Focus, when set, is a Ginkgo focus regular expression (--ginkgo.focus) that narrows the
	// labelled specs further by their text, which holds each golden case's name: "bf16-" runs
	// only the bf16 cases, the ones a bf16-only bug can fail.
	Focus string
	// Sanitizer, CUDA side only, runs the mutant's suites under `compute-sanitizer --tool
	// <Sanitizer>` (as dist/run sanitize does), and its errors count as a kill: a missing
	// barrier makes wrong numbers only when the warps happen to interleave badly, and racecheck
	// is the check that sees it every time.
	Sanitizer string
	// FullTier runs the mutant's suites over the full-scale tier as well: for a bug that only
	// shows at sizes too large to commit (its cases must be generated on the host first, with
	// `make golden-full` or `gen-golden kernels --tier full --op <op>`).
	FullTier bool
	// Equivalent, when set, says why no correct test can tell this mutant from the original
	// source: it is still run, but not counted in the kill rate.
	Equivalent string
}

// allSuites are the Ginkgo suites of suites/, in the order a mutant runs them.
var allSuites = []string{"kernels", "models", "sampling"}

// sanitizerTools are the compute-sanitizer tools a CUDA mutant may run under.
var sanitizerTools = []string{"memcheck", "racecheck", "initcheck", "synccheck"}

// filter is the Ginkgo label filter the mutant's suites run under.
func (m Mutant) filter() string { return labelFilter(m.Labels, m.FullTier) }

// suites returns the suites a mutant runs.
func (m Mutant) suites() []string {
	if len(m.Suites) == 0 {
		return allSuites
	}
	return m.Suites
}

// modelLevel reports whether the models suite runs the mutant: its failures name a tap.
func (m Mutant) modelLevel() bool { return slices.Contains(m.suites(), "models") }

// Apply returns src with the mutant's edit made, or an error when Original does not occur
// exactly once.
func (m Mutant) Apply(src []byte) ([]byte, error) {
	if n := bytes.Count(src, []byte(m.Original)); n != 1 {
		return nil, fmt.Errorf("%s: the original snippet occurs %d times in %s, want exactly once: the source changed, update the mutant in tools/mutate/catalogue.go (snippet: %q)",
			m.ID, n, m.File, firstLine(m.Original))
	}
	return bytes.Replace(src, []byte(m.Original), []byte(m.Replacement), 1), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

var idPattern = regexp.MustCompile(`^(go|cuda)-[a-z0-9]+(-[a-z0-9]+)*$`)

// validate checks a catalogue's own consistency: what must hold before any source is read.
func validate(cat []Mutant) error {
	var errs []string
	seen := map[string]bool{}
	for i, m := range cat {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Sprintf("mutant %d (%s): %s", i, m.ID, fmt.Sprintf(format, args...)))
		}
		if !idPattern.MatchString(m.ID) || !strings.HasPrefix(m.ID, string(m.Side)+"-") {
			bad("id must be %q followed by lower-case words joined by '-'", string(m.Side)+"-")
		}
		if seen[m.ID] {
			bad("duplicate id")
		}
		seen[m.ID] = true
		switch m.Side {
		case SideGo:
			if !strings.HasPrefix(m.File, "engine/") || path.Ext(m.File) != ".go" || strings.HasSuffix(m.File, "_test.go") {
				bad("a Go mutant edits a non-test .go file under engine/, not %q", m.File)
			}
		case SideCUDA:
			if !strings.HasPrefix(m.File, "cuda/") || !slices.Contains([]string{".cu", ".cuh", ".h"}, path.Ext(m.File)) {
				bad("a CUDA mutant edits a .cu, .cuh or .h file under cuda/, not %q", m.File)
			}
		default:
			bad("side %q: want %q or %q", m.Side, SideGo, SideCUDA)
		}
		if path.Clean(m.File) != m.File || strings.Contains(m.File, "..") {
			bad("file %q is not a clean relative path", m.File)
		}
		if strings.TrimSpace(m.Original) == "" || m.Original == m.Replacement {
			bad("needs a non-blank original snippet and a different replacement")
		}
		if strings.TrimSpace(m.Bug) == "" || strings.Contains(m.Bug, "\n") {
			bad("needs a one-line bug description")
		}
		for _, s := range m.Suites {
			if !slices.Contains(allSuites, s) {
				bad("unknown suite %q (have %v)", s, allSuites)
			}
		}
		if _, err := regexp.Compile(m.Focus); err != nil {
			bad("focus %q is not a regular expression: %v", m.Focus, err)
		}
		if m.Sanitizer != "" && (m.Side != SideCUDA || !slices.Contains(sanitizerTools, m.Sanitizer)) {
			bad("sanitizer %q: only CUDA mutants run under compute-sanitizer, with one of %v", m.Sanitizer, sanitizerTools)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("catalogue:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// selectMutants returns the mutants of side (all sides for "all") whose id matches one of
// the comma-separated regular expressions of only ("" matches every id).
func selectMutants(cat []Mutant, side string, only string) ([]Mutant, error) {
	var res []*regexp.Regexp
	for _, p := range strings.Split(only, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return nil, fmt.Errorf("-only %q: %w", p, err)
		}
		res = append(res, re)
	}
	var out []Mutant
	for _, m := range cat {
		if side != "all" && string(m.Side) != side {
			continue
		}
		match := len(res) == 0
		for _, re := range res {
			match = match || re.MatchString(m.ID)
		}
		if match {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mutant of side %s matches -only %q", side, only)
	}
	return out, nil
}
