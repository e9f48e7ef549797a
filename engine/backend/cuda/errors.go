package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Sentinels for errors.Is. Argument errors (TS_ERR_INVALID_ARGUMENT, TS_ERR_SHAPE_MISMATCH,
// TS_ERR_INDEX) wrap backend.ErrInvalidArgument instead, as the CPU backend's do, so a suite
// handles a refused call the same way on both backends; TS_ERR_UNSUPPORTED is
// backend.ErrUnsupported for the same reason.
var (
	// ErrLibrary: libtouchstone_cuda.so was not found or dlopen refused it.
	ErrLibrary = errors.New("cannot load libtouchstone_cuda.so")
	// ErrABI: the library misses a symbol of touchstone.h or reports another ABI version.
	ErrABI = errors.New("libtouchstone_cuda.so does not match this build's touchstone.h")
	// ErrNoDevice: no CUDA device, or the requested ordinal does not exist.
	ErrNoDevice = errors.New("no CUDA device")
	// ErrUnsupported: a valid request this build of the library does not implement
	// (TS_ERR_UNSUPPORTED, say attention with head_dim 100). It is backend.ErrUnsupported
	// itself, the one sentinel of the unsupported verdict: touchstone check lists the case
	// as UNSUPPORTED and the suites skip it with "unsupported: <the library's message>",
	// neither passed nor failed, unless touchstone check -unsupported=fail or
	// TOUCHSTONE_UNSUPPORTED=fail (set by dist/run, GPU CI's runner) makes it a failure:
	// this backend claims every op, so on a GPU runner nothing passes by being skipped.
	ErrUnsupported = backend.ErrUnsupported
	// ErrOutOfMemory: device allocation failed.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrCUDA: any other CUDA or cuBLAS failure that left the context usable.
	ErrCUDA = errors.New("CUDA failure")
	// ErrPoisoned: an earlier fault corrupted the CUDA context. The process must restart;
	// until then every call fails at once without entering the library.
	ErrPoisoned = errors.New("the GPU context is corrupted: restart the process")
	// ErrHang: a wait for the device passed its deadline (TS_ERR_TIMEOUT): a kernel did not
	// finish. It wraps ErrPoisoned: the hung kernel keeps the context busy, so, as after a
	// sticky fault, every later call fails at once and the process must restart.
	ErrHang = fmt.Errorf("%w (%w)", backend.ErrHang, ErrPoisoned)
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("backend closed")
	// ErrOutOfBounds: an op wrote into the guard region around an output (guards on only).
	ErrOutOfBounds = errors.New("out-of-bounds write")
)

// StatusError is a failed call into libtouchstone_cuda.so: the op that made it, the
// ts_status and the library's own message, which names the op, argument and value.
type StatusError struct {
	Op      string // the backend call that failed, e.g. "rmsnorm", "download"
	Status  int    // the ts_status, e.g. -2
	Name    string // its name from ts_status_name, e.g. "TS_ERR_SHAPE_MISMATCH"
	Message string // ts_last_error() of the failing call
	// Sticky is set when the failure corrupted the context; this error was then the first
	// to report it, and every later call returns a *PoisonedError.
	Sticky bool
	// After is, for a failure reported by a call that drains the stream (download,
	// synchronize, a guard check), the last op launched before it: kernels run
	// asynchronously, so the op that faulted is usually not the call that reports it.
	After string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "(the library gave no message)"
	}
	// The library's messages already start with the op ("rmsnorm: cfg->hidden = 0: ...");
	// do not say it twice.
	msg = strings.TrimPrefix(msg, e.Op+": ")
	if e.Status == statusTimeout {
		return backend.HangMarker + e.Op + ": " + msg
	}
	if e.Sticky {
		s := "the GPU context is corrupted by " + e.Op + ": " + msg
		if e.After != "" && e.After != e.Op {
			s += " (last op launched: " + e.After + ")"
		}
		return s
	}
	return e.Op + ": " + msg + " [" + e.Name + "]"
}

// Unwrap gives the sentinel of the status.
func (e *StatusError) Unwrap() error {
	if e.Status == statusTimeout {
		return ErrHang
	}
	if e.Sticky {
		return ErrPoisoned
	}
	switch e.Status {
	case statusInvalidArgument, statusShapeMismatch, statusIndex:
		return backend.ErrInvalidArgument
	case statusUnsupported:
		return ErrUnsupported
	case statusOutOfMemory:
		return ErrOutOfMemory
	case statusNoDevice:
		return ErrNoDevice
	case statusSticky:
		return ErrPoisoned
	}
	return ErrCUDA
}

// As lets errors.As find a *backend.ArgError in an argument error, so code that inspects
// the op, argument and value of a refusal works on both backends. The fields come from the
// library's message when it has the documented shape "op: arg = value: reason".
func (e *StatusError) As(target any) bool {
	p, ok := target.(**backend.ArgError)
	if !ok || e.Unwrap() != backend.ErrInvalidArgument {
		return false
	}
	*p = e.argError()
	return true
}

func (e *StatusError) argError() *backend.ArgError {
	op, rest, ok1 := strings.Cut(e.Message, ": ")
	arg, rest, ok2 := strings.Cut(rest, " = ")
	value, reason, ok3 := strings.Cut(rest, ": ")
	if ok1 && ok2 && ok3 && op != "" && !strings.ContainsAny(op, " =") && arg != "" {
		return &backend.ArgError{Op: op, Arg: arg, Value: value, Reason: reason}
	}
	return &backend.ArgError{Op: e.Op, Arg: "?", Value: "?", Reason: e.Message}
}

// PoisonedError is returned, without entering the library, by every call after a fault
// corrupted the context. First is the error that reported the fault.
type PoisonedError struct {
	Op    string
	First *StatusError
}

func (e *PoisonedError) Error() string {
	return e.Op + ": not run: " + e.First.Error() + "; restart the process"
}

// Unwrap makes both ErrPoisoned and the first error reachable.
func (e *PoisonedError) Unwrap() []error { return []error{ErrPoisoned, e.First} }

// guardError is an out-of-bounds write caught by the guard regions.
type guardError struct{ msg string }

func (e *guardError) Error() string { return e.msg }
func (e *guardError) Unwrap() error { return ErrOutOfBounds }

func errClosedTimer(op string) error { return errors.New("cuda " + op + ": the timer is closed") }
