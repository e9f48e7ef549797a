package abtest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// JSON is the report for machines: options, every case with both measurements (times
// included) and its verdicts, and the summary.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// Markdown is the report for a pull-request comment: the summary line, then one row per case
// (regressions and cases too slow first).
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**\n\n", r.Summary.Line)
	fmt.Fprintf(&b, "Baseline `%s`, candidate `%s`; an accuracy regression is a case that passed and no longer does, or whose budget grew by more than %.0f points", r.Baseline, r.Candidate, 100*r.Options.BudgetMargin)
	if r.Options.MaxSlowdown > 0 {
		fmt.Fprintf(&b, "; a case slower than %.2fx beyond its noise fails", r.Options.MaxSlowdown)
	}
	fmt.Fprintf(&b, ". Times are medians in ms; ratio = candidate / baseline, called faster or slower beyond its noise and beyond %.0f%%.\n\n", 100*r.Options.MinEffect)
	b.WriteString("| case | baseline | candidate | accuracy | baseline ms | candidate ms | ratio | noise | speed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range r.Outcomes {
		acc := string(o.Accuracy)
		if o.Accuracy == AccuracyRegressed {
			acc = "**" + acc + "**: " + o.Why
		}
		spd := string(o.Speed)
		if o.TooSlow {
			spd = "**too slow**"
		}
		if o.Untimed != "" {
			spd += " (" + o.Untimed + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", o.ID, cell(o.Baseline), cell(o.Candidate), acc,
			ms(o.BaselineMS, o.Speed), ms(o.CandidateMS, o.Speed), ratio(o), noise(o), spd)
	}
	return b.String()
}

func cell(m Measurement) string {
	switch m.Status {
	case Pass, Fail:
		return fmt.Sprintf("%s %.0f%%", m.Status, 100*m.Budget)
	}
	return string(m.Status)
}

func ms(v float64, s Speed) string {
	if s == SpeedNone {
		return ""
	}
	return fmt.Sprintf("%.4f", v)
}

func ratio(o Outcome) string {
	if o.Speed == SpeedNone {
		return ""
	}
	return fmt.Sprintf("%.3f", o.Ratio)
}

func noise(o Outcome) string {
	if o.Speed == SpeedNone {
		return ""
	}
	return fmt.Sprintf("±%.1f%%", 100*o.Noise)
}
