package report

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// knownKinds are the layer tap kinds of the golden sets in forward order; they come first in
// legends and keep the same colour in every report, whichever of them a set stores.
var knownKinds = []string{
	"attn_norm", "q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope", "attn", "attn_out", "attn_post_norm",
	"resid_attn", "ffn_norm", "router_logits", "moe_out", "ffn_gate", "ffn_up", "ffn_act", "shared_out", "ffn_out", "ffn_post_norm",
	"resid_ffn",
}

// palette has one colour per known kind, then more for kinds this list does not know. Red is
// left out: it marks the limit and the first failure.
var palette = []string{
	"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
	"#000080", "#b8860b", "#00a087", "#6a3d9a", "#66a61e", "#000000",
	"#7b4173", "#8c6d31", "#5254a3", "#6baed6", "#fd8d3c", "#74c476", "#9e9ac8", "#843c39",
}

// styles assigns each layer tap kind of a report its colour and legend position, the same in
// every plot of the report.
type styles struct {
	kinds  []string // known kinds, then the others sorted
	colour map[string]string
}

func kindStyles(sets []*set) *styles {
	other := map[string]bool{}
	for _, s := range sets {
		for _, ts := range [][]tap{s.taps, s.iso} {
			for _, t := range ts {
				if t.layer >= 0 && !slices.Contains(knownKinds, t.kind) {
					other[t.kind] = true
				}
			}
		}
	}
	st := &styles{kinds: slices.Clone(knownKinds), colour: map[string]string{}}
	for k := range other {
		st.kinds = append(st.kinds, k)
	}
	slices.Sort(st.kinds[len(knownKinds):])
	for i, k := range st.kinds {
		st.colour[k] = palette[i%len(palette)]
	}
	return st
}

// order returns the kinds present in m, in legend order.
func (st *styles) order(m map[string]map[int]tap) []string {
	var out []string
	for _, k := range st.kinds {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// Plot geometry, in SVG user units.
const (
	plotWidth  = 780
	legendW    = 150 // the legend column on the right
	marginL    = 58  // y tick labels
	marginT    = 26  // title
	marginB    = 38  // x tick labels and axis title
	minPlotH   = 230
	legendRowH = 15
)

// yScale is the log10 percent axis: decades lo..hi, so that a 1e6 % failure and a 0.3 %
// pass fit one plot and both stay readable.
type yScale struct {
	lo, hi      int
	top, bottom float64 // pixel rows of 10^hi and 10^lo percent
}

// newYScale spans the finite positive budgets of ts, always including 1 % to 1000 % so the
// limit line sits inside the plot with room above it, and never more than 1e-3 % to 1e8 %:
// anything beyond is clamped to the edge.
func newYScale(ts []tap, top, bottom float64) yScale {
	s := yScale{lo: 0, hi: 3, top: top, bottom: bottom}
	for _, t := range ts {
		v := 100 * t.budget
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		d := math.Log10(v)
		s.lo = min(s.lo, max(-3, int(math.Floor(d))))
		s.hi = max(s.hi, min(8, int(math.Ceil(d))))
	}
	return s
}

// off says how a point sits against the scale.
type off int

const (
	onScale   off = iota
	below         // zero or under the lowest decade: drawn on the bottom edge
	above         // finite but over the top decade: drawn on the top edge
	nonFinite     // NaN or infinity: drawn on the top edge with its own marker
)

// y returns the pixel row of a budget share, always finite, and how it was placed.
func (s yScale) y(b float64) (float64, off) {
	v := 100 * b
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return s.top, nonFinite
	case v <= 0:
		return s.bottom, below
	}
	d := math.Log10(v)
	switch {
	case d < float64(s.lo):
		return s.bottom, below
	case d > float64(s.hi):
		return s.top, above
	}
	return s.bottom - (d-float64(s.lo))/float64(s.hi-s.lo)*(s.bottom-s.top), onScale
}

// decadeLabel is the tick label of 10^d percent.
func decadeLabel(d int) string {
	if d >= -3 && d <= 3 {
		return strconv.FormatFloat(math.Pow(10, float64(d)), 'f', max(0, -d), 64) + "%"
	}
	return "1e" + strconv.Itoa(d) + "%"
}

// c formats a coordinate. Every coordinate reaching here is finite by construction; the
// guard keeps a NaN from ever reaching an attribute, where it would make the SVG invalid.
func c(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// plot writes the SVG line plot of one pass: x the layer, y the budget used on a log scale,
// a polyline per tap kind (dotted for the isolated replay), the limit at 100 %, and the first
// failing tap (when in this pass) ringed in red.
func (p *page) plot(title string, main, iso []tap, first *tap) {
	series := map[string]map[int]tap{}
	isoSeries := map[string]map[int]tap{}
	layers := 0
	var all []tap
	for _, src := range []struct {
		ts []tap
		m  map[string]map[int]tap
	}{{main, series}, {iso, isoSeries}} {
		for _, t := range src.ts {
			if t.layer < 0 {
				continue
			}
			if src.m[t.kind] == nil {
				src.m[t.kind] = map[int]tap{}
			}
			src.m[t.kind][t.layer] = t
			layers = max(layers, t.layer+1)
			all = append(all, t)
		}
	}
	if layers == 0 {
		return // a pass with no layer taps (only logits, say) has its table alone
	}
	union := map[string]map[int]tap{}
	for k, v := range series {
		union[k] = v
	}
	for k, v := range isoSeries {
		union[k] = v
	}
	kinds := p.kinds.order(union)

	hasNonFinite := false
	for _, t := range all {
		if math.IsNaN(t.budget) || math.IsInf(t.budget, 0) {
			hasNonFinite = true
		}
	}
	marked := first != nil && first.layer >= 0
	legendRows := len(kinds) + 1 // the limit line
	if marked {
		legendRows++
	}
	if len(iso) > 0 {
		legendRows += 2
	}
	if hasNonFinite {
		legendRows++
	}
	plotH := max(float64(minPlotH), float64(legendRows*legendRowH+10))
	height := marginT + plotH + marginB
	x0, x1 := float64(marginL), float64(plotWidth-legendW-14)
	y0, y1 := float64(marginT), marginT+plotH
	ys := newYScale(all, y0, y1)
	// Layers sit in the middle of equal slots, so a single-layer model still has an x.
	xAt := func(l int) float64 { return x0 + (float64(l)+0.5)*(x1-x0)/float64(layers) }

	var b strings.Builder
	w := func(parts ...string) {
		for _, s := range parts {
			b.WriteString(s)
		}
	}
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="`, c(plotWidth), `" height="`, c(height),
		`" viewBox="0 0 `, c(plotWidth), " ", c(height), `" role="img">`, "\n")
	w(`<title>`, esc(title), `: budget used per layer</title>`, "\n")
	w(`<text x="`, c(x0), `" y="16" font-weight="bold">`, esc(title), `</text>`, "\n")

	// The region over the limit is tinted so failing points read as failing at a glance.
	yLimit, _ := ys.y(1)
	w(`<rect x="`, c(x0), `" y="`, c(y0), `" width="`, c(x1-x0), `" height="`, c(yLimit-y0), `" fill="#fdecea"/>`, "\n")
	for d := ys.lo; d <= ys.hi; d++ {
		y, _ := ys.y(math.Pow(10, float64(d)) / 100)
		w(`<line x1="`, c(x0), `" y1="`, c(y), `" x2="`, c(x1), `" y2="`, c(y), `" stroke="#e4e4e4"/>`)
		w(`<text x="`, c(x0-4), `" y="`, c(y+4), `" text-anchor="end">`, esc(decadeLabel(d)), `</text>`, "\n")
	}
	step := (layers + 23) / 24 // at most ~24 x labels
	for l := 0; l < layers; l += step {
		w(`<text x="`, c(xAt(l)), `" y="`, c(y1+14), `" text-anchor="middle">`, strconv.Itoa(l), `</text>`)
	}
	w("\n", `<text x="`, c((x0+x1)/2), `" y="`, c(height-6), `" text-anchor="middle">layer</text>`, "\n")
	w(`<text transform="translate(12 `, c((y0+y1)/2), `) rotate(-90)" text-anchor="middle">budget used (log)</text>`, "\n")
	w(`<rect x="`, c(x0), `" y="`, c(y0), `" width="`, c(x1-x0), `" height="`, c(y1-y0), `" fill="none" stroke="#999"/>`, "\n")
	w(`<line x1="`, c(x0), `" y1="`, c(yLimit), `" x2="`, c(x1), `" y2="`, c(yLimit), `" stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/>`, "\n")

	// Line styles are attributes rather than page CSS so the SVG also renders on its own
	// (copied out of the page, or by an SVG converter).
	drawSeries := func(m map[string]map[int]tap, lineStyle string, hollow bool) {
		for _, k := range kinds {
			pts := m[k]
			if len(pts) == 0 {
				continue
			}
			col := p.kinds.colour[k]
			ls := make([]int, 0, len(pts))
			for l := range pts {
				ls = append(ls, l)
			}
			slices.Sort(ls)
			var coords []string
			for _, l := range ls {
				y, _ := ys.y(pts[l].budget)
				coords = append(coords, c(xAt(l))+","+c(y))
			}
			w(`<polyline `, lineStyle, ` stroke="`, col, `" points="`, strings.Join(coords, " "), `"/>`, "\n")
			for _, l := range ls {
				t := pts[l]
				x := xAt(l)
				y, o := ys.y(t.budget)
				tip := esc(t.Name) + ": " + esc(pct(t.budget))
				if hollow {
					tip += " (isolated replay)"
				}
				tip = `<title>` + tip + `</title>`
				if o == nonFinite {
					// A cross on the top edge: the value has no place on the axis.
					w(`<path d="M`, c(x-4), " ", c(y-4), "L", c(x+4), " ", c(y+4), "M", c(x-4), " ", c(y+4), "L", c(x+4), " ", c(y-4),
						`" stroke="#5b2a86" stroke-width="2">`, tip, `</path>`, "\n")
					continue
				}
				fill := col
				if hollow {
					fill = "#fff"
				}
				w(`<circle cx="`, c(x), `" cy="`, c(y), `" r="2.5" fill="`, fill, `" stroke="`, col, `">`, tip, `</circle>`, "\n")
			}
		}
	}
	drawSeries(series, `fill="none" stroke-width="1.6"`, false)
	drawSeries(isoSeries, `fill="none" stroke-width="1.4" stroke-dasharray="2 3"`, true)

	if marked {
		x := xAt(first.layer)
		y, _ := ys.y(first.budget)
		w(`<circle cx="`, c(x), `" cy="`, c(y), `" r="7" fill="none" stroke="#d00000" stroke-width="2"/>`, "\n")
		// The label goes toward the plot's middle so it stays inside the frame.
		anchor, dx := "start", 10.0
		if x > (x0+x1)/2 {
			anchor, dx = "end", -10
		}
		ly := y - 10
		if ly < y0+12 {
			ly = y + 18
		}
		w(`<text x="`, c(x+dx), `" y="`, c(ly), `" text-anchor="`, anchor, `" fill="#d00000" font-weight="bold">first failure: `,
			esc(first.kind), " @ layer ", strconv.Itoa(first.layer), " (", esc(pct(first.budget)), `)</text>`, "\n")
	}

	// Legend.
	lx := float64(plotWidth - legendW)
	ly := y0 + 8
	entry := func(sample, label string) {
		w(sample, `<text x="`, c(lx+24), `" y="`, c(ly+4), `">`, esc(label), `</text>`, "\n")
		ly += legendRowH
	}
	for _, k := range kinds {
		col := p.kinds.colour[k]
		entry(`<line x1="`+c(lx)+`" y1="`+c(ly)+`" x2="`+c(lx+18)+`" y2="`+c(ly)+`" stroke="`+col+`" stroke-width="2.5"/>`, k)
	}
	ly += 4
	entry(`<line x1="`+c(lx)+`" y1="`+c(ly)+`" x2="`+c(lx+18)+`" y2="`+c(ly)+`" stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/>`, "limit (100%)")
	if marked {
		entry(`<circle cx="`+c(lx+9)+`" cy="`+c(ly)+`" r="5" fill="none" stroke="#d00000" stroke-width="2"/>`, "first failure")
	}
	if len(iso) > 0 {
		entry(`<line x1="`+c(lx)+`" y1="`+c(ly)+`" x2="`+c(lx+18)+`" y2="`+c(ly)+`" stroke="#555" stroke-width="1.6"/>`, "full pass")
		entry(`<line x1="`+c(lx)+`" y1="`+c(ly)+`" x2="`+c(lx+18)+`" y2="`+c(ly)+`" stroke="#555" stroke-width="1.4" stroke-dasharray="2 3"/>`, "isolated replay")
	}
	if hasNonFinite {
		entry(`<path d="M`+c(lx+5)+" "+c(ly-4)+"L"+c(lx+13)+" "+c(ly+4)+"M"+c(lx+5)+" "+c(ly+4)+"L"+c(lx+13)+" "+c(ly-4)+`" stroke="#5b2a86" stroke-width="2"/>`, "NaN / ∞ (clamped)")
	}
	w("</svg>\n")
	p.s(b.String())
}
