package cuda

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/sample"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Sample and Philox build their configs from the buffer shapes and the Go config (64-bit
// seed and step intact), pass the library stream, and make one call each.
func TestSamplerPassesConfigsToTheLibrary(t *testing.T) {
	b := openFake(t)
	tokens, logits := alloc(t, b, tensor.I32, 3), alloc(t, b, tensor.F32, 3, 151936)
	cfg := backend.SampleConfig{Temperature: 0.7, TopK: 50, TopP: 0.9, Seed: 0xfedcba9876543210, Step: 1<<40 + 5}
	for _, tc := range []struct {
		op, want string
		call     func() error
	}{
		{"sample", "ts_sample rows=3 vocab=151936 temperature=0.7 top_k=50 top_p=0.9 seed=18364758544493064720 step=1099511627781 stream=0",
			func() error { return b.Sample(tokens, logits, cfg) }},
		{"sample", "ts_sample rows=3 vocab=151936 temperature=0 top_k=0 top_p=1 seed=0 step=0 stream=0",
			func() error { return b.Sample(tokens, logits, backend.SampleConfig{TopP: 1}) }},
		{"philox", "ts_philox seed=18364758544493064720 step=18446744073709551615 row=7 n=5 stream=0",
			func() error { return b.Philox(alloc(t, b, tensor.I32, 5, 4), cfg.Seed, math.MaxUint64, 7) }},
	} {
		expectOneCall(t, tc.op, tc.want, tc.call)
	}
}

// The fake computes the real Philox stream, so this proves the words come back in order and
// row i advances the step (wrapping at 2^64) as the cpu backend's do.
func TestPhiloxWordsRoundTrip(t *testing.T) {
	b := openFake(t)
	out := alloc(t, b, tensor.I32, 3, 4)
	const seed, row = 0x299f31d0a4093822, 0x13198a2e
	const step = math.MaxUint64 - 1
	if err := b.Philox(out, seed, step, row); err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(out)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		w := sample.Words(seed, step+uint64(i), row)
		for j := range w {
			if uint32(got.I32[4*i+j]) != w[j] {
				t.Fatalf("row %d: %08x, want %08x", i, got.I32[4*i:4*i+4], w)
			}
		}
	}
}

// Greedy in the fake takes the argmax: tokens and logits reach the library in their places.
func TestSampleBuffersReachTheLibrary(t *testing.T) {
	b := openFake(t)
	logits := upload(t, b, tensor.FromF32([]int{2, 4}, []float32{0, 3, 1, 2, 9, -1, 4, 8}))
	tokens := alloc(t, b, tensor.I32, 2)
	if err := b.Sample(tokens, logits, backend.SampleConfig{TopP: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Download(tokens)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.I32, []int32{1, 0}) {
		t.Errorf("tokens %v, want [1 0]", got.I32)
	}
}

// A refused config or shape never reaches the library, and the error is the cpu backend's.
func TestSamplerSharedChecksRunFirst(t *testing.T) {
	b := openFake(t)
	tokens, logits := alloc(t, b, tensor.I32, 2), alloc(t, b, tensor.F32, 2, 10)
	half, tokens3, words := alloc(t, b, tensor.F16, 2, 10), alloc(t, b, tensor.I32, 3), alloc(t, b, tensor.I32, 2, 3)
	nan := float32(math.NaN())
	n := len(calls(t))
	for _, tc := range []struct {
		arg            string
		tokens, logits backend.Buffer
		cfg            backend.SampleConfig
	}{
		{"temperature", tokens, logits, backend.SampleConfig{Temperature: -1, TopP: 1}},
		{"temperature", tokens, logits, backend.SampleConfig{Temperature: float32(math.Inf(1)), TopP: 1}},
		{"top_k", tokens, logits, backend.SampleConfig{Temperature: 1, TopK: -1, TopP: 1}},
		{"top_p", tokens, logits, backend.SampleConfig{Temperature: 1, TopP: 0}},
		{"top_p", tokens, logits, backend.SampleConfig{Temperature: 1, TopP: nan}},
		{"logits", tokens, half, backend.SampleConfig{TopP: 1}},
		{"tokens", tokens3, logits, backend.SampleConfig{TopP: 1}},
	} {
		err := b.Sample(tc.tokens, tc.logits, tc.cfg)
		want := backend.CheckSample(tc.tokens, tc.logits, tc.cfg)
		var ae *backend.ArgError
		if want == nil || err == nil || err.Error() != want.Error() || !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("%s: err = %v, want the shared check's %v", tc.arg, err, want)
		}
	}
	if err, want := b.Philox(words, 1, 2, 3), backend.CheckPhilox(words); err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("philox on [2, 3]: %v, want %v", err, want)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("refused calls reached the library: %q", c)
	}
}

// A bad logit is found on the device and reported when the stream drains, as the argument
// error the cpu backend gives for the same logits: same op, argument and value.
func TestSampleLogitFaultIsTheCPUBackendsError(t *testing.T) {
	b := openFake(t)
	tokens, logits := alloc(t, b, tensor.I32, 1), alloc(t, b, tensor.F32, 1, 20)
	if err := b.Sample(tokens, logits, backend.SampleConfig{Temperature: 1, TopP: 1}); err != nil {
		t.Fatal(err) // asynchronous: the launch succeeds
	}
	for _, tc := range []struct {
		msg  string // what runtime.cu reports
		row  int
		bad  func([]float32)
		rows int
	}{
		{"sample: logits[0][17] = NaN: must be finite or -inf", 0, func(x []float32) { x[17] = float32(math.NaN()) }, 1},
		{"sample: logits[0][3] = +Inf: must be finite or -inf", 0, func(x []float32) { x[3] = float32(math.Inf(1)) }, 1},
		{"sample: logits[2] = all -inf: a row needs at least one finite logit", 2, func(x []float32) {
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
		}, 3},
	} {
		x := make([]float32, 20)
		tc.bad(x)
		var cpu *backend.ArgError
		if want := sample.Validate(backend.SampleConfig{Temperature: 1, TopP: 1}, tc.row, x); !errors.As(want, &cpu) {
			t.Fatalf("engine/sample: %v", want)
		}
		t.Setenv("FAKETS_FAIL", "ts_copy_to_host:-1:"+tc.msg)
		_, err := b.Download(tokens)
		var ae *backend.ArgError
		if !errors.Is(err, backend.ErrInvalidArgument) || !errors.As(err, &ae) {
			t.Fatalf("err = %v, want an argument error", err)
		}
		if *ae != *cpu {
			t.Errorf("cuda %+v, cpu %+v", *ae, *cpu)
		}
	}
	t.Setenv("FAKETS_FAIL", "")
}

// With guards on, a write past tokens is caught at the op.
func TestSampleGuards(t *testing.T) {
	b := openGuarded(t)
	t.Setenv("FAKETS_OOB", "ts_sample:after:0")
	err := b.Sample(alloc(t, b, tensor.I32, 2), alloc(t, b, tensor.F32, 2, 8), backend.SampleConfig{TopP: 1})
	if !errors.Is(err, ErrOutOfBounds) || err.Error() != "sample wrote out of bounds of tokens i32[2]: guard byte 0 after the end is 0x00, want 0xA5" {
		t.Errorf("err = %v", err)
	}
	t.Setenv("FAKETS_OOB", "ts_philox:before:3")
	err = b.Philox(alloc(t, b, tensor.I32, 2, 4), 1, 2, 3)
	if !errors.Is(err, ErrOutOfBounds) || err.Error() != "philox wrote out of bounds of out i32[2,4]: guard byte 3 before the start is 0x00, want 0xA5" {
		t.Errorf("err = %v", err)
	}
}
