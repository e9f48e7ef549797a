package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Status is a mutant's verdict.
type Status string

const (
	// Caught: at least one spec failed (or the suite crashed or hung) with the mutant in.
	Caught Status = "CAUGHT"
	// Survived: every selected spec passed with the mutant in.
	Survived Status = "SURVIVED"
	// BuildFailed: the mutated source does not compile: a catalogue bug.
	BuildFailed Status = "BUILD-FAILED"
	// NotApplicable: the original snippet no longer occurs exactly once: the catalogue rotted.
	NotApplicable Status = "NOT-APPLICABLE"
	// Errored: the harness itself could not run the mutant (no spec selected, I/O).
	Errored Status = "ERROR"
	// Built: compiled but not run (-compile-only: CUDA mutants on a machine without a GPU).
	Built Status = "BUILT"
)

// Outcome is one mutant's result.
type Outcome struct {
	ID         string   `json:"id"`
	Side       Side     `json:"side"`
	File       string   `json:"file"`
	Bug        string   `json:"description"`
	Equivalent string   `json:"equivalent,omitempty"`
	Status     Status   `json:"status"`
	CaughtBy   []string `json:"caught_by,omitempty"`
	FirstTaps  []string `json:"first_failing_tap,omitempty"` // "<model>: <tap>", model-level mutants
	Detail     string   `json:"detail,omitempty"`            // build error, crash, why not applicable
	Seconds    float64  `json:"seconds"`
}

func outcomeOf(m Mutant) Outcome {
	return Outcome{ID: m.ID, Side: m.Side, File: m.File, Bug: m.Bug, Equivalent: m.Equivalent}
}

// Summary is the kill-rate arithmetic over a run.
type Summary struct {
	Mutants       int `json:"mutants"`
	Equivalent    int `json:"equivalent"`     // marked equivalent (not counted)
	NonEquivalent int `json:"non_equivalent"` // caught or survived, not marked equivalent
	Killed        int `json:"killed"`
	Survived      int `json:"survived"`
	BuildFailed   int `json:"build_failed"`
	NotApplicable int `json:"not_applicable"`
	Errors        int `json:"errors"`
	Built         int `json:"built_not_run,omitempty"`
}

func summarize(outs []Outcome) Summary {
	s := Summary{Mutants: len(outs)}
	for _, o := range outs {
		switch {
		case o.Status == BuildFailed:
			s.BuildFailed++
		case o.Status == NotApplicable:
			s.NotApplicable++
		case o.Status == Errored:
			s.Errors++
		case o.Status == Built:
			s.Built++
		case o.Equivalent != "":
			s.Equivalent++
		case o.Status == Caught:
			s.NonEquivalent++
			s.Killed++
		case o.Status == Survived:
			s.NonEquivalent++
			s.Survived++
		}
	}
	return s
}

// OK is true when every non-equivalent mutant was killed and every mutant could run.
func (s Summary) OK() bool {
	return s.Survived == 0 && s.BuildFailed == 0 && s.NotApplicable == 0 && s.Errors == 0
}

// percent is killed/total rounded down to 0.1, so that 199 of 200 never reads 100%.
func percent(killed, total int) string {
	if total == 0 {
		return "n/a"
	}
	p := math.Floor(1000*float64(killed)/float64(total)) / 10
	return strconv.FormatFloat(p, 'f', -1, 64) + "%"
}

// KillRate is the headline: "killed 31 of 31 non-equivalent mutants (100%)".
func (s Summary) KillRate() string {
	line := fmt.Sprintf("killed %d of %d non-equivalent mutants (%s)", s.Killed, s.NonEquivalent, percent(s.Killed, s.NonEquivalent))
	if s.Built > 0 && s.NonEquivalent == 0 {
		line = fmt.Sprintf("%d of %d mutants apply and compile; none was run (compile only)", s.Built, s.Mutants)
	}
	var extra []string
	if s.Equivalent > 0 {
		extra = append(extra, fmt.Sprintf("%d marked equivalent", s.Equivalent))
	}
	for _, c := range []struct {
		n    int
		what string
	}{{s.BuildFailed, "did not build"}, {s.NotApplicable, "no longer apply"}, {s.Errors, "could not run"}} {
		if c.n > 0 {
			extra = append(extra, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(extra) > 0 {
		line += "; " + strings.Join(extra, ", ")
	}
	return line
}

// Report is the JSON document of a run.
type Report struct {
	Side     string    `json:"side"`
	KillRate string    `json:"kill_rate"`
	Summary  Summary   `json:"summary"`
	Seconds  float64   `json:"seconds"`
	Mutants  []Outcome `json:"mutants"`
}

func newReport(side string, outs []Outcome, seconds float64) Report {
	s := summarize(outs)
	return Report{Side: side, KillRate: s.KillRate(), Summary: s, Seconds: seconds, Mutants: outs}
}

// JSON is the report as indented JSON.
func (r Report) JSON() []byte {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return append(data, '\n')
}

// Markdown is the report as a Markdown table, the kill rate and, for every survivor, the
// details a reviewer needs.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| mutant | side | description | result | caught by | first failing tap | time |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|\n")
	for _, o := range r.Mutants {
		status := string(o.Status)
		if o.Equivalent != "" {
			status += " (equivalent)"
		}
		caught := strings.Join(shorten(o.CaughtBy, 2), "; ")
		if o.Status != Caught && o.Detail != "" {
			caught = o.Detail
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.1fs |\n", o.ID, o.Side, cell(o.Bug), status,
			cell(caught), cell(strings.Join(o.FirstTaps, "; ")), o.Seconds)
	}
	fmt.Fprintf(&b, "\n**%s** (%s side, %.0f s)\n", r.KillRate, r.Side, r.Seconds)
	for _, o := range r.Mutants {
		switch {
		case o.Equivalent != "":
			fmt.Fprintf(&b, "\n- %s is marked equivalent: %s\n", o.ID, o.Equivalent)
		case o.Status == Survived:
			fmt.Fprintf(&b, "\n- SURVIVOR %s (%s): %s. Every selected spec passed with it planted: the committed tier cannot see this bug. Do not loosen anything to hide it: add the case or tighten the tolerance that would kill it, or mark it equivalent with the reason.\n", o.ID, o.File, o.Bug)
		case o.Status == BuildFailed || o.Status == NotApplicable || o.Status == Errored:
			fmt.Fprintf(&b, "\n- %s %s: %s\n", o.Status, o.ID, o.Detail)
		}
	}
	return b.String()
}

// shorten keeps the first n entries and counts the rest.
func shorten(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(append([]string(nil), xs[:n]...), fmt.Sprintf("(+%d more)", len(xs)-n))
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	if len(s) > 240 {
		s = s[:237] + "..."
	}
	return s
}
