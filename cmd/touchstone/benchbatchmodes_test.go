package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/bench"
)

func TestParseGemvRows(t *testing.T) {
	got, err := parseGemvRows("0, 2,4")
	if err != nil || !slices.Equal(got, []int{0, 2, 4}) {
		t.Errorf("parseGemvRows(\"0, 2,4\") = %v, %v", got, err)
	}
	if got, err := parseGemvRows(""); err != nil || got != nil {
		t.Errorf("parseGemvRows(\"\") = %v, %v, want nothing: the library's own setting", got, err)
	}
	for _, bad := range []string{"-1", "5", "2,2", "x", "1,,2"} {
		if _, err := parseGemvRows(bad); err == nil || !strings.Contains(err.Error(), "-gemv-rows") {
			t.Errorf("parseGemvRows(%q) = %v, want an error naming -gemv-rows", bad, err)
		}
	}
}

// switches is a profiler stand-in with both of the library's process-wide switches.
type switches struct {
	invariant bool
	rows      int
	log       []string
	failRows  bool
}

func (s *switches) SetBatchInvariant(on bool) error {
	s.invariant = on
	s.log = append(s.log, map[bool]string{true: "inv", false: "noinv"}[on])
	return nil
}
func (s *switches) BatchInvariant() (bool, error) { return s.invariant, nil }
func (s *switches) SetGemvRows(n int) error {
	if s.failRows {
		return errors.New("ts_set_gemv_rows: refused")
	}
	s.rows = n
	s.log = append(s.log, "rows="+string(rune('0'+n)))
	return nil
}
func (s *switches) GemvRows() (int, error) { return s.rows, nil }

func labels(ms []batchKernels) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.label)
	}
	return out
}

func TestBatchModesListsEachSettingAndRestoresTheLibrarys(t *testing.T) {
	sw := &switches{rows: 4}
	modes, restore, err := batchModes(sw, nil, true)
	if err != nil || !slices.Equal(labels(modes), []string{"default", "batch-invariant"}) {
		t.Fatalf("no -gemv-rows: %v, %v", labels(modes), err)
	}
	if modes[0].gemvRows != 4 || restore.gemvRows != 4 || restore.invariant {
		t.Errorf("default mode %+v, restore %+v: want the library's 4 rows, invariance off", modes[0], restore)
	}
	modes, _, err = batchModes(sw, []int{0, 2, 4}, false)
	want := []string{"no gemv", "gemv up to 2 rows", "gemv up to 4 rows (default)"}
	if err != nil || !slices.Equal(labels(modes), want) {
		t.Fatalf("-gemv-rows 0,2,4: %v, %v; want %v", labels(modes), err, want)
	}
	for _, m := range modes {
		if err := applyBatchKernels(sw, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := applyBatchKernels(sw, restore); err != nil {
		t.Fatal(err)
	}
	if sw.rows != 4 || sw.invariant {
		t.Errorf("after restore: rows %d, invariant %v; want 4, false (log %v)", sw.rows, sw.invariant, sw.log)
	}
	if !slices.Contains(sw.log, "rows=0") || !slices.Contains(sw.log, "rows=2") {
		t.Errorf("the settings were not applied: %v", sw.log)
	}
	sw.failRows = true
	if err := applyBatchKernels(sw, modes[1]); err == nil {
		t.Error("a refused row limit passed silently")
	}
}

func TestBatchModesRefusesSwitchesTheBackendLacks(t *testing.T) {
	if _, _, err := batchModes(struct{}{}, []int{2}, false); err == nil || !strings.Contains(err.Error(), "-gemv-rows") {
		t.Errorf("-gemv-rows on a backend without the limit: %v", err)
	}
	if _, _, err := batchModes(struct{}{}, nil, true); err == nil || !strings.Contains(err.Error(), "-invariant") {
		t.Errorf("-invariant on a backend without the switch: %v", err)
	}
	modes, _, err := batchModes(struct{}{}, nil, false)
	if err != nil || len(modes) != 1 || modes[0].gemvRows != -1 {
		t.Errorf("a backend without switches: %+v, %v; want one default mode that sets nothing", modes, err)
	}
}

func TestFastestGemvRowsPicksTheShortestStepPerBatch(t *testing.T) {
	modes := []batchKernels{{label: "no gemv"}, {label: "gemv up to 4 rows (default)", gemvRows: 4}, {label: "batch-invariant", invariant: true}}
	res := map[string]*bench.BatchResult{
		"1/no gemv": {LoopMsPerStep: 1.2}, "1/gemv up to 4 rows (default)": {LoopMsPerStep: 1.0}, "1/batch-invariant": {LoopMsPerStep: 0.5},
		"4/no gemv": {LoopMsPerStep: 1.3}, "4/gemv up to 4 rows (default)": {LoopMsPerStep: 1.5},
	}
	got := fastestGemvRows("m", []int{1, 4}, modes, res)
	want := "m, fastest gemv row limit by batch: B=1: gemv up to 4 rows (default) (1.000 ms); B=4: no gemv (1.300 ms)"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestBenchTargetTakesACheckpointDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "llama3.2-1b-randinit")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, name, err := benchTarget(t.TempDir(), dir)
	if err != nil || got != dir || name != "llama3.2-1b-randinit" {
		t.Errorf("benchTarget(checkpoint dir) = %q, %q, %v", got, name, err)
	}
	if _, _, err := benchTarget(t.TempDir(), "no-such-model"); err == nil || !strings.Contains(err.Error(), "no-such-model") {
		t.Errorf("benchTarget(unknown) = %v, want an error naming it", err)
	}
}
