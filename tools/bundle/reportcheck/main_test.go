package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFindsEverySuite(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "report.json", `[{"SuiteDescription": "Kernel conformance", "SpecReports": [{"State": "passed"}]},
		{"SuiteDescription": "Seeded sampling", "SpecReports": [{"State": "failed"}, {"State": "skipped"}]}]`)
	write(t, dir, "junit.xml", `<testsuites><testsuite name="Kernel conformance" tests="1"></testsuite>
		<testsuite name="Seeded sampling" tests="2"></testsuite></testsuites>`)
	problems, err := check(dir, []string{"Kernel conformance", "Seeded sampling"})
	if err != nil || len(problems) != 0 {
		t.Fatalf("%v %v", problems, err)
	}
}

// The failure this check exists for: suites sharing a directory, the merged reports holding the
// last one only.
func TestCheckReportsALostSuiteAndAnEmptyOne(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "report.json", `[{"SuiteDescription": "Seeded sampling", "SpecReports": [{"State": "skipped"}]}]`)
	write(t, dir, "junit.xml", `<testsuites><testsuite name="Seeded sampling" tests="0"></testsuite></testsuites>`)
	problems, err := check(dir, []string{"Kernel conformance", "Seeded sampling"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{`report.json has no suite "Kernel conformance"`, `junit.xml has no testsuite "Kernel conformance"`,
		`suite "Seeded sampling" ran no spec`, `testsuite "Seeded sampling" has no test`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

func TestCheckRefusesCorruptReports(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "report.json", `{not json`)
	if _, err := check(dir, []string{"x"}); err == nil || !strings.Contains(err.Error(), "report.json") {
		t.Fatalf("err %v", err)
	}
	if _, err := check(t.TempDir(), []string{"x"}); err == nil {
		t.Fatal("a directory without reports passed")
	}
}
