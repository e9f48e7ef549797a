package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A call can block inside the library without any wait of its own that a deadline bounds:
// a launch whose kernel has not been loaded yet (CUDA loads modules lazily) waits for the
// device, which a hung kernel keeps busy; a driver call can hang. The goroutine making such a
// call cannot be freed, so the process must end its run at that point: a monitor, started
// with the first library, polls the calls in flight (tsg_stuck), and one in flight for the
// library's deadline plus 2 x watchdogGrace (past the point where Backend.waiting gives up on
// a wait, so a wait is reported by its caller) latches a hang, which every later call
// refuses, and hands it to the process's stuck handler (OnStuck).

// ExitStuck is the exit status of a process without a stuck handler whose call into the
// library never returned, as timeout(1)'s.
const ExitStuck = 124

var (
	stuckHandler atomic.Pointer[func(error)]
	monitorOnce  sync.Once
	// stuckPoll is how often the monitor looks.
	stuckPoll = 500 * time.Millisecond
)

// OnStuck sets what happens when a call into the library never returns: f gets the hang (an
// error wrapping ErrHang, naming the ABI function and how long it has been blocked), once per
// process, on the monitor's goroutine, while the blocked call's goroutine stays blocked. f
// must end the run from there: a test suite interrupts itself so that its reports are
// written (harness.AbortOnHang); touchstone check and compare continue in a new process.
// Without a handler the process prints the hang and exits with ExitStuck.
func OnStuck(f func(error)) { stuckHandler.Store(&f) }

// startMonitor starts the process's monitor (once).
func startMonitor() {
	monitorOnce.Do(func() { go monitor() })
}

func monitor() {
	for range time.Tick(stuckPoll) {
		libMu.Lock()
		libs := make([]*library, 0, len(loaded))
		for _, l := range loaded {
			libs = append(libs, l)
		}
		libMu.Unlock()
		for _, l := range libs {
			// A poisoned library's calls in flight are the abandoned ones its hang reported.
			if l.poison.Load() != nil {
				continue
			}
			if err := l.stuck(); err != nil {
				if f := stuckHandler.Load(); f != nil {
					(*f)(err)
				} else {
					fmt.Fprintf(os.Stderr, "%v\n(no stuck handler: exiting with status %d)\n", err, ExitStuck)
					os.Exit(ExitStuck)
				}
				return
			}
		}
	}
}

// stuck returns, latched, the hang of a call into l in flight for longer than its deadline
// plus 2 x watchdogGrace; nil when there is none.
func (l *library) stuck() error {
	limit := l.deadline() + 2*watchdogGrace
	var name [128]C.char
	var elapsed C.longlong
	if C.tsg_stuck(l.api, C.longlong(limit), &name[0], C.size_t(len(name)), &elapsed) == 0 {
		return nil
	}
	fn := C.GoString(&name[0])
	msg := fmt.Sprintf("the call did not return within %v (the deadline %v plus %v): it is blocked inside the CUDA library or driver "+
		"(a launch whose kernel is loaded lazily waits for the device, which a hung kernel keeps busy)",
		time.Duration(elapsed).Round(time.Millisecond), l.deadline(), 2*watchdogGrace)
	return l.latch(&StatusError{Op: fn, Status: statusTimeout, Name: "TS_ERR_TIMEOUT", Message: msg})
}
