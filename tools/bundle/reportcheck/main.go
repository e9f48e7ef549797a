// Command reportcheck checks the merged reports of one dist/run: that report.json and junit.xml
// hold every suite of the bundle, each named by its description and with the specs it ran.
// Ginkgo names the per-suite files it merges after each suite's directory, so suites sharing a
// directory overwrite each other's and the merged reports silently keep one; the bundle gives
// each suite a directory of its own (dist/suites/<name>), and this is its check.
//
// With -devices N (a run with ginkgo -p on N GPUs) it also checks that every suite's backend
// report entries ("..., device D, Ginkgo process P") put process P on device (P-1) mod N and
// that the run used all N devices (or as many as there were processes): processes that all
// open device 0 share one GPU while the others idle.
//
//	go run ./tools/bundle/reportcheck -reports DIR -suite "Kernel conformance" -suite ... [-devices N]
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ", ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// jsonSuite is the part of a Ginkgo JSON report entry the check reads.
type jsonSuite struct {
	SuiteDescription string
	SuiteSucceeded   bool
	PreRunStats      struct{ SpecsThatWillRun int }
	SpecReports      []struct {
		State                   string
		LeafNodeType            string
		LeafNodeText            string
		ContainerHierarchyTexts []string
		Failure                 struct{ Message string }
		ReportEntries           []struct {
			Name  string
			Value struct {
				Representation string
			}
		}
	}
}

type junitSuites struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Tests int    `xml:"tests,attr"`
	} `xml:"testsuite"`
}

// backendDevice is what harness.OpenBackend writes of a GPU backend in its "backend" entry.
var backendDevice = regexp.MustCompile(`device (\d+), Ginkgo process (\d+)`)

// checkDevices returns one problem per suite whose backend entries put a process on another
// device than (process-1) mod devices, or that used fewer devices than it had processes (up to
// devices).
func checkDevices(js []jsonSuite, devices int) []string {
	var problems []string
	for _, s := range js {
		used := map[int]bool{}
		procs := map[int]bool{}
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name != "backend" {
					continue
				}
				m := backendDevice.FindStringSubmatch(e.Value.Representation)
				if m == nil {
					problems = append(problems, fmt.Sprintf("suite %q: backend entry %q names no device and process (not a GPU backend?)", s.SuiteDescription, e.Value.Representation))
					continue
				}
				var d, p int
				fmt.Sscan(m[1], &d)
				fmt.Sscan(m[2], &p)
				used[d], procs[p] = true, true
				if want := (p - 1) % devices; d != want {
					problems = append(problems, fmt.Sprintf("suite %q: Ginkgo process %d ran on device %d, want device %d of %d", s.SuiteDescription, p, d, want, devices))
				}
			}
		}
		if len(procs) == 0 {
			problems = append(problems, fmt.Sprintf("suite %q: no backend report entry", s.SuiteDescription))
			continue
		}
		if want := min(devices, len(procs)); len(used) < want {
			var ds []int
			for d := range used {
				ds = append(ds, d)
			}
			sort.Ints(ds)
			problems = append(problems, fmt.Sprintf("suite %q: %d processes used devices %v, want %d distinct devices", s.SuiteDescription, len(procs), ds, want))
		}
	}
	return problems
}

// checkHangs returns one problem unless exactly hangs specs failed as HANG (the marker in their
// failure), every other spec passed or was skipped for a reason of its own, and every spec the
// label filter selected was reported (an abort leaves the rest skipped without a reason until
// dist/run restarts the suite; a spec the filter left out is skipped without one too, so the
// count of reported specs is what tells them apart).
func checkHangs(js []jsonSuite, hangs int) []string {
	var problems []string
	n := 0
	for _, s := range js {
		reported := 0
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != "It" || (sp.State == "skipped" && sp.Failure.Message == "") {
				continue
			}
			reported++
			switch {
			case strings.Contains(sp.Failure.Message, backend.HangMarker):
				n++
			case sp.State != "passed" && sp.State != "skipped":
				problems = append(problems, fmt.Sprintf("suite %q: %q %s: %s", s.SuiteDescription, sp.LeafNodeText, sp.State, sp.Failure.Message))
			}
		}
		if reported != s.PreRunStats.SpecsThatWillRun {
			problems = append(problems, fmt.Sprintf("suite %q: %d specs reported, the filter selected %d: the rest were never run", s.SuiteDescription, reported, s.PreRunStats.SpecsThatWillRun))
		}
	}
	if n != hangs {
		problems = append(problems, fmt.Sprintf("%d specs failed as HANG, want %d", n, hangs))
	}
	return problems
}

// checkUniqueNames returns a problem per spec name that two specs of a suite share: a suite
// restarted after a hang skips the specs already reported by name, so it would skip both.
func checkUniqueNames(js []jsonSuite) []string {
	var problems []string
	for _, s := range js {
		seen := map[string]int{}
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType == "It" {
				seen[strings.Join(append(slices.Clone(sp.ContainerHierarchyTexts), sp.LeafNodeText), " ")]++
			}
		}
		for _, name := range slices.Sorted(maps.Keys(seen)) {
			if seen[name] > 1 {
				problems = append(problems, fmt.Sprintf("suite %q: %d specs are named %q: a restart after a hang would skip all of them once one is reported", s.SuiteDescription, seen[name], name))
			}
		}
	}
	return problems
}

// check returns one problem per missing or empty suite in the reports under dir and, with
// devices > 0, per suite that did not spread its processes over the devices.
func check(dir string, want []string, devices, hangs int) ([]string, error) {
	var problems []string
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return nil, err
	}
	var js []jsonSuite
	if err := json.Unmarshal(raw, &js); err != nil {
		return nil, fmt.Errorf("report.json: %w", err)
	}
	ran := map[string]int{}
	for _, s := range js {
		for _, sp := range s.SpecReports {
			if sp.State == "passed" || sp.State == "failed" {
				ran[s.SuiteDescription]++
			}
		}
		if _, ok := ran[s.SuiteDescription]; !ok {
			ran[s.SuiteDescription] = 0
		}
	}
	raw, err = os.ReadFile(filepath.Join(dir, "junit.xml"))
	if err != nil {
		return nil, err
	}
	var ju junitSuites
	if err := xml.Unmarshal(raw, &ju); err != nil {
		return nil, fmt.Errorf("junit.xml: %w", err)
	}
	tests := map[string]int{}
	for _, s := range ju.Suites {
		tests[s.Name] = s.Tests
	}
	problems = append(problems, checkUniqueNames(js)...)
	if devices > 0 {
		problems = append(problems, checkDevices(js, devices)...)
	}
	if hangs >= 0 {
		problems = append(problems, checkHangs(js, hangs)...)
	}
	for _, name := range want {
		if n, ok := ran[name]; !ok {
			problems = append(problems, fmt.Sprintf("report.json has no suite %q (it has %d suites)", name, len(js)))
		} else if n == 0 {
			problems = append(problems, fmt.Sprintf("report.json: suite %q ran no spec", name))
		}
		if n, ok := tests[name]; !ok {
			problems = append(problems, fmt.Sprintf("junit.xml has no testsuite %q (it has %d)", name, len(ju.Suites)))
		} else if n == 0 {
			problems = append(problems, fmt.Sprintf("junit.xml: testsuite %q has no test", name))
		}
	}
	return problems, nil
}

func main() {
	dir := flag.String("reports", "build/reports", "the directory dist/run wrote its reports to")
	var want list
	flag.Var(&want, "suite", "a suite description that must be in both reports with specs run (repeatable)")
	devices := flag.Int("devices", 0, "a ginkgo -p run on this many GPUs: each process on device (process-1) mod N, all N used")
	hangs := flag.Int("hangs", -1, "exactly this many specs failed as HANG, every other spec passed or was skipped with a reason, none left unreported")
	flag.Parse()
	if len(want) == 0 {
		fmt.Fprintln(os.Stderr, "reportcheck: name the suites with -suite")
		os.Exit(2)
	}
	problems, err := check(*dir, want, *devices, *hangs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reportcheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "reportcheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("reportcheck: %s: every suite (%s) in report.json and junit.xml with its specs\n", *dir, want.String())
	if *devices > 0 {
		fmt.Printf("reportcheck: every process on its own device of %d\n", *devices)
	}
}
