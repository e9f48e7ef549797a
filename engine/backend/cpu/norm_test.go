package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The fused residual + RMSNorm is defined as its unfused pair: it must match ResidualAdd then
// RMSNorm bit for bit, out of place and with sum written over x or over residual.
func TestRMSNormResidualIsTheUnfusedPair(t *testing.T) {
	b := New()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(shape ...int) *tensor.Tensor {
		h := tensor.New(tensor.F16, shape...)
		for i := range h.F16 {
			h.F16[i] = float16.Fromfloat32(float32(rng.NormFloat64()))
		}
		return h
	}
	up := func(h *tensor.Tensor) backend.Buffer {
		t.Helper()
		buf, err := b.Upload(h)
		if err != nil {
			t.Fatal(err)
		}
		return buf
	}
	down := func(buf backend.Buffer) []float16.Float16 {
		t.Helper()
		h, err := b.Download(buf)
		if err != nil {
			t.Fatal(err)
		}
		return h.F16
	}
	const rows, hidden, eps = 3, 1001, 1e-6
	xh, rh, wh := random(rows, hidden), random(rows, hidden), random(hidden)
	w := up(wh)

	sum, out := buf(t, tensor.F16, rows, hidden), buf(t, tensor.F16, rows, hidden)
	if err := b.ResidualAdd(sum, up(xh), up(rh)); err != nil {
		t.Fatal(err)
	}
	if err := b.RMSNorm(out, sum, w, eps); err != nil {
		t.Fatal(err)
	}
	wantSum, wantOut := down(sum), down(out)

	for _, alias := range []string{"none", "x", "residual"} {
		x, r := up(xh), up(rh)
		s := buf(t, tensor.F16, rows, hidden)
		switch alias {
		case "x":
			s = x
		case "residual":
			s = r
		}
		o := buf(t, tensor.F16, rows, hidden)
		if err := b.RMSNormResidual(s, o, x, r, w, eps); err != nil {
			t.Fatalf("sum aliasing %s: %v", alias, err)
		}
		if !slices.Equal(down(s), wantSum) {
			t.Errorf("sum aliasing %s: sum differs from ResidualAdd", alias)
		}
		if !slices.Equal(down(o), wantOut) {
			t.Errorf("sum aliasing %s: out differs from ResidualAdd then RMSNorm", alias)
		}
	}
}
