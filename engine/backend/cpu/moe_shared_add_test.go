package cpu

import (
	"math"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Qwen2-MoE's gated shared expert on the CPU backend: routed + sigmoid(x · gate) ⊙ shared in
// fp64 from the stored values, one rounding to the storage dtype, in place over routed or x.

// stored is a [rows, len(vals)/rows] tensor of dt holding vals rounded to dt.
func stored(dt tensor.DType, rows int, vals ...float32) *tensor.Tensor {
	t := tensor.New(dt, rows, len(vals)/rows)
	for i, v := range vals {
		if dt == tensor.BF16 {
			t.BF16[i] = tensor.BF16FromFloat32(v)
		} else {
			t.F16[i] = f16(v)
		}
	}
	return t
}

// sharedAddWant is the contract on host tensors: per token z = x[t] · gate in fp64, then
// routed + sigmoid(z) · shared rounded once to dt.
func sharedAddWant(dt tensor.DType, routed, shared, x, gate *tensor.Tensor) []float32 {
	t, h := x.Shape[0], x.Shape[1]
	rv, sv, xv, gv := routed.Float32(), shared.Float32(), x.Float32(), gate.Float32()
	want := make([]float32, t*h)
	for r := 0; r < t; r++ {
		z := 0.0
		for c := 0; c < h; c++ {
			z += float64(xv[r*h+c]) * float64(gv[c])
		}
		s := 1 / (1 + math.Exp(-z))
		for c := 0; c < h; c++ {
			want[r*h+c] = tensor.Round(dt, float32(float64(rv[r*h+c])+s*float64(sv[r*h+c])))
		}
	}
	return want
}

func TestMoESharedAddValues(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		b := New()
		// Three tokens whose logits are 0 (the gate is 1/2), 1.875 and -40 (the gate is 4e-18:
		// out is routed itself), over a row of 5: one gate value a token, not one per element.
		x := stored(dt, 3, 1, -1, 0.5, 0, 0, 1, 1, 1, 1, 1.5, -40, -40, -20, 0, 0)
		gate := stored(dt, 1, 0.5, 0.5, 0, 0.5, 0.25)
		routed := stored(dt, 3, 1, -2, 0.375, 7, -0.0625, 3, 0.5, -1, 0, 2, 1.25, -3.5, 0.75, 100, -0.5)
		shared := stored(dt, 3, 0.5, 4, -0.25, 3, 8, -2, 1, 1, 6, -4, 9, 9, 9, 9, 9)
		out := buf(t, dt, 3, 5)
		if err := b.MoESharedAdd(out, upload(t, b, routed), upload(t, b, shared), upload(t, b, x), upload(t, b, gate)); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		got := download(t, b, out)
		want := sharedAddWant(dt, routed, shared, x, gate)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: out[%d] = %g, want %g", dt, i, got[i], want[i])
			}
		}
		// Token 0's logit is exactly 0: out = routed + shared / 2.
		for c, r := range routed.Float32()[:5] {
			if w := tensor.Round(dt, r+shared.Float32()[c]/2); got[c] != w {
				t.Errorf("%s: token 0 (logit 0) out[%d] = %g, want routed + shared / 2 = %g", dt, c, got[c], w)
			}
		}
		// Token 2's logit is -40: sigmoid is 4e-18, out is routed to the last bit.
		for c, r := range routed.Float32()[10:] {
			if got[10+c] != r {
				t.Errorf("%s: token 2 (logit -40) out = %g, want routed %g", dt, got[10+c], r)
			}
		}
	}
}

// In place over routed (a decode step adds the shared expert into the experts' sum) and over x:
// the same values as out of place, every row read before it is written.
func TestMoESharedAddInPlace(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		b := New()
		x := stored(dt, 2, 0.5, -1.5, 2, 0.25, 3, -0.75, 1, 1)
		gate := stored(dt, 1, 1, 0.5, -0.25, 2)
		routed := stored(dt, 2, 1, 2, 3, 4, -5, 6, -7, 8)
		shared := stored(dt, 2, -0.5, 0.125, 9, -3, 2, 2, -6, 1)
		want := sharedAddWant(dt, routed, shared, x, gate)
		for _, into := range []string{"routed", "x"} {
			rb, xb := upload(t, b, routed), upload(t, b, x)
			out := rb
			if into == "x" {
				out = xb
			}
			if err := b.MoESharedAdd(out, rb, upload(t, b, shared), xb, upload(t, b, gate)); err != nil {
				t.Fatalf("%s into %s: %v", dt, into, err)
			}
			h, err := b.Download(out)
			if err != nil {
				t.Fatal(err)
			}
			if h.DType != dt {
				t.Fatalf("%s into %s came back %s", dt, into, h.DType)
			}
			for i, v := range h.Float32() {
				if v != want[i] {
					t.Errorf("%s in place over %s: out[%d] = %g, want %g", dt, into, i, v, want[i])
				}
			}
		}
	}
}

func TestMoESharedAddRecordedInAGraph(t *testing.T) {
	b := New()
	x := upload(t, b, stored(tensor.F16, 1, 0, 0, 0, 0))
	gate := upload(t, b, stored(tensor.F16, 1, 1, 1, 1, 1))
	routed := upload(t, b, stored(tensor.F16, 1, 1, 2, 3, 4))
	shared := upload(t, b, stored(tensor.F16, 1, 2, 2, 2, 2))
	out := buf(t, tensor.F16, 1, 4)
	g, err := b.Capture(func(r backend.Backend) error { return r.MoESharedAdd(out, routed, shared, x, gate) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if got := download(t, b, out); got[0] != 0 {
		t.Fatalf("the capture ran the op: %v", got)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if got := download(t, b, out); got[0] != 2 || got[3] != 5 {
		t.Fatalf("replayed out = %v, want routed + shared / 2 = [2 3 4 5]", got)
	}
}
