package cuda

/*
#cgo CFLAGS: -I${SRCDIR}/../../../cuda/include
#cgo LDFLAGS: -ldl
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Environment variables read by this package.
const (
	// EnvLib is the path of libtouchstone_cuda.so; when set, nothing else is searched.
	EnvLib = "TOUCHSTONE_CUDA_LIB"
	// EnvGuards=1 surrounds every buffer with guard bytes checked after each op (guards.go).
	EnvGuards = "TOUCHSTONE_GUARDS"
)

const libName = "libtouchstone_cuda.so"

// abiVersion is the TS_ABI_VERSION of the touchstone.h this package is built against: the
// version a loaded library must report.
const abiVersion = int(C.TS_ABI_VERSION)

// The ts_status codes, as Go constants for the code that does not import C.
const (
	statusOK              = int(C.TS_OK)
	statusInvalidArgument = int(C.TS_ERR_INVALID_ARGUMENT)
	statusShapeMismatch   = int(C.TS_ERR_SHAPE_MISMATCH)
	statusUnsupported     = int(C.TS_ERR_UNSUPPORTED)
	statusOutOfMemory     = int(C.TS_ERR_OUT_OF_MEMORY)
	statusCUDA            = int(C.TS_ERR_CUDA)
	statusSticky          = int(C.TS_ERR_STICKY)
	statusIndex           = int(C.TS_ERR_INDEX)
	statusNoDevice        = int(C.TS_ERR_NO_DEVICE)
	statusTimeout         = int(C.TS_ERR_TIMEOUT)
)

// library is the loaded libtouchstone_cuda.so. The CUDA context behind it is per process,
// so everything that follows from it is too: one load, one ts_init/ts_shutdown pairing
// shared by all Backends, and one poison latch.
type library struct {
	path string // as found, for messages
	key  string // absolute, symlinks resolved, to recognise the same file under another name
	api  *C.tsg_api

	mu     sync.Mutex // guards opens and device across ts_init and ts_shutdown
	opens  int        // open Backends; ts_shutdown runs when the last one closes
	device int

	// poison is the first error that reported a corrupted context. Once set, no call
	// enters the library again: after a sticky fault CUDA calls may fail slowly or hang.
	poison atomic.Pointer[StatusError]

	// deadlineNs is the library's deadline for a wait (ts_deadline, read at init and set
	// by SetDeadline), the base of the backend's own watchdog (Backend.waiting).
	deadlineNs atomic.Int64
}

var (
	libMu  sync.Mutex
	theLib *library                // the process's default library, once a load has succeeded
	loaded = map[string]*library{} // every library loaded in this process, by key
)

// processLibrary returns the process's default library (TOUCHSTONE_CUDA_LIB, else the first
// found), loading it on first success. Only success is remembered: a failed attempt is cheap
// to repeat, and repeating it means its error always describes the environment of the call
// that got it (a library built since, or TOUCHSTONE_CUDA_LIB changed).
func processLibrary() (*library, error) {
	exeDir := ""
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		exeDir = filepath.Dir(exe)
	}
	wd, _ := os.Getwd()
	path, err := findLibrary(os.Getenv, exeDir, wd)
	if err != nil {
		return nil, err
	}
	key := canonical(path)

	libMu.Lock()
	defer libMu.Unlock()
	if theLib != nil {
		if theLib.key != key {
			// The default library changing under a running process would leave the backends
			// opened before on the first one: refuse rather than silently keep testing it.
			return nil, fmt.Errorf("cuda: %w: %s is already loaded in this process as the default library, cannot also load %s (open a second library by path with OpenLibrary)", ErrLibrary, theLib.path, path)
		}
		return theLib, nil
	}
	lib, err := libraryLocked(path, key)
	if err != nil {
		return nil, err
	}
	theLib = lib
	return lib, nil
}

// libraryAt returns the library at path, loading it on first use. Several libraries may live
// in one process (touchstone compare runs a baseline and a candidate build): each is dlopen'ed
// RTLD_LOCAL, with its own stream, cuBLAS handles and fault record, on the device's shared
// primary context, so a sticky fault in one corrupts the context of all.
func libraryAt(path string) (*library, error) {
	libMu.Lock()
	defer libMu.Unlock()
	return libraryLocked(path, canonical(path))
}

func libraryLocked(path, key string) (*library, error) {
	if l := loaded[key]; l != nil {
		return l, nil
	}
	if !isFile(path) {
		return nil, fmt.Errorf("cuda: %w: %s does not exist or is not a file", ErrLibrary, path)
	}
	l, err := loadLibrary(path)
	if err != nil {
		return nil, err
	}
	loaded[key] = l
	startMonitor()
	return l, nil
}

// findLibrary resolves the library path: $TOUCHSTONE_CUDA_LIB if set, else the first of
// searchPaths that exists. Not finding it is an error listing every path tried.
func findLibrary(getenv func(string) string, exeDir, wd string) (string, error) {
	if p := getenv(EnvLib); p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if !isFile(p) {
			return "", fmt.Errorf("cuda: %w: %s=%s: no such file; run `make cuda` to build the library, or point %s at it",
				ErrLibrary, EnvLib, p, EnvLib)
		}
		return p, nil
	}
	tried := searchPaths(exeDir, wd)
	for _, p := range tried {
		if isFile(p) {
			return p, nil
		}
	}
	return "", &NotFoundError{Tried: tried}
}

// NotFoundError is a library search that found nothing. Its message is one line, the reason and
// the fix; Tried lists every path searched, for a caller's verbose output.
type NotFoundError struct{ Tried []string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("cuda: %v: not found in cuda/build/ of the checkout or beside the binaries (%d paths searched); "+
		"run `make cuda` to build it, or set %s to its path", ErrLibrary, len(e.Tried), EnvLib)
}

// Unwrap makes a NotFoundError an ErrLibrary.
func (e *NotFoundError) Unwrap() error { return ErrLibrary }

// searchPaths lists where the library may be, in order of preference:
//   - <exe dir>/lib and <exe dir>/../lib: a library installed next to the binaries;
//   - cuda/build/ in every directory from the executable's up to the root, then from the
//     working directory's: a dist/bin/ bundle or a test binary inside a checkout where
//     `make cuda` has run.
func searchPaths(exeDir, wd string) []string {
	var paths []string
	add := func(p string) {
		for _, q := range paths {
			if q == p {
				return
			}
		}
		paths = append(paths, p)
	}
	if exeDir != "" {
		add(filepath.Join(exeDir, "lib", libName))
		add(filepath.Join(filepath.Dir(exeDir), "lib", libName))
	}
	for _, start := range []string{exeDir, wd} {
		if start == "" {
			continue
		}
		for d := filepath.Clean(start); ; d = filepath.Dir(d) {
			add(filepath.Join(d, "cuda", "build", libName))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return paths
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func canonical(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p
}

// loadLibrary dlopens path and resolves every ABI function, refusing a library whose
// ts_abi_version() is not this build's TS_ABI_VERSION.
func loadLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var api *C.tsg_api
	var version C.int
	var detail [1024]C.char
	switch C.tsg_load(cpath, &api, &version, &detail[0], C.size_t(len(detail))) {
	case C.TSG_LOADED:
		return &library{path: path, key: canonical(path), api: api}, nil
	case C.TSG_DLOPEN_FAILED:
		return nil, fmt.Errorf("cuda: %w: dlopen %s: %s", ErrLibrary, path, C.GoString(&detail[0]))
	case C.TSG_MISSING_SYMBOL:
		return nil, fmt.Errorf("cuda: %w: %s has no symbol %s; rebuild it from this checkout with `make cuda`",
			ErrABI, path, C.GoString(&detail[0]))
	case C.TSG_VERSION_MISMATCH:
		return nil, fmt.Errorf("cuda: %w: %s reports ts_abi_version() = %d, this build needs TS_ABI_VERSION %d; rebuild it from this checkout with `make cuda`",
			ErrABI, path, int(version), abiVersion)
	default:
		return nil, fmt.Errorf("cuda: %w: loading %s: out of host memory", ErrLibrary, path)
	}
}

// acquire initialises device for one more Backend. The library allows one device per
// process (ts_init of another is TS_ERR_INVALID_ARGUMENT); its message says so.
func (l *library) acquire(b *Backend, device int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := b.status("init", C.tsg_init(l.api, C.int(device), b.e), false); err != nil {
		return err
	}
	var s C.double
	if err := b.status("deadline", C.tsg_deadline(l.api, &s, b.e), false); err != nil {
		return err
	}
	l.deadlineNs.Store(int64(float64(s) * float64(time.Second)))
	l.opens++
	l.device = device
	return nil
}

// release undoes acquire; the last Backend to close shuts the library down.
func (l *library) release(b *Backend) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opens--
	if err := l.poisoned("close"); err != nil {
		return err // nothing enters a corrupted context, not even ts_shutdown
	}
	if l.opens > 0 {
		return nil
	}
	return b.waiting("close", false, func() C.int { return C.tsg_shutdown(l.api, b.e) })
}

// deadline is the library's deadline for a wait (TS_DEFAULT_DEADLINE_S before init).
func (l *library) deadline() time.Duration {
	if d := l.deadlineNs.Load(); d > 0 {
		return time.Duration(d)
	}
	return time.Duration(float64(C.TS_DEFAULT_DEADLINE_S) * float64(time.Second))
}

// latch records e as the fault that corrupted the context. The first report is e itself;
// a concurrent second one gets the poisoned error like any later call.
func (l *library) latch(e *StatusError) error {
	e.Sticky = true
	if l.poison.CompareAndSwap(nil, e) {
		return e
	}
	return &PoisonedError{Op: e.Op, First: l.poison.Load()}
}

// poisoned returns the error for op if the context is corrupted, else nil.
func (l *library) poisoned(op string) error {
	if first := l.poison.Load(); first != nil {
		return &PoisonedError{Op: op, First: first}
	}
	return nil
}
