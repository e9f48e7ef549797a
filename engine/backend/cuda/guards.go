package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Guard regions catch kernels that write outside their output. With guards on (env
// TOUCHSTONE_GUARDS=1, or NewWithGuards), every buffer is allocated with guardBytes of
// guardPattern before and after its data, and after every op the guards of that op's
// outputs are copied back and compared. A changed byte fails the op with an error naming
// it, the output and the first changed byte:
//
//	rmsnorm wrote out of bounds of out f16[4,896]: guard byte 3 after the end is 0x00, want 0xA5
//
// An overrun that stays inside the allocation corrupts no other buffer and faults nothing,
// so without guards it passes unseen (or corrupts whatever happens to follow). The check
// copies to the host, which waits for the op: guards are for the test path, off by default,
// and make an index fault (TS_ERR_INDEX) surface at the op that caused it.
const (
	// guardBytes is the size of each guard: a multiple of 256 keeps the data at the
	// alignment cudaMalloc gives the allocation, so kernels see the same alignment as
	// without guards.
	guardBytes = 256
	// guardPattern is neither 0x00 (what an unwritten or zeroed region holds) nor 0xFF,
	// nor the start of a common fp16 value.
	guardPattern = 0xA5
)

// guardsFromEnv reads TOUCHSTONE_GUARDS: 1/true/yes on, empty/0/false/no off.
func guardsFromEnv(getenv func(string) string) (bool, error) {
	switch v := getenv(EnvGuards); v {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	default:
		return false, fmt.Errorf("cuda: %s=%q: want 1 (on) or 0 (off)", EnvGuards, v)
	}
}

// checkGuards compares the guards of each output of op with the pattern.
func (b *Backend) checkGuards(op string, outputs []arg) error {
	var before, after [guardBytes]byte
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&before)
	pin.Pin(&after)
	for _, o := range outputs {
		d := o.buf.(*buffer) // device() accepted it
		if d.guard == 0 {
			continue
		}
		err := b.waiting(op, true, func() C.int {
			return C.tsg_read_guards(b.lib.api, d.base, C.size_t(d.bytes), C.size_t(d.guard),
				unsafe.Pointer(&before[0]), unsafe.Pointer(&after[0]), b.e)
		})
		if err != nil {
			return err
		}
		where := guardDamage(before[:], after[:])
		if where == "" {
			continue
		}
		// Restore the pattern so the next op on this buffer is judged on its own writes.
		st := C.tsg_fill_guards(b.lib.api, d.base, C.size_t(d.bytes), C.size_t(d.guard), C.int(guardPattern), b.e)
		if err := b.status(op, st, false); err != nil {
			return err
		}
		return &guardError{msg: fmt.Sprintf("%s wrote out of bounds of %s %s: %s", op, o.name, d, where)}
	}
	return nil
}

// guardDamage describes the changed guard byte nearest to the data, or returns "" if both
// guards are intact. before[len-1] is the byte just before the data, after[0] the byte
// just past its end; bytes are numbered from the data outwards.
func guardDamage(before, after []byte) string {
	changed, first := 0, ""
	for i := range after {
		if after[i] != guardPattern {
			if changed == 0 {
				first = fmt.Sprintf("guard byte %d after the end is 0x%02X, want 0x%02X", i, after[i], guardPattern)
			}
			changed++
		}
	}
	for i := range before {
		if v := before[len(before)-1-i]; v != guardPattern {
			if changed == 0 {
				first = fmt.Sprintf("guard byte %d before the start is 0x%02X, want 0x%02X", i, v, guardPattern)
			}
			changed++
		}
	}
	if changed > 1 {
		first += fmt.Sprintf(" (%d guard bytes changed)", changed)
	}
	return first
}
