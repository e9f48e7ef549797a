package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// names is the first word (the ts_* function) of each logged call.
func names(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i], _, _ = strings.Cut(l, " ")
	}
	return out
}

func TestCaptureRecordsBetweenBeginAndEnd(t *testing.T) {
	b := openFake(t)
	x := upload(t, b, halfs([]int{4}, 1, 2, 3, 4))
	out := alloc(t, b, tensor.F16, 4)
	n := len(calls(t))
	g, err := b.Capture(func(be backend.Backend) error { return be.ResidualAdd(out, x, x) })
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	g.Free()
	g.Free()
	want := []string{"ts_graph_begin", "ts_residual_add", "ts_graph_end", "ts_graph_launch", "ts_graph_destroy"}
	if got := names(callsSince(t, n)); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if err := g.Launch(); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("launch after Free: %v", err)
	}
}

func TestCaptureReturnsTheRecordersErrorAndNoGraph(t *testing.T) {
	b := openFake(t)
	x := upload(t, b, halfs([]int{4}, 1, 2, 3, 4))
	n := len(calls(t))
	boom := errors.New("boom")
	g, err := b.Capture(func(be backend.Backend) error {
		if err := be.GELU(alloc(t, b, tensor.F16, 3), x); err == nil { // shapes differ: refused at the call
			return fmt.Errorf("gelu of mismatched shapes was accepted")
		}
		return boom
	})
	if g != nil || !errors.Is(err, boom) {
		t.Fatalf("got %v, %v; want no graph and the recorder's error", g, err)
	}
	// The capture is closed either way, and the graph it made is destroyed.
	got := names(callsSince(t, n))
	if !slices.Contains(got, "ts_graph_end") || !slices.Contains(got, "ts_graph_destroy") {
		t.Errorf("calls %v: want the capture ended and its graph destroyed", got)
	}
	if _, err := b.Capture(func(backend.Backend) error { return nil }); err != nil {
		t.Errorf("a capture after a failed one: %v", err)
	}
}

func TestCaptureMapsLibraryRefusals(t *testing.T) {
	b := openFake(t)
	t.Setenv("FAKETS_FAIL", "ts_graph_begin:-3:ts_graph_begin: not allowed")
	if _, err := b.Capture(func(backend.Backend) error { return nil }); err == nil || !strings.Contains(err.Error(), "ts_graph_begin: not allowed") {
		t.Errorf("err = %v", err)
	}
	t.Setenv("FAKETS_FAIL", "")
	_, err := b.Capture(func(be backend.Backend) error {
		_, err := be.(backend.Graphs).Capture(func(backend.Backend) error { return nil })
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "already open") {
		t.Errorf("a nested capture: %v", err)
	}
}

// A buffer freed during a capture is released when the capture ends, not refused and leaked.
func TestFreeDuringCaptureIsDeferred(t *testing.T) {
	b := openFake(t)
	d := alloc(t, b, tensor.F16, 8)
	live := b.LiveBuffers()
	n := len(calls(t))
	_, err := b.Capture(func(backend.Backend) error {
		d.Free()
		if b.LiveBuffers() != live {
			return fmt.Errorf("freed during the capture")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.LiveBuffers() != live-1 {
		t.Errorf("live buffers %d after the capture, want %d", b.LiveBuffers(), live-1)
	}
	got := names(callsSince(t, n))
	if i, j := slices.Index(got, "ts_free"), slices.Index(got, "ts_graph_end"); i < j {
		t.Errorf("calls %v: ts_free before the capture ended", got)
	}
}

// With guards on, the outputs of captured ops are checked after each replay, since nothing
// can be read back during the capture. (The fake runs ops at once, so its overrun happens
// at the call; the check is what is tested.)
func TestGuardsAreCheckedAfterAReplay(t *testing.T) {
	b := openGuarded(t)
	x := alloc(t, b, tensor.F16, 4, 896)
	out := alloc(t, b, tensor.F16, 4, 896)
	t.Setenv("FAKETS_OOB", "ts_gelu:after:2")
	g, err := b.Capture(func(be backend.Backend) error { return be.GELU(out, x) })
	if err != nil {
		t.Fatalf("the capture checked guards it cannot read: %v", err)
	}
	defer g.Free()
	t.Setenv("FAKETS_OOB", "")
	err = g.Launch()
	want := "gelu (graph replay) wrote out of bounds of out f16[4,896]: guard byte 2 after the end is 0x00, want 0xA5"
	if !errors.Is(err, ErrOutOfBounds) || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
