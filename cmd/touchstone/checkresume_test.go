package main

import (
	"slices"
	"strings"
	"testing"
)

// After a hang, check continues in a new process from the case after it, with the counts so
// far: that process skips the cases already printed and adds its own counts.
func TestCheckResumesAfterAHang(t *testing.T) {
	t.Setenv("TOUCHSTONE_BACKEND", "cpu")
	// three sampling sets; the first two were run (5 passed, 1 HANG counted as failed) by the
	// process that hung
	t.Setenv(envCheckResume, "2:5:1:0:0:0")
	code, out, errs := runCLI("check", "-kind", "sampling")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the carried failure)\n%s%s", code, out, errs)
	}
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "sample ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 1 || !strings.Contains(out, "a new process after the hang") || strings.Contains(out, "OP  ") {
		t.Errorf("want one row (the third set) after the resume note, no header:\n%s", out)
	}
	if !strings.Contains(out, "6 passed, 1 failed, 0 unsupported, 0 inconclusive") {
		t.Errorf("summary does not add the carried counts:\n%s", out)
	}
	for _, bad := range []string{"x", "0:1:2:3:4:5", "1:2:3"} {
		t.Setenv(envCheckResume, bad)
		if code, _, errs := runCLI("check", "-kind", "sampling"); code != 2 || !strings.Contains(errs, envCheckResume) {
			t.Errorf("%s=%q: exit %d, stderr %q", envCheckResume, bad, code, errs)
		}
	}
}

// The resume point round-trips the next case and every count.
func TestResumePointParses(t *testing.T) {
	if p, c, err := resumePoint("3:4:5:6:7:8"); err != nil || p != 3 || c != (checkCounts{4, 5, 6, 7, 8}) {
		t.Errorf("resumePoint: %d %v %v", p, c, err)
	}
	if p, _, err := resumePoint(""); err != nil || p != 0 {
		t.Errorf("resumePoint of nothing: %d %v", p, err)
	}
}

// A process continuing after a second hang replaces the resume point its parent gave it.
func TestWithEnvReplaces(t *testing.T) {
	got := withEnv([]string{"A=1", envCheckResume + "=2:1:1:0:0:0", "B=2"}, envCheckResume, "5:3:2:0:0:0")
	want := []string{"A=1", "B=2", envCheckResume + "=5:3:2:0:0:0"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
