package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// Timer measures device time between Start and Stop with CUDA events on the library stream,
// for benchmarks: unlike a host clock it excludes launch overhead the host hides and
// includes the queue the host does not see.
type Timer struct {
	b *Backend
	t *C.ts_timer
}

var _ backend.Timer = (*Timer)(nil)

// NewTimer creates a timer; Close releases it.
func (b *Backend) NewTimer() (backend.Timer, error) {
	if err := b.enter("timer_create"); err != nil {
		return nil, err
	}
	tm := &Timer{b: b}
	if err := b.status("timer_create", C.tsg_timer_create(b.lib.api, &tm.t, b.e), false); err != nil {
		return nil, err
	}
	return tm, nil
}

// Start records the start event.
func (tm *Timer) Start() error {
	if err := tm.usable("timer_start"); err != nil {
		return err
	}
	return tm.b.status("timer_start", C.tsg_timer_start(tm.b.lib.api, tm.t, tm.b.e), false)
}

// Stop records the stop event, waits for it, and returns the device time since Start.
// Waiting drains the stream, so faults of the timed ops surface here.
func (tm *Timer) Stop() (time.Duration, error) {
	if err := tm.usable("timer_stop"); err != nil {
		return 0, err
	}
	var ms C.float
	if err := tm.b.waiting("timer_stop", true, func() C.int { return C.tsg_timer_stop(tm.b.lib.api, tm.t, &ms, tm.b.e) }); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Close destroys the timer; a second Close is a no-op.
func (tm *Timer) Close() error {
	if tm.t == nil {
		return nil
	}
	t := tm.t
	tm.t = nil
	if err := tm.b.enter("timer_destroy"); err != nil {
		return err
	}
	return tm.b.status("timer_destroy", C.tsg_timer_destroy(tm.b.lib.api, t, tm.b.e), false)
}

func (tm *Timer) usable(op string) error {
	if err := tm.b.enter(op); err != nil {
		return err
	}
	if tm.t == nil {
		return errClosedTimer(op)
	}
	return nil
}
