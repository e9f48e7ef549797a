// Package cudatest builds the fake libtouchstone_cuda.so of engine/backend/cuda/testdata/fakets.c
// (the ABI over host memory, see that file) for tests on machines without CUDA: the cuda
// backend's own tests and those of commands that load a library, such as touchstone compare.
package cudatest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// ErrNoCompiler: gcc is not installed, so no fake can be built (a reason to skip).
var ErrNoCompiler = errors.New("gcc not found: the fake libtouchstone_cuda.so cannot be built")

// BuildFake compiles the fake into dir/libtouchstone_cuda.so with the given -D defines and
// returns its path. A library stays loaded until the process exits, so dir must outlive
// every test that opens it.
func BuildFake(dir string, defines ...string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoCompiler, err)
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cudatest: cannot locate the fake's sources")
	}
	here := filepath.Dir(self)
	src := filepath.Join(here, "..", "testdata", "fakets.c")
	include := filepath.Join(here, "..", "..", "..", "..", "cuda", "include")
	out := filepath.Join(dir, "libtouchstone_cuda.so")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I" + include}, defines...)
	args = append(args, "-o", out, src, "-lm")
	if msg, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the fake library: gcc %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}
