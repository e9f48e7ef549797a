package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"time"
)

// SetDeadline sets the deadline of every wait for the device, process-wide (ts_set_deadline):
// a wait past it is a hang, reported as an error wrapping ErrHang, and poisons the backend.
func (b *Backend) SetDeadline(d time.Duration) error {
	if err := b.enter("set_deadline"); err != nil {
		return err
	}
	if err := b.status("set_deadline", C.tsg_set_deadline(b.lib.api, C.double(d.Seconds()), b.e), false); err != nil {
		return err
	}
	b.lib.deadlineNs.Store(int64(d))
	return nil
}

// Deadline is the deadline of every wait for the device (ts_deadline).
func (b *Backend) Deadline() (time.Duration, error) {
	if err := b.enter("deadline"); err != nil {
		return 0, err
	}
	var s C.double
	if err := b.status("deadline", C.tsg_deadline(b.lib.api, &s, b.e), false); err != nil {
		return 0, err
	}
	return time.Duration(float64(s) * float64(time.Second)), nil
}

// DebugHang launches a kernel that never finishes (ts_debug_hang), for tests of the deadline:
// the next wait reports a hang naming debug_hang, and the backend refuses every later call.
func (b *Backend) DebugHang() error {
	if err := b.enter("debug_hang"); err != nil {
		return err
	}
	err := b.status("debug_hang", C.tsg_debug_hang(b.lib.api, b.e), false)
	if err == nil {
		b.lastOp = "debug_hang"
	}
	return err
}

// watchdogGrace is how long past the library's own deadline a waiting call may take before
// the backend stops waiting for it: the library returns TS_ERR_TIMEOUT at its deadline, so
// only a call that never returns at all (a library without deadlines, a hang inside a
// driver call) reaches this.
var watchdogGrace = 5 * time.Second

// waiting runs call, one C call that may wait for the device, and returns its status; if it
// has not returned within the library's deadline plus watchdogGrace, it gives up on it and
// returns a hang (latched: nothing enters the library again). The abandoned call keeps its
// goroutine and OS thread, and what it references, until the process exits.
func (b *Backend) waiting(op string, drained bool, call func() C.int) error {
	done := make(chan C.int, 1)
	go func() { done <- call() }()
	limit := b.lib.deadline() + watchdogGrace
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case st := <-done:
		return b.status(op, st, drained)
	case <-t.C:
	}
	msg := fmt.Sprintf("%s: the CUDA library did not return within %v (its deadline %v plus %v): a call that never returns is a hang", op, limit, b.lib.deadline(), watchdogGrace)
	if b.lastOp != "" {
		msg += "; last op launched: " + b.lastOp
	}
	return b.lib.latch(&StatusError{Op: op, Status: statusTimeout, Name: "TS_ERR_TIMEOUT", Message: msg, After: b.lastOp})
}
