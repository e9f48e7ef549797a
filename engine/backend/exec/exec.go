// Package exec is the external backend (TOUCHSTONE_BACKEND=exec:<command>): an adapter process
// that runs ops from other kernel libraries behind the protocol of docs/external-backends.md.
// touchstone keeps every tensor on the host, hands the adapter each golden case as its op's
// golden-format name, params and .npy files in an exchange directory (nothing but short JSON
// lines goes through the pipe), and judges what the adapter wrote with the case's tolerances.
//
// The adapter runs whole golden ops (backend.OpRunner) and, when it lists the protocol's sample
// op, draws tokens with its own random numbers (sample.go); it is not a device for models, so
// the Kernels methods refuse by name (refuse.go). A misbehaving adapter gets a verdict, never a
// hang: a call past its deadline kills it, one that dies is an error naming the op and its exit
// status, and the next call starts a fresh process.
package exec

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Environment of the external backend.
const (
	// EnvTimeout is the per-call deadline in seconds (default 60, at most 86400).
	EnvTimeout = "TOUCHSTONE_EXEC_TIMEOUT"
	// EnvDir is the directory the exchange directories are made in (default /dev/shm when it
	// exists, a tmpfs on Linux; else the system's temporary directory).
	EnvDir = "TOUCHSTONE_EXEC_DIR"
)

func init() {
	backend.Register("exec", func(opts backend.Options) (backend.Backend, error) {
		timeout, err := timeoutFromEnv(os.Getenv(EnvTimeout))
		if err != nil {
			return nil, err
		}
		return Open(opts.Command, Config{Timeout: timeout, Dir: os.Getenv(EnvDir)})
	})
}

// Config tunes an external backend.
type Config struct {
	Timeout time.Duration // a call's deadline, the handshake's included; 0: 60 s
	Dir     string        // where the exchange directory is made; "": /dev/shm or the temp dir
}

func timeoutFromEnv(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || v > 86400 {
		return 0, fmt.Errorf("%s=%q: want seconds in (0, 86400]", EnvTimeout, s)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// Backend is an adapter process and the host tensors it reads and writes.
type Backend struct {
	command string
	timeout time.Duration
	dir     string // the exchange directory, removed by Close

	mu      sync.Mutex // one call at a time: an adapter answers in order
	proc    *adapter   // nil until the first call, or after the adapter died
	hello   helloReply // the first handshake's, which every restart must repeat
	calls   int        // calls made, for the files' names and the messages' ids
	closed  bool
	restart int // adapters started after the first
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.OpTimer = (*Backend)(nil)

// Open starts the adapter command (run by sh -c) and makes the handshake: an adapter that does
// not start, speaks another protocol or lists no op is refused here, naming why.
func Open(command string, cfg Config) (*Backend, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	parent := cfg.Dir
	if parent == "" {
		parent = os.TempDir()
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			parent = "/dev/shm"
		}
	}
	dir, err := os.MkdirTemp(parent, "touchstone-exec-")
	if err != nil {
		return nil, fmt.Errorf("exec backend: exchange directory: %w", err)
	}
	b := &Backend{command: command, timeout: cfg.Timeout, dir: dir}
	p, h, err := start(command, dir, cfg.Timeout)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.proc, b.hello = p, h
	return b, nil
}

// Name is the adapter's name from its handshake, as reports show it ("exec:<name>").
func (b *Backend) Name() string { return "exec:" + b.hello.Name }

// Info describes the adapter.
func (b *Backend) Info() backend.DeviceInfo {
	return backend.DeviceInfo{Backend: "exec", Name: b.hello.Name + " " + b.hello.Version + " (" + b.command + ")"}
}

// Supports reports whether the adapter's handshake listed op.
func (b *Backend) Supports(op string) bool {
	_, ok := b.hello.Ops[op]
	return ok
}

// buffer is a host tensor.
type buffer struct {
	t     *tensor.Tensor
	owner *Backend
	freed bool
	// held is the .npy file holding t, written the first time t is a call's input and kept
	// until t changes, so that the calls of a loop over one input (a sampler's draws, a
	// bench's repeats) write it once. heldStat is the file as written: a file the adapter
	// has touched since is written again.
	held     string
	heldStat os.FileInfo
	// rowsChecked says t's rows passed sample.Validate's logit checks.
	rowsChecked bool
}

func (x *buffer) DType() tensor.DType { return x.t.DType }
func (x *buffer) Shape() []int        { return x.t.Shape }
func (x *buffer) Free() {
	x.freed = true
	x.forget()
}

// forget drops what was derived from t, when t changes or is freed.
func (x *buffer) forget() {
	if x.held != "" {
		os.Remove(x.held)
	}
	x.held, x.heldStat, x.rowsChecked = "", nil, false
}

// heldFile is the path of a file holding t, written into dir unless the one written before is
// still as it was.
func (x *buffer) heldFile(dir string) (string, error) {
	if x.held != "" {
		if fi, err := os.Stat(x.held); err == nil && fi.Size() == x.heldStat.Size() && fi.ModTime().Equal(x.heldStat.ModTime()) {
			return x.held, nil
		}
		x.forget()
	}
	f, err := os.CreateTemp(dir, "held-*.npy")
	if err != nil {
		return "", err
	}
	path := f.Name()
	f.Close()
	if err := tensor.WriteNPY(path, x.t); err != nil {
		os.Remove(path)
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		os.Remove(path)
		return "", err
	}
	x.held, x.heldStat = path, fi
	return path, nil
}

func (b *Backend) own(t *tensor.Tensor) *buffer { return &buffer{t: t, owner: b} }

// Alloc returns a zeroed host buffer.
func (b *Backend) Alloc(dt tensor.DType, shape ...int) (backend.Buffer, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("exec: alloc: dtype %v: %w", dt, backend.ErrInvalidArgument)
	}
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("exec: alloc: shape %v: %w", shape, backend.ErrInvalidArgument)
		}
	}
	return b.own(tensor.New(dt, shape...)), nil
}

// Upload copies t into a new host buffer.
func (b *Backend) Upload(t *tensor.Tensor) (backend.Buffer, error) { return b.own(t.Clone()), nil }

// Download copies a buffer.
func (b *Backend) Download(x backend.Buffer) (*tensor.Tensor, error) {
	h, err := b.host("download", x)
	if err != nil {
		return nil, err
	}
	return h.t.Clone(), nil
}

func (b *Backend) host(what string, x backend.Buffer) (*buffer, error) {
	h, ok := x.(*buffer)
	if !ok || h.owner != b {
		return nil, fmt.Errorf("exec: %s: a buffer of another backend (%T): %w", what, x, backend.ErrInvalidArgument)
	}
	if h.freed {
		return nil, fmt.Errorf("exec: %s: a freed buffer: %w", what, backend.ErrInvalidArgument)
	}
	return h, nil
}

// Close ends the adapter (bye, then kill past the deadline) and removes the exchange directory.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var err error
	if b.proc != nil {
		err = b.proc.stop(b.timeout)
		b.proc = nil
	}
	return errors.Join(err, os.RemoveAll(b.dir))
}

// Restarts is how many adapters were started after the first (one per call after a death or a
// missed deadline).
func (b *Backend) Restarts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.restart
}

// RunOp runs one golden op through the adapter: the inputs and the outputs' current contents
// (an in-place op's input) go to .npy files in the exchange directory, the adapter writes the
// outputs' files in place and answers; the files are read back into the outputs, each checked
// to have kept its dtype and shape.
func (b *Backend) RunOp(op string, params []byte, inputs, outputs []backend.NamedBuffer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	msg, cleanup, err := b.files(op, "call", params, inputs, outputs)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := b.call(op, msg); err != nil {
		return err
	}
	for _, nb := range outputs {
		if err := b.readBack(op, nb, msg.Outputs[nb.Name]); err != nil {
			return err
		}
	}
	return nil
}

// TimingDevice is the device the adapter times its ops on, when its handshake offered timing.
func (b *Backend) TimingDevice() (string, bool) {
	if b.hello.Timing == nil {
		return "", false
	}
	return b.hello.Timing.Device, true
}

// TimeOp asks the adapter to time op on its device (backend.OpTimer): the files go to the
// exchange directory as for RunOp, the adapter launches the op t.Warmup times untimed, then
// t.Repeats times, each after an L2 flush of t.FlushBytes, timed with its own device events;
// its outputs are not read back. An answer without one positive, finite time per repeat is
// the adapter's error.
func (b *Backend) TimeOp(op string, params []byte, inputs, outputs []backend.NamedBuffer, t backend.TimeRequest) ([]float64, error) {
	if t.Warmup < 0 || t.Repeats < 1 || t.FlushBytes < 0 {
		return nil, fmt.Errorf("exec: %s: time request warmup %d, repeats %d, flush %d bytes: %w", op, t.Warmup, t.Repeats, t.FlushBytes, backend.ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.TimingDevice(); !ok {
		return nil, fmt.Errorf("%s: %s does not time its ops (its handshake offers no timing): %w", op, b.Name(), backend.ErrUnsupported)
	}
	msg, cleanup, err := b.files(op, "time", params, inputs, outputs)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	msg.Warmup, msg.Repeats, msg.FlushBytes = t.Warmup, t.Repeats, t.FlushBytes
	r, err := b.request(op, msg.ID, msg)
	if err != nil {
		return nil, err
	}
	if len(r.TimesMS) != t.Repeats {
		return nil, fmt.Errorf("%s: %s timed %d launches, %d asked: %w", op, b.Name(), len(r.TimesMS), t.Repeats, ErrAdapter)
	}
	for _, ms := range r.TimesMS {
		if !(ms > 0) || math.IsInf(ms, 0) {
			return nil, fmt.Errorf("%s: %s answered a time of %v ms: %w", op, b.Name(), ms, ErrAdapter)
		}
	}
	return r.TimesMS, nil
}

// CopyBandwidthGBps is the adapter's measure of its device's copy bandwidth (bytes read plus
// written), for reports of its ops' bandwidth.
func (b *Backend) CopyBandwidthGBps() (float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, fmt.Errorf("exec: copy bandwidth: the backend is closed")
	}
	if _, ok := b.TimingDevice(); !ok {
		return 0, fmt.Errorf("copy bandwidth: %s offers no timing: %w", b.Name(), backend.ErrUnsupported)
	}
	b.calls++
	r, err := b.request("copy bandwidth", b.calls, bandwidthMsg{Type: "copy_bandwidth", ID: b.calls})
	if err != nil {
		return 0, err
	}
	if !(r.GBps > 0) || math.IsInf(r.GBps, 0) {
		return 0, fmt.Errorf("copy bandwidth: %s answered %v GB/s: %w", b.Name(), r.GBps, ErrAdapter)
	}
	return r.GBps, nil
}

// files writes a call's inputs and outputs to a new directory of the exchange directory and
// returns the message naming them and the directory's removal.
func (b *Backend) files(op, typ string, params []byte, inputs, outputs []backend.NamedBuffer) (*callMsg, func(), error) {
	if b.closed {
		return nil, nil, fmt.Errorf("exec: %s: the backend is closed", op)
	}
	if !b.Supports(op) {
		return nil, nil, fmt.Errorf("%s: %s does not implement it: %w", op, b.Name(), backend.ErrUnsupported)
	}
	b.calls++
	id := b.calls
	callDir := filepath.Join(b.dir, strconv.Itoa(id))
	if err := os.Mkdir(callDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("exec: %s: %w", op, err)
	}
	cleanup := func() { os.RemoveAll(callDir) }
	msg := &callMsg{Type: typ, ID: id, Op: op, Params: params, Inputs: map[string]tensorRef{}, Outputs: map[string]tensorRef{}}
	if len(msg.Params) == 0 {
		msg.Params = []byte("{}")
	}
	write := func(kind string, nb backend.NamedBuffer, to map[string]tensorRef) error {
		h, err := b.host(op+" "+kind+" "+nb.Name, nb.Buf)
		if err != nil {
			return err
		}
		// An input is read, never written (docs/external-backends.md), so its file may serve
		// the next calls too; an output's is the adapter's to write, one per call.
		var path string
		if kind == "in" {
			path, err = h.heldFile(b.dir)
		} else {
			path = filepath.Join(callDir, kind+"."+nb.Name+".npy")
			err = tensor.WriteNPY(path, h.t)
		}
		if err != nil {
			return fmt.Errorf("exec: %s: %s %s: %w", op, kind, nb.Name, err)
		}
		to[nb.Name] = tensorRef{Path: path, DType: h.t.DType.String(), Shape: h.t.Shape}
		return nil
	}
	for _, nb := range inputs {
		if err := write("in", nb, msg.Inputs); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	for _, nb := range outputs {
		if err := write("out", nb, msg.Outputs); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return msg, cleanup, nil
}

// readBack reads an output file into its buffer: the adapter must have written it in place,
// keeping the dtype and shape touchstone made it with.
func (b *Backend) readBack(op string, nb backend.NamedBuffer, ref tensorRef) error {
	h, err := b.host(op+" output "+nb.Name, nb.Buf)
	if err != nil {
		return err
	}
	got, err := tensor.ReadNPY(ref.Path)
	if err != nil {
		return fmt.Errorf("%s: %s: output %s: %w", op, b.Name(), nb.Name, err)
	}
	if got.DType == tensor.U8 && (h.t.DType == tensor.F8E4M3 || h.t.DType == tensor.F8E5M2) {
		got.DType = h.t.DType // .npy stores FP8 as bytes; the call said which
	}
	if got.DType != h.t.DType || !tensor.SameShape(got.Shape, h.t.Shape) {
		return fmt.Errorf("%s: %s wrote output %s as %s%s, want %s%s written in place: %w", op, b.Name(), nb.Name,
			got.DType, tensor.ShapeString(got.Shape), h.t.DType, tensor.ShapeString(h.t.Shape), ErrAdapter)
	}
	h.forget()
	h.t = got
	return nil
}

// refuse is every Kernels and Sampler method's answer (refuse.go): an external backend
// runs golden cases whole, by op name (RunOp), so a model pass, a broken variant or an
// argument spec that calls a method directly is unsupported here, by name.
func refuse(method string) error {
	return fmt.Errorf("exec: %s: an external backend runs golden cases whole (docs/external-backends.md), not the %s method: %w",
		method, method, backend.ErrUnsupported)
}
