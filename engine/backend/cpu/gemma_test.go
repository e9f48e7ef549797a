package cpu

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Gemma 3's kernel capabilities on the CPU backend: an f32 RMSNorm weight is the same weight as
// a 16-bit one holding the same values (the math is fp32 either way), a scaled embedding is one
// rounding of an exact product (inf past the type's range, as torch gives), and GeGLU is the
// GELU of the gate times up.

func upload(t *testing.T, b *Backend, h *tensor.Tensor) backend.Buffer {
	t.Helper()
	buf, err := b.Upload(h)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func download(t *testing.T, b *Backend, buf backend.Buffer) []float32 {
	t.Helper()
	h, err := b.Download(buf)
	if err != nil {
		t.Fatal(err)
	}
	return h.Float32()
}

func TestRMSNormF32WeightIsTheWeightItHolds(t *testing.T) {
	b := New()
	const rows, hidden = 2, 264
	x := tensor.New(tensor.BF16, rows, hidden)
	w16, w32 := tensor.New(tensor.BF16, hidden), tensor.New(tensor.F32, hidden)
	for i := range x.BF16 {
		x.BF16[i] = tensor.BF16FromFloat32(float32(i%37) - 18)
	}
	for i := range w16.BF16 {
		w16.BF16[i] = tensor.BF16FromFloat32(1 + float32(i%9)/16)
		w32.F32[i] = w16.BF16[i].Float32()
	}
	for _, residual := range []bool{false, true} {
		got := map[tensor.DType][]float32{}
		for _, w := range []*tensor.Tensor{w16, w32} {
			out := buf(t, tensor.BF16, rows, hidden)
			var err error
			if residual {
				err = b.RMSNormResidual(buf(t, tensor.BF16, rows, hidden), out, upload(t, b, x), buf(t, tensor.BF16, rows, hidden), upload(t, b, w), 1e-6)
			} else {
				err = b.RMSNorm(out, upload(t, b, x), upload(t, b, w), 1e-6)
			}
			if err != nil {
				t.Fatalf("residual %v, %s weight: %v", residual, w.DType, err)
			}
			got[w.DType] = download(t, b, out)
		}
		for i, v := range got[tensor.F32] {
			if v != got[tensor.BF16][i] {
				t.Fatalf("residual %v: out[%d] = %g with the f32 weight, %g with the bf16 one", residual, i, v, got[tensor.BF16][i])
			}
		}
	}
}

func TestScaledEmbeddingRoundsOnceAndOverflowsToInf(t *testing.T) {
	b := New()
	table := half(1.5, -3, 2000, -60000)
	table.Shape = []int{2, 2}
	out := buf(t, tensor.F16, 2, 2)
	if err := b.Embedding(out, ints(t, 1, 0), upload(t, b, table), 33.9375); err != nil {
		t.Fatal(err)
	}
	got := download(t, b, out)
	// 2000 * 33.9375 = 67875 rounds past fp16's 65504 to +inf; -60000 * 33.9375 to -inf.
	want := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), tensor.RoundF16(1.5 * 33.9375), tensor.RoundF16(-3 * 33.9375)}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("out = %v, want %v", got, want)
		}
	}
	// Unscaled, the gather is a bit-exact copy.
	if err := b.Embedding(out, ints(t, 1, 0), upload(t, b, table), 1); err != nil {
		t.Fatal(err)
	}
	if got := download(t, b, out); got[0] != 2000 || got[3] != -3 {
		t.Fatalf("unscaled out = %v", got)
	}
}

func TestGeGLUIsGELUOfGateTimesUp(t *testing.T) {
	b := New()
	gate, up := half(-3, -0.5, 0, 1.25, 9), half(2, -4, 7, 0.5, -1)
	for _, tanh := range []bool{false, true} {
		out := buf(t, tensor.F16, 1, 5)
		if err := b.GeGLU(out, upload(t, b, gate), upload(t, b, up), tanh); err != nil {
			t.Fatal(err)
		}
		gelu := geluErf
		if tanh {
			gelu = geluTanh
		}
		for i, v := range download(t, b, out) {
			g, u := gate.F16[i].Float32(), up.F16[i].Float32()
			if want := tensor.RoundF16(gelu(g) * u); v != want {
				t.Errorf("tanh %v: out[%d] = %g, want gelu(%g) * %g = %g", tanh, i, v, g, u, want)
			}
		}
	}
	// The two forms differ in the negative tail: gelu(-3) is -4.0e-3 (erf) and -3.6e-3 (tanh).
	if e, h := geluErf(-3), geluTanh(-3); math.Abs(float64(e-h)) < 1e-4 {
		t.Fatalf("gelu(-3): erf %g, tanh %g", e, h)
	}
}

// A scale of 1 is no scaling, and nothing else may stand for it: 0 (the C ABI's "none") is
// refused here, where a forgotten argument would otherwise zero every embedding.
func TestEmbeddingRefusesZeroScale(t *testing.T) {
	err := New().Embedding(buf(t, tensor.F16, 1, 8), ints(t, 0), buf(t, tensor.F16, 4, 8), 0)
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Arg != "scale" || !strings.Contains(err.Error(), "1: no scaling") {
		t.Fatalf("scale 0: %v", err)
	}
}
