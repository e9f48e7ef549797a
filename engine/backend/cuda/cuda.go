// Package cuda is the GPU backend: a thin cgo layer over libtouchstone_cuda.so, the C ABI of
// cuda/include/touchstone.h.
//
// The library is dlopen'ed at run time, never linked, so this package builds, vets and tests
// on machines without CUDA, and precompiled binaries run on GPU hosts without a Go toolchain.
// It is found through TOUCHSTONE_CUDA_LIB or searched next to the executable and in the
// cuda/build/ directory of the checkout around it (see searchPaths).
//
// Each Go method validates with the same backend.CheckXxx as the CPU backend, so both refuse
// the same calls with the same errors, then makes one C call. Ops run asynchronously on the
// library's stream; a fault in device-side index data (TS_ERR_INDEX) or a bad logit of Sample
// (TS_ERR_INVALID_ARGUMENT) is reported by the next Download or Synchronize as an error
// wrapping backend.ErrInvalidArgument.
//
// A fault that corrupts the CUDA context (TS_ERR_STICKY) is reported once, by the call that
// saw it, as "the GPU context is corrupted by <op>: <message>"; from then on every call of
// every Backend of the process fails at once with a *PoisonedError, without entering the
// library, because the process must restart.
//
// Environment:
//
//	TOUCHSTONE_CUDA_LIB=<path>  the library to load (default: searched)
//	TOUCHSTONE_GUARDS=1         guard regions around every buffer, checked after each op
//	                            (default off: it synchronises after every op)
package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func init() {
	backend.Register("cuda", func(opts backend.Options) (backend.Backend, error) {
		b, err := New(opts)
		if err != nil {
			return nil, err // not b: a nil *Backend in an interface would not be nil
		}
		return b, nil
	})
}

// Backend runs ops on one CUDA device through libtouchstone_cuda.so. One goroutine at a
// time may use an instance; instances may live in different goroutines.
type Backend struct {
	lib    *library
	info   backend.DeviceInfo
	guards bool
	// e receives the message of this instance's failing calls. It is Go memory without Go
	// pointers, so C may write it during a call; one per instance avoids an allocation per call.
	e      *C.tsg_err
	closed bool
	// lastOp is the last op launched since the stream was last drained, so a fault that
	// surfaces at a later synchronisation can say what probably caused it.
	lastOp string
	// capture is the open graph capture (graph.go), nil outside one.
	capture *capture

	liveBytes atomic.Int64
	liveBufs  atomic.Int64
	// liveGraphs counts captured graphs not yet freed (LiveGraphs).
	liveGraphs atomic.Int64
}

var _ backend.Backend = (*Backend)(nil)

// New opens the device that opts select: opts.Device if >= 0, else one device per parallel
// Ginkgo process (opts.Process-1 modulo the device count), else device 0. Guard regions are
// on when TOUCHSTONE_GUARDS=1.
func New(opts backend.Options) (*Backend, error) {
	guards, err := guardsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return open(opts, guards)
}

// NewWithGuards is New with guard regions on whatever the environment says (guards.go).
func NewWithGuards(opts backend.Options) (*Backend, error) { return open(opts, true) }

// OpenLibrary opens a backend on the library at path rather than the default one: a second
// build of the kernels in the same process, as touchstone compare's candidate. Guards follow
// TOUCHSTONE_GUARDS as in New.
func OpenLibrary(path string, opts backend.Options) (*Backend, error) {
	guards, err := guardsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	lib, err := libraryAt(path)
	if err != nil {
		return nil, err
	}
	return openOn(lib, opts, guards)
}

func open(opts backend.Options, guards bool) (*Backend, error) {
	lib, err := processLibrary()
	if err != nil {
		return nil, err
	}
	return openOn(lib, opts, guards)
}

func openOn(lib *library, opts backend.Options, guards bool) (*Backend, error) {
	b := &Backend{lib: lib, guards: guards, e: new(C.tsg_err)}
	if err := b.enter("open"); err != nil {
		return nil, err
	}
	var count C.int
	if err := b.status("device_count", C.tsg_device_count(lib.api, &count, b.e), false); err != nil {
		return nil, err
	}
	device, err := pickDevice(opts, int(count))
	if err != nil {
		return nil, err
	}
	if err := lib.acquire(b, device); err != nil {
		return nil, err
	}
	var info C.ts_device_info
	if err := b.status("device_info", C.tsg_get_device_info(lib.api, &info, b.e), false); err != nil {
		_ = lib.release(b)
		return nil, err
	}
	b.info = backend.DeviceInfo{
		Backend:    "cuda",
		Name:       C.GoString(&info.name[0]),
		Index:      int(info.ordinal),
		Processors: int(info.sm_count),
		MemoryMiB:  int64(info.total_bytes) >> 20,
	}
	return b, nil
}

// pickDevice chooses the ordinal to open among count devices.
func pickDevice(opts backend.Options, count int) (int, error) {
	switch {
	case count <= 0:
		return 0, fmt.Errorf("cuda: %w: ts_device_count found none", ErrNoDevice)
	case opts.Device >= 0:
		if opts.Device >= count {
			return 0, fmt.Errorf("cuda: %w: device %d requested (%s) but this host has %d (ordinals 0..%d)",
				ErrNoDevice, opts.Device, backend.EnvDevice, count, count-1)
		}
		return opts.Device, nil
	case opts.Process > 0:
		// One GPU per parallel Ginkgo process; more processes than GPUs share round-robin.
		return (opts.Process - 1) % count, nil
	}
	return 0, nil
}

// enter refuses a call on a closed backend or a corrupted context, before any C call.
func (b *Backend) enter(op string) error {
	if err := b.lib.poisoned(op); err != nil {
		return err
	}
	if b.closed {
		return fmt.Errorf("cuda %s: %w", op, ErrClosed)
	}
	return nil
}

// status maps the status of one C call made with b.e. drained says whether the call waited
// for the stream (ts_synchronize, ts_copy_to_host), which is where asynchronous faults of
// earlier ops surface.
func (b *Backend) status(op string, st C.int, drained bool) error {
	if int(st) == statusOK {
		if drained {
			b.lastOp = ""
		}
		return nil
	}
	e := &StatusError{Op: op, Status: int(st), Name: C.GoString(&b.e.name[0]), Message: C.GoString(&b.e.msg[0])}
	if drained {
		e.After = b.lastOp
	}
	switch int(st) {
	case statusSticky, statusTimeout:
		return b.lib.latch(e)
	case statusCUDA:
		// Some CUDA errors (an illegal address, a device assert) corrupt the context and
		// some (a bad launch configuration) do not. The ABI promises TS_ERR_STICKY from
		// every call after a corrupting one, so one ts_synchronize tells them apart.
		var probe C.tsg_err
		switch pst := int(C.tsg_synchronize(b.lib.api, &probe)); pst {
		case statusOK:
		case statusSticky:
			return b.lib.latch(e)
		default:
			// Do not lose what the probe drained (say, a pending TS_ERR_INDEX).
			return fmt.Errorf("%w; then synchronize: %w", e, &StatusError{Op: "synchronize", Status: pst,
				Name: C.GoString(&probe.name[0]), Message: C.GoString(&probe.msg[0]), After: b.lastOp})
		}
	}
	return e
}

// Info describes the device, as read once at open.
func (b *Backend) Info() backend.DeviceInfo { return b.info }

// Supports reports true for every op: the library implements them all. A dtype it does not
// implement is reported per call as ErrUnsupported.
func (b *Backend) Supports(op string) bool { return slices.Contains(backend.Ops, op) }

// GuardsEnabled reports whether buffers of this backend carry guard regions.
func (b *Backend) GuardsEnabled() bool { return b.guards }

// LiveBytes is the number of data bytes (guards excluded) in buffers of this backend that
// are not freed yet; tests use it to prove nothing leaks.
func (b *Backend) LiveBytes() int64 { return b.liveBytes.Load() }

// LiveBuffers is the number of buffers of this backend that are not freed yet.
func (b *Backend) LiveBuffers() int64 { return b.liveBufs.Load() }

// buffer is device memory: guard bytes, the data, guard bytes (guard is 0 without guards).
type buffer struct {
	owner *Backend
	base  unsafe.Pointer // the allocation, what ts_free takes; nil for an empty buffer
	data  unsafe.Pointer // base + guard
	dt    tensor.DType
	shape []int
	bytes int64
	guard int
	view  bool // shares another buffer's memory (View): owns and frees nothing
	freed atomic.Bool
}

func (d *buffer) DType() tensor.DType { return d.dt }
func (d *buffer) Shape() []int        { return d.shape }
func (d *buffer) String() string      { return d.dt.String() + tensor.ShapeString(d.shape) }

// Free releases the device memory; a second Free is a no-op. Buffers are freed explicitly,
// never by a finalizer: device memory must not wait for a GC that cannot see it. On a
// corrupted context nothing is freed on the device (the process must restart anyway), but
// the accounting still drops the buffer.
func (d *buffer) Free() {
	if !d.freed.CompareAndSwap(false, true) || d.view {
		return
	}
	b := d.owner
	if b.capture != nil {
		// The library refuses a free during a capture: release it when the capture ends.
		b.capture.frees = append(b.capture.frees, d)
		return
	}
	d.release()
}

// release gives a freed buffer's device memory back.
func (d *buffer) release() {
	b := d.owner
	b.liveBytes.Add(-d.bytes)
	b.liveBufs.Add(-1)
	if d.base == nil || b.lib.poison.Load() != nil {
		return
	}
	// Free has no error to return; a sticky fault it meets is latched, so the next call
	// reports it. Any other failure can only leak, which LiveBytes cannot see but
	// MemoryInUse can.
	var e C.tsg_err
	if int(C.tsg_free(b.lib.api, d.base, &e)) == statusSticky {
		b.lib.latch(&StatusError{Op: "free", Status: statusSticky, Name: C.GoString(&e.name[0]), Message: C.GoString(&e.msg[0])})
	}
}

// Alloc returns a zeroed device buffer.
func (b *Backend) Alloc(dt tensor.DType, shape ...int) (backend.Buffer, error) {
	d, err := b.alloc("alloc", dt, shape, nil)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Upload copies t into a new device buffer of its dtype and shape.
func (b *Backend) Upload(t *tensor.Tensor) (backend.Buffer, error) {
	if t == nil {
		return nil, fmt.Errorf("cuda upload: nil tensor")
	}
	for _, n := range t.Shape {
		if n < 0 {
			return nil, fmt.Errorf("cuda upload %s: negative dimension", t)
		}
	}
	if want := tensor.NumElements(t.Shape); t.Len() != want {
		return nil, fmt.Errorf("cuda upload %s: the tensor holds %d elements, its shape needs %d", t, t.Len(), want)
	}
	src := hostData(t)
	var pin runtime.Pinner
	defer pin.Unpin()
	if src != nil {
		pin.Pin(src)
	}
	d, err := b.alloc("upload", t.DType, t.Shape, src)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// alloc makes one buffer, zeroed or filled from the host data at src, in one C call.
func (b *Backend) alloc(op string, dt tensor.DType, shape []int, src unsafe.Pointer) (*buffer, error) {
	if err := b.enter(op); err != nil {
		return nil, err
	}
	if dt != tensor.F16 && dt != tensor.BF16 && dt != tensor.F32 && dt != tensor.I32 && !dt.IsFP8() {
		return nil, fmt.Errorf("cuda %s: unsupported dtype %s", op, dt)
	}
	for _, n := range shape {
		if n < 0 {
			return nil, fmt.Errorf("cuda %s %s%s: negative dimension", op, dt, tensor.ShapeString(shape))
		}
	}
	d := &buffer{owner: b, dt: dt, shape: slices.Clone(shape), bytes: int64(tensor.NumElements(shape)) * int64(dt.Size())}
	if d.shape == nil {
		d.shape = []int{}
	}
	if b.guards {
		d.guard = guardBytes
	}
	// An empty buffer without guards needs no device memory (ts_malloc of 0 bytes is not
	// something to rely on); ops refuse empty shapes before using it.
	if d.bytes > 0 || d.guard > 0 {
		st := C.tsg_alloc(b.lib.api, &d.base, C.size_t(d.bytes), C.size_t(d.guard), C.int(guardPattern), src, b.e)
		if err := b.status(op, st, false); err != nil {
			return nil, fmt.Errorf("%w (allocating %s, %d bytes)", err, d, d.bytes)
		}
		d.data = unsafe.Add(d.base, d.guard)
	}
	b.liveBytes.Add(d.bytes)
	b.liveBufs.Add(1)
	return d, nil
}

// Download waits for the work queued on the stream, then copies buf into a new host tensor.
func (b *Backend) Download(buf backend.Buffer) (*tensor.Tensor, error) {
	ds, err := b.device("download", arg{"buffer", buf})
	if err != nil {
		return nil, err
	}
	d := ds[0]
	t := tensor.New(d.dt, d.shape...)
	if d.bytes == 0 {
		return t, nil
	}
	dst := hostData(t)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(dst)
	err = b.waiting("download", true, func() C.int {
		return C.tsg_copy_to_host(b.lib.api, dst, d.data, C.size_t(d.bytes), b.e)
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// hostData points at the first element of t, nil when t is empty.
func hostData(t *tensor.Tensor) unsafe.Pointer {
	switch {
	case t.DType == tensor.F16 && len(t.F16) > 0:
		return unsafe.Pointer(&t.F16[0])
	case t.DType == tensor.BF16 && len(t.BF16) > 0:
		return unsafe.Pointer(&t.BF16[0])
	case t.DType == tensor.F32 && len(t.F32) > 0:
		return unsafe.Pointer(&t.F32[0])
	case t.DType == tensor.I32 && len(t.I32) > 0:
		return unsafe.Pointer(&t.I32[0])
	case t.DType.IsFP8() && len(t.F8) > 0:
		return unsafe.Pointer(&t.F8[0])
	}
	return nil
}

// Synchronize waits for all work queued on the library stream and reports its faults: a
// pending TS_ERR_INDEX as an argument error, a corrupted context as sticky.
func (b *Backend) Synchronize() error {
	if err := b.enter("synchronize"); err != nil {
		return err
	}
	return b.waiting("synchronize", true, func() C.int { return C.tsg_synchronize(b.lib.api, b.e) })
}

// CopyBandwidthGBps is the device-to-device copy bandwidth in GB/s, counting bytes read plus
// bytes written, measured once per process by the library: the roofline for memory-bound ops.
func (b *Backend) CopyBandwidthGBps() (float64, error) {
	if err := b.enter("copy_bandwidth"); err != nil {
		return 0, err
	}
	var gbps C.double
	if err := b.waiting("copy_bandwidth", false, func() C.int { return C.tsg_copy_bandwidth(b.lib.api, &gbps, b.e) }); err != nil {
		return 0, err
	}
	return float64(gbps), nil
}

// MemoryInUse is the device memory in use by all processes (total - free), in bytes.
func (b *Backend) MemoryInUse() (int64, error) {
	if err := b.enter("memory_in_use"); err != nil {
		return 0, err
	}
	var n C.int64_t
	if err := b.status("memory_in_use", C.tsg_memory_in_use(b.lib.api, &n, b.e), false); err != nil {
		return 0, err
	}
	return int64(n), nil
}

var _ backend.DeviceMemory = (*Backend)(nil)

// ReleaseWorkspaces waits for the device and frees the library's workspaces, which grow
// again on demand: with every buffer freed, device memory then returns to where it was.
func (b *Backend) ReleaseWorkspaces() error {
	if err := b.enter("release_workspaces"); err != nil {
		return err
	}
	return b.waiting("release_workspaces", true, func() C.int { return C.tsg_release_workspaces(b.lib.api, b.e) })
}

// Close releases the device; the library shuts down when its last Backend closes. Buffers
// must be freed before: Close still closes, but reports any left as an error. Later calls
// fail with ErrClosed; a second Close is a no-op.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	err := b.lib.release(b)
	b.closed = true
	if n := b.liveBufs.Load(); n > 0 {
		leak := fmt.Errorf("cuda close: %d buffers (%d bytes) still allocated: free them before Close", n, b.liveBytes.Load())
		if err != nil {
			return fmt.Errorf("%w; %w", leak, err)
		}
		return leak
	}
	return err
}

// arg is a buffer argument with the name the ABI gives it, for messages.
type arg struct {
	name string
	buf  backend.Buffer
}

// device unwraps the buffers of one call after checking the backend is usable. A nil
// buffer (gemm's optional bias) stays nil.
func (b *Backend) device(op string, args ...arg) ([]*buffer, error) {
	if err := b.enter(op); err != nil {
		return nil, err
	}
	ds := make([]*buffer, len(args))
	for i, a := range args {
		if a.buf == nil {
			continue
		}
		d, ok := a.buf.(*buffer)
		switch {
		case !ok:
			return nil, fmt.Errorf("cuda %s: %s is a %T, not a buffer of the cuda backend", op, a.name, a.buf)
		case d.owner != b:
			return nil, fmt.Errorf("cuda %s: %s %s belongs to another cuda backend instance", op, a.name, d)
		case d.freed.Load():
			return nil, fmt.Errorf("cuda %s: %s %s was freed", op, a.name, d)
		}
		ds[i] = d
	}
	return ds, nil
}

// ptr is the device pointer of d, NULL for a nil (optional) buffer.
func ptr(d *buffer) unsafe.Pointer {
	if d == nil {
		return nil
	}
	return d.data
}

// launched maps the status of an op and, with guards on, checks the guards of its outputs.
func (b *Backend) launched(op string, st C.int, outputs ...arg) error {
	if err := b.status(op, st, false); err != nil {
		return err
	}
	b.lastOp = op
	switch {
	case b.capture != nil:
		// Recorded, not run: its guards are checked after each replay (graph.Launch).
		if b.guards {
			b.capture.ops = append(b.capture.ops, capturedOp{op, outputs})
		}
	case b.guards:
		return b.checkGuards(op, outputs)
	}
	return nil
}

// dtype is the ts_dtype of dt.
func dtype(dt tensor.DType) C.ts_dtype {
	switch dt {
	case tensor.F16:
		return C.TS_F16
	case tensor.BF16:
		return C.TS_BF16
	case tensor.F32:
		return C.TS_F32
	case tensor.I32:
		return C.TS_I32
	case tensor.F8E4M3:
		return C.TS_F8E4M3
	case tensor.F8E5M2:
		return C.TS_F8E5M2
	}
	panic("cuda: no ts_dtype for " + dt.String()) // the shared checks admit no other dtype
}

// dims converts sizes read from buffer shapes into the C ints of a config. A size beyond
// int32 cannot be expressed in the ABI; refusing it beats truncating it into another,
// valid-looking shape.
type dims struct {
	op  string
	err error
}

func (c *dims) int(name string, v int) C.int {
	if v > math.MaxInt32 && c.err == nil {
		c.err = &backend.ArgError{Op: c.op, Arg: name, Value: strconv.Itoa(v), Reason: "exceeds the int32 range of the C ABI"}
	}
	return C.int(v)
}
