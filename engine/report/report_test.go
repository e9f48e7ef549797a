package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func ptr(v float64) *float64 { return &v }

var tol = compare.Tolerance{Atol: ptr(1e-3), Rtol: ptr(1e-3), NMSE: ptr(1e-5), MinCosine: ptr(0.9999), Why: "test limits"}

// tapRow compares a small [2,4] tensor with a copy of itself perturbed by errScale.
func tapRow(t *testing.T, name string, errScale float32) compare.TapResult {
	t.Helper()
	want := []float32{1, -2, 3, 0.5, -1.5, 2.5, 0.25, -3}
	got := make([]float32, len(want))
	for i, v := range want {
		got[i] = v + errScale*float32(i%3-1)
	}
	r, err := compare.Compare(tensor.FromF32([]int{2, 4}, got), tensor.FromF32([]int{2, 4}, want), tol)
	if err != nil {
		t.Fatal(err)
	}
	return compare.TapResult{Name: name, Tol: tol, Floor: tol, Result: r}
}

var layerKinds = []string{"attn_norm", "q", "q_rope", "attn", "resid_ffn"}

// modelRows is a 3-layer prefill and one decode step in forward order; with fail, the
// prefill's layer 1 attn is far out of tolerance and the taps after it inherit a smaller error.
func modelRows(t *testing.T, fail bool) []compare.TapResult {
	var rows []compare.TapResult
	for _, pass := range []string{"prefill", "decode.0"} {
		rows = append(rows, tapRow(t, pass+".embed", 0))
		for l := range 3 {
			for _, k := range layerKinds {
				e := float32(1e-4 * float64(l+1))
				if fail && pass == "prefill" && l == 1 && k == "attn" {
					e = 0.5
				} else if fail && (pass != "prefill" || l > 1 || (l == 1 && k == "resid_ffn")) {
					e = 0.05
				}
				rows = append(rows, tapRow(t, fmt.Sprintf("%s.layers.%d.%s", pass, l, k), e))
			}
		}
		rows = append(rows, tapRow(t, pass+".final_norm", 2e-4), tapRow(t, pass+".logits", 3e-4))
	}
	return rows
}

func render(t *testing.T, models ...Model) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, models...); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// parse checks the document is well-formed XML (every element, <svg> included, closes) and
// returns the start elements inside <svg>.
func parse(t *testing.T, doc string) (svgElems []xml.StartElement) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	d.Strict = true
	depth, svgs, opened := 0, 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name.Local == "svg" {
				svgs++
			}
			if e.Name.Local == "svg" || depth > 0 {
				depth++
				svgElems = append(svgElems, e.Copy())
			}
			opened++
		case xml.EndElement:
			if depth > 0 {
				depth--
			}
			opened--
		}
	}
	if opened != 0 || depth != 0 {
		t.Fatalf("unbalanced document: %d elements, %d svg levels left open", opened, depth)
	}
	if svgs == 0 {
		t.Fatal("no <svg> plot")
	}
	return svgElems
}

func TestFailingSet(t *testing.T) {
	rows := modelRows(t, true)
	if i := compare.FirstFailure(rows); rows[i].Name != "prefill.layers.1.attn" {
		t.Fatalf("fixture: first failure %s", rows[i].Name)
	}
	doc := render(t, Model{Set: "models/tiny", Backend: "cuda (test)", Note: "limits from calibration.json", Rows: rows})
	elems := parse(t, doc)
	svgs := 0
	for _, e := range elems {
		if e.Name.Local == "svg" {
			svgs++
		}
	}
	if svgs != 2 {
		t.Errorf("%d plots, want one per pass (prefill, decode.0)", svgs)
	}
	for _, want := range []string{
		`<span class="badge FAIL">FAIL</span>`,
		"first failing tap <b>prefill.layers.1.attn</b> (attn, layer 1 of prefill)",
		"first failure: attn @ layer 1",
		"Worst elements of prefill.layers.1.attn (first failing tap)",
		"<details>",
		"limits from calibration.json",
		"cuda (test)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Count(doc, "first failure: ") != 1 {
		t.Errorf("first failure labelled %d times, want once", strings.Count(doc, "first failure: "))
	}
}

func TestPassingSetSaysPass(t *testing.T) {
	doc := render(t, Model{Set: "models/tiny", Backend: "cpu", Rows: modelRows(t, false)})
	parse(t, doc)
	if !strings.Contains(doc, `<span class="badge PASS">PASS</span> all 36 taps within tolerance`) {
		t.Error("passing set not reported as PASS")
	}
	if strings.Contains(doc, "badge FAIL") || strings.Contains(doc, ">FAIL<") {
		t.Error("passing set mentions FAIL")
	}
	if !strings.Contains(doc, "(worst tap; all pass)") {
		t.Error("no worst-elements section for a passing set")
	}
}

func TestDeterministic(t *testing.T) {
	build := func() []Model {
		return []Model{
			{Set: "models/a", Backend: "cuda", Rows: modelRows(t, true), Isolated: modelRows(t, false)},
			{Set: "models/b", Backend: "cuda", Rows: modelRows(t, false)},
		}
	}
	a, b := render(t, build()...), render(t, build()...)
	if a != b {
		t.Fatal("same input rendered differently")
	}
	parse(t, a)
	for _, want := range []string{`href="#set-1"`, `stroke-dasharray="2 3"`, "isolated replay"} {
		if !strings.Contains(a, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestNonFiniteBudgetsStayOutOfCoordinates(t *testing.T) {
	rows := modelRows(t, false)
	set := func(name string, r *compare.Result) {
		for i := range rows {
			if rows[i].Name == name {
				rows[i].Result = r
				return
			}
		}
		t.Fatalf("fixture has no tap %s", name)
	}
	// A NaN in the output gives an infinite budget through Compare; a NaN budget can only be
	// made by hand, and must be handled too.
	want := tensor.FromF32([]int{2}, []float32{1, 2})
	inf, err := compare.Compare(tensor.FromF32([]int{2}, []float32{float32(math.NaN()), 2}), want, tol)
	if err != nil {
		t.Fatal(err)
	}
	set("prefill.layers.2.q", inf)
	set("prefill.layers.0.q_rope", &compare.Result{
		Checks: []compare.Check{{Metric: "nmse", Value: math.NaN(), Limit: 1, Upper: true, Budget: math.NaN()}},
	})
	doc := render(t, Model{Set: "models/nan", Rows: rows})
	for _, e := range parse(t, doc) {
		for _, a := range e.Attr {
			switch a.Name.Local {
			case "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "width", "height", "points", "d", "viewBox", "transform":
				if strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf") {
					t.Errorf("<%s %s=%q>", e.Name.Local, a.Name.Local, a.Value)
				}
			}
		}
	}
	if !strings.Contains(doc, "prefill.layers.0.q_rope: NaN") || !strings.Contains(doc, "NaN / ∞ (clamped)") {
		t.Error("NaN budget not marked")
	}
}

func TestEscapesText(t *testing.T) {
	doc := render(t, Model{Set: "<script>alert(1)</script>", Backend: "a & b", Rows: modelRows(t, false)})
	parse(t, doc)
	if strings.Contains(doc, "<script>") || !strings.Contains(doc, "a &amp; b") {
		t.Error("text not escaped")
	}
}

func TestNilResultIsAnError(t *testing.T) {
	err := Write(io.Discard, Model{Set: "s", Rows: []compare.TapResult{{Name: "prefill.embed"}}})
	if err == nil || !strings.Contains(err.Error(), "prefill.embed") {
		t.Fatalf("err = %v", err)
	}
}

func TestWriteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "report.html")
	m := Model{Set: "models/tiny", Rows: modelRows(t, true)}
	if err := WriteFile(path, m); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != render(t, m) {
		t.Error("file differs from Write's output")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in %s, want the report alone (no temp file left)", len(ents), dir)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}
