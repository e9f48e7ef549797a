package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// modelVerdict is one model set's row of touchstone check: the verdicts the models suite
// reaches, condensed.
type modelVerdict struct {
	tapSummary
	greedy, seeded tokenCheck
}

// outcome is the set's verdict: a failure anywhere fails it; otherwise a token check that
// decided too few steps makes it inconclusive under the skip policy (a failure under fail).
func (v *modelVerdict) outcome(p conformance.InconclusivePolicy) outcome {
	return worst(passOrFail(v.tapsFailed == 0), v.greedy.outcome(p), v.seeded.outcome(p))
}

// outcome is a row's or a set's verdict in touchstone check.
type outcome int

const (
	outcomePass outcome = iota
	outcomeInconclusive
	outcomeFail
)

func passOrFail(ok bool) outcome {
	if ok {
		return outcomePass
	}
	return outcomeFail
}

// worst is the verdict of several checks: any failure fails, else any inconclusive.
func worst(os ...outcome) outcome {
	w := outcomePass
	for _, o := range os {
		w = max(w, o)
	}
	return w
}

// tokenCheck is a greedy or seeded token check: what it compared, its tally of decisive
// steps, and its error (a token differing at a decisive step) if any.
type tokenCheck struct {
	detail string // "32 of 32", or "12 of 32, then a tie (margin rule)"
	tally  model.TokenTally
	none   bool // the set stores no such run: nothing to decide
	err    error
}

func (c tokenCheck) outcome(p conformance.InconclusivePolicy) outcome {
	switch {
	case c.err != nil:
		return outcomeFail
	case c.none || !c.tally.Inconclusive():
		return outcomePass
	case p == conformance.FailInconclusive:
		return outcomeFail
	}
	return outcomeInconclusive
}

// status is the check's STATUS column.
func (c tokenCheck) status(p conformance.InconclusivePolicy) string {
	switch c.outcome(p) {
	case outcomePass:
		return "PASS"
	case outcomeInconclusive:
		return "INCONCLUSIVE"
	}
	if c.err == nil {
		return "FAIL (inconclusive)"
	}
	return "FAIL"
}

// value is the check's VALUE column: what was compared and the decisive steps.
func (c tokenCheck) value() string {
	if c.none {
		return c.detail
	}
	return c.detail + "; " + c.tally.String()
}

// tapSummary is a set's taps in the check table: how many, how many out of tolerance, the tap
// using the largest share of its limit and the first out of tolerance in forward order.
type tapSummary struct {
	taps, tapsFailed int
	worst            compare.TapResult
	worstCheck       compare.Check
	firstFailing     string // "" if none
}

func summarizeTaps(rows []compare.TapResult) tapSummary {
	s := tapSummary{taps: len(rows)}
	for _, r := range rows {
		if !r.Result.Pass() {
			s.tapsFailed++
		}
		if c := binding(r.Result); s.worst.Result == nil || c.Budget > s.worstCheck.Budget {
			s.worst, s.worstCheck = r, c
		}
	}
	if i := compare.FirstFailure(rows); i >= 0 {
		s.firstFailing = rows[i].Name
	}
	return s
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// printRows writes the worst tap against its limit and the count out of tolerance, as rows of
// kind ("model", "batch") for the set name.
func (s tapSummary) printRows(tw *tabwriter.Writer, kind, name string) {
	c := s.worstCheck
	cmp := "<="
	if !c.Upper {
		cmp = ">="
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.6g\t%s %.6g\t%s\t%s\n", kind, name, s.worst.Name, c.Metric, c.Value, cmp, c.Limit, headroom(c), passFail(c.Pass))
	failing := fmt.Sprintf("%d of %d", s.tapsFailed, s.taps)
	if s.firstFailing != "" {
		failing += ", first " + s.firstFailing
	}
	fmt.Fprintf(tw, "%s\t%s\ttaps\tout of tolerance\t%s\t<= 0\t\t%s\n", kind, name, failing, passFail(s.tapsFailed == 0))
}

// checkModelSet runs set's checks on its loaded model: the reference's hyper-parameters, every
// tap of prefill and the stored decode steps, greedy generation, and teacher-forced seeded
// sampling (every step compared), as the models suite does.
func checkModelSet(m *model.Model, set *golden.Set, p *model.SetParams, tols *compare.Tolerances) (*modelVerdict, error) {
	if err := model.CheckHParams(m, set, p); err != nil {
		return nil, err
	}
	rows, err := model.CompareTaps(m, set, p, tols)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no taps to compare", set.ID())
	}
	v := &modelVerdict{tapSummary: summarizeTaps(rows)}
	steps, err := model.Greedy(m, set, p)
	v.greedy = tokenCheck{err: err, tally: model.GreedyTally(steps, p.MarginEpsilon, p.GreedyTokens)}
	switch {
	case err != nil:
	case len(steps) > 0 && steps[len(steps)-1].Accepted:
		v.greedy.detail = fmt.Sprintf("%d of %d, then a tie (margin rule)", len(steps)-1, p.GreedyTokens)
	default:
		v.greedy.detail = fmt.Sprintf("%d of %d", len(steps), p.GreedyTokens)
	}
	if p.Sample.Tokens == 0 {
		v.seeded = tokenCheck{detail: "none stored", none: true}
		return v, nil
	}
	sampled, err := model.SeededTeacherForced(m, set, p)
	v.seeded = tokenCheck{err: err, tally: model.SampledTally(sampled, p.MarginEpsilon, p.Sample.Tokens)}
	if err != nil {
		return v, nil
	}
	same := 0
	for _, st := range sampled {
		if st.Got == st.Want {
			same++
		}
	}
	v.seeded.detail = fmt.Sprintf("%d of %d, teacher-forced", same, len(sampled))
	if same < len(sampled) {
		v.seeded.detail += fmt.Sprintf(", %d differ where the margin rule accepts it", len(sampled)-same)
	}
	return v, nil
}

// printModelRow writes the set's rows in the check table's columns: its worst tap against its
// limit, the taps out of tolerance (and the first of them), and the greedy and seeded
// generations. A failure's explanation follows the table row it belongs to.
func printModelRow(tw *tabwriter.Writer, w io.Writer, name string, v *modelVerdict, p conformance.InconclusivePolicy) {
	v.printRows(tw, "model", name)
	for _, g := range []struct {
		what string
		c    tokenCheck
	}{{"greedy", v.greedy}, {"seeded", v.seeded}} {
		if g.c.err == nil {
			fmt.Fprintf(tw, "model\t%s\t%s\ttokens\t%s\t\t\t%s\n", name, g.what, g.c.value(), g.c.status(p))
			continue
		}
		fmt.Fprintf(tw, "model\t%s\t%s\ttokens\t%s\t\t\tFAIL\n", name, g.what, g.c.tally)
		tw.Flush()
		fmt.Fprintf(w, "    %v\n", g.c.err)
	}
}
