// Package cpu is the pure-Go backend: CI's backend and a second opinion on the GPU.
//
// It computes in fp32 from 16-bit inputs (fp16 or bf16, the storage dtype of the call) and
// rounds to that dtype exactly where the CUDA kernels store it (each op's output, and the
// intermediates of fused ops), so its numbers are
// the ones a correct GPU kernel should land near. Speed is secondary to being obviously
// right: loops are plain and follow the formulas of docs/golden-format.md.
package cpu

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func init() {
	backend.Register("cpu", func(backend.Options) (backend.Backend, error) { return New(), nil })
}

// Backend runs every op on the host.
type Backend struct {
	// Buffers from Alloc and Upload not freed yet, as the CUDA backend counts them: host
	// memory needs no release, but a model that forgets a buffer would leak device memory on
	// the GPU, and CI (CPU only) must see that too.
	liveBufs, liveBytes atomic.Int64
	liveGraphs          atomic.Int64
}

var _ backend.Backend = (*Backend)(nil)

// New returns the CPU backend.
func New() *Backend { return &Backend{} }

// buffer is a host tensor standing in for device memory.
type buffer struct {
	t     *tensor.Tensor
	freed bool
	owner *Backend // the backend counting it; nil for a view, which owns nothing
}

func (b *buffer) DType() tensor.DType { return b.t.DType }
func (b *buffer) Shape() []int        { return b.t.Shape }

// Free drops the storage; a second Free is a no-op.
func (b *buffer) Free() {
	if !b.freed && b.owner != nil {
		b.owner.liveBufs.Add(-1)
		b.owner.liveBytes.Add(-b.t.Bytes())
	}
	b.freed = true
	b.t = &tensor.Tensor{DType: b.t.DType, Shape: b.t.Shape}
}

// own counts a new buffer as live until it is freed.
func (b *Backend) own(t *tensor.Tensor) *buffer {
	b.liveBufs.Add(1)
	b.liveBytes.Add(t.Bytes())
	return &buffer{t: t, owner: b}
}

// LiveBuffers is the number of buffers from Alloc and Upload not freed yet (views are not
// counted: they own nothing); tests use it to prove nothing leaks.
func (b *Backend) LiveBuffers() int64 { return b.liveBufs.Load() }

// LiveBytes is the number of data bytes in those buffers.
func (b *Backend) LiveBytes() int64 { return b.liveBytes.Load() }

// Info describes the host.
func (*Backend) Info() backend.DeviceInfo {
	return backend.DeviceInfo{Backend: "cpu", Name: "pure Go, fp32 math", Processors: runtime.NumCPU()}
}

// Supports reports true for every op: the CPU backend implements them all.
func (*Backend) Supports(op string) bool {
	for _, o := range backend.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Alloc returns a zeroed host buffer.
func (b *Backend) Alloc(dt tensor.DType, shape ...int) (backend.Buffer, error) {
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("cpu: alloc %s%s: negative dimension", dt, tensor.ShapeString(shape))
		}
	}
	if dt != tensor.F16 && dt != tensor.BF16 && dt != tensor.F32 && dt != tensor.I32 && !dt.IsFP8() {
		return nil, fmt.Errorf("cpu: alloc: unsupported dtype %s", dt)
	}
	return b.own(tensor.New(dt, shape...)), nil
}

// Upload copies t.
func (b *Backend) Upload(t *tensor.Tensor) (backend.Buffer, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: upload of a nil tensor")
	}
	return b.own(t.Clone()), nil
}

// Download copies b.
func (*Backend) Download(b backend.Buffer) (*tensor.Tensor, error) {
	hb, err := host(b)
	if err != nil {
		return nil, err
	}
	return hb.t.Clone(), nil
}

// Close is a no-op: the host needs no release.
func (*Backend) Close() error { return nil }

func host(b backend.Buffer) (*buffer, error) {
	hb, ok := b.(*buffer)
	if !ok {
		return nil, fmt.Errorf("cpu: buffer %T belongs to another backend", b)
	}
	if hb.freed {
		return nil, fmt.Errorf("cpu: use of a freed buffer")
	}
	return hb, nil
}

// tensors unwraps the buffers of one call; a nil buffer stays nil.
func tensors(op string, bufs ...backend.Buffer) ([]*tensor.Tensor, error) {
	ts := make([]*tensor.Tensor, len(bufs))
	for i, b := range bufs {
		if b == nil {
			continue
		}
		hb, err := host(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		ts[i] = hb.t
	}
	return ts, nil
}

// store writes fp32 values into t, rounding to t's dtype as a kernel's store would.
func store(t *tensor.Tensor, vals []float32) {
	switch t.DType {
	case tensor.F32:
		copy(t.F32, vals)
	case tensor.F16:
		for i, v := range vals {
			t.F16[i] = f16(v)
		}
	case tensor.BF16:
		for i, v := range vals {
			t.BF16[i] = tensor.BF16FromFloat32(v)
		}
	default:
		panic("cpu: store into " + t.DType.String())
	}
}

// roundTo rounds every value to the storage dtype dt (fp16 or bf16) in place: the points
// where a CUDA kernel stores an intermediate in its 16-bit storage type.
func roundTo(dt tensor.DType, vals []float32) {
	for i, v := range vals {
		vals[i] = tensor.Round(dt, v)
	}
}

// lastDim splits a shape into rows and the length of the last dimension.
func lastDim(shape []int) (rows, n int) {
	n = shape[len(shape)-1]
	return tensor.NumElements(shape) / n, n
}

func f16(v float32) float16.Float16 { return float16.Fromfloat32(v) }

func fmtF(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

func fmtI(v int) string { return strconv.Itoa(v) }
