package cpu

import (
	"math"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Gemma 2's final logit soft cap on the CPU backend: cap · tanh(x / cap) in fp64, stored in the
// logits' dtype, in place or not.

func f32s(vals ...float32) *tensor.Tensor { return tensor.FromF32([]int{1, len(vals)}, vals) }

func TestLogitSoftcapValues(t *testing.T) {
	b := New()
	inf := float32(math.Inf(1))
	x := f32s(0, 1, -1, 30, -45, 1e4, -1e4, inf, -inf, 1e-30, float32(math.NaN()))
	out := buf(t, tensor.F32, 1, 11)
	if err := b.LogitSoftcap(out, upload(t, b, x), 30); err != nil {
		t.Fatal(err)
	}
	got := download(t, b, out)
	for i, v := range x.F32 {
		want := float32(30 * math.Tanh(float64(v)/30))
		if got[i] != want && !(math.IsNaN(float64(want)) && math.IsNaN(float64(got[i]))) {
			t.Errorf("softcap(%g) = %g, want %g", v, got[i], want)
		}
	}
	// Saturation is exact: far logits (and inf) land on the cap itself, not a hair inside it.
	for i, want := range map[int]float32{5: 30, 6: -30, 7: 30, 8: -30, 0: 0} {
		if got[i] != want {
			t.Errorf("softcap(%g) = %g, want %g", x.F32[i], got[i], want)
		}
	}
	if got[3] == 30 || math.Abs(float64(got[3])-30*math.Tanh(1)) > 1e-5 {
		t.Errorf("softcap(30) = %g, want 30 tanh(1) = 22.85", got[3])
	}
}

func TestLogitSoftcapInPlaceAndStorageDtypes(t *testing.T) {
	b := New()
	vals := []float32{-300, -31.5, -2, -0.0625, 0, 0.375, 7, 29, 64, 5000}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		x := tensor.New(dt, 2, 5)
		for i, v := range vals {
			switch dt {
			case tensor.F32:
				x.F32[i] = v
			case tensor.F16:
				x.F16[i] = f16(v)
			default:
				x.BF16[i] = tensor.BF16FromFloat32(v)
			}
		}
		in := x.Float32()
		xb := upload(t, b, x)
		if err := b.LogitSoftcap(xb, xb, 50); err != nil { // in place
			t.Fatalf("%s: %v", dt, err)
		}
		h, err := b.Download(xb)
		if err != nil {
			t.Fatal(err)
		}
		if h.DType != dt {
			t.Fatalf("%s logits came back %s", dt, h.DType)
		}
		for i, v := range h.Float32() {
			want := float32(50 * math.Tanh(float64(in[i])/50))
			if dt != tensor.F32 {
				want = tensor.Round(dt, want)
			}
			if v != want {
				t.Errorf("%s: softcap(%g) = %g, want %g", dt, in[i], v, want)
			}
		}
	}
}

func TestLogitSoftcapRecordedInAGraph(t *testing.T) {
	b := New()
	x := upload(t, b, f32s(-90, 3, 45))
	out := buf(t, tensor.F32, 1, 3)
	g, err := b.Capture(func(r backend.Backend) error { return r.LogitSoftcap(out, x, 30) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if got := download(t, b, out); got[1] != 0 {
		t.Fatalf("the capture ran the op: %v", got)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if got := download(t, b, out); got[1] != float32(30*math.Tanh(0.1)) {
		t.Fatalf("replayed out = %v", got)
	}
}

// FuzzLogitSoftcap checks what any soft cap must give for any finite logit and cap: an odd,
// nondecreasing function of x bounded by the cap and by |x| (tanh(u) <= u), exact at 0.
func FuzzLogitSoftcap(f *testing.F) {
	f.Add(float32(1), float32(30))
	f.Add(float32(-1e4), float32(30))
	f.Add(float32(29.9), float32(50))
	f.Add(float32(1e-38), float32(1e-3))
	b := New()
	f.Fuzz(func(t *testing.T, v, c float32) {
		if !(c > 0) || math.IsInf(float64(c), 0) || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return
		}
		next := math.Nextafter32(v, float32(math.Inf(1)))
		x := upload(t, b, f32s(v, -v, next))
		out := buf(t, tensor.F32, 1, 3)
		if err := b.LogitSoftcap(out, x, c); err != nil {
			t.Fatal(err)
		}
		got := download(t, b, out)
		if got[0] != -got[1] {
			t.Errorf("cap %g: softcap(%g) = %g but softcap(%g) = %g", c, v, got[0], -v, got[1])
		}
		if math.Abs(float64(got[0])) > float64(c) || math.Abs(float64(got[0])) > math.Abs(float64(v)) {
			t.Errorf("cap %g: softcap(%g) = %g, beyond the cap or |x|", c, v, got[0])
		}
		if got[2] < got[0] {
			t.Errorf("cap %g: softcap(%g) = %g > softcap(%g) = %g", c, v, got[0], next, got[2])
		}
		if (v == 0) != (got[0] == 0) && math.Abs(float64(v)) > 1e-30 {
			t.Errorf("cap %g: softcap(%g) = %g", c, v, got[0])
		}
	})
}
