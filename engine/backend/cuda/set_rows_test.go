package cuda

import (
	"errors"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// A row index of set_rows is device data like embedding's ids: the library reports a bad one
// at the next call that drains the stream, and Go turns it into the ArgError the CPU backend
// gives at once.
func TestSetRowsIndexFaultIsAnArgumentError(t *testing.T) {
	b := openFake(t)
	dst := alloc(t, b, tensor.F16, 64, 2, 64)
	rows := upload(t, b, tensor.FromI32([]int{1}, []int32{64}))
	if err := b.SetRows(dst, alloc(t, b, tensor.F16, 1, 2, 64), rows); err != nil {
		t.Fatal(err) // asynchronous: the launch succeeds
	}
	const msg = "set_rows: rows[0] = 64: must be in [0, 64) (the rows of dst)"
	t.Setenv("FAKETS_FAIL", "ts_copy_to_host:-8:"+msg)
	_, err := b.Download(dst)
	var ae *backend.ArgError
	if !errors.Is(err, backend.ErrInvalidArgument) || !errors.As(err, &ae) {
		t.Fatalf("err = %v, want an argument error", err)
	}
	if ae.Op != "set_rows" || ae.Arg != "rows[0]" || ae.Value != "64" {
		t.Errorf("ArgError %+v, want set_rows rows[0] = 64 (as the CPU backend reports it)", ae)
	}
	t.Setenv("FAKETS_FAIL", "")
	if _, err := b.Download(dst); err != nil {
		t.Errorf("an index fault poisoned the backend: %v", err)
	}
}

// The shared checks refuse a mismatched call before it reaches the library.
func TestSetRowsSharedChecksRunFirst(t *testing.T) {
	b := openFake(t)
	dst, src, rows := alloc(t, b, tensor.F16, 64, 128), alloc(t, b, tensor.F32, 1, 128), alloc(t, b, tensor.I32, 1)
	n := len(calls(t))
	err := b.SetRows(dst, src, rows)
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Op != "set_rows" || ae.Arg != "src" {
		t.Errorf("err = %v, want an ArgError for set_rows src", err)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("a refused call reached the library: %q", c)
	}
}
