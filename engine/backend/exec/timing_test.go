package exec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/exec"
	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// openTimed is open with the numpy adapter's wall-clock timing offered.
func openTimed(t *testing.T, bug string) *exec.Backend {
	t.Helper()
	b, err := exec.Open("TOUCHSTONE_NUMPY_ADAPTER_TIMING=wall "+adapter(t, bug), exec.Config{Timeout: 60 * time.Second, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// timeFirstRMSNorm has the adapter time the first committed rmsnorm case.
func timeFirstRMSNorm(t *testing.T, b *exec.Backend, repeats int) ([]float64, error) {
	t.Helper()
	p, err := conformance.Prepare(b, "rmsnorm", committed(t, "rmsnorm")[0])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if !p.TimedByAdapter() {
		t.Fatal("a prepared case of an external backend is not timed by its adapter")
	}
	return p.Time(backend.TimeRequest{Warmup: 1, Repeats: repeats, FlushBytes: bench.FlushBytes})
}

func TestTimingAdapterTimesItsOps(t *testing.T) {
	b := openTimed(t, "")
	if dev, ok := b.TimingDevice(); !ok || dev != "cpu (wall clock)" {
		t.Fatalf("TimingDevice = %q, %v", dev, ok)
	}
	times, err := timeFirstRMSNorm(t, b, 3)
	if err != nil || len(times) != 3 {
		t.Fatalf("times %v, err %v", times, err)
	}
	if bw, err := b.CopyBandwidthGBps(); err != nil || !(bw > 0) {
		t.Errorf("copy bandwidth %v, err %v", bw, err)
	}
	if _, err := b.TimeOp("rmsnorm", nil, nil, nil, backend.TimeRequest{Repeats: 0}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("0 repeats: err = %v, want an invalid argument", err)
	}
}

// An adapter that offers no timing is refused time requests by name, before any is sent.
func TestAdapterWithoutTimingIsNotTimed(t *testing.T) {
	b := open(t, "", 60*time.Second)
	if _, ok := b.TimingDevice(); ok {
		t.Fatal("the numpy adapter without TOUCHSTONE_NUMPY_ADAPTER_TIMING offers timing")
	}
	if _, err := timeFirstRMSNorm(t, b, 3); !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "offers no timing") {
		t.Errorf("err = %v, want unsupported naming the missing timing", err)
	}
	if _, err := b.CopyBandwidthGBps(); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("copy bandwidth: err = %v, want unsupported", err)
	}
	if _, err := bench.NewExternal(b, bench.Options{Warmup: 1, Repeats: 1}); err == nil || !strings.Contains(err.Error(), "does not time its ops") {
		t.Errorf("bench.NewExternal: err = %v", err)
	}
}

// A time answer with a time fewer than asked, or a negative time, is the adapter's error.
func TestBadTimesAreAdapterErrors(t *testing.T) {
	for bug, want := range map[string]string{"time-count": "timed 2 launches, 3 asked", "time-negative": "answered a time of -"} {
		b := openTimed(t, bug)
		if _, err := timeFirstRMSNorm(t, b, 3); !errors.Is(err, exec.ErrAdapter) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", bug, err, want)
		}
	}
}

// bench.External times a bench case through the adapter on the same random inputs as the
// library's runner would use, and reports bandwidth against the adapter's copy bandwidth.
func TestBenchExternalTimesACase(t *testing.T) {
	b := openTimed(t, "")
	e, err := bench.NewExternal(b, bench.Options{Warmup: 1, Repeats: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := bench.Case{Name: "rmsnorm 64x256", Op: "rmsnorm", Params: `{"eps": 1e-6}`, Bytes: 2 * 64 * 256 * 2,
		Inputs: []conformance.InputSpec{conformance.Spec("x", tensor.F16, []int{64, 256}, nil),
			conformance.Spec("weight", tensor.F16, []int{256}, conformance.Normal(0.1, 1))}}
	res, err := e.Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Times) != 5 || !(res.MedianMs > 0) || !(res.GBps > 0) || !(res.CopyPct > 0) {
		t.Errorf("result %+v", res)
	}
	c.Op = "gemm"
	if _, err := e.Run(c); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("an op the adapter lacks: err = %v, want unsupported", err)
	}
}
