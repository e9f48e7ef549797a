package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// spec builds one spec report as the suites would produce it.
func spec(state types.SpecState, containers []string, leaf string, labels []string, msg string, entries ...types.ReportEntry) types.SpecReport {
	sr := types.SpecReport{ContainerHierarchyTexts: containers, LeafNodeText: leaf, LeafNodeType: types.NodeTypeIt,
		LeafNodeLabels: labels, State: state, ReportEntries: entries}
	sr.Failure.Message = msg
	return sr
}

func entry(name, value string) types.ReportEntry {
	return types.ReportEntry{Name: name, Value: types.WrapEntryValue(value)}
}

func TestParseReportFindsFailuresAndFirstTaps(t *testing.T) {
	tapSpec := []string{"model conformance", "every tap of prefill and the stored decode steps"}
	greedy := []string{"model conformance", "greedy generation of the reference's tokens"}
	rep := types.Report{SpecReports: []types.SpecReport{
		spec(types.SpecStatePassed, tapSpec, "gpt2-tiny", []string{"model", "model:gpt2-tiny"}, ""),
		spec(types.SpecStateSkipped, tapSpec, "qwen2.5-0.5b", []string{"model", "model:qwen2.5-0.5b", "slow"}, ""),
		// A model whose taps fail: the tap spec's message is the authority, even though a
		// broken-variant spec's table (seen first) names another tap.
		spec(types.SpecStateFailed, []string{"model tolerances are tight", "a broken variant fails at the first tap it changes"},
			"qwen2-tiny: RoPE theta 1e4 instead of 1e6", []string{"model", "model:qwen2-tiny", "tightness"},
			"Expected\n    <string>: prefill.layers.0.attn_norm\nlayer diff:\n...\nfirst tap out of tolerance: prefill.layers.0.attn_norm (why)\n"),
		spec(types.SpecStateFailed, tapSpec, "qwen2-tiny", []string{"model", "model:qwen2-tiny"},
			"qwen2-tiny/greedy32: tap prefill.layers.0.q_rope is out of tolerance; layer diff:\n>> prefill.layers.0.q_rope ...\nfirst tap out of tolerance: prefill.layers.0.q_rope (why)\n",
			entry("layer diff qwen2-tiny/greedy32", "...\nfirst tap out of tolerance: prefill.layers.0.q_rope (why)\n")),
		// A model whose taps all pass but whose tokens differ: the greedy spec's table says so.
		spec(types.SpecStatePanicked, greedy, "phi3-tiny", []string{"model", "model:phi3-tiny"}, "token 0 differs",
			entry("worst tap budget", "prefill.logits: 40% of its budget"),
			entry("layer diff phi3-tiny/greedy32", "   tap ...\nall 297 taps within tolerance\n")),
	}}
	data, err := json.Marshal([]types.Report{rep})
	if err != nil {
		t.Fatal(err)
	}
	res, err := parseReport("models", data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ran != 4 {
		t.Errorf("ran %d specs, want 4 (the skipped one does not count)", res.Ran)
	}
	wantFailed := []string{
		"models: model tolerances are tight a broken variant fails at the first tap it changes qwen2-tiny: RoPE theta 1e4 instead of 1e6",
		"models: model conformance every tap of prefill and the stored decode steps qwen2-tiny",
		"models: model conformance greedy generation of the reference's tokens phi3-tiny",
	}
	if !slices.Equal(res.Failed, wantFailed) {
		t.Errorf("failed specs:\n%q\nwant\n%q", res.Failed, wantFailed)
	}
	wantTaps := []string{"qwen2-tiny: prefill.layers.0.q_rope", "phi3-tiny: none (all 297 taps in tolerance)"}
	if !slices.Equal(res.FirstTaps, wantTaps) {
		t.Errorf("first taps %q, want %q", res.FirstTaps, wantTaps)
	}
	if _, err := parseReport("models", []byte("not json")); err == nil {
		t.Error("a corrupt report is accepted")
	}
}

func TestFirstTapsPreferTheBestSource(t *testing.T) {
	var f firstTaps
	f.note("a", "none (all 9 taps in tolerance)", fromPassingTable)
	f.note("b", "prefill.embed", fromTable)
	f.note("a", "decode.0.layers.1.k", fromTable)
	f.note("a", "prefill.layers.0.q", fromTapSpec)
	f.note("a", "prefill.logits", fromTable) // a worse source never replaces a better one
	if got, want := f.list(), []string{"a: prefill.layers.0.q", "b: prefill.embed"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestJudge(t *testing.T) {
	model := Mutant{ID: "go-m", Suites: []string{"models"}}
	kernel := Mutant{ID: "go-k", Suites: []string{"kernels"}, Labels: "op:rope"}
	full := Mutant{ID: "go-f", Suites: []string{"kernels"}, Labels: "op:rope", FullTier: true}
	for _, c := range []struct {
		what    string
		m       Mutant
		results []suiteResult
		status  Status
		caught  []string
		taps    []string
	}{
		{"nothing failed", kernel, []suiteResult{{Ran: 10}}, Survived, nil, nil},
		{"no spec selected", kernel, []suiteResult{{}}, Errored, nil, nil},
		// A full-tier mutant is only tested where the full-tier sets exist.
		{"full tier absent: not a survival", full, []suiteResult{{Ran: 10}}, Errored, nil, nil},
		{"full tier present, nothing failed", full, []suiteResult{{Ran: 12, RanSlow: 2}}, Survived, nil, nil},
		{"full tier absent, a committed spec failed", full, []suiteResult{{Ran: 10, Failed: []string{"kernels: kernel conformance rope x"}}},
			Caught, []string{"kernels: kernel conformance rope x"}, nil},
		{"a crash is a kill", kernel, []suiteResult{{Crash: "kernels: timed out"}}, Caught, []string{"kernels: timed out"}, nil},
		{"conformance before tightness", model,
			[]suiteResult{{Ran: 5, Failed: []string{"models: model tolerances are tight x", "models: model conformance every tap y"}, FirstTaps: []string{"qwen2-tiny: prefill.embed"}}},
			Caught, []string{"models: model conformance every tap y", "models: model tolerances are tight x"}, []string{"qwen2-tiny: prefill.embed"}},
		{"taps only for model-level mutants", kernel,
			[]suiteResult{{Ran: 5, Failed: []string{"kernels: kernel conformance rope x"}, FirstTaps: []string{"ignored"}}},
			Caught, []string{"kernels: kernel conformance rope x"}, nil},
	} {
		o := outcomeOf(c.m)
		judge(&o, c.m, c.results)
		if o.Status != c.status || !slices.Equal(o.CaughtBy, c.caught) || !slices.Equal(o.FirstTaps, c.taps) {
			t.Errorf("%s: got %s %q %q, want %s %q %q", c.what, o.Status, o.CaughtBy, o.FirstTaps, c.status, c.caught, c.taps)
		}
	}
}

func outcomes(statuses ...Status) []Outcome {
	var outs []Outcome
	for i, s := range statuses {
		outs = append(outs, Outcome{ID: "go-m" + string(rune('a'+i)), Status: s})
	}
	return outs
}

func TestKillRate(t *testing.T) {
	all := make([]Status, 31)
	for i := range all {
		all[i] = Caught
	}
	s := summarize(outcomes(all...))
	if got := s.KillRate(); got != "killed 31 of 31 non-equivalent mutants (100%)" || !s.OK() {
		t.Errorf("all caught: %q, OK %v", got, s.OK())
	}

	outs := outcomes(Caught, Caught, Survived, Survived, BuildFailed, NotApplicable, Errored)
	outs[3].Equivalent = "fp64 math: no input tells them apart" // an equivalent survivor is not counted
	s = summarize(outs)
	want := Summary{Mutants: 7, Equivalent: 1, NonEquivalent: 3, Killed: 2, Survived: 1, BuildFailed: 1, NotApplicable: 1, Errors: 1}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	if got := s.KillRate(); got != "killed 2 of 3 non-equivalent mutants (66.6%); 1 marked equivalent, 1 did not build, 1 no longer apply, 1 could not run" {
		t.Errorf("kill rate %q", got)
	}
	if s.OK() {
		t.Error("a survivor passes")
	}

	eq := outcomes(Caught, Survived)
	eq[1].Equivalent = "why"
	if s := summarize(eq); !s.OK() || s.KillRate() != "killed 1 of 1 non-equivalent mutants (100%); 1 marked equivalent" {
		t.Errorf("an equivalent survivor fails the run: %q", s.KillRate())
	}
	if s := summarize(outcomes(Built, Built)); !s.OK() || s.KillRate() != "2 of 2 mutants apply and compile; none was run (compile only)" {
		t.Errorf("compile only: %q", s.KillRate())
	}
	for _, c := range []struct {
		k, n int
		want string
	}{{199, 200, "99.5%"}, {1999, 2000, "99.9%"}, {2, 3, "66.6%"}, {0, 4, "0%"}, {0, 0, "n/a"}} {
		if got := percent(c.k, c.n); got != c.want {
			t.Errorf("percent(%d, %d) = %s, want %s", c.k, c.n, got, c.want)
		}
	}
}

func TestReportFormats(t *testing.T) {
	outs := []Outcome{
		{ID: "go-a", Side: SideGo, File: "engine/a.go", Bug: "a | pipe", Status: Caught, CaughtBy: []string{"kernels: x", "kernels: y", "kernels: z"},
			FirstTaps: []string{"qwen2-tiny: prefill.embed"}, Seconds: 2},
		{ID: "go-b", Side: SideGo, File: "engine/b.go", Bug: "b", Status: Survived, Detail: "12 specs passed", Seconds: 3},
		{ID: "go-c", Side: SideGo, File: "engine/c.go", Bug: "c", Status: BuildFailed, Detail: "c.go:1: undefined: q"},
	}
	r := newReport("go", outs, 5)
	md := r.Markdown()
	for _, want := range []string{
		"| mutant | side | description | result | caught by | first failing tap | time |",
		`| go-a | go | a \| pipe | CAUGHT | kernels: x; kernels: y; (+1 more) | qwen2-tiny: prefill.embed | 2.0s |`,
		"| go-b | go | b | SURVIVED | 12 specs passed |  | 3.0s |",
		"**killed 1 of 2 non-equivalent mutants (50%); 1 did not build** (go side, 5 s)",
		"SURVIVOR go-b (engine/b.go): b.",
		"BUILD-FAILED go-c: c.go:1: undefined: q",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	var back Report
	if err := json.Unmarshal(r.JSON(), &back); err != nil {
		t.Fatal(err)
	}
	if back.KillRate != r.KillRate || back.Summary != r.Summary || len(back.Mutants) != 3 ||
		back.Mutants[0].FirstTaps[0] != "qwen2-tiny: prefill.embed" || back.Mutants[2].Status != BuildFailed {
		t.Errorf("JSON round trip: %+v", back)
	}
}
