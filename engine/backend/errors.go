package backend

import (
	"errors"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// ErrInvalidArgument is wrapped by every argument error, so callers can tell a rejected
// call (nothing was launched, outputs untouched) from a device failure.
var ErrInvalidArgument = errors.New("invalid argument")

// ErrUnsupported is wrapped by every error for a valid request that a backend does not
// implement: the CUDA library's TS_ERR_UNSUPPORTED (a head_dim or dtype it has no kernel
// for), an op whose Supports is false, or an UnsupportedError of any backend. It is its own
// verdict, as in ggml's test-backend-ops: an unsupported case is neither passed nor failed
// but counted and listed apart (touchstone check's UNSUPPORTED rows, a Ginkgo Skip whose
// message starts "unsupported:"), unless touchstone check -unsupported=fail or
// TOUCHSTONE_UNSUPPORTED=fail (GPU CI's default in dist/run) makes it a failure for the ops
// a backend claims, so a GPU runner cannot pass by skipping.
var ErrUnsupported = errors.New("not supported by this backend")

// ErrHang is wrapped by the error of a call that waited for the device past its deadline
// (the CUDA library's TS_ERR_TIMEOUT): a kernel did not finish. It is a verdict of its own,
// HANG, and a failure; the backend refuses every later call, since the hung kernel keeps the
// device busy until the process exits.
var ErrHang = errors.New("a kernel did not finish within the deadline")

// HangMarker starts the message of a backend's error for a hang, and so every failure a hang
// causes: the suites abort on it, dist/run's resume and reportcheck count it.
const HangMarker = "HANG: "

// UnsupportedError names the op, the argument and the value of a valid request that a
// backend written in Go does not implement, as the CUDA library's TS_ERR_UNSUPPORTED
// messages do ("attention_prefill: cfg->head_dim = 100: ..."), so both read alike.
type UnsupportedError struct {
	Op     string // e.g. "attention_prefill"
	Arg    string // e.g. "cfg->head_dim"
	Value  string // e.g. "100"
	Reason string // what is implemented, e.g. "this build supports multiples of 8 up to 256"
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: unsupported %s = %s: %s", e.Op, e.Arg, e.Value, e.Reason)
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// ArgError names the op, the argument and the value that made an op refuse to run.
type ArgError struct {
	Op     string // e.g. "rmsnorm"
	Arg    string // e.g. "weight"
	Value  string // the offending value, e.g. "f16[895]"
	Reason string // what was expected, e.g. "want [896] (the last dim of x)"
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("%s: invalid argument %s = %s: %s", e.Op, e.Arg, e.Value, e.Reason)
}

func (e *ArgError) Unwrap() error { return ErrInvalidArgument }

// Check collects the argument checks of one op call and reports the first failure.
// Each backend validates with it before touching any output.
type Check struct {
	op  string
	err error
	// store is the storage dtype of the call's 16-bit operands, set by Storage from the
	// operand named storeArg.
	store    tensor.DType
	storeArg string
}

// Validate starts the checks of one call of op.
func Validate(op string) *Check { return &Check{op: op} }

// Err returns the first failed check, or nil.
func (c *Check) Err() error { return c.err }

func (c *Check) fail(arg, value, reason string, args ...any) {
	if c.err == nil {
		c.err = &ArgError{Op: c.op, Arg: arg, Value: value, Reason: fmt.Sprintf(reason, args...)}
	}
}

func describe(b Buffer) string {
	if b == nil {
		return "nil"
	}
	return b.DType().String() + tensor.ShapeString(b.Shape())
}

// Present fails when b is nil.
func (c *Check) Present(arg string, b Buffer) bool {
	if b == nil {
		c.fail(arg, "nil", "a buffer is required")
		return false
	}
	return true
}

// DType fails unless b has one of the allowed dtypes.
func (c *Check) DType(arg string, b Buffer, allowed ...tensor.DType) {
	if !c.Present(arg, b) {
		return
	}
	for _, dt := range allowed {
		if b.DType() == dt {
			return
		}
	}
	c.fail(arg, describe(b), "dtype must be one of %v", allowed)
}

// Rank fails unless b has the given number of dimensions, all of them positive.
func (c *Check) Rank(arg string, b Buffer, rank int) {
	if !c.Present(arg, b) {
		return
	}
	shape := b.Shape()
	if len(shape) != rank {
		c.fail(arg, describe(b), "want %d dimensions", rank)
		return
	}
	c.positive(arg, b)
}

// MinRank fails unless b has at least rank dimensions, all of them positive.
func (c *Check) MinRank(arg string, b Buffer, rank int) {
	if !c.Present(arg, b) {
		return
	}
	if len(b.Shape()) < rank {
		c.fail(arg, describe(b), "want at least %d dimensions", rank)
		return
	}
	c.positive(arg, b)
}

func (c *Check) positive(arg string, b Buffer) {
	for _, d := range b.Shape() {
		if d <= 0 {
			c.fail(arg, describe(b), "every dimension must be positive")
			return
		}
	}
}

// Shape fails unless b's shape equals want; why says where want comes from.
func (c *Check) Shape(arg string, b Buffer, want []int, why string) {
	if !c.Present(arg, b) {
		return
	}
	if !tensor.SameShape(b.Shape(), want) {
		c.fail(arg, describe(b), "want shape %s (%s)", tensor.ShapeString(want), why)
	}
}

// Optional checks an operand that may be absent (a bias): nil passes, else it must be in the
// call's storage dtype (Same) and of shape want.
func (c *Check) Optional(arg string, b Buffer, want []int, why string) {
	if b == nil {
		return
	}
	c.Same(arg, b)
	c.Shape(arg, b, want, why)
}

// Storage checks the call's first 16-bit operand: fp16 or bf16, which then is the storage
// dtype every other 16-bit operand must share (Same).
func (c *Check) Storage(arg string, b Buffer) {
	c.DType(arg, b, tensor.F16, tensor.BF16)
	if c.store == tensor.Invalid && b != nil && b.DType().IsFloat16Bit() {
		c.store, c.storeArg = b.DType(), arg
	}
}

// Stored is the storage dtype Storage recorded (F16 when it refused its operand, so that the
// checks after it still name a dtype).
func (c *Check) Stored() tensor.DType {
	if c.store == tensor.Invalid {
		return tensor.F16
	}
	return c.store
}

// Same fails unless b has the call's storage dtype: a bf16 weight with fp16 activations is a
// mix no kernel takes, and converting silently would hide a loader bug.
func (c *Check) Same(arg string, b Buffer) {
	if !c.Present(arg, b) {
		return
	}
	if dt := c.Stored(); b.DType() != dt {
		c.fail(arg, describe(b), "dtype must be %v, the storage dtype of %s", dt, c.storeArgName())
	}
}

func (c *Check) storeArgName() string {
	if c.storeArg == "" {
		return "the call"
	}
	return c.storeArg
}

// That fails with reason unless ok; value names the offending value.
func (c *Check) That(ok bool, arg, value, reason string, args ...any) {
	if !ok {
		c.fail(arg, value, reason, args...)
	}
}
