// Command reportcheck checks the merged reports of one dist/run: that report.json and junit.xml
// hold every suite of the bundle, each named by its description and with the specs it ran.
// Ginkgo names the per-suite files it merges after each suite's directory, so suites sharing a
// directory overwrite each other's and the merged reports silently keep one; the bundle gives
// each suite a directory of its own (dist/suites/<name>), and this is its check.
//
//	go run ./tools/bundle/reportcheck -reports DIR -suite "Kernel conformance" -suite ...
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ", ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// jsonSuite is the part of a Ginkgo JSON report entry the check reads.
type jsonSuite struct {
	SuiteDescription string
	SuiteSucceeded   bool
	SpecReports      []struct {
		State string
	}
}

type junitSuites struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Tests int    `xml:"tests,attr"`
	} `xml:"testsuite"`
}

// check returns one problem per missing or empty suite in the reports under dir.
func check(dir string, want []string) ([]string, error) {
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
	flag.Parse()
	if len(want) == 0 {
		fmt.Fprintln(os.Stderr, "reportcheck: name the suites with -suite")
		os.Exit(2)
	}
	problems, err := check(*dir, want)
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
}
