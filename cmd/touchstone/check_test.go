package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// refusingAttention is the CPU backend with attention_prefill refused exactly as the CUDA
// library refuses a head_dim it has no kernel for: a TS_ERR_UNSUPPORTED StatusError. It
// still claims the op (Supports is true), as the CUDA backend claims every op.
type refusingAttention struct{ *cpu.Backend }

func (refusingAttention) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	return &cuda.StatusError{Op: "attention_prefill", Status: -3, Name: "TS_ERR_UNSUPPORTED",
		Message: fmt.Sprintf("attention_prefill: cfg->head_dim = %d: this build has no kernel for it", cfg.HeadDim)}
}

// unclaimedAttention is the CPU backend declaring that it does not implement
// attention_prefill at all.
type unclaimedAttention struct{ *cpu.Backend }

func (u unclaimedAttention) Supports(op string) bool {
	return op != "attention_prefill" && u.Backend.Supports(op)
}

// useBackend makes check run on b instead of the backend the environment selects.
func useBackend(t *testing.T, b backend.Backend) {
	t.Helper()
	prev := selectBackend
	selectBackend = func() (*backend.Selection, error) {
		return &backend.Selection{Backend: b, Requested: "test"}, nil
	}
	t.Cleanup(func() { selectBackend = prev })
}

// attentionAndNorm is a golden root with one rmsnorm case, which passes on the CPU, and one
// attention_prefill case, which the wrapped backends do not run.
func attentionAndNorm(t *testing.T) string {
	t.Helper()
	root, _ := committedSet(t, "rmsnorm", firstCase(t, "rmsnorm"))
	attn := firstCase(t, "attention_prefill")
	src := filepath.Join("..", "..", "golden", "kernels", "attention_prefill", attn)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(src, e.Name()), filepath.Join(root, "kernels", "attention_prefill", attn, e.Name()))
	}
	return root
}

// rowStatus returns the status (the text after the case name's columns) of op's row.
func rowStatus(t *testing.T, out, op string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == op {
			return strings.Join(f[2:], " ")
		}
	}
	t.Fatalf("no %s row in:\n%s", op, out)
	return ""
}

// Under the default, an unsupported case is neither passed nor failed: its own row and count,
// its reason printed under it, and a clean exit when everything else passes.
func TestCheckCountsUnsupportedApart(t *testing.T) {
	t.Setenv("TOUCHSTONE_UNSUPPORTED", "")
	useBackend(t, refusingAttention{cpu.New()})
	code, out, errs := runCLI("check", "-golden", attentionAndNorm(t))
	if code != 0 {
		t.Fatalf("exit %d, want 0: an unsupported case must not fail the run\n%s%s", code, out, errs)
	}
	if got := rowStatus(t, out, "attention_prefill"); got != "UNSUPPORTED" {
		t.Errorf("attention_prefill row status %q, want UNSUPPORTED\n%s", got, out)
	}
	for _, want := range []string{
		"1 passed, 0 failed, 1 unsupported, 0 inconclusive\n",
		"    ", // the reason is indented under the row
		"attention_prefill: cfg->head_dim = ",
		"this build has no kernel for it [TS_ERR_UNSUPPORTED]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ERROR") || strings.Contains(out, "errors") {
		t.Errorf("an unsupported case was reported as an error:\n%s", out)
	}
}

// The fail switch, as a flag or from the environment (dist/run's default), makes an
// unsupported call of a claimed op a failure; the flag overrides the environment.
func TestCheckUnsupportedFailSwitch(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		flags     []string
		code      int
	}{
		{"flag", "", []string{"-unsupported=fail"}, 1},
		{"environment", "fail", nil, 1},
		{"flag over environment", "fail", []string{"-unsupported", "skip"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TOUCHSTONE_UNSUPPORTED", tc.env)
			useBackend(t, refusingAttention{cpu.New()})
			args := append([]string{"check", "-golden", attentionAndNorm(t)}, tc.flags...)
			code, out, errs := runCLI(args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errs)
			}
			if tc.code == 0 {
				return
			}
			if got := rowStatus(t, out, "attention_prefill"); got != "FAIL (unsupported)" {
				t.Errorf("attention_prefill row status %q, want FAIL (unsupported)\n%s", got, out)
			}
			if !strings.Contains(out, "1 passed, 1 failed, 0 unsupported, 0 inconclusive\n") || !strings.Contains(out, "[TS_ERR_UNSUPPORTED]") {
				t.Errorf("summary or reason missing:\n%s", out)
			}
		})
	}
}

// An op the backend does not claim is declared in its code, not found at run time: it stays
// unsupported even under the fail switch.
func TestCheckUnclaimedOpStaysUnsupported(t *testing.T) {
	t.Setenv("TOUCHSTONE_UNSUPPORTED", "fail")
	useBackend(t, unclaimedAttention{cpu.New()})
	code, out, errs := runCLI("check", "-golden", attentionAndNorm(t))
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errs)
	}
	if got := rowStatus(t, out, "attention_prefill"); got != "UNSUPPORTED" {
		t.Errorf("attention_prefill row status %q, want UNSUPPORTED\n%s", got, out)
	}
	if !strings.Contains(out, "op not supported by this backend") || !strings.Contains(out, "1 passed, 0 failed, 1 unsupported, 0 inconclusive\n") {
		t.Errorf("reason or summary missing:\n%s", out)
	}
}

func TestCheckRejectsAnUnknownUnsupportedPolicy(t *testing.T) {
	t.Setenv("TOUCHSTONE_UNSUPPORTED", "")
	if code, _, errs := runCLI("check", "-unsupported", "maybe"); code != 2 || !strings.Contains(errs, "-unsupported") {
		t.Errorf("-unsupported maybe: exit %d, stderr %q", code, errs)
	}
	// A typo in the environment must not quietly mean skip on a GPU runner.
	t.Setenv("TOUCHSTONE_UNSUPPORTED", "fial")
	if code, _, errs := runCLI("check"); code != 2 || !strings.Contains(errs, "TOUCHSTONE_UNSUPPORTED") {
		t.Errorf("TOUCHSTONE_UNSUPPORTED=fial: exit %d, stderr %q", code, errs)
	}
}

// Without a library, auto falls back to the CPU with one line saying why and how to fix it; the
// paths searched only with -v.
func TestCheckFallbackIsOneLineAndListsPathsWithV(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "auto")
	t.Setenv("TOUCHSTONE_CUDA_LIB", "")
	t.Setenv("TOUCHSTONE_REQUIRE_GPU", "")
	root, _ := committedSet(t, "rmsnorm", firstCase(t, "rmsnorm"))
	// A working directory without cuda/build above it, so the search finds nothing.
	t.Chdir(t.TempDir())
	code, out, errs := runCLI("check", "-golden", root)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	var fallback []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "fell back") || strings.Contains(l, "searched:") {
			fallback = append(fallback, l)
		}
	}
	if len(fallback) != 1 || !strings.Contains(fallback[0], "make cuda") || strings.Contains(fallback[0], "libtouchstone_cuda.so,") {
		t.Fatalf("want one fallback line with the fix and no path list:\n%s", out)
	}
	_, out, _ = runCLI("check", "-v", "-golden", root)
	if !strings.Contains(out, "(searched: ") || !strings.Contains(out, "cuda/build/libtouchstone_cuda.so") {
		t.Fatalf("-v does not list the paths searched:\n%s", out)
	}
}

// modelRoot is a golden root holding one rmsnorm case and the committed model set name.
func modelRoot(t *testing.T, name string) string {
	t.Helper()
	root, _ := committedSet(t, "rmsnorm", firstCase(t, "rmsnorm"))
	src := filepath.Join("..", "..", "golden", "models", name)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(src, e.Name()), filepath.Join(root, "models", name, e.Name()))
	}
	return root
}

// modelRows returns the set's rows of the check table, by what they report (the worst tap's
// row is keyed "worst").
func modelRows(t *testing.T, out, set string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "model" || f[1] != set {
			continue
		}
		key := f[2]
		if key != "taps" && key != "greedy" && key != "seeded" {
			key = "worst"
		}
		rows[key] = f[2:]
	}
	if len(rows) != 4 {
		t.Fatalf("want the worst-tap, taps, greedy and seeded rows of %s:\n%s", set, out)
	}
	return rows
}

// The main table holds the model sets: each set's worst tap, its taps, greedy and seeded
// verdicts; a model bug fails the set's row and names the first failing tap.
func TestCheckModelRows(t *testing.T) {
	root := modelRoot(t, "gpt2-tiny")
	useBackend(t, cpu.New())
	code, out, errs := runCLI("check", "-golden", root)
	if code != 0 || !strings.Contains(out, "2 passed, 0 failed") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	rows := modelRows(t, out, "gpt2-tiny")
	for key, r := range rows {
		if r[len(r)-1] != "PASS" {
			t.Errorf("%s row %v", key, r)
		}
	}
	if !strings.HasPrefix(rows["worst"][0], "prefill.") && !strings.HasPrefix(rows["worst"][0], "decode.") {
		t.Errorf("worst row names no tap: %v", rows["worst"])
	}
	if got := strings.Join(rows["greedy"], " "); !strings.Contains(got, "32 of 32") {
		t.Errorf("greedy row %q", got)
	}

	// -kind selects: kernels only, models only.
	_, out, _ = runCLI("check", "-golden", root, "-kind", "kernels")
	if strings.Contains(out, "gpt2-tiny") || !strings.Contains(out, "1 passed") {
		t.Errorf("-kind kernels ran the model set:\n%s", out)
	}
	_, out, _ = runCLI("check", "-golden", root, "-kind", "models")
	if strings.Contains(out, "rmsnorm") || !strings.Contains(out, "1 passed") {
		t.Errorf("-kind models ran the kernel set:\n%s", out)
	}

	useBackend(t, layerNormWithoutBeta{cpu.New()})
	code, out, _ = runCLI("check", "-golden", root, "-kind", "models")
	if code != 1 || !strings.Contains(out, "0 passed, 1 failed") {
		t.Fatalf("a model without the layernorm bias passed: exit %d\n%s", code, out)
	}
	rows = modelRows(t, out, "gpt2-tiny")
	if taps := strings.Join(rows["taps"], " "); !strings.Contains(taps, ", first prefill.layers.0.attn_norm") || !strings.HasSuffix(taps, "FAIL") {
		t.Errorf("taps row %q does not name the first failing tap", taps)
	}
}

func TestCheckRejectsABadKind(t *testing.T) {
	for _, args := range [][]string{{"-kind", "model"}, {"-kind", "models", "-op", "gelu"}} {
		code, _, errs := runCLI(append([]string{"check"}, args...)...)
		if code != 2 || !strings.Contains(errs, "-kind") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

// layerNormWithoutBeta is the cpu backend with the layernorm's beta dropped, a realistic slip
// that every GPT-2 tap after the first norm shows.
type layerNormWithoutBeta struct{ *cpu.Backend }

func (l layerNormWithoutBeta) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	zero, err := l.Backend.Alloc(beta.DType(), beta.Shape()...)
	if err != nil {
		return err
	}
	defer zero.Free()
	return l.Backend.LayerNorm(out, x, gamma, zero, eps)
}

// rewriteMargins replaces a model set's stored margins (greedy_top2_margin or sample_margin)
// with v everywhere and fixes the manifest's checksum, as a regenerated set with flat logits
// would have them.
func rewriteMargins(t *testing.T, dir, name string, v float32) {
	t.Helper()
	path := filepath.Join(dir, name+".npy")
	old, err := tensor.ReadNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	flat := make([]float32, len(old.F32))
	for i := range flat {
		flat[i] = v
	}
	if err := tensor.WriteNPY(path, tensor.FromF32(old.Shape, flat)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	mpath := filepath.Join(dir, "manifest.json")
	raw, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a uint64 seed must survive the round trip
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m["files"].([]any) {
		if f := f.(map[string]any); f["name"] == name {
			f["sha256"] = hex.EncodeToString(sum[:])
		}
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A token check whose reference margins are all below epsilon decides nothing: its row says
// INCONCLUSIVE with the tally, the summary counts it apart, and -inconclusive=fail (or the
// environment) makes it a failure.
func TestCheckInconclusiveTokens(t *testing.T) {
	root := modelRoot(t, "gpt2-tiny")
	rewriteMargins(t, filepath.Join(root, "models", "gpt2-tiny"), "greedy_top2_margin", 0)
	rewriteMargins(t, filepath.Join(root, "models", "gpt2-tiny"), "sample_margin", 1e6)
	useBackend(t, cpu.New())
	t.Setenv("TOUCHSTONE_INCONCLUSIVE", "")
	code, out, errs := runCLI("check", "-golden", root, "-kind", "models")
	if code != 1 || !strings.Contains(out, "0 passed, 0 failed, 0 unsupported, 1 inconclusive") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	rows := modelRows(t, out, "gpt2-tiny")
	if g := strings.Join(rows["greedy"], " "); !strings.Contains(g, "0 of 32 steps decisive") || !strings.HasSuffix(g, "INCONCLUSIVE") {
		t.Errorf("greedy row %q", g)
	}
	if s := strings.Join(rows["seeded"], " "); !strings.Contains(s, "32 of 32 steps decisive") || !strings.HasSuffix(s, "PASS") {
		t.Errorf("seeded row %q", s)
	}
	for _, tc := range []struct {
		env   string
		flags []string
	}{{"", []string{"-inconclusive=fail"}}, {"fail", nil}} {
		t.Setenv("TOUCHSTONE_INCONCLUSIVE", tc.env)
		args := append([]string{"check", "-golden", root, "-kind", "models"}, tc.flags...)
		code, out, _ := runCLI(args...)
		rows := modelRows(t, out, "gpt2-tiny")
		if code != 1 || !strings.Contains(out, "0 passed, 1 failed, 0 unsupported, 0 inconclusive") ||
			!strings.HasSuffix(strings.Join(rows["greedy"], " "), "FAIL (inconclusive)") {
			t.Errorf("env %q flags %v: exit %d\n%s", tc.env, tc.flags, code, out)
		}
	}
	t.Setenv("TOUCHSTONE_INCONCLUSIVE", "maybe")
	if code, _, errs := runCLI("check", "-golden", root); code != 2 || !strings.Contains(errs, "TOUCHSTONE_INCONCLUSIVE") {
		t.Errorf("an unknown policy: exit %d %s", code, errs)
	}
}
