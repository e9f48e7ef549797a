package kernels_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of what Gemma 3 adds: RMSNorm's fp32 weight 1 + w, the scaled embedding and GeGLU.
// Each variant is a bug an engine or a kernel would really ship, rejected by the committed
// cases of its storage type.
var _ = Describe("tolerance tightness, Gemma 3", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken kernel",
		func(op string, dt tensor.DType, broken backend.Backend, mustCatch string) {
			expectRejected(op, dt, broken, mustCatch)
		},
		Entry("rmsnorm: the fp32 weight read as 16-bit values (the weight pointer typed as the storage type)", "rmsnorm", tensor.F16, normWeightAs16Bit{cpu.New()}, "gemma-3-1b_w32"),
		Entry("rmsnorm: the fp32 weight read as 16-bit values, bf16", "rmsnorm", tensor.BF16, normWeightAs16Bit{cpu.New()}, "bf16-gemma-3-1b_w32"),
		Entry("rmsnorm: Gemma's +1 dropped (the raw w as the weight)", "rmsnorm", tensor.F16, normWeightWithoutOne{cpu.New()}, "gemma-3-4b-q-norm"),
		Entry("rmsnorm: Gemma's +1 dropped, bf16", "rmsnorm", tensor.BF16, normWeightWithoutOne{cpu.New()}, "bf16-gemma-3-4b_w32"),
		Entry("rmsnorm: the fold 1 + w rounded to bf16 (folded in the checkpoint's dtype, not fp32)", "rmsnorm", tensor.BF16, normWeightRounded{cpu.New()}, "bf16-"),
		Entry("rmsnorm_residual: the fp32 weight read as 16-bit values", "rmsnorm_residual", tensor.F16, normWeightAs16Bit{cpu.New()}, "gemma-3-1b_w32"),
		Entry("rmsnorm_residual: the fp32 weight read as 16-bit values, bf16", "rmsnorm_residual", tensor.BF16, normWeightAs16Bit{cpu.New()}, "bf16-gemma-3-4b_w32"),
		Entry("rmsnorm_residual: Gemma's +1 dropped", "rmsnorm_residual", tensor.F16, normWeightWithoutOne{cpu.New()}, "outliers-x20_gemma-3-1b_w32"),
		// rmsnorm_residual's out admits the fp32-sum order of FlashInfer's and Liger's fused
		// kernels (fused_norm_order_test.go), two ulps at a binade's bottom, which also admits a
		// 1 + w rounded to bf16 (at most 2^-9 of each channel's scale): rmsnorm's Gemma cases
		// above still reject that fold.
		Entry("embedding: the scale ignored (embed_scale forgotten)", "embedding", tensor.F16, embeddingUnscaled{cpu.New()}, "gemma-3-1b-v8_t4_scaled"),
		Entry("embedding: the scale ignored, bf16", "embedding", tensor.BF16, embeddingUnscaled{cpu.New()}, "bf16-gemma-3-1b"),
		Entry("embedding: sqrt(hidden) in fp32, not rounded to the storage type as transformers rounds it", "embedding", tensor.F16, embeddingUnroundedScale{cpu.New()}, "gemma-3-4b-v4_t2_scaled"),
		Entry("embedding: sqrt(hidden) in fp32, bf16 (34 there: 0.2% off)", "embedding", tensor.BF16, embeddingUnroundedScale{cpu.New()}, "bf16-gemma-3-1b"),
		Entry("geglu: the tanh GELU where erf is asked and vice versa", "geglu", tensor.F16, gegluFlipped{cpu.New()}, "gemma-3-1b_f6912_t1_tanh"),
		Entry("geglu: the kinds swapped, caught on the erf cases too", "geglu", tensor.F16, gegluFlipped{cpu.New()}, "gemma-3-1b_f6912_t1_erf"),
		Entry("geglu: the kinds swapped, bf16", "geglu", tensor.BF16, gegluFlipped{cpu.New()}, "bf16-gemma-3-1b"),
		Entry("geglu: the GELU applied to up, gate passed through", "geglu", tensor.F16, gegluOnUp{cpu.New()}, "gemma-3-1b"),
		Entry("geglu: SwiGLU's silu for the GELU", "geglu", tensor.BF16, gegluAsSwiGLU{cpu.New()}, "bf16-gemma-3-1b"),
	)
})

// remapF32Weight replaces an f32 norm weight by what f makes of its host copy (a 16-bit weight
// passes through: the cases without Gemma's weight are not this bug's).
func remapF32Weight(b backend.Backend, w backend.Buffer, f func(*tensor.Tensor) *tensor.Tensor) (backend.Buffer, func(), error) {
	if w.DType() != tensor.F32 {
		return w, func() {}, nil
	}
	t, err := b.Download(w)
	if err != nil {
		return nil, nil, err
	}
	nw, err := b.Upload(f(t))
	if err != nil {
		return nil, nil, err
	}
	return nw, nw.Free, nil
}

// weightBug is the broken norm weight of a variant, in the storage dtype dt of x.
type weightBug func(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor

func brokenRMSNorm(k *cpu.Backend, bug weightBug, out, x, weight backend.Buffer, eps float32) error {
	w, free, err := remapF32Weight(k, weight, func(t *tensor.Tensor) *tensor.Tensor { return bug(t, x.DType()) })
	if err != nil {
		return err
	}
	defer free()
	return k.RMSNorm(out, x, w, eps)
}

func brokenRMSNormResidual(k *cpu.Backend, bug weightBug, sum, out, x, residual, weight backend.Buffer, eps float32) error {
	w, free, err := remapF32Weight(k, weight, func(t *tensor.Tensor) *tensor.Tensor { return bug(t, x.DType()) })
	if err != nil {
		return err
	}
	defer free()
	return k.RMSNormResidual(sum, out, x, residual, w, eps)
}

// as16Bit is what a kernel whose weight pointer is typed as the storage type reads from an fp32
// weight of H values: the first H 16-bit halves of its bytes, low half first (little-endian).
func as16Bit(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	h := len(t.F32)
	out := tensor.New(dt, h)
	for i := 0; i < h; i++ {
		word := math.Float32bits(t.F32[i/2])
		half := uint16(word >> (16 * (i % 2)))
		if dt == tensor.BF16 {
			out.BF16[i] = tensor.BFloat16(half)
		} else {
			out.F16[i] = float16.Frombits(half)
		}
	}
	return out
}

// withoutOne is the weight of an engine that loaded Gemma's raw w and forgot the + 1 of
// Gemma3RMSNorm: w = (1 + w) - 1, exact in fp32.
func withoutOne(t *tensor.Tensor, _ tensor.DType) *tensor.Tensor {
	out := tensor.New(tensor.F32, len(t.F32))
	for i, v := range t.F32 {
		out.F32[i] = v - 1
	}
	return out
}

// rounded is the fold computed in the checkpoint's dtype, 1 + w rounded to the storage type
// (what Llama-style code, weight.to(dtype) before the product, would hold).
func rounded(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	out := tensor.New(tensor.F32, len(t.F32))
	for i, v := range t.F32 {
		out.F32[i] = tensor.Round(dt, v)
	}
	return out
}

type normWeightAs16Bit struct{ *cpu.Backend }

func (k normWeightAs16Bit) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	return brokenRMSNorm(k.Backend, as16Bit, out, x, weight, eps)
}

func (k normWeightAs16Bit) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return brokenRMSNormResidual(k.Backend, as16Bit, sum, out, x, residual, weight, eps)
}

type normWeightWithoutOne struct{ *cpu.Backend }

func (k normWeightWithoutOne) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	return brokenRMSNorm(k.Backend, withoutOne, out, x, weight, eps)
}

func (k normWeightWithoutOne) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return brokenRMSNormResidual(k.Backend, withoutOne, sum, out, x, residual, weight, eps)
}

type normWeightRounded struct{ *cpu.Backend }

func (k normWeightRounded) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	return brokenRMSNorm(k.Backend, rounded, out, x, weight, eps)
}

func (k normWeightRounded) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return brokenRMSNormResidual(k.Backend, rounded, sum, out, x, residual, weight, eps)
}

type embeddingUnscaled struct{ *cpu.Backend }

func (k embeddingUnscaled) Embedding(out, ids, table backend.Buffer, _ float32) error {
	return k.Backend.Embedding(out, ids, table, 1)
}

// embeddingUnroundedScale multiplies by sqrt(hidden) as an fp32 (33.941125 for hidden 1152),
// where Gemma3TextScaledWordEmbedding multiplies by embed_scale.to(dtype) (33.9375 in fp16, 34
// in bf16).
type embeddingUnroundedScale struct{ *cpu.Backend }

func (k embeddingUnroundedScale) Embedding(out, ids, table backend.Buffer, scale float32) error {
	if scale != 1 {
		scale = float32(math.Sqrt(float64(table.Shape()[1])))
	}
	return k.Backend.Embedding(out, ids, table, scale)
}

type gegluFlipped struct{ *cpu.Backend }

func (k gegluFlipped) GeGLU(out, gate, up backend.Buffer, tanh bool) error {
	return k.Backend.GeGLU(out, gate, up, !tanh)
}

type gegluOnUp struct{ *cpu.Backend }

func (k gegluOnUp) GeGLU(out, gate, up backend.Buffer, tanh bool) error {
	return k.Backend.GeGLU(out, up, gate, tanh)
}

type gegluAsSwiGLU struct{ *cpu.Backend }

func (k gegluAsSwiGLU) GeGLU(out, gate, up backend.Buffer, _ bool) error {
	return k.Backend.SwiGLU(out, gate, up)
}
