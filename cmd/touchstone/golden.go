package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/touchstone-llm/touchstone/engine/golden"
)

func runGoldenVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("golden verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := goldenFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := goldenRoot(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "touchstone:", err)
		return 2
	}
	sets, discoverErr := golden.Discover(root)
	bad := 0
	if discoverErr != nil {
		fmt.Fprintln(stdout, discoverErr)
		bad++
	}
	for _, s := range sets {
		if err := s.Verify(); err != nil {
			fmt.Fprintf(stdout, "FAIL %-50s %s\n     %v\n", s.ID(), s.Manifest.Tier, err)
			bad++
			continue
		}
		fmt.Fprintf(stdout, "ok   %-50s %s\n", s.ID(), s.Manifest.Tier)
	}
	fmt.Fprintf(stdout, "%d sets verified under %s, %d with problems\n", len(sets), root, bad)
	if bad > 0 || len(sets) == 0 {
		return 1
	}
	return 0
}

// goldenFlag defines the -golden flag every subcommand that reads golden sets takes; its
// value goes to goldenRoot.
func goldenFlag(fs *flag.FlagSet) *string {
	return fs.String("golden", "", "golden directory (default: $TOUCHSTONE_GOLDEN or golden/ above the working directory)")
}

func goldenRoot(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return golden.FindRoot()
}
