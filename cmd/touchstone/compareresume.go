package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/touchstone-llm/touchstone/engine/abtest"
)

// envCompareResume carries a `touchstone compare` run across a hang, as envCheckResume does
// check's: a kernel that did not finish keeps the GPU busy and poisons its backend, so compare
// writes the cases finished to a file, names it here and starts itself again (exec, the same
// arguments); the new process reads the file, removes it, and runs the sets from the first
// one not finished.
const envCompareResume = "TOUCHSTONE_COMPARE_RESUME"

// compareProgress is that file.
type compareProgress struct {
	// Sets is how many sets the run selected: the new process must select as many.
	Sets int `json:"sets"`
	// Next indexes the kernel sets, then the model sets, in the order they run.
	Next  int           `json:"next"`
	Cases []abtest.Case `json:"cases"`
	// Partial is the case at Next when its baseline hung: its candidate is still to run.
	Partial *abtest.Case `json:"partial,omitempty"`
}

// loadCompareProgress reads the file envCompareResume names, if any, and removes it.
func loadCompareProgress(sets int) (compareProgress, error) {
	path := os.Getenv(envCompareResume)
	if path == "" {
		return compareProgress{Sets: sets}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return compareProgress{}, fmt.Errorf("%s: %w (set by compare itself after a hang)", envCompareResume, err)
	}
	os.Remove(path)
	var p compareProgress
	if err := json.Unmarshal(data, &p); err != nil {
		return compareProgress{}, fmt.Errorf("%s = %s: %w", envCompareResume, path, err)
	}
	if p.Sets != sets || p.Next < 0 || p.Next > sets || (p.Partial != nil && p.Next == sets) {
		return compareProgress{}, fmt.Errorf("%s = %s: next set %d of %d, but this run selects %d sets: the golden sets or the flags changed", envCompareResume, path, p.Next, p.Sets, sets)
	}
	return p, nil
}

// continueCompare writes p to a new file and re-executes compare with it.
func continueCompare(p compareProgress) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "touchstone-compare-*.json")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = reexec(envCompareResume, f.Name())
	}
	os.Remove(f.Name()) // reached only when exec failed
	return err
}
