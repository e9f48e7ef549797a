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
	problems, err := check(dir, []string{"Kernel conformance", "Seeded sampling"}, 0, -1)
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
	problems, err := check(dir, []string{"Kernel conformance", "Seeded sampling"}, 0, -1)
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
	if _, err := check(dir, []string{"x"}, 0, -1); err == nil || !strings.Contains(err.Error(), "report.json") {
		t.Fatalf("err %v", err)
	}
	if _, err := check(t.TempDir(), []string{"x"}, 0, -1); err == nil {
		t.Fatal("a directory without reports passed")
	}
}

func backendEntries(entries ...string) string {
	var specs []string
	for _, e := range entries {
		specs = append(specs, `{"State": "passed", "ReportEntries": [{"Name": "backend", "Value": {"Representation": "`+e+`"}}]}`)
	}
	return `[{"SuiteDescription": "Kernel conformance", "SpecReports": [` + strings.Join(specs, ",") + `]}]`
}

// The failure -devices exists for: two parallel processes both on device 0.
func TestDevicesCatchesProcessesSharingOneGPU(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "junit.xml", `<testsuites><testsuite name="Kernel conformance" tests="2"></testsuite></testsuites>`)
	write(t, dir, "report.json", backendEntries("cuda: H100, device 0, Ginkgo process 1 (requested auto)", "cuda: H100, device 0, Ginkgo process 2 (requested auto)"))
	problems, err := check(dir, []string{"Kernel conformance"}, 2, -1)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{"Ginkgo process 2 ran on device 0, want device 1 of 2", "2 processes used devices [0], want 2 distinct devices"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	write(t, dir, "report.json", backendEntries("cuda: H100, device 0, Ginkgo process 1 (requested auto)", "cuda: H100, device 1, Ginkgo process 2 (requested auto)"))
	if problems, err := check(dir, []string{"Kernel conformance"}, 2, -1); err != nil || len(problems) != 0 {
		t.Fatalf("%v %v", problems, err)
	}
	write(t, dir, "report.json", backendEntries("cpu: Go (requested auto)"))
	if problems, _ := check(dir, []string{"Kernel conformance"}, 2, -1); len(problems) == 0 || !strings.Contains(problems[0], "names no device") {
		t.Fatalf("a CPU run passed the device check: %v", problems)
	}
}
