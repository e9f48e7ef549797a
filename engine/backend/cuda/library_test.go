package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func TestRegistered(t *testing.T) {
	if !slices.Contains(backend.Names(), "cuda") {
		t.Fatalf("registered backends %v lack cuda", backend.Names())
	}
}

// Asking for a library that is not there names the path and says how to build it.
func TestOpenWithoutLibraryNamesPathAndMakeCuda(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "build", libName)
	t.Setenv(EnvLib, missing)
	_, err := backend.Open("cuda", backend.Options{Device: -1})
	if !errors.Is(err, ErrLibrary) {
		t.Fatalf("err = %v, want ErrLibrary", err)
	}
	for _, want := range []string{missing, "make cuda", EnvLib} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// What auto-selection shows as its reason for falling back to the CPU.
	sel, serr := backend.Select(func(k string) string { return map[string]string{EnvLib: missing, backend.EnvBackend: "cuda"}[k] }, 0)
	if serr == nil || !strings.Contains(serr.Error(), missing) {
		t.Errorf("TOUCHSTONE_BACKEND=cuda without a library: %v, %v", sel, serr)
	}
}

// Without TOUCHSTONE_CUDA_LIB the search covers the bundle layout (dist/bin/<binaries> in a
// checkout with cuda/build/) and the working directory, and a miss lists every path tried.
func TestSearch(t *testing.T) {
	root := t.TempDir()
	exeDir := filepath.Join(root, "repo", "dist", "bin")
	wd := filepath.Join(root, "elsewhere", "suites")
	noEnv := func(string) string { return "" }

	_, err := findLibrary(noEnv, exeDir, wd)
	if !errors.Is(err, ErrLibrary) {
		t.Fatalf("err = %v, want ErrLibrary", err)
	}
	want := []string{
		filepath.Join(exeDir, "lib", libName),
		filepath.Join(root, "repo", "dist", "lib", libName),
		filepath.Join(exeDir, "cuda", "build", libName),
		filepath.Join(root, "repo", "dist", "cuda", "build", libName),
		filepath.Join(root, "repo", "cuda", "build", libName),
		filepath.Join(root, "cuda", "build", libName),
		filepath.Join(wd, "cuda", "build", libName),
		filepath.Join(root, "elsewhere", "cuda", "build", libName),
		filepath.Join("/", "cuda", "build", libName),
	}
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("err = %v, want a *NotFoundError", err)
	}
	for _, p := range want {
		if !slices.Contains(nf.Tried, p) {
			t.Errorf("the search did not try %s: %v", p, nf.Tried)
		}
	}
	// One line with the reason and the fix; the paths only on request (touchstone check -v).
	for _, s := range []string{"make cuda", EnvLib, fmt.Sprintf("%d paths searched", len(nf.Tried))} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not say %q: %v", s, err)
		}
	}
	if strings.Contains(err.Error(), root) || strings.Contains(err.Error(), "\n") {
		t.Errorf("the error lists paths or spans lines: %v", err)
	}
	paths := searchPaths(exeDir, wd)
	for i := 1; i < len(want)-1; i++ { // "/" comes after every other ancestor of both
		if slices.Index(paths, want[i-1]) > slices.Index(paths, want[i]) {
			t.Errorf("%s is searched before %s: %v", want[i], want[i-1], paths)
		}
	}

	place := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{want[7], want[4], want[1]} { // each one found beats the last
		place(p)
		if got, err := findLibrary(noEnv, exeDir, wd); err != nil || got != p {
			t.Errorf("with %s present: found %q, %v", p, got, err)
		}
	}
	// The variable wins over everything, even a relative path.
	t.Chdir(root)
	rel := filepath.Join("elsewhere", "cuda", "build", libName)
	if got, err := findLibrary(func(k string) string { return map[string]string{EnvLib: rel}[k] }, exeDir, wd); err != nil || got != want[7] {
		t.Errorf("%s=%s: found %q, %v", EnvLib, rel, got, err)
	}
	// A directory is not a library.
	if _, err := findLibrary(func(string) string { return root }, exeDir, wd); !errors.Is(err, ErrLibrary) {
		t.Errorf("%s=<directory>: %v", EnvLib, err)
	}
}

func TestABIVersionMismatchIsRefused(t *testing.T) {
	needFakes(t)
	_, err := loadLibrary(fakes.badVersion)
	if !errors.Is(err, ErrABI) {
		t.Fatalf("err = %v, want ErrABI", err)
	}
	for _, want := range []string{fakes.badVersion, "ts_abi_version() = 99", fmt.Sprintf("TS_ABI_VERSION %d", abiVersion), "make cuda"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestMissingSymbolIsRefused(t *testing.T) {
	needFakes(t)
	_, err := loadLibrary(fakes.noRMSNorm)
	if !errors.Is(err, ErrABI) {
		t.Fatalf("err = %v, want ErrABI", err)
	}
	for _, want := range []string{fakes.noRMSNorm, "no symbol ts_rmsnorm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestNotALibraryIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), libName)
	if err := os.WriteFile(p, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadLibrary(p)
	if !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), "dlopen "+p) {
		t.Fatalf("err = %v, want ErrLibrary naming dlopen of %s", err, p)
	}
}

// One process uses one library: a second one would share its CUDA context.
func TestSecondLibraryIsRefused(t *testing.T) {
	openFake(t)
	t.Setenv(EnvLib, fakes.badVersion)
	_, err := backend.Open("cuda", backend.Options{Device: -1})
	if !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), "already loaded") {
		t.Fatalf("err = %v, want a refusal to load a second library", err)
	}
}

func TestPickDevice(t *testing.T) {
	for _, tc := range []struct {
		opts  backend.Options
		count int
		want  int
	}{
		{backend.Options{Device: -1}, 1, 0},
		{backend.Options{Device: -1}, 8, 0},
		{backend.Options{Device: 3}, 8, 3},
		{backend.Options{Device: -1, Process: 1}, 8, 0},
		{backend.Options{Device: -1, Process: 5}, 8, 4},
		{backend.Options{Device: -1, Process: 10}, 8, 1}, // more processes than GPUs: round-robin
		{backend.Options{Device: 2, Process: 5}, 8, 2},   // an explicit device wins
	} {
		if got, err := pickDevice(tc.opts, tc.count); err != nil || got != tc.want {
			t.Errorf("pickDevice(%+v, %d) = %d, %v; want %d", tc.opts, tc.count, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		opts  backend.Options
		count int
	}{{backend.Options{Device: -1}, 0}, {backend.Options{Device: 2}, 2}} {
		if _, err := pickDevice(tc.opts, tc.count); !errors.Is(err, ErrNoDevice) {
			t.Errorf("pickDevice(%+v, %d): %v, want ErrNoDevice", tc.opts, tc.count, err)
		}
	}
}

func TestNoDevice(t *testing.T) {
	fakeEnv(t)
	t.Setenv("FAKETS_DEVICES", "0")
	_, err := backend.Open("cuda", backend.Options{Device: -1})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "no CUDA-capable device is detected (fake)") {
		t.Fatalf("err = %v, want ErrNoDevice with the library's message", err)
	}
	t.Setenv("FAKETS_DEVICES", "1")
	_, err = backend.Open("cuda", backend.Options{Device: 1})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "device 1 requested") {
		t.Fatalf("device 1 of 1: %v, want ErrNoDevice", err)
	}
}

// A second build opened by path lives beside the default one (touchstone compare's
// candidate): its own library, each one's calls its own.
func TestOpenLibraryBesideTheDefault(t *testing.T) {
	def := openFake(t)
	data, err := os.ReadFile(fakes.lib)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "candidate", libName)
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cand, err := OpenLibrary(other, backend.Options{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cand.Close()
	if cand.lib == def.lib || cand.lib.api == def.lib.api {
		t.Fatal("the candidate shares the default library")
	}
	same, err := OpenLibrary(fakes.lib, backend.Options{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer same.Close()
	if same.lib != def.lib {
		t.Error("opening the default library by path loaded it a second time")
	}
	for _, b := range []*Backend{def, cand} {
		x, err := b.Upload(tensor.FromF32([]int{2}, []float32{1, 2}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Download(x); err != nil {
			t.Fatal(err)
		}
		x.Free()
	}
	if _, err := OpenLibrary(filepath.Join(t.TempDir(), "missing.so"), backend.Options{Device: -1}); !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), "missing.so") {
		t.Errorf("missing library: %v", err)
	}
}

// A parallel process opens its own device: process p of a ginkgo -p run (the number the suites
// pass, since Ginkgo gives it as a flag and not in the environment) initialises the library on
// device (p-1) mod count, reports that device, and TOUCHSTONE_DEVICE still wins.
func TestParallelProcessOpensItsOwnDevice(t *testing.T) {
	for _, tc := range []struct {
		process int
		device  string
		want    int
	}{{2, "", 1}, {3, "", 0}, {2, "0", 0}} {
		fakeEnv(t)
		t.Setenv("FAKETS_DEVICES", "2")
		t.Setenv(backend.EnvBackend, "cuda")
		t.Setenv(backend.EnvDevice, tc.device)
		sel, err := backend.ForProcess(tc.process)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Backend.Info().Index; got != tc.want {
			t.Errorf("process %d, TOUCHSTONE_DEVICE=%q: device %d, want %d", tc.process, tc.device, got, tc.want)
		}
		init := fmt.Sprintf("ts_init device=%d", tc.want)
		if log := calls(t); !slices.Contains(log, init) {
			t.Errorf("process %d: the library saw %q, want %q", tc.process, log, init)
		}
		if err := sel.Backend.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
