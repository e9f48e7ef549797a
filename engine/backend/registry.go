package backend

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Options are what a backend factory needs to open a device.
type Options struct {
	// Device is the ordinal to open (TOUCHSTONE_DEVICE); -1 lets the backend choose, which
	// for a GPU backend means one device per parallel Ginkgo process.
	Device int
	// Process is the 1-based number of this process among parallel test processes (Ginkgo's
	// GinkgoParallelProcess(), which Ginkgo passes as a flag, never in the environment), 0
	// outside a parallel run.
	Process int
	// Command is the external backend's adapter command (TOUCHSTONE_BACKEND=exec:<command>),
	// run by sh -c; empty for the built-in backends.
	Command string
}

// ExecPrefix starts a TOUCHSTONE_BACKEND value that names an external backend's command.
const ExecPrefix = "exec:"

// Factory opens a backend.
type Factory func(Options) (Backend, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Factory{}
)

// Register makes a backend available under name. Backends call it from init; a second
// registration of one name is a programming error and panics.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	registry[name] = f
}

// Names lists the registered backends, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens the backend registered under name.
func Open(name string, opts Options) (Backend, error) {
	registryMu.Lock()
	f, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		if name == "cuda" {
			return nil, fmt.Errorf("backend cuda: this build has no CUDA backend (registered backends: %v)", Names())
		}
		return nil, fmt.Errorf("backend %q: unknown (registered backends: %v)", name, Names())
	}
	return f(opts)
}

// Selection is the outcome of choosing a backend from the environment.
type Selection struct {
	Backend Backend
	// Requested is the value of TOUCHSTONE_BACKEND ("auto" when unset).
	Requested string
	// Fallback explains why auto did not pick the GPU, empty otherwise; FallbackErr is that
	// error, for a caller that shows more of it (the library paths searched, with -v).
	Fallback    string
	FallbackErr error
}

// Environment variables that steer backend selection.
const (
	EnvBackend    = "TOUCHSTONE_BACKEND"     // cpu | cuda | auto (default) | exec:<command>
	EnvRequireGPU = "TOUCHSTONE_REQUIRE_GPU" // "1": no GPU is a failure, never a skip
	EnvDevice     = "TOUCHSTONE_DEVICE"      // device ordinal, default: chosen by the backend
)

// RequireGPU reports whether TOUCHSTONE_REQUIRE_GPU asks for a GPU.
func RequireGPU(getenv func(string) string) bool {
	v := getenv(EnvRequireGPU)
	return v == "1" || v == "true" || v == "yes"
}

// FromEnv opens the backend the environment asks for. With TOUCHSTONE_REQUIRE_GPU=1 any
// outcome other than a GPU backend is an error, so a GPU runner can never pass by quietly
// testing the CPU.
func FromEnv() (*Selection, error) { return Select(os.Getenv, 0) }

// ForProcess is FromEnv for parallel process p (1-based): without TOUCHSTONE_DEVICE a GPU
// backend opens device (p-1) mod count, so `ginkgo -p` spreads its processes over the GPUs.
// The test suites pass GinkgoParallelProcess(): Ginkgo hands each process its number as a
// command-line flag, so the environment alone cannot tell processes apart.
func ForProcess(p int) (*Selection, error) { return Select(os.Getenv, p) }

// Select is ForProcess with an injectable environment, for tests.
func Select(getenv func(string) string, process int) (*Selection, error) {
	requested := getenv(EnvBackend)
	if requested == "" {
		requested = "auto"
	}
	requireGPU := RequireGPU(getenv)
	opts := Options{Device: -1}
	if s := getenv(EnvDevice); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s=%q: want a device ordinal >= 0", EnvDevice, s)
		}
		opts.Device = d
	}
	if process > 0 {
		opts.Process = process
	}

	if cmd, ok := strings.CutPrefix(requested, ExecPrefix); ok {
		if strings.TrimSpace(cmd) == "" {
			return nil, fmt.Errorf("%s=%q: want exec:<command>, the adapter to start", EnvBackend, requested)
		}
		opts.Command = cmd
		b, err := Open("exec", opts)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvBackend, requested, err)
		}
		return &Selection{Backend: b, Requested: requested}, nil
	}
	switch requested {
	case "cpu":
		if requireGPU {
			return nil, fmt.Errorf("%s=1 but %s=cpu: a GPU run cannot use the CPU backend", EnvRequireGPU, EnvBackend)
		}
		b, err := Open("cpu", opts)
		if err != nil {
			return nil, err
		}
		return &Selection{Backend: b, Requested: requested}, nil
	case "cuda":
		b, err := Open("cuda", opts)
		if err != nil {
			return nil, fmt.Errorf("%s=cuda: %w", EnvBackend, err)
		}
		return &Selection{Backend: b, Requested: requested}, nil
	case "auto":
		b, err := Open("cuda", opts)
		if err == nil {
			return &Selection{Backend: b, Requested: requested}, nil
		}
		if requireGPU {
			return nil, fmt.Errorf("%s=1 and no GPU backend could be opened: %w", EnvRequireGPU, err)
		}
		cpu, cerr := Open("cpu", opts)
		if cerr != nil {
			return nil, cerr
		}
		return &Selection{Backend: cpu, Requested: requested, Fallback: err.Error(), FallbackErr: err}, nil
	default:
		return nil, fmt.Errorf("%s=%q: want cpu, cuda, auto or exec:<command>", EnvBackend, requested)
	}
}
