// Package report renders the tap-by-tap comparison of model golden sets as one
// self-contained HTML file: a triage view meant to be opened from a CI artifact or copied off
// a GPU machine, so it needs no server, no network and no JavaScript. The CSS is inline and the
// plots are SVG written directly here, which also keeps the module free of plotting
// dependencies.
package report

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Model is what a report describes.
type Model struct {
	Set     string // set ID, e.g. "models/qwen2.5-0.5b"
	Backend string // e.g. "cuda (NVIDIA H100 80GB HBM3)"
	Note    string // optional free text line (e.g. the first failing tap, the limits' source)
	Rows    []compare.TapResult
	// Isolated holds the rows of an isolated replay (same naming); plotted as a second series
	// when non-empty.
	Isolated []compare.TapResult
}

// Write writes the self-contained HTML report of one or more model sets to w.
func Write(w io.Writer, models ...Model) error {
	sets := make([]*set, len(models))
	for i, m := range models {
		s, err := analyse(m)
		if err != nil {
			return err
		}
		sets[i] = s
	}
	// The page is built in memory and written once, so a failing writer never receives half
	// a document from a later section's error.
	p := &page{kinds: kindStyles(sets)}
	p.document(sets)
	_, err := w.Write(p.b.Bytes())
	return err
}

// WriteFile writes the report to path (parent directories created), atomically: it is
// written to a temporary file beside path and renamed over it, so a reader (a browser
// refreshing, a CI artifact upload) never sees a truncated report.
func WriteFile(path string, models ...Model) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = Write(f, models...); err != nil {
		return err
	}
	// CreateTemp makes the file private; a report is meant to be read by others.
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// tap is one row with its name taken apart and its headline budget.
type tap struct {
	compare.TapResult
	pass   string // "prefill", "decode.3"; "" for a name without a pass prefix
	layer  int    // the N of layers.N, -1 for taps outside the layer stack
	kind   string // compare.TapKind of the name
	budget float64
}

func newTap(r compare.TapResult) (tap, error) {
	if r.Result == nil {
		return tap{}, fmt.Errorf("report: tap %q has no result", r.Name)
	}
	t := tap{TapResult: r, layer: -1, kind: compare.TapKind(r.Name), budget: r.Result.MaxBudget()}
	if pass, layer, _, ok := compare.TapPlace(r.Name); ok {
		t.pass, t.layer = pass, layer
	}
	// math.Max lets a NaN check budget through, and a NaN must read as a failure here.
	for _, c := range r.Result.Checks {
		if math.IsNaN(c.Budget) {
			t.budget = math.NaN()
		}
	}
	return t, nil
}

// where names the tap's position for the verdict line: "q_rope, layer 12 of prefill".
func (t tap) where() string {
	s := t.kind
	if t.layer >= 0 {
		s += ", layer " + strconv.Itoa(t.layer)
	}
	if t.pass != "" {
		s += " of " + t.pass
	}
	return s
}

// set is one Model taken apart for rendering.
type set struct {
	Model
	taps, iso         []tap
	first, worst      int // indexes into taps; -1 when none fails / there are no taps
	isoFirst, isoWrst int // the same for iso
	passes            []string
}

func analyse(m Model) (*set, error) {
	s := &set{Model: m}
	var err error
	if s.taps, err = newTaps(m.Rows); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Set, err)
	}
	if s.iso, err = newTaps(m.Isolated); err != nil {
		return nil, fmt.Errorf("%s (isolated): %w", m.Set, err)
	}
	s.first, s.worst = compare.FirstFailure(m.Rows), worstTap(s.taps)
	s.isoFirst, s.isoWrst = compare.FirstFailure(m.Isolated), worstTap(s.iso)
	// Passes in forward order as the rows give them; an isolated replay's extra pass (there
	// should be none) goes last rather than being dropped.
	seen := map[string]bool{}
	for _, ts := range [][]tap{s.taps, s.iso} {
		for _, t := range ts {
			if !seen[t.pass] {
				seen[t.pass] = true
				s.passes = append(s.passes, t.pass)
			}
		}
	}
	return s, nil
}

func newTaps(rows []compare.TapResult) ([]tap, error) {
	ts := make([]tap, len(rows))
	for i, r := range rows {
		t, err := newTap(r)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

// worse orders budgets for "worst tap": NaN (a broken comparison) above everything, then
// the largest.
func worse(a, b float64) bool {
	if math.IsNaN(a) {
		return !math.IsNaN(b)
	}
	return !math.IsNaN(b) && a > b
}

// worstTap returns the index of the tap with the largest budget (the first of equals), or
// -1 for none.
func worstTap(ts []tap) int {
	w := -1
	for i, t := range ts {
		if w < 0 || worse(t.budget, ts[w].budget) {
			w = i
		}
	}
	return w
}

// inPass returns the taps of one pass, in their order.
func inPass(ts []tap, pass string) []tap {
	var out []tap
	for _, t := range ts {
		if t.pass == pass {
			out = append(out, t)
		}
	}
	return out
}

// page accumulates the document.
type page struct {
	b     bytes.Buffer
	kinds *styles
}

func (p *page) f(format string, args ...any) { fmt.Fprintf(&p.b, format, args...) }
func (p *page) s(s string)                   { p.b.WriteString(s) }

// esc escapes text for HTML and SVG alike (html.EscapeString's entities are all XML's).
func esc(s string) string { return html.EscapeString(s) }

const css = `body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em}h2{font-size:1.25em;border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.1em;margin-top:1.5em}h4{margin:.8em 0 .3em}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:9em}table.kv td,table.kv th{border:none;padding:1px 8px 1px 0;background:none}
.badge{display:inline-block;padding:0 .5em;border-radius:4px;color:#fff;font-weight:bold}
.PASS{background:#2a8a3e}.FAIL{background:#c62828}
tr.first td{background:#ffd6d6;font-weight:bold}tr.fail td{background:#fff0f0}td.bad{color:#c62828;font-weight:bold}
.row{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
table.heat td{text-align:center;min-width:2.2em;padding:1px 3px;font-size:11px}table.heat td.none{background:#f6f6f6}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:12px}
svg{font:11px system-ui,sans-serif}
summary{cursor:pointer;font-weight:bold}
`

func (p *page) document(sets []*set) {
	title := "touchstone triage"
	if len(sets) == 1 {
		title += ": " + sets[0].Set
	}
	p.f("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>%s</title>\n<style>\n%s</style>\n</head>\n<body>\n", esc(title), css)
	p.f("<h1>%s</h1>\n", esc(title))
	if len(sets) == 0 {
		p.s("<p>No model sets.</p>\n")
	}
	if len(sets) > 1 {
		p.summary(sets)
	}
	for i, s := range sets {
		p.model(i, s)
	}
	p.s("</body>\n</html>\n")
}

// summary is the index of a multi-set report: one line per set linking to its section.
func (p *page) summary(sets []*set) {
	p.s("<table>\n<tr><th>set</th><th>verdict</th><th>first failing tap</th><th>worst tap</th></tr>\n")
	for i, s := range sets {
		first := "–"
		if s.first >= 0 {
			first = esc(s.taps[s.first].Name)
		}
		p.f("<tr><td><a href=\"#set-%d\">%s</a></td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			i, esc(s.Set), badge(s.first < 0), first, worstText(s.taps, s.worst))
	}
	p.s("</table>\n")
}

func badge(pass bool) string {
	if pass {
		return `<span class="badge PASS">PASS</span>`
	}
	return `<span class="badge FAIL">FAIL</span>`
}

func worstText(ts []tap, w int) string {
	if w < 0 {
		return "–"
	}
	return esc(fmt.Sprintf("%s (%s of its budget)", ts[w].Name, pct(ts[w].budget)))
}

func (p *page) model(i int, s *set) {
	p.f("<section id=\"set-%d\">\n<h2>%s %s</h2>\n<table class=\"kv\">\n", i, esc(s.Set), badge(s.first < 0))
	kv := func(k, v string) { p.f("<tr><th>%s</th><td>%s</td></tr>\n", k, v) }
	kv("backend", esc(s.Backend))
	kv("verdict", verdict(s.taps, s.first))
	failing := 0
	for _, t := range s.taps {
		if !t.Result.Pass() {
			failing++
		}
	}
	kv("taps", fmt.Sprintf("%d compared, %d out of tolerance", len(s.taps), failing))
	kv("worst tap", worstText(s.taps, s.worst))
	if len(s.iso) > 0 {
		kv("isolated replay", verdict(s.iso, s.isoFirst)+"; worst "+worstText(s.iso, s.isoWrst))
	}
	if s.Note != "" {
		kv("note", esc(s.Note))
	}
	p.s("</table>\n")
	if len(s.taps) == 0 && len(s.iso) == 0 {
		p.s("<p>No taps were compared.</p>\n</section>\n")
		return
	}

	p.s("<h3>Budget used per layer</h3>\n")
	if len(s.iso) > 0 {
		p.s("<p>Solid lines: the taps of the full forward pass; dotted lines: the isolated replay (each op fed the reference's inputs), so a tap failing only in the solid series inherits its error from upstream.</p>\n")
	}
	for _, pass := range s.passes {
		p.pass(s, pass)
	}
	p.heatmap(s)
	p.worstElements(s)
	p.fullTable(s)
	p.s("</section>\n")
}

// verdict is the PASS/FAIL line: the first failing tap, where it is, and the checks it failed.
func verdict(ts []tap, first int) string {
	if first < 0 {
		return fmt.Sprintf("%s all %d taps within tolerance", badge(true), len(ts))
	}
	t := ts[first]
	var checks []string
	for _, c := range t.Result.Failed() {
		checks = append(checks, checkText(c))
	}
	return fmt.Sprintf("%s first failing tap <b>%s</b> (%s): %s", badge(false), esc(t.Name), esc(t.where()), esc(strings.Join(checks, "; ")))
}

// checkText is one check as "nmse 3.1e-05 > 2e-06 (1550% of budget)".
func checkText(c compare.Check) string {
	var op string
	switch {
	case c.Upper && c.Pass:
		op = "≤"
	case c.Upper:
		op = ">"
	case c.Pass:
		op = "≥"
	default:
		op = "<"
	}
	return fmt.Sprintf("%s %s %s %s (%s of budget)", c.Metric, num(c.Value), op, num(c.Limit), pct(c.Budget))
}

// num formats a value with enough digits to compare it with its limit.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// pct formats a budget share as a percentage; huge ones in exponent form.
func pct(b float64) string {
	switch {
	case math.IsNaN(b):
		return "NaN"
	case math.IsInf(b, 1):
		return "∞"
	case 100*b >= 1e4:
		return strconv.FormatFloat(100*b, 'e', 1, 64) + "%"
	}
	return strconv.FormatFloat(100*b, 'f', 1, 64) + "%"
}

// passTitle names a pass for headings; taps without a pass prefix are grouped as "other".
func passTitle(pass string) string {
	if pass == "" {
		return "other"
	}
	return pass
}

// pass renders one pass: the per-layer plot and, beside it, the taps outside the layers.
func (p *page) pass(s *set, pass string) {
	main, iso := inPass(s.taps, pass), inPass(s.iso, pass)
	failing := 0
	for _, t := range main {
		if !t.Result.Pass() {
			failing++
		}
	}
	p.f("<h4>%s: %d taps, %d out of tolerance</h4>\n<div class=\"row\">\n", esc(passTitle(pass)), len(main), failing)
	var first *tap
	if s.first >= 0 && s.taps[s.first].pass == pass {
		first = &s.taps[s.first]
	}
	p.plot(passTitle(pass), main, iso, first)

	// Taps outside the layer stack (embed, final_norm, logits) have no x position.
	isoBudget := map[string]float64{}
	for _, t := range iso {
		isoBudget[t.Name] = t.budget
	}
	var rows []tap
	for _, t := range main {
		if t.layer < 0 {
			rows = append(rows, t)
		}
	}
	if len(rows) > 0 {
		p.s("<table>\n<tr><th>tap</th><th>budget</th>")
		if len(iso) > 0 {
			p.s("<th>isolated</th>")
		}
		p.s("<th></th></tr>\n")
		for _, t := range rows {
			p.f("<tr%s><td title=\"%s\">%s</td><td class=\"n\">%s</td>", rowClass(t, first), esc(t.Name), esc(t.kind), pct(t.budget))
			if len(iso) > 0 {
				b, ok := isoBudget[t.Name]
				v := "–"
				if ok {
					v = pct(b)
				}
				p.f("<td class=\"n\">%s</td>", v)
			}
			p.f("<td>%s</td></tr>\n", okText(t.Result.Pass()))
		}
		p.s("</table>\n")
	}
	p.s("</div>\n")
}

func rowClass(t tap, first *tap) string {
	switch {
	case first != nil && t.Name == first.Name:
		return ` class="first"`
	case !t.Result.Pass():
		return ` class="fail"`
	}
	return ""
}

func okText(pass bool) string {
	if pass {
		return "ok"
	}
	return "FAIL"
}

// heatmap is the kind × layer table of the prefill pass (the first pass with layer taps when
// there is no prefill), each cell coloured by its budget: the whole stack at a glance.
func (p *page) heatmap(s *set) {
	pass, ok := "", false
	for _, ps := range s.passes {
		for _, t := range inPass(s.taps, ps) {
			if t.layer >= 0 && (!ok || ps == "prefill") {
				pass, ok = ps, true
			}
		}
	}
	if !ok {
		return
	}
	cells := map[string]map[int]tap{}
	layers := 0
	for _, t := range inPass(s.taps, pass) {
		if t.layer < 0 {
			continue
		}
		if cells[t.kind] == nil {
			cells[t.kind] = map[int]tap{}
		}
		cells[t.kind][t.layer] = t
		layers = max(layers, t.layer+1)
	}
	p.f("<h3>Heatmap: %s, tap kind × layer (%% of budget)</h3>\n<table class=\"heat\">\n<tr><th></th>", esc(pass))
	for l := range layers {
		p.f("<th>%d</th>", l)
	}
	p.s("</tr>\n")
	for _, k := range p.kinds.order(cells) {
		p.f("<tr><th>%s</th>", esc(k))
		for l := range layers {
			t, ok := cells[k][l]
			if !ok {
				p.s(`<td class="none"></td>`)
				continue
			}
			bg, fg := heatColour(t.budget)
			mark := ""
			if s.first >= 0 && s.taps[s.first].Name == t.Name {
				mark = ";outline:3px solid #000;outline-offset:-3px"
			}
			p.f("<td style=\"background:%s;color:%s%s\" title=\"%s: %s\">%s</td>", bg, fg, mark, esc(t.Name), pct(t.budget), shortPct(t.budget))
		}
		p.s("</tr>\n")
	}
	p.s("</table>\n")
}

// heatColour maps a budget to a cell's background and text colour: green (unused) through
// yellow to orange (at the limit) for passes, reds that darken with each decade over the limit, and a
// purple that cannot be mistaken for either for NaN and infinity.
func heatColour(b float64) (bg, fg string) {
	switch {
	case math.IsNaN(b) || math.IsInf(b, 0):
		return "#5b2a86", "#fff"
	case b > 1:
		l := 62 - 30*math.Min(1, math.Log10(b)/4)
		fg = "#000"
		if l < 50 {
			fg = "#fff"
		}
		return fmt.Sprintf("hsl(0,80%%,%.0f%%)", l), fg
	}
	// The square root spreads the small budgets most passing taps use over more of the hues.
	return fmt.Sprintf("hsl(%.0f,65%%,78%%)", 120-90*math.Sqrt(math.Max(0, b))), "#000"
}

// shortPct is a budget in the few characters a heatmap cell has.
func shortPct(b float64) string {
	switch {
	case math.IsNaN(b):
		return "NaN"
	case math.IsInf(b, 1):
		return "∞"
	case 100*b >= 1000:
		e := int(math.Floor(math.Log10(100 * b)))
		return strconv.Itoa(int(100*b/math.Pow(10, float64(e)))) + "e" + strconv.Itoa(e)
	case 100*b >= 10:
		return strconv.FormatFloat(100*b, 'f', 0, 64)
	}
	return strconv.FormatFloat(100*b, 'f', 1, 64)
}

// worstElements shows where the first failing tap (or the worst one when all pass) is off.
func (p *page) worstElements(s *set) {
	i, why := s.first, "first failing tap"
	if i < 0 {
		i, why = s.worst, "worst tap; all pass"
	}
	if i < 0 {
		return
	}
	t := s.taps[i]
	p.f("<h3>Worst elements of %s (%s)</h3>\n", esc(t.Name), why)
	if t.Tol.Why != "" {
		p.f("<p>Tolerance: %s</p>\n", esc(t.Tol.Why))
	}
	if len(t.Result.Worst) > 0 {
		p.s("<table>\n<tr><th>index</th><th>got</th><th>want</th><th>abs err</th><th>excess</th></tr>\n")
		for _, e := range t.Result.Worst {
			p.f("<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
				tensor.ShapeString(e.Index), elem(e.Got), elem(e.Want), elem(e.AbsErr), elem(e.Excess))
		}
		p.s("</table>\n")
	}
	p.f("<pre>%s</pre>\n", esc(t.Result.Table()))
}

func elem(v float64) string { return strconv.FormatFloat(v, 'g', 7, 64) }

// fullTable lists every tap with each check's value against its limit, folded away since it
// is long and the sections above point at the rows that matter.
func (p *page) fullTable(s *set) {
	// Columns: the metrics in order of first appearance (logit taps add kl and top-k).
	var metrics []string
	seen := map[string]bool{}
	for _, t := range s.taps {
		for _, c := range t.Result.Checks {
			if !seen[c.Metric] {
				seen[c.Metric] = true
				metrics = append(metrics, c.Metric)
			}
		}
	}
	isoBudget := map[string]float64{}
	for _, t := range s.iso {
		isoBudget[t.Name] = t.budget
	}
	p.f("<details>\n<summary>All %d taps</summary>\n<table>\n<tr><th>#</th><th>tap</th><th>budget</th>", len(s.taps))
	if len(s.iso) > 0 {
		p.s("<th>isolated</th>")
	}
	for _, m := range metrics {
		p.f("<th>%s</th>", esc(m))
	}
	p.s("<th></th><th>raised limits</th></tr>\n")
	var first *tap
	if s.first >= 0 {
		first = &s.taps[s.first]
	}
	for i, t := range s.taps {
		p.f("<tr%s><td class=\"n\">%d</td><td title=\"%s\">%s</td><td class=\"n\">%s</td>", rowClass(t, first), i, esc(t.Tol.Why), esc(t.Name), pct(t.budget))
		if len(s.iso) > 0 {
			v := "–"
			if b, ok := isoBudget[t.Name]; ok {
				v = pct(b)
			}
			p.f("<td class=\"n\">%s</td>", v)
		}
		checks := map[string]compare.Check{}
		for _, c := range t.Result.Checks {
			checks[c.Metric] = c
		}
		for _, m := range metrics {
			c, ok := checks[m]
			switch {
			case !ok:
				p.s("<td></td>")
			case c.Pass:
				p.f("<td class=\"n\">%s</td>", esc(limitText(c)))
			default:
				p.f("<td class=\"n bad\">%s</td>", esc(limitText(c)))
			}
		}
		p.f("<td>%s</td><td>%s</td></tr>\n", okText(t.Result.Pass()), esc(t.RaisedLimits()))
	}
	p.s("</table>\n</details>\n")
}

// limitText is a check's cell: "1.2e-06 ≤ 2e-06".
func limitText(c compare.Check) string {
	op := "≤"
	if !c.Upper {
		op = "≥"
	}
	return strconv.FormatFloat(c.Value, 'g', 3, 64) + " " + op + " " + strconv.FormatFloat(c.Limit, 'g', 3, 64)
}
