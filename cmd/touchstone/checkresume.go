package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

// envCheckResume carries a `touchstone check` run across a hang: after a case whose kernel did
// not finish, the backend refuses every later call, so check starts itself again (exec, the
// same arguments) with "<next case>:<passed>:<failed>:<errors>:<unsupported>:<inconclusive>"
// here; the new process skips the cases already printed and adds its counts to these.
const envCheckResume = "TOUCHSTONE_CHECK_RESUME"

// checkCounts are the summary's counts.
type checkCounts struct {
	passed, failed, errored, unsupported, inconclusive int
}

// resumePoint parses envCheckResume: the ordinal of the first case to run (0 when the
// variable is unset) and the counts so far.
func resumePoint(v string) (int, checkCounts, error) {
	var c checkCounts
	if v == "" {
		return 0, c, nil
	}
	var next int
	n, err := fmt.Sscanf(v, "%d:%d:%d:%d:%d:%d", &next, &c.passed, &c.failed, &c.errored, &c.unsupported, &c.inconclusive)
	if err != nil || n != 6 || next < 1 {
		return 0, c, fmt.Errorf("%s = %q: want <next case>:<passed>:<failed>:<errors>:<unsupported>:<inconclusive> (set by check itself after a hang)", envCheckResume, v)
	}
	return next, c, nil
}

// reexec replaces the process with a new run of the same command line and environment plus
// name=value (envCheckResume, envCompareResume); a variable so tests can see what would run.
var reexec = func(name, value string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, withEnv(os.Environ(), name, value))
}

// withEnv is environ with name set to value: replaced, not added, since a process started after
// a hang has the variable already and a second entry would not be the one read.
func withEnv(environ []string, name, value string) []string {
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	return append(env, name+"="+value)
}
