package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"
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
		"1 passed, 0 failed, 1 unsupported\n",
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
			if !strings.Contains(out, "1 passed, 1 failed, 0 unsupported\n") || !strings.Contains(out, "[TS_ERR_UNSUPPORTED]") {
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
	if !strings.Contains(out, "op not supported by this backend") || !strings.Contains(out, "1 passed, 0 failed, 1 unsupported\n") {
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
