package model_test

import (
	"path/filepath"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// gemmCounter is the CPU backend counting its projections: GEMMs, and RMSNormGemms (each a
// norm and one GEMM) apart.
type gemmCounter struct {
	*cpu.Backend
	gemms, normGemms int
}

func (g *gemmCounter) Gemm(out, x, w, bias backend.Buffer) error {
	g.gemms++
	return g.Backend.Gemm(out, x, w, bias)
}

func (g *gemmCounter) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	g.gemms++
	return g.Backend.SwiGLUGemm(out, gate, up, w, bias)
}

func (g *gemmCounter) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	g.gemms++
	g.normGemms++
	return g.Backend.RMSNormGemm(out, sum, x, residual, normW, w, bias, eps)
}

func (g *gemmCounter) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	g.gemms++
	g.normGemms++
	return g.Backend.LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps)
}

// loadCounting loads a committed model set on a counting CPU backend, graphs off (every step
// runs its ops), closed when the test ends.
func loadCounting(t *testing.T, name string) (*model.Model, *gemmCounter) {
	t.Helper()
	set, err := golden.Load(filepath.Join("..", "..", "golden", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	be := &gemmCounter{Backend: cpu.New()}
	m, err := model.Load(be, set.Dir, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.UseGraphs(false)
	return m, be
}

// A LayerNorm family's fused decode step runs each layer's attention norm with its q/k/v
// projection as one LayerNormGemm (the MLP's norm feeds GPTFFN, not counted here); with
// Fused off, none.
func TestGPT2DecodeFusesTheAttentionNorm(t *testing.T) {
	m, be := loadCounting(t, "gpt2-tiny")
	L := m.Cfg.Layers
	step := func() (gemms, normGemms int) {
		if err := m.PrefillOnDevice([]int32{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		g, n := be.gemms, be.normGemms
		if err := m.DecodeOnDevice(4); err != nil {
			t.Fatal(err)
		}
		return be.gemms - g, be.normGemms - n
	}
	// Per layer: qkv (with its norm) and o; then the head.
	if g, n := step(); g != 2*L+1 || n != L {
		t.Errorf("fused decode step: %d GEMMs, %d LayerNormGemms; want %d and %d", g, n, 2*L+1, L)
	}
	// Fused off: every projection a GEMM after a norm of its own (q/k/v stacked, o, up, down).
	m.Fused = false
	if g, n := step(); g != 4*L+1 || n != 0 {
		t.Errorf("decode step with Fused off: %d GEMMs, %d LayerNormGemms; want %d and 0", g, n, 4*L+1)
	}
}

// A decode step computes q, k and v with one GEMM and gate and up with another; when a test
// swaps one of those weights after Load, the step falls back to a GEMM per weight, so the
// swapped weight is used.
func TestDecodeFusesProjectionsUnlessAWeightChanged(t *testing.T) {
	m, be := loadCounting(t, "qwen2-tiny")
	L := m.Cfg.Layers
	step := func() int {
		if err := m.PrefillOnDevice([]int32{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		before := be.gemms
		if err := m.DecodeOnDevice(4); err != nil {
			t.Fatal(err)
		}
		return be.gemms - before
	}
	// Per layer: qkv, o, gate+up, down; then the head. qkv and gate+up each with its norm.
	fusedBefore := be.normGemms
	if got, want := step(), 4*L+1; got != want {
		t.Errorf("fused decode step: %d GEMMs, want %d", got, want)
	}
	if got, want := be.normGemms-fusedBefore, 2*L; got != want {
		t.Errorf("fused decode step: %d RMSNormGemms, want %d (the attention and MLP norms of every layer)", got, want)
	}
	// Fused off: the same stacked GEMMs, each after a norm of its own.
	m.Fused = false
	fusedBefore = be.normGemms
	if got, want := step(), 4*L+1; got != want {
		t.Errorf("decode step with Fused off: %d GEMMs, want %d", got, want)
	}
	if be.normGemms != fusedBefore {
		t.Errorf("decode step with Fused off ran %d RMSNormGemms", be.normGemms-fusedBefore)
	}
	m.Fused = true
	a := m.Layers[0].Attn
	a.Bk, a.Bv = a.Bv, a.Bk
	// Layer 0 now runs q, k and v separately (3 instead of 1).
	if got, want := step(), 4*L+1+2; got != want {
		t.Errorf("after swapping layer 0's k and v biases: %d GEMMs, want %d", got, want)
	}
	f := m.Layers[1].MLP
	f.Gate, f.Up = f.Up, f.Gate
	if got, want := step(), 4*L+1+2+1; got != want {
		t.Errorf("after also swapping layer 1's gate and up: %d GEMMs, want %d", got, want)
	}
}
