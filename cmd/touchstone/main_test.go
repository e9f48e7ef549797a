package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// committedSet copies one committed golden set into a fresh golden root with the real
// tolerances, so the CLI can be run against data it may then corrupt.
func committedSet(t *testing.T, op, caseName string) (root, dir string) {
	t.Helper()
	src := filepath.Join("..", "..", "golden")
	root = t.TempDir()
	copyFile(t, filepath.Join(src, "tolerances.yaml"), filepath.Join(root, "tolerances.yaml"))
	dir = filepath.Join(root, "kernels", op, caseName)
	entries, err := os.ReadDir(filepath.Join(src, "kernels", op, caseName))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(src, "kernels", op, caseName, e.Name()), filepath.Join(dir, e.Name()))
	}
	return root, dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func firstCase(t *testing.T, op string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("..", "..", "golden", "kernels", op))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no committed %s case: %v", op, err)
	}
	return entries[0].Name()
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckPrintsPassingTable(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	root, _ := committedSet(t, "rmsnorm", firstCase(t, "rmsnorm"))
	code, out, errs := runCLI("check", "-golden", root)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"OP", "HEADROOM", "rmsnorm", "PASS", "1 passed, 0 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckFailsOnACorruptedExpectation(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	root, dir := committedSet(t, "gelu", firstCase(t, "gelu"))
	// A wrong checksum is an error for that case, never a pass.
	path := filepath.Join(dir, "out.npy")
	data, _ := os.ReadFile(path)
	data[len(data)-1] ^= 0x40
	os.WriteFile(path, data, 0o644)
	code, out, _ := runCLI("check", "-golden", root)
	if code == 0 || !strings.Contains(out, "ERROR") || !strings.Contains(out, "sha256") {
		t.Fatalf("corrupted set: exit %d\n%s", code, out)
	}
}

func TestCheckRequireGPUWithoutGPUFails(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "")
	t.Setenv("TOUCHSTONE_REQUIRE_GPU", "1")
	root, _ := committedSet(t, "gelu", firstCase(t, "gelu"))
	code, _, errs := runCLI("check", "-golden", root)
	if code != 2 || !strings.Contains(errs, "TOUCHSTONE_REQUIRE_GPU") {
		t.Fatalf("REQUIRE_GPU without a GPU: exit %d, stderr %q", code, errs)
	}
}

func TestGoldenVerify(t *testing.T) {
	root, dir := committedSet(t, "softmax", firstCase(t, "softmax"))
	if code, out, _ := runCLI("golden", "verify", "-golden", root); code != 0 {
		t.Fatalf("clean set: exit %d\n%s", code, out)
	}
	os.Remove(filepath.Join(dir, "x.npy"))
	code, out, _ := runCLI("golden", "verify", "-golden", root)
	if code != 1 || !strings.Contains(out, "x.npy") {
		t.Fatalf("missing file: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"golden"}, {"check", "-op", "nosuchop"}, {"check", "-tier", "huge"}, {"bench-model"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestDiffPrintsTheLayerTable(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	golden := filepath.Join("..", "..", "golden")
	code, out, errs := runCLI("diff", "-golden", golden, "gpt2-tiny")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	// The summary: the verdict, the worst tap of each layer, one line per tap kind; no table.
	for _, want := range []string{"gpt2-tiny", "PASS: all", "worst tap of each layer", "layer 1 ", "by tap kind", "ffn_act ",
		"raised where 4 x the error recorded in the set's calibration.json is larger"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "prefill.layers.1.resid_ffn ") || strings.Count(out, "\n") > 60 {
		t.Errorf("the summary lists every tap (%d lines):\n%s", strings.Count(out, "\n"), out)
	}
	code, out, errs = runCLI("diff", "-v", "-golden", golden, "gpt2-tiny")
	if code != 0 {
		t.Fatalf("-v: exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"prefill.embed", "prefill.layers.1.resid_ffn", "decode.0.logits",
		"calibrated limits (above the floor)", "top5_tie="} {
		if !strings.Contains(out, want) {
			t.Errorf("-v table lacks %q", want)
		}
	}
	html := filepath.Join(t.TempDir(), "r", "gpt2-tiny.html")
	code, out, errs = runCLI("diff", "-isolate", "-html", html, "-golden", golden, "gpt2-tiny")
	if code != 0 || !strings.Contains(out, "isolated replay") || !strings.Contains(out, "report: "+html) {
		t.Fatalf("-isolate -html: exit %d\n%s%s", code, out, errs)
	}
	page, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(page), "<svg") || !strings.Contains(string(page), "gpt2-tiny") {
		t.Errorf("-html wrote no report with plots (%v)", err)
	}
	if code, _, errs := runCLI("diff", "-golden", golden, "no-such-model"); code != 2 || !strings.Contains(errs, "gpt2-tiny") {
		t.Errorf("unknown model: exit %d, %q (want 2 and the list of model sets)", code, errs)
	}
}

// A model set generated before calibration existed is refused with a request to regenerate it,
// by diff and by golden verify, never judged by the floors alone.
func TestDiffRefusesASetWithoutCalibration(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	src := filepath.Join("..", "..", "golden")
	root := t.TempDir()
	copyFile(t, filepath.Join(src, "tolerances.yaml"), filepath.Join(root, "tolerances.yaml"))
	dir := filepath.Join(root, "models", "gpt2-tiny")
	entries, err := os.ReadDir(filepath.Join(src, "models", "gpt2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "calibration.json" {
			copyFile(t, filepath.Join(src, "models", "gpt2-tiny", e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(manifest), "\n") {
		if strings.Contains(line, `"role": "calibration"`) {
			continue
		}
		kept = append(kept, line)
	}
	// the entry before the dropped last one loses its comma
	text := strings.Replace(strings.Join(kept, "\n"), "},\n  ]", "}\n  ]", 1)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("diff", "-golden", root, "gpt2-tiny")
	if code != 1 || !strings.Contains(errs, "predates calibration; regenerate it (make golden") {
		t.Errorf("diff of a set without calibration: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := runCLI("golden", "verify", "-golden", root); code != 1 || !strings.Contains(out, "predates calibration") {
		t.Errorf("golden verify of a set without calibration: exit %d\n%s", code, out)
	}
}

// The timing commands refuse a backend without device timers instead of timing the host.
func TestBenchCommandsNeedDeviceTimers(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	t.Setenv("TOUCHSTONE_REQUIRE_GPU", "")
	for _, args := range [][]string{{"bench"}, {"bench-model", "qwen2-tiny"}} {
		code, _, errs := runCLI(args...)
		if code != 2 || !strings.Contains(errs, "device timers") || !strings.Contains(errs, args[0]) {
			t.Errorf("%v on cpu: exit %d, stderr %q", args, code, errs)
		}
	}
}
