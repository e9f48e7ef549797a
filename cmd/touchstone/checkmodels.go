package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// modelVerdict is one model set's row of touchstone check: the verdicts the models suite
// reaches, condensed.
type modelVerdict struct {
	tapSummary
	greedy   string // "8 of 8 tokens", or why the greedy run stopped
	greedyOK bool
	seeded   string // "8 of 8 tokens (teacher-forced)", or the failures
	seededOK bool
}

func (v *modelVerdict) pass() bool { return v.tapsFailed == 0 && v.greedyOK && v.seededOK }

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
	switch {
	case err != nil:
		v.greedy = err.Error()
	case len(steps) > 0 && steps[len(steps)-1].Accepted:
		v.greedy, v.greedyOK = fmt.Sprintf("%d of %d, then a tie (margin rule)", len(steps)-1, p.GreedyTokens), true
	default:
		v.greedy, v.greedyOK = fmt.Sprintf("%d of %d", len(steps), p.GreedyTokens), true
	}
	if p.Sample.Tokens == 0 {
		v.seeded, v.seededOK = "none stored", true
		return v, nil
	}
	sampled, err := model.SeededTeacherForced(m, set, p)
	if err != nil {
		v.seeded = err.Error()
		return v, nil
	}
	same := 0
	for _, st := range sampled {
		if st.Got == st.Want {
			same++
		}
	}
	v.seeded, v.seededOK = fmt.Sprintf("%d of %d, teacher-forced", same, len(sampled)), true
	if same < len(sampled) {
		v.seeded += fmt.Sprintf(", %d differ where the margin rule accepts it", len(sampled)-same)
	}
	return v, nil
}

// printModelRow writes the set's rows in the check table's columns: its worst tap against its
// limit, the taps out of tolerance (and the first of them), and the greedy and seeded
// generations. A failure's explanation follows the table row it belongs to.
func printModelRow(tw *tabwriter.Writer, w io.Writer, name string, v *modelVerdict) {
	v.printRows(tw, "model", name)
	for _, g := range []struct {
		what, verdict string
		ok            bool
	}{{"greedy", v.greedy, v.greedyOK}, {"seeded", v.seeded, v.seededOK}} {
		if g.ok {
			fmt.Fprintf(tw, "model\t%s\t%s\ttokens\t%s\t\t\tPASS\n", name, g.what, g.verdict)
			continue
		}
		fmt.Fprintf(tw, "model\t%s\t%s\ttokens\t\t\t\tFAIL\n", name, g.what)
		tw.Flush()
		fmt.Fprintf(w, "    %s\n", g.verdict)
	}
}
