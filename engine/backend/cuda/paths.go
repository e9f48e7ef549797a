package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

var _ backend.PathRecorder = (*Backend)(nil)

// RecordPaths starts (clearing earlier counts) or stops the library's path recording
// (ts_record_paths). The counts are process-wide: every Backend of the library shares them.
func (b *Backend) RecordPaths(on bool) error {
	if err := b.enter("record_paths"); err != nil {
		return err
	}
	flag := C.int(0)
	if on {
		flag = 1
	}
	return b.status("record_paths", C.tsg_record_paths(b.lib.api, flag, b.e), false)
}

// RecordedPaths reads the library's counts (ts_recorded_paths).
func (b *Backend) RecordedPaths() (map[backend.PathKey]int64, error) {
	if err := b.enter("recorded_paths"); err != nil {
		return nil, err
	}
	var needed C.size_t
	if err := b.status("recorded_paths", C.tsg_recorded_paths(b.lib.api, nil, 0, &needed, b.e), false); err != nil {
		return nil, err
	}
	// The table can grow between the two calls (another goroutine launching): leave room.
	buf := make([]byte, int(needed)+4096)
	if err := b.status("recorded_paths", C.tsg_recorded_paths(b.lib.api, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed, b.e), false); err != nil {
		return nil, err
	}
	text := C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
	return parseRecordedPaths(text)
}

// parseRecordedPaths reads ts_recorded_paths' "<op>\t<what>\t<count>\n" lines.
func parseRecordedPaths(text string) (map[backend.PathKey]int64, error) {
	out := map[backend.PathKey]int64{}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] == "" || f[1] == "" {
			return nil, fmt.Errorf("cuda: ts_recorded_paths line %d = %q: want <op>\\t<what>\\t<count>", i+1, line)
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("cuda: ts_recorded_paths line %d = %q: count must be a positive integer", i+1, line)
		}
		out[backend.PathKey{Op: f[0], What: f[1]}] += n
	}
	return out, nil
}
