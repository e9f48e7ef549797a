package exec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	osexec "os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/sample"
)

// Protocol is the protocol version of docs/external-backends.md this build speaks.
const Protocol = 1

// ErrAdapter is wrapped by every error that is the adapter's doing: it died, missed its
// deadline, broke the protocol or wrote an output in another shape or dtype. The call is an
// ERROR (not a wrong answer, not unsupported), and the next call starts a fresh adapter.
var ErrAdapter = errors.New("the external adapter failed")

// The messages, one JSON object a line (docs/external-backends.md).
type helloMsg struct {
	Type     string `json:"type"`
	Protocol int    `json:"protocol"`
}

type helloReply struct {
	Type     string            `json:"type"`
	Protocol int               `json:"protocol"`
	Name     string            `json:"name"`
	Version  string            `json:"version"`
	Ops      map[string]opInfo `json:"ops"`
	// Timing, when present, says the adapter answers time and copy_bandwidth requests: its
	// ops timed on its own device with its own events.
	Timing *timingInfo `json:"timing,omitempty"`
}

// timingInfo names the device an adapter times its ops on.
type timingInfo struct {
	Device string `json:"device"`
}

// opInfo is what the handshake says of an op: the storage dtypes its cases may use.
type opInfo struct {
	DTypes []string `json:"dtypes"`
}

type tensorRef struct {
	Path  string `json:"path"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

type callMsg struct {
	Type    string               `json:"type"`
	ID      int                  `json:"id"`
	Op      string               `json:"op"`
	Params  json.RawMessage      `json:"params"`
	Inputs  map[string]tensorRef `json:"inputs"`
	Outputs map[string]tensorRef `json:"outputs"`
	// A time request's: untimed launches, then timed launches each after an L2 flush of
	// FlushBytes (docs/external-backends.md).
	Warmup     int `json:"warmup,omitempty"`
	Repeats    int `json:"repeats,omitempty"`
	FlushBytes int `json:"flush_bytes,omitempty"`
}

// bandwidthMsg asks a timing adapter for its device's copy bandwidth.
type bandwidthMsg struct {
	Type string `json:"type"`
	ID   int    `json:"id"`
}

type resultMsg struct {
	Type    string `json:"type"`
	ID      int    `json:"id"`
	Status  string `json:"status"` // ok | unsupported | error
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// TimesMS is a time request's answer: one time in milliseconds per timed launch.
	TimesMS []float64 `json:"times_ms,omitempty"`
	// GBps is a copy_bandwidth request's answer: bytes read plus written per second / 1e9.
	GBps float64 `json:"gbps,omitempty"`
}

// adapter is one running adapter process.
type adapter struct {
	cmd    *osexec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte // its stdout, a line at a time; closed at EOF
	stderr *tailBuffer
	done   chan struct{} // closed once the process has exited and exitErr is set
	exit   error
}

// start runs command with sh -c in its own process group and makes the handshake.
func start(command, dir string, timeout time.Duration) (*adapter, helloReply, error) {
	cmd := osexec.Command("sh", "-c", command)
	cmd.Env = append(cmd.Environ(), "TOUCHSTONE_EXEC_EXCHANGE="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a := &adapter{cmd: cmd, lines: make(chan []byte, 16), stderr: &tailBuffer{max: 4096}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	var err error
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, helloReply{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, helloReply{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, helloReply{}, fmt.Errorf("exec:%s: cannot start: %w: %w", command, err, ErrAdapter)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			a.lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(a.lines)
		a.exit = cmd.Wait()
		close(a.done)
	}()
	var h helloReply
	if err := a.exchange("handshake", helloMsg{Type: "hello", Protocol: Protocol}, &h, timeout); err != nil {
		a.kill()
		return nil, h, fmt.Errorf("exec:%s: %w", command, err)
	}
	if err := checkHello(h); err != nil {
		a.kill()
		return nil, h, fmt.Errorf("exec:%s: handshake: %w: %w", command, err, ErrAdapter)
	}
	return a, h, nil
}

// checkHello checks an adapter's handshake answer.
func checkHello(h helloReply) error {
	switch {
	case h.Type != "hello":
		return fmt.Errorf("answered a %q message, want hello", h.Type)
	case h.Protocol != Protocol:
		return fmt.Errorf("speaks protocol %d; this build speaks %d (docs/external-backends.md)", h.Protocol, Protocol)
	case h.Name == "" || strings.ContainsAny(h.Name, " \t\n"):
		return fmt.Errorf("name %q: want a non-empty word", h.Name)
	case len(h.Ops) == 0:
		return fmt.Errorf("lists no op")
	case h.Timing != nil && strings.TrimSpace(h.Timing.Device) == "":
		return fmt.Errorf("offers timing on no named device")
	}
	for op := range h.Ops {
		if !known(op) {
			return fmt.Errorf("op %q is neither a golden op (docs/golden-format.md) nor %q", op, sample.OpName)
		}
	}
	return nil
}

// decodeLine decodes one protocol line strictly (an unknown field is an error).
func decodeLine(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func known(op string) bool {
	if op == sample.OpName {
		return true
	}
	for _, o := range backend.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// exchange sends msg and decodes the next line into reply, within timeout. A missed deadline
// kills the adapter; an adapter that exits first is reported with its exit status and the end
// of its stderr.
func (a *adapter) exchange(what string, msg, reply any, timeout time.Duration) error {
	line, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := a.stdin.Write(append(line, '\n')); err != nil {
		return a.died(what, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case got, ok := <-a.lines:
		if !ok {
			return a.died(what, nil)
		}
		if err := decodeLine(got, reply); err != nil {
			a.kill()
			return fmt.Errorf("%s: answered %q, not a protocol message (%v): %w", what, clip(got), err, ErrAdapter)
		}
		return nil
	case <-timer.C:
		a.kill()
		return fmt.Errorf("%s: no answer within %v: the adapter was killed%s: %w", what, timeout, a.stderrNote(), ErrAdapter)
	}
}

// died reports an adapter that exited (or closed its pipes) before answering.
func (a *adapter) died(what string, cause error) error {
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		a.kill()
		<-a.done
	}
	status := "closed its output"
	if a.exit != nil {
		status = a.exit.Error()
	} else if a.cmd.ProcessState != nil {
		status = a.cmd.ProcessState.String()
	}
	if cause != nil {
		status += " (" + cause.Error() + ")"
	}
	return fmt.Errorf("%s: the adapter died: %s%s: %w", what, status, a.stderrNote(), ErrAdapter)
}

// kill ends the adapter's whole process group (its children too: sh -c forks).
func (a *adapter) kill() {
	if a.cmd.Process != nil {
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
	}
}

// stop asks the adapter to leave, and kills it if it has not within timeout.
func (a *adapter) stop(timeout time.Duration) error {
	line, _ := json.Marshal(helloMsg{Type: "bye", Protocol: Protocol})
	_, _ = a.stdin.Write(append(line, '\n'))
	_ = a.stdin.Close()
	select {
	case <-a.done:
		return nil
	case <-time.After(timeout):
		a.kill()
		return fmt.Errorf("exec: the adapter did not exit within %v of bye: killed: %w", timeout, ErrAdapter)
	}
}

func (a *adapter) stderrNote() string {
	if t := strings.TrimSpace(a.stderr.String()); t != "" {
		return "; its stderr ends: " + t
	}
	return ""
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// call sends one call message and waits for its result, starting an adapter first when none
// is running (after a death or a kill). A result other than ok is an error: unsupported wraps
// backend.ErrUnsupported with the adapter's reason, error wraps ErrAdapter with its message.
func (b *Backend) call(op string, msg *callMsg) error {
	_, err := b.request(op, msg.ID, msg)
	return err
}

// request sends one message of id and waits for its result, as call does, and returns it.
func (b *Backend) request(op string, id int, msg any) (resultMsg, error) {
	if b.proc == nil {
		p, h, err := start(b.command, b.dir, b.timeout)
		if err != nil {
			return resultMsg{}, fmt.Errorf("%s: restarting the adapter: %w", op, err)
		}
		if h.Name != b.hello.Name || h.Protocol != b.hello.Protocol {
			p.kill()
			return resultMsg{}, fmt.Errorf("%s: the restarted adapter is %s (protocol %d), not %s: %w", op, h.Name, h.Protocol, b.Name(), ErrAdapter)
		}
		b.proc = p
		b.restart++
	}
	var r resultMsg
	if err := b.proc.exchange(op, msg, &r, b.timeout); err != nil {
		b.proc = nil // the next call starts a fresh one
		return r, fmt.Errorf("%s: %w", b.Name(), err)
	}
	if r.Type != "result" || r.ID != id {
		b.proc.kill()
		b.proc = nil
		return r, fmt.Errorf("%s: %s: answered %s %d, want result %d: %w", b.Name(), op, r.Type, r.ID, id, ErrAdapter)
	}
	switch r.Status {
	case "ok":
		return r, nil
	case "unsupported":
		reason := r.Reason
		if reason == "" {
			reason = "(no reason given)"
		}
		return r, fmt.Errorf("%s: %s: %s: %w", op, b.Name(), reason, backend.ErrUnsupported)
	case "error":
		return r, fmt.Errorf("%s: %s: %s: %w", op, b.Name(), r.Message, ErrAdapter)
	}
	return r, fmt.Errorf("%s: %s: status %q, want ok, unsupported or error: %w", op, b.Name(), r.Status, ErrAdapter)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
