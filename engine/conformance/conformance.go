// Package conformance runs one kernel golden set on a backend and judges every output
// against golden/tolerances.yaml. The Ginkgo suites and the touchstone CLI both call it, so
// a case means the same thing in CI, on a GPU runner and at an engineer's terminal.
package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// ErrUnsupported is returned for an op the backend does not claim to implement (its
// Supports is false). It wraps backend.ErrUnsupported, so the case gets the unsupported
// verdict as a call the backend refuses with it does; unlike such a call it stays
// unsupported under FailUnsupported, since the backend declared it up front.
var ErrUnsupported = fmt.Errorf("op %w", backend.ErrUnsupported)

// Output is one result of a kernel next to its reference.
type Output struct {
	Name string // the expected file's name in the set, e.g. "out", "q_out"
	Got  *tensor.Tensor
	Want *tensor.Tensor
	// Allowance is the reference's per-element allowance for this output, nil when the set
	// has none (golden.RoleAllowance).
	Allowance *tensor.Tensor
	// Storage is the dtype of the set's 16-bit inputs (tensor.Invalid: none), which picks a
	// kernels.<op>.<dtype>@<storage> tolerance where there is one (compare.Tolerances.KernelFor).
	Storage tensor.DType
}

// Storage is the storage dtype of a set: its first f16 or bf16 input's (tensor.Invalid when it
// has none).
func Storage(set *golden.Set) tensor.DType {
	for _, f := range set.Files(golden.RoleInput) {
		if dt, err := tensor.ParseDType(f.DType); err == nil && dt.IsFloat16Bit() {
			return dt
		}
	}
	return tensor.Invalid
}

// runner executes one op through the backend, recording its outputs with c.output.
type runner func(c *call)

// runners maps each golden op name to the code that runs it.
var runners = map[string]runner{}

// unfused maps each fused op to a runner of its unfused composition (the equivalent its ABI
// comment states), with the same inputs and outputs.
var unfused = map[string]runner{}

// HasUnfused reports whether op has an unfused composition to run against it.
func HasUnfused(op string) bool { _, ok := unfused[op]; return ok }

func register(op string, r runner) {
	if _, dup := runners[op]; dup {
		panic("conformance: runner registered twice for " + op)
	}
	runners[op] = r
}

// Source supplies the parameters and input tensors of one op call: a golden set, or
// tensors made in memory (the cross-backend check).
type Source interface {
	DecodeParams(v any) error
	Tensor(name string) (*tensor.Tensor, error)
}

// Memory is a Source of in-memory tensors.
type Memory struct {
	Params  json.RawMessage
	Tensors map[string]*tensor.Tensor
}

// DecodeParams decodes the params strictly, like a golden set does.
func (m Memory) DecodeParams(v any) error {
	dec := json.NewDecoder(bytes.NewReader(m.Params))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Tensor returns the named tensor.
func (m Memory) Tensor(name string) (*tensor.Tensor, error) {
	t, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("no input tensor %q", name)
	}
	return t, nil
}

// rawParams returns src's params as JSON: a golden set's manifest params, a Memory's Params.
func rawParams(src Source) ([]byte, error) {
	switch s := src.(type) {
	case *golden.Set:
		return s.Manifest.Params, nil
	case Memory:
		return s.Params, nil
	}
	return nil, fmt.Errorf("a source of type %T has no raw params for an external backend", src)
}

func named(bufs []namedBuffer) []backend.NamedBuffer {
	out := make([]backend.NamedBuffer, len(bufs))
	for i, b := range bufs {
		out[i] = backend.NamedBuffer{Name: b.name, Buf: b.buf}
	}
	return out
}

// Prepared is an op with its inputs uploaded and outputs allocated, ready to launch any
// number of times: Execute launches it once, a benchmark many times.
type Prepared struct {
	c *call
}

// Placement says where Prepare puts an op's inputs and outputs in memory.
type Placement int

const (
	// Aligned gives each tensor an allocation of its own (the allocator's alignment: 256
	// bytes on a GPU), where every vectorised path of a kernel may run.
	Aligned Placement = iota
	// Misaligned puts each tensor one element past the start of a larger allocation, as a
	// view into a model's activations or KV cache can be: off every 16-byte boundary, where
	// kernels must take their scalar paths (or refuse the call as unsupported).
	Misaligned
)

func (p Placement) String() string {
	if p == Misaligned {
		return "misaligned"
	}
	return "aligned"
}

// Prepare uploads the inputs of src and allocates the outputs of op on b.
func Prepare(b backend.Backend, op string, src Source) (*Prepared, error) {
	return PrepareAt(b, op, src, Aligned)
}

// PrepareUnfused is Prepare for the unfused composition of the fused op: the ops its ABI
// comment names, one after another, each rounding its output as it does alone.
func PrepareUnfused(b backend.Backend, op string, src Source) (*Prepared, error) {
	r, ok := unfused[op]
	if !ok {
		return nil, fmt.Errorf("op %q has no unfused composition", op)
	}
	return prepare(b, op, src, Aligned, r)
}

// CheckUnfused runs and judges the unfused composition of set's fused op, by the fused op's
// tolerance.
func CheckUnfused(b backend.Backend, set *golden.Set, tols *compare.Tolerances) ([]Verdict, error) {
	return checkForm(b, set, tols, PrepareUnfused)
}

// checkForm runs set's op in the form prepare makes (its unfused composition, a backend's tiled
// weight) and judges it by the op's tolerance and golden files.
func checkForm(b backend.Backend, set *golden.Set, tols *compare.Tolerances, prepare func(backend.Backend, string, Source) (*Prepared, error)) ([]Verdict, error) {
	p, err := prepare(b, set.Manifest.Op, set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	defer p.Free()
	if err := p.Launch(); err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	got, err := p.Outputs()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	outs, err := pair(set, got)
	if err != nil {
		return nil, err
	}
	return Judge(set.Manifest.Op, outs, tols)
}

// PrepareAt is Prepare with the tensors placed as place says.
func PrepareAt(b backend.Backend, op string, src Source, place Placement) (*Prepared, error) {
	r, ok := runners[op]
	if !ok {
		return nil, fmt.Errorf("no runner for op %q (known ops: %v)", op, backend.Ops)
	}
	return prepare(b, op, src, place, r)
}

func prepare(b backend.Backend, op string, src Source, place Placement, r runner) (*Prepared, error) {
	if !b.Supports(op) {
		return nil, fmt.Errorf("%s on %s: %w", op, b.Info().Backend, ErrUnsupported)
	}
	c := &call{b: b, src: src, place: place}
	r(c)
	if c.err != nil {
		c.free()
		return nil, c.err
	}
	if runner, ok := b.(backend.OpRunner); ok {
		// An external backend runs the op as a whole from the set's own params, inputs and
		// outputs (the buffers the runner made): the runner's Kernels calls are not made.
		params, err := rawParams(src)
		if err != nil {
			c.free()
			return nil, err
		}
		ins, outs := named(c.inputs), named(c.outputs)
		c.launches = []func() error{func() error { return runner.RunOp(op, params, ins, outs) }}
		if t, ok := b.(backend.OpTimer); ok {
			c.timeOp = func(r backend.TimeRequest) ([]float64, error) { return t.TimeOp(op, params, ins, outs, r) }
		}
	}
	return &Prepared{c: c}, nil
}

// Launch runs the op's backend calls once.
func (p *Prepared) Launch() error {
	for _, l := range p.c.launches {
		if err := l(); err != nil {
			return err
		}
	}
	return nil
}

// TimedByAdapter reports whether the op runs in an external adapter that times it on its own
// device (Time); such an op cannot be timed by launching it under this process's timers.
func (p *Prepared) TimedByAdapter() bool { return p.c.timeOp != nil }

// Time has the external adapter time the op (backend.OpTimer): r.Warmup untimed launches,
// then r.Repeats timed ones, each after an L2 flush; the times are in milliseconds.
func (p *Prepared) Time(r backend.TimeRequest) ([]float64, error) {
	if p.c.timeOp == nil {
		return nil, fmt.Errorf("%s does not time its ops itself: %w", p.c.b.Info().Backend, ErrUnsupported)
	}
	return p.c.timeOp(r)
}

// Outputs downloads every output by name.
func (p *Prepared) Outputs() (map[string]*tensor.Tensor, error) {
	outs := make(map[string]*tensor.Tensor, len(p.c.outputs))
	for _, o := range p.c.outputs {
		got, err := p.c.b.Download(o.buf)
		if err != nil {
			return nil, fmt.Errorf("download %s: %w", o.name, err)
		}
		outs[o.name] = got
	}
	return outs, nil
}

// Free releases every buffer.
func (p *Prepared) Free() { p.c.free() }

// Execute runs op on b once with the inputs of src and returns the outputs by name.
// Buffers are freed before it returns, on success and on error.
func Execute(b backend.Backend, op string, src Source) (map[string]*tensor.Tensor, error) {
	return ExecuteAt(b, op, src, Aligned)
}

// ExecuteAt is Execute with the tensors placed as place says.
func ExecuteAt(b backend.Backend, op string, src Source, place Placement) (map[string]*tensor.Tensor, error) {
	p, err := PrepareAt(b, op, src, place)
	if err != nil {
		return nil, err
	}
	defer p.Free()
	if err := p.Launch(); err != nil {
		return nil, err
	}
	return p.Outputs()
}

// Run executes set's op on b and pairs every output with its reference.
func Run(b backend.Backend, set *golden.Set) ([]Output, error) {
	return RunAt(b, set, Aligned)
}

// RunAt is Run with the tensors placed as place says.
func RunAt(b backend.Backend, set *golden.Set, place Placement) ([]Output, error) {
	m := set.Manifest
	if m.Kind != "kernel" {
		return nil, fmt.Errorf("%s: kind %q is not a kernel set", set.ID(), m.Kind)
	}
	got, err := ExecuteAt(b, m.Op, set, place)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	return pair(set, got)
}

// pair matches the outputs a runner produced with the set's expected files, one for one.
func pair(set *golden.Set, got map[string]*tensor.Tensor) ([]Output, error) {
	m := set.Manifest
	var outs []Output
	storage := Storage(set)
	for _, f := range set.Files("expected") {
		g, ok := got[f.Name]
		if !ok {
			return nil, fmt.Errorf("%s: the %s runner produced no output %q", set.ID(), m.Op, f.Name)
		}
		want, err := set.Tensor(f.Name)
		if err != nil {
			return nil, err
		}
		o := Output{Name: f.Name, Got: g, Want: want, Storage: storage}
		if _, ok := set.File(f.Name + golden.AllowanceSuffix); ok {
			if o.Allowance, err = set.Tensor(f.Name + golden.AllowanceSuffix); err != nil {
				return nil, err
			}
		}
		outs = append(outs, o)
	}
	if len(outs) != len(got) {
		return nil, fmt.Errorf("%s: the set expects %d outputs, the %s runner produced %d", set.ID(), len(outs), m.Op, len(got))
	}
	return outs, nil
}

// Verdict is one output judged against its tolerance.
type Verdict struct {
	Output    string
	DType     tensor.DType // the dtype the backend produced, which selects the tolerance
	Tolerance compare.Tolerance
	Result    *compare.Result
}

// Pass reports whether the output is within tolerance.
func (v Verdict) Pass() bool { return v.Result.Pass() }

// Judge compares each output with its reference under the op's tolerance.
func Judge(op string, outs []Output, tols *compare.Tolerances) ([]Verdict, error) {
	verdicts := make([]Verdict, 0, len(outs))
	for _, o := range outs {
		tol, err := tols.KernelForOutput(op, o.Name, o.Got.DType, o.Storage)
		if err != nil {
			return nil, err
		}
		res, err := compare.CompareAllowing(o.Got, o.Want, o.Allowance, tol)
		if err != nil {
			return nil, fmt.Errorf("%s output %s: %w", op, o.Name, err)
		}
		verdicts = append(verdicts, Verdict{Output: o.Name, DType: o.Got.DType, Tolerance: tol, Result: res})
	}
	return verdicts, nil
}

// Check runs and judges one set.
func Check(b backend.Backend, set *golden.Set, tols *compare.Tolerances) ([]Verdict, error) {
	return CheckAt(b, set, tols, Aligned)
}

// CheckAt is Check with the tensors placed as place says.
func CheckAt(b backend.Backend, set *golden.Set, tols *compare.Tolerances, place Placement) ([]Verdict, error) {
	outs, err := RunAt(b, set, place)
	if err != nil {
		return nil, err
	}
	return Judge(set.Manifest.Op, outs, tols)
}

// call carries one op execution: it loads and uploads inputs, allocates outputs and
// downloads results, keeping the first error so runners read as straight-line code.
type call struct {
	b        backend.Backend
	src      Source
	place    Placement
	bufs     []backend.Buffer
	launches []func() error
	timeOp   func(backend.TimeRequest) ([]float64, error) // an external adapter's own timing
	inputs   []namedBuffer                                // the set's tensors as uploaded, by name (an external backend's call)
	outputs  []namedBuffer
	err      error
}

type namedBuffer struct {
	name string
	buf  backend.Buffer
}

func (c *call) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// params decodes the set's parameters strictly into v.
func (c *call) params(v any) {
	if c.err == nil {
		c.fail(c.src.DecodeParams(v))
	}
}

// host loads a tensor of the set.
func (c *call) host(name string) *tensor.Tensor {
	if c.err != nil {
		return nil
	}
	t, err := c.src.Tensor(name)
	c.fail(err)
	return t
}

// input loads and uploads an input tensor.
func (c *call) input(name string) backend.Buffer {
	t := c.host(name)
	if c.err != nil {
		return nil
	}
	if c.place == Misaligned {
		buf := c.offset(t.DType, t.Shape)
		if c.err == nil {
			if err := c.b.(backend.Memory).Write(buf, t); err != nil {
				c.fail(fmt.Errorf("write %s: %w", name, err))
			}
			c.inputs = append(c.inputs, namedBuffer{name, buf})
		}
		return buf
	}
	buf, err := c.b.Upload(t)
	if err != nil {
		c.fail(fmt.Errorf("upload %s: %w", name, err))
		return nil
	}
	c.bufs = append(c.bufs, buf)
	c.inputs = append(c.inputs, namedBuffer{name, buf})
	return buf
}

// offset returns a view of shape that starts one element into an allocation of one element
// more (Misaligned). Only that allocation is kept for free: a view owns nothing.
func (c *call) offset(dt tensor.DType, shape []int) backend.Buffer {
	if c.err != nil {
		return nil
	}
	mem, ok := c.b.(backend.Memory)
	if !ok {
		c.fail(fmt.Errorf("%s backend has no views: cannot place tensors %s: %w", c.b.Info().Backend, c.place, backend.ErrUnsupported))
		return nil
	}
	n := tensor.NumElements(shape)
	base, err := c.b.Alloc(dt, n+1)
	if err != nil {
		c.fail(fmt.Errorf("alloc %s[%d]: %w", dt, n+1, err))
		return nil
	}
	c.bufs = append(c.bufs, base)
	if n == 0 {
		c.fail(fmt.Errorf("a tensor of shape %s has no elements to place %s", tensor.ShapeString(shape), c.place))
		return nil
	}
	rows, err := mem.Rows(base, 1, n)
	if err == nil {
		var v backend.Buffer
		if v, err = mem.View(rows, shape...); err == nil {
			return v
		}
	}
	c.fail(fmt.Errorf("view %s%s one element into its allocation: %w", dt, tensor.ShapeString(shape), err))
	return nil
}

// alloc allocates an output buffer.
func (c *call) alloc(dt tensor.DType, shape []int) backend.Buffer {
	if c.err != nil {
		return nil
	}
	if c.place == Misaligned {
		return c.offset(dt, shape)
	}
	buf, err := c.b.Alloc(dt, shape...)
	if err != nil {
		c.fail(fmt.Errorf("alloc %s%s: %w", dt, tensor.ShapeString(shape), err))
		return nil
	}
	c.bufs = append(c.bufs, buf)
	return buf
}

// like allocates an output of buf's dtype and shape (a 16-bit op writes its inputs' storage
// dtype, fp16 or bf16).
func (c *call) like(buf backend.Buffer) backend.Buffer {
	if c.err != nil {
		return nil
	}
	return c.alloc(buf.DType(), buf.Shape())
}

// dim returns dimension i of buf, failing the call (not panicking) when a golden set's
// tensor has fewer dimensions than the op needs.
func (c *call) dim(name string, buf backend.Buffer, i int) int {
	if c.err != nil {
		return 0
	}
	if s := buf.Shape(); i >= len(s) {
		c.fail(fmt.Errorf("input %s has shape %s: want at least %d dimensions", name, tensor.ShapeString(s), i+1))
		return 0
	}
	return buf.Shape()[i]
}

// do records one backend call of the op; Launch makes it.
func (c *call) do(op func() error) {
	if c.err == nil {
		c.launches = append(c.launches, op)
	}
}

// output records buf as the output called name.
func (c *call) output(name string, buf backend.Buffer) {
	if c.err == nil {
		c.outputs = append(c.outputs, namedBuffer{name, buf})
	}
}

func (c *call) free() {
	for _, b := range c.bufs {
		b.Free()
	}
	c.bufs = nil
}
