package kernels_test

import (
	"fmt"
	"math"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness: each entry wraps the CPU backend with one realistic kernel bug and shows the
// committed golden cases reject it under golden/tolerances.yaml. A tolerance loose enough
// to let one of these pass is a tolerance that would let the bug ship.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken kernel",
		func(op string, broken backend.Backend, mustCatch string) {
			expectRejected(op, tensor.F16, broken, mustCatch)
		},
		Entry("residual_add: half2 path drops the odd tail element", "residual_add", residualTailDropped{cpu.New()}, "odd"),
		Entry("rmsnorm: eps 1e-5 where 1e-6 is asked and vice versa", "rmsnorm", rmsnormWrongEps{cpu.New()}, "small-rms"),
		Entry("layernorm: beta ignored", "layernorm", layernormNoBeta{cpu.New()}, "gpt2"),
		Entry("layernorm_residual: normalises x instead of x + residual", "layernorm_residual", layernormResidualUnsummed{cpu.New()}, "gpt2"),
		Entry("rmsnorm_residual: normalises x instead of x + residual", "rmsnorm_residual", rmsnormResidualUnsummed{cpu.New()}, "qwen"),
		Entry("rmsnorm_residual: eps ignored", "rmsnorm_residual", rmsnormResidualNoEps{cpu.New()}, "small-rms"),
		Entry("rope: position off by one", "rope", ropeOffByOne{cpu.New()}, "qwen"),
		Entry("rope: interleaved (GPT-J) pairs instead of rotate_half", "rope", ropeInterleaved{cpu.New()}, "phi3"),
		Entry("rope: rotates all of head_dim when rope_dim is partial", "rope", ropeFullRotary{cpu.New()}, "partial"),
		Entry("rope: angle pos * inv_freq in fp32 (loses the phase at long context)", "rope", ropeFP32Angle{cpu.New()}, "llama3.1-8b_base5e5_pos131064"),
		Entry("rope: fp32 angle, caught at Qwen2.5's 32k context too", "rope", ropeFP32Angle{cpu.New()}, "qwen2.5-7b_base1e6_pos32760"),
		Entry("rope: scaling's divisor table ignored (Llama 3's frequencies unscaled)", "rope", ropeUnscaled{cpu.New()}, "llama3.1-8b-llama3"),
		Entry("rope: divisor multiplied instead of divided", "rope", ropeDivisorInverted{cpu.New()}, "llama3.1-8b-llama3"),
		Entry("rope: YaRN's attention factor ignored", "rope", ropeNoAttentionFactor{cpu.New()}, "yarn"),
		Entry("rope: LongRoPE's long factors from position long_from + 1 (off by one at the switch)", "rope", ropeLateSwitch{cpu.New()}, "longrope_switch"),
		Entry("rope: LongRoPE's long factors never used", "rope", ropeShortOnly{cpu.New()}, "longrope"),
		Entry("attention_prefill: causal mask missing", "attention_prefill", prefillNoMask{cpu.New()}, "qwen"),
		Entry("attention_prefill: query head h reads kv head h mod n_kv (wrong GQA mapping)", "attention_prefill", prefillWrongGQA{cpu.New()}, "qwen"),
		Entry("attention_prefill: causal mask applied when causal is false", "attention_prefill", prefillAlwaysCausal{cpu.New()}, "noncausal"),
		Entry("attention_prefill: scale taken as 1/sqrt(head_dim), ignoring cfg.scale", "attention_prefill", prefillDefaultScale{cpu.New()}, "scale"),
		Entry("attention_decode: attends the whole cache capacity, ignoring cache_lens", "attention_decode", decodeIgnoresLens{cpu.New()}, "qwen"),
		Entry("attention_decode: query head h reads kv head h mod n_kv (wrong GQA mapping)", "attention_decode", decodeWrongGQA{cpu.New()}, "gqa6"),
		Entry("attention_decode: scale taken as 1/sqrt(head_dim), ignoring cfg.scale", "attention_decode", decodeDefaultScale{cpu.New()}, "scale"),
		Entry("swiglu: silu applied to up instead of gate", "swiglu", swigluSwapped{cpu.New()}, "qwen"),
		Entry("swiglu_ffn: gate and up projections swapped", "swiglu_ffn", ffnSwapped{cpu.New()}, "896"),
		Entry("gemm_swiglu: silu applied to the up half (the halves of the stacked weight swapped)", "gemm_swiglu", gemmSwiGLUHalvesSwapped{cpu.New()}, "qwen2.5"),
		Entry("gemm_swiglu: the stacked weight read as interleaved gate/up rows", "gemm_swiglu", gemmSwiGLUInterleaved{cpu.New()}, "phi3"),
		Entry("attention_scores_softmax: causal mask missing", "attention_scores_softmax", scoresNoMask{cpu.New()}, "qwen2.5-0.5b-gqa7"),
		Entry("attention_scores_softmax: the mask aligned to the first keys in a chunk (query i sees keys 0..i)", "attention_scores_softmax", scoresMaskFromZero{cpu.New()}, "chunk"),
		Entry("attention_scores_softmax: query head h reads kv head h mod n_kv", "attention_scores_softmax", scoresWrongGQA{cpu.New()}, "qwen2.5-0.5b-gqa7"),
		Entry("attention_scores_softmax: scores rounded to fp16 before the softmax", "attention_scores_softmax", scoresF16{cpu.New()}, "logit-growth"),
		Entry("rmsnorm_gemm: norm weight ignored", "rmsnorm_gemm", rmsnormGemmNoNormWeight{cpu.New()}, "qwen2.5"),
		Entry("rmsnorm_gemm: normalises x instead of x + residual (sum still stored)", "rmsnorm_gemm", rmsnormGemmUnsummed{cpu.New()}, "decode"),
		Entry("rmsnorm_gemm: vectorised K loop drops the hidden % 8 tail", "rmsnorm_gemm", rmsnormGemmKTail{cpu.New()}, "prime"),
		Entry("layernorm_gemm: beta dropped", "layernorm_gemm", layernormGemmNoBeta{cpu.New()}, "gpt2"),
		Entry("layernorm_gemm: variance as E[x^2] - mean^2 in one fp32 pass (a large mean cancels it)", "layernorm_gemm", layernormGemmOnePassVariance{cpu.New()}, "mean-offset"),
		Entry("layernorm_gemm: normalises x instead of x + residual (sum still stored)", "layernorm_gemm", layernormGemmUnsummed{cpu.New()}, "decode"),
		Entry("swiglu_gemm: silu applied to up instead of gate", "swiglu_gemm", swigluGemmSwapped{cpu.New()}, "qwen2.5"),
		Entry("swiglu_gemm: bias dropped", "swiglu_gemm", swigluGemmNoBias{cpu.New()}, "bias"),
		Entry("gpt_ffn: erf GELU where tanh is asked", "gpt_ffn", gptFFNFlippedGELU{cpu.New()}, "gelu-tail_h768-f64_t2_tanh"),
		Entry("gpt_ffn: tanh GELU where erf is asked", "gpt_ffn", gptFFNFlippedGELU{cpu.New()}, "gelu-tail_h768-f64_t3_erf"),
		Entry("gpt_ffn: the down projection's bias dropped", "gpt_ffn", gptFFNNoB2{cpu.New()}, "gpt2"),
		Entry("gelu: tanh approximation where erf is expected", "gelu", geluTanhForErf{cpu.New()}, "gpt2"),
		Entry("gelu_tanh: erf where the tanh approximation is expected", "gelu_tanh", geluErfForTanh{cpu.New()}, "gpt2"),
		Entry("gelu_scale: the scale applied to the input, gelu(scale x)", "gelu_scale", geluScaleOfScaledInput{cpu.New()}, "gpt2-ffn_t1_erf_s0.125"),
		Entry("gelu_scale: the scale applied to the input, caught at a scale near 1 too", "gelu_scale", geluScaleOfScaledInput{cpu.New()}, "s1oversqrt2"),
		Entry("gelu_scale: tanh GELU where erf is asked and vice versa", "gelu_scale", geluScaleFlippedGELU{cpu.New()}, "odd-h1001_t1_tanh"),
		Entry("pos_embedding: position off by one", "pos_embedding", posEmbedOffByOne{cpu.New()}, "gpt2"),
		Entry("embedding: row off by one", "embedding", embeddingOffByOne{cpu.New()}, "qwen"),
		Entry("set_rows: writes src row i to rows[i]+1", "set_rows", setRowsOffByOne{cpu.New()}, "decode"),
		Entry("set_rows: zeroes the rows it does not write (treats dst as a fresh output)", "set_rows", setRowsClobbers{cpu.New()}, "decode"),
		Entry("gemm: bias dropped", "gemm", gemmNoBias{cpu.New()}, "qwen"),
		Entry("gemm: vectorised K loop drops the tail (K not a multiple of 8)", "gemm", gemmKTailDropped{cpu.New()}, "odd"),
		Entry("gemm: fp16 accumulation (fp16 output path)", "gemm", gemmF16Accumulation{cpu.New()}, "outliers"),
		Entry("softmax: -inf logits read as 0", "softmax", softmaxInfAsZero{cpu.New()}, "f16"),
	)
})

// expectRejected runs the broken variant over op's committed cases stored in dt and expects the
// mustCatch case among those that reject it, reporting by how many times its budget each did.
func expectRejected(op string, dt tensor.DType, broken backend.Backend, mustCatch string) {
	sets := storageSets(op, dt)
	Expect(sets).NotTo(BeEmpty(), "no committed %s golden cases for %s", dt, op)
	expectRejectedBy(op, sets, broken, mustCatch)
}

// expectRejectedBy is expectRejected over the given sets.
func expectRejectedBy(op string, sets []*golden.Set, broken backend.Backend, mustCatch string) {
	var rejected, margins []string
	for _, s := range sets {
		verdicts, err := conformance.Check(broken, s, tols)
		Expect(err).NotTo(HaveOccurred(), "the broken variant must run, and be rejected by comparison")
		// The margin of a rejection is the budget its worst check used: 1.3 is a bug caught
		// by 30%, 1e3 one no tolerance change could ever let through.
		worst := 0.0
		for _, v := range verdicts {
			if !v.Pass() {
				worst = math.Max(worst, v.Result.MaxBudget())
			}
		}
		if worst > 0 {
			rejected = append(rejected, s.Manifest.Case)
			margins = append(margins, fmt.Sprintf("%s (%.3gx its budget)", s.Manifest.Case, worst))
		}
	}
	AddReportEntry("rejected by", strings.Join(margins, ", "))
	Expect(rejected).To(ContainElement(ContainSubstring(mustCatch)),
		"the %s case of %s must reject this bug; rejected by: %v", mustCatch, op, rejected)
}

// mutated downloads buf, lets f change the host copy and uploads the result: the broken
// variants corrupt what a buggy kernel would effectively read, then run the correct op.
func mutated(b backend.Backend, buf backend.Buffer, f func(t *tensor.Tensor)) (backend.Buffer, error) {
	t, err := b.Download(buf)
	if err != nil {
		return nil, err
	}
	f(t)
	return b.Upload(t)
}

// copyInto overwrites dst with t through the public interface alone: dst = t + 0 is exact
// in fp16, so a broken variant can post-process an output without backend internals.
func copyInto(b backend.Backend, dst backend.Buffer, t *tensor.Tensor) error {
	src, err := b.Upload(t)
	if err != nil {
		return err
	}
	defer src.Free()
	zero, err := b.Alloc(t.DType, t.Shape...)
	if err != nil {
		return err
	}
	defer zero.Free()
	return b.ResidualAdd(dst, src, zero)
}

func lastDim(t *tensor.Tensor) (rows, n int) {
	n = t.Shape[len(t.Shape)-1]
	return t.Len() / n, n
}

type residualTailDropped struct{ *cpu.Backend }

func (k residualTailDropped) ResidualAdd(out, x, residual backend.Buffer) error {
	r, err := mutated(k, residual, func(t *tensor.Tensor) {
		rows, n := lastDim(t)
		if n%2 == 1 {
			for i := 0; i < rows; i++ {
				t.F16[i*n+n-1] = 0
			}
		}
	})
	if err != nil {
		return err
	}
	defer r.Free()
	return k.Backend.ResidualAdd(out, x, r)
}

type rmsnormWrongEps struct{ *cpu.Backend }

func (k rmsnormWrongEps) RMSNorm(out, x, w backend.Buffer, eps float32) error {
	if eps < 5e-6 {
		return k.Backend.RMSNorm(out, x, w, 1e-5)
	}
	return k.Backend.RMSNorm(out, x, w, 1e-6)
}

type layernormNoBeta struct{ *cpu.Backend }

func (k layernormNoBeta) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	zero, err := k.Alloc(tensor.F16, beta.Shape()...)
	if err != nil {
		return err
	}
	defer zero.Free()
	return k.Backend.LayerNorm(out, x, gamma, zero, eps)
}

type layernormResidualUnsummed struct{ *cpu.Backend }

func (k layernormResidualUnsummed) LayerNormResidual(sum, out, x, residual, gamma, beta backend.Buffer, eps float32) error {
	if err := k.ResidualAdd(sum, x, residual); err != nil {
		return err
	}
	return k.LayerNorm(out, x, gamma, beta, eps)
}

type rmsnormResidualUnsummed struct{ *cpu.Backend }

// RMSNormResidual stores the sum correctly but normalises x: it reads x before sum is written,
// so it stays right when sum is written over residual (or x) in place.
func (k rmsnormResidualUnsummed) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	if err := k.RMSNorm(out, x, weight, eps); err != nil {
		return err
	}
	return k.ResidualAdd(sum, x, residual)
}

type rmsnormResidualNoEps struct{ *cpu.Backend }

// RMSNormResidual with eps dropped from the root mean square (the smallest positive float32
// stands in for 0, which the argument check refuses).
func (k rmsnormResidualNoEps) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return k.Backend.RMSNormResidual(sum, out, x, residual, weight, math.SmallestNonzeroFloat32)
}

type ropeOffByOne struct{ *cpu.Backend }

func (k ropeOffByOne) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	p, err := mutated(k, positions, func(t *tensor.Tensor) {
		for i := range t.I32 {
			t.I32[i]++
		}
	})
	if err != nil {
		return err
	}
	defer p.Free()
	return k.Backend.RoPE(out, x, p, cfg)
}

// ropeInterleaved pairs dims (2i, 2i+1) like GPT-J instead of (i, i+rope_dim/2): it
// permutes each head so the interleaved pairs sit where rotate_half pairs them, rotates, and
// permutes back.
type ropeInterleaved struct{ *cpu.Backend }

func (k ropeInterleaved) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	half := cfg.RopeDim / 2
	perm := func(t *tensor.Tensor, inverse bool) {
		d := cfg.HeadDim
		for h := 0; h < t.Len()/d; h++ {
			head := append([]float16.Float16(nil), t.F16[h*d:(h+1)*d]...)
			for i := 0; i < half; i++ {
				src, dst := [2]int{2 * i, 2*i + 1}, [2]int{i, i + half}
				if inverse {
					src, dst = dst, src
				}
				t.F16[h*d+dst[0]] = head[src[0]]
				t.F16[h*d+dst[1]] = head[src[1]]
			}
		}
	}
	px, err := mutated(k, x, func(t *tensor.Tensor) { perm(t, false) })
	if err != nil {
		return err
	}
	defer px.Free()
	if err := k.Backend.RoPE(out, px, positions, cfg); err != nil {
		return err
	}
	rotated, err := k.Download(out)
	if err != nil {
		return err
	}
	perm(rotated, true)
	return copyInto(k, out, rotated)
}

// The RoPE-scaling bugs: each drops or bends one part of backend.RoPEConfig's scaling.
type (
	ropeUnscaled          struct{ *cpu.Backend }
	ropeDivisorInverted   struct{ *cpu.Backend }
	ropeNoAttentionFactor struct{ *cpu.Backend }
	ropeLateSwitch        struct{ *cpu.Backend }
	ropeShortOnly         struct{ *cpu.Backend }
)

func (k ropeUnscaled) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.FreqDivisor, cfg.LongDivisor = nil, nil
	return k.Backend.RoPE(out, x, positions, cfg)
}

func (k ropeDivisorInverted) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	invert := func(buf backend.Buffer) (backend.Buffer, error) {
		return mutated(k, buf, func(t *tensor.Tensor) {
			for i, d := range t.F32 {
				t.F32[i] = 1 / d
			}
		})
	}
	for _, p := range []*backend.Buffer{&cfg.FreqDivisor, &cfg.LongDivisor} {
		if *p == nil {
			continue
		}
		inv, err := invert(*p)
		if err != nil {
			return err
		}
		defer inv.Free()
		*p = inv
	}
	return k.Backend.RoPE(out, x, positions, cfg)
}

func (k ropeNoAttentionFactor) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.AttentionFactor = 0
	return k.Backend.RoPE(out, x, positions, cfg)
}

func (k ropeLateSwitch) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.LongFrom++
	return k.Backend.RoPE(out, x, positions, cfg)
}

func (k ropeShortOnly) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.LongDivisor = nil
	return k.Backend.RoPE(out, x, positions, cfg)
}

type ropeFullRotary struct{ *cpu.Backend }

func (k ropeFullRotary) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	cfg.RopeDim = cfg.HeadDim
	return k.Backend.RoPE(out, x, positions, cfg)
}

type prefillNoMask struct{ *cpu.Backend }

func (k prefillNoMask) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	cfg.Causal, cfg.Window = false, 0 // no mask at all: a windowed case's window goes with it
	return k.Backend.AttentionPrefill(out, q, kk, v, cfg)
}

// prefillWrongGQA expands K and V to one head per query head with the mapping h % n_kv
// instead of h / (n_heads/n_kv), then runs plain multi-head attention.
type prefillWrongGQA struct{ *cpu.Backend }

func (k prefillWrongGQA) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	expand := func(buf backend.Buffer) (backend.Buffer, error) { return expandKVModulo(k, buf, cfg) }
	if cfg.NumKVHeads == cfg.NumHeads {
		return k.Backend.AttentionPrefill(out, q, kk, v, cfg)
	}
	wk, err := expand(kk)
	if err != nil {
		return err
	}
	defer wk.Free()
	wv, err := expand(v)
	if err != nil {
		return err
	}
	defer wv.Free()
	cfg.NumKVHeads = cfg.NumHeads
	return k.Backend.AttentionPrefill(out, q, wk, wv, cfg)
}

type decodeIgnoresLens struct{ *cpu.Backend }

func (k decodeIgnoresLens) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	full, err := mutated(k, lens, func(t *tensor.Tensor) {
		for i := range t.I32 {
			t.I32[i] = int32(kc.Shape()[1])
		}
	})
	if err != nil {
		return err
	}
	defer full.Free()
	return k.Backend.AttentionDecode(out, q, kc, vc, full, cfg)
}

type swigluSwapped struct{ *cpu.Backend }

func (k swigluSwapped) SwiGLU(out, gate, up backend.Buffer) error {
	return k.Backend.SwiGLU(out, up, gate)
}

type ffnSwapped struct{ *cpu.Backend }

func (k ffnSwapped) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	return k.Backend.SwiGLUFFN(out, x, wUp, wGate, wDown)
}

type geluTanhForErf struct{ *cpu.Backend }

func (k geluTanhForErf) GELU(out, x backend.Buffer) error { return k.Backend.GELUTanh(out, x) }

type geluErfForTanh struct{ *cpu.Backend }

func (k geluErfForTanh) GELUTanh(out, x backend.Buffer) error { return k.Backend.GELU(out, x) }

// geluScaleOfScaledInput scales the input instead of the output, gelu(scale x) for gelu(x)
// scale: the fold of a scale into the wrong side of the activation (the two agree only where the
// GELU is linear, and GELU is not). x scale is computed exactly here (every committed scale but
// 1/sqrt(2) is exact in fp16), then rounded to fp16 as a kernel reading it would not: the bug is
// orders of magnitude above that rounding.
type geluScaleOfScaledInput struct{ *cpu.Backend }

func (k geluScaleOfScaledInput) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	sx, err := mutated(k, x, func(t *tensor.Tensor) {
		for i, v := range t.F16 {
			t.F16[i] = float16.Fromfloat32(v.Float32() * scale)
		}
	})
	if err != nil {
		return err
	}
	defer sx.Free()
	return k.Backend.GELUScale(out, sx, tanh, 1)
}

// geluScaleFlippedGELU applies the other GELU form than the one asked (gelu_new for gelu).
type geluScaleFlippedGELU struct{ *cpu.Backend }

func (k geluScaleFlippedGELU) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	return k.Backend.GELUScale(out, x, !tanh, scale)
}

type posEmbedOffByOne struct{ *cpu.Backend }

func (k posEmbedOffByOne) PosEmbedding(out, x, table, positions backend.Buffer) error {
	p, err := nextRow(k, positions, table.Shape()[0])
	if err != nil {
		return err
	}
	defer p.Free()
	return k.Backend.PosEmbedding(out, x, table, p)
}

// nextRow turns every row index i into (i+1) mod rows: an off-by-one gather.
func nextRow(b backend.Backend, idx backend.Buffer, rows int) (backend.Buffer, error) {
	return mutated(b, idx, func(t *tensor.Tensor) {
		for i := range t.I32 {
			t.I32[i] = (t.I32[i] + 1) % int32(rows)
		}
	})
}

type embeddingOffByOne struct{ *cpu.Backend }

func (k embeddingOffByOne) Embedding(out, ids, table backend.Buffer, scale float32) error {
	p, err := nextRow(k, ids, table.Shape()[0])
	if err != nil {
		return err
	}
	defer p.Free()
	return k.Backend.Embedding(out, p, table, scale)
}

type setRowsOffByOne struct{ *cpu.Backend }

func (k setRowsOffByOne) SetRows(dst, src, rows backend.Buffer) error {
	p, err := nextRow(k, rows, dst.Shape()[0])
	if err != nil {
		return err
	}
	defer p.Free()
	return k.Backend.SetRows(dst, src, p)
}

// setRowsClobbers clears all of dst (by scattering zero rows over every row) before the real
// scatter: the kernel of someone who took dst for an output it may overwrite.
type setRowsClobbers struct{ *cpu.Backend }

func (k setRowsClobbers) SetRows(dst, src, rows backend.Buffer) error {
	zero, err := k.Alloc(dst.DType(), dst.Shape()...)
	if err != nil {
		return err
	}
	defer zero.Free()
	n := dst.Shape()[0]
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	every, err := k.Upload(tensor.FromI32([]int{n}, all))
	if err != nil {
		return err
	}
	defer every.Free()
	if err := k.Backend.SetRows(dst, zero, every); err != nil {
		return err
	}
	return k.Backend.SetRows(dst, src, rows)
}

type gemmNoBias struct{ *cpu.Backend }

func (k gemmNoBias) Gemm(out, x, w, bias backend.Buffer) error { return k.Backend.Gemm(out, x, w, nil) }

type gemmKTailDropped struct{ *cpu.Backend }

func (k gemmKTailDropped) Gemm(out, x, w, bias backend.Buffer) error {
	px, err := mutated(k, x, func(t *tensor.Tensor) {
		rows, n := lastDim(t)
		for r := 0; r < rows; r++ {
			for i := n - n%8; i < n; i++ {
				t.F16[r*n+i] = 0
			}
		}
	})
	if err != nil {
		return err
	}
	defer px.Free()
	return k.Backend.Gemm(out, px, w, bias)
}

type softmaxInfAsZero struct{ *cpu.Backend }

func (k softmaxInfAsZero) Softmax(out, x backend.Buffer) error {
	px, err := mutated(k, x, func(t *tensor.Tensor) {
		for i, v := range t.F16 {
			if v.IsInf(-1) {
				t.F16[i] = 0
			}
		}
		for i, v := range t.F32 {
			if v < -3e38 {
				t.F32[i] = 0
			}
		}
	})
	if err != nil {
		return err
	}
	defer px.Free()
	return k.Backend.Softmax(out, px)
}

// ropeFP32Angle computes the angle pos * inv_freq as an fp32 product of an fp32 inv_freq, as
// many kernels do, then rotates exactly: its error grows with the position (pos * 2^-24 rad).
type ropeFP32Angle struct{ *cpu.Backend }

func (k ropeFP32Angle) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	t, err := k.Download(x)
	if err != nil {
		return err
	}
	pos, err := k.Download(positions)
	if err != nil {
		return err
	}
	half, d := cfg.RopeDim/2, cfg.HeadDim
	heads := t.Len() / d / len(pos.I32)
	for tok, p := range pos.I32 {
		for i := 0; i < half; i++ {
			inv := float32(math.Pow(float64(cfg.FreqBase), -float64(2*i)/float64(cfg.RopeDim)))
			angle := float64(float32(p) * inv)
			c, sn := math.Cos(angle), math.Sin(angle)
			for h := 0; h < heads; h++ {
				base := (tok*heads + h) * d
				a, b := float64(elem(t, base+i)), float64(elem(t, base+i+half))
				setElem(t, base+i, float32(a*c-b*sn))
				setElem(t, base+i+half, float32(b*c+a*sn))
			}
		}
	}
	return copyInto(k, out, t)
}

type prefillAlwaysCausal struct{ *cpu.Backend }

func (k prefillAlwaysCausal) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	cfg.Causal = true
	return k.Backend.AttentionPrefill(out, q, kk, v, cfg)
}

type prefillDefaultScale struct{ *cpu.Backend }

func (k prefillDefaultScale) AttentionPrefill(out, q, kk, v backend.Buffer, cfg backend.AttentionConfig) error {
	cfg.Scale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	return k.Backend.AttentionPrefill(out, q, kk, v, cfg)
}

type decodeDefaultScale struct{ *cpu.Backend }

func (k decodeDefaultScale) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	cfg.Scale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	return k.Backend.AttentionDecode(out, q, kc, vc, lens, cfg)
}

// decodeWrongGQA expands the caches [B, L, n_kv, D] to one head per query head with the
// mapping h % n_kv instead of h / (n_heads/n_kv), then runs plain multi-head attention.
type decodeWrongGQA struct{ *cpu.Backend }

func (k decodeWrongGQA) AttentionDecode(out, q, kc, vc, lens backend.Buffer, cfg backend.AttentionConfig) error {
	if cfg.NumKVHeads == cfg.NumHeads {
		return k.Backend.AttentionDecode(out, q, kc, vc, lens, cfg)
	}
	expand := func(buf backend.Buffer) (backend.Buffer, error) { return expandKVModulo(k, buf, cfg) }
	wk, err := expand(kc)
	if err != nil {
		return err
	}
	defer wk.Free()
	wv, err := expand(vc)
	if err != nil {
		return err
	}
	defer wv.Free()
	cfg.NumKVHeads = cfg.NumHeads
	return k.Backend.AttentionDecode(out, q, wk, wv, lens, cfg)
}

// gemmF16Accumulation sums the products of each output in the 16-bit storage dtype (rounding
// after every add), as a kernel with an fp16 (or bf16) accumulator does. The fp32-output path is
// left correct.
type gemmF16Accumulation struct{ *cpu.Backend }

func (k gemmF16Accumulation) Gemm(out, x, w, bias backend.Buffer) error {
	if !out.DType().IsFloat16Bit() {
		return k.Backend.Gemm(out, x, w, bias)
	}
	xt, err := k.Download(x)
	if err != nil {
		return err
	}
	wt, err := k.Download(w)
	if err != nil {
		return err
	}
	m, kk, n := xt.Shape[0], xt.Shape[1], wt.Shape[0]
	dt := out.DType()
	xv, wv := xt.Float32(), wt.Float32()
	res := tensor.New(dt, m, n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float32
			for l := 0; l < kk; l++ {
				acc = tensor.Round(dt, acc+xv[i*kk+l]*wv[j*kk+l])
			}
			setElem(res, i*n+j, acc)
		}
	}
	if bias != nil {
		bt, err := k.Download(bias)
		if err != nil {
			return err
		}
		bv := bt.Float32()
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				setElem(res, i*n+j, elem(res, i*n+j)+bv[j])
			}
		}
	}
	return copyInto(k, out, res)
}

// expandKVModulo widens a K or V tensor [..., n_kv, D] (prefill's [B, S, ...] or a decode
// cache [B, L, ...]) to one head per query head, query head h taking kv head h % n_kv instead
// of h / (n_heads/n_kv): the wrong GQA mapping of the broken variants.
func expandKVModulo(b backend.Backend, buf backend.Buffer, cfg backend.AttentionConfig) (backend.Buffer, error) {
	t, err := b.Download(buf)
	if err != nil {
		return nil, err
	}
	d := cfg.HeadDim
	rows := t.Len() / (cfg.NumKVHeads * d)
	wide := tensor.New(tensor.F16, append(append([]int{}, t.Shape[:len(t.Shape)-2]...), cfg.NumHeads, d)...)
	for r := 0; r < rows; r++ {
		for h := 0; h < cfg.NumHeads; h++ {
			src := (r*cfg.NumKVHeads + h%cfg.NumKVHeads) * d
			copy(wide.F16[(r*cfg.NumHeads+h)*d:][:d], t.F16[src:src+d])
		}
	}
	return b.Upload(wide)
}

// gemmSwiGLUHalvesSwapped takes the up rows of the stacked weight for the gate and the gate
// rows for up, as a kernel with the two offsets exchanged would.
type gemmSwiGLUHalvesSwapped struct{ *cpu.Backend }

func (k gemmSwiGLUHalvesSwapped) GemmSwiGLU(out, x, w backend.Buffer) error {
	return k.withRows(out, x, w, func(f, i int) int { return (i + f) % (2 * f) })
}

// gemmSwiGLUInterleaved reads gate row i at 2i and up row i at 2i+1, the layout some exports
// use, where this op's contract stacks all gate rows first.
type gemmSwiGLUInterleaved struct{ *cpu.Backend }

func (k gemmSwiGLUInterleaved) GemmSwiGLU(out, x, w backend.Buffer) error {
	return gemmSwiGLUHalvesSwapped(k).withRows(out, x, w, func(f, i int) int {
		if i < f {
			return 2 * i
		}
		return 2*(i-f) + 1
	})
}

// withRows runs the correct op on a weight whose row i is row src(ffn, i) of w.
func (k gemmSwiGLUHalvesSwapped) withRows(out, x, w backend.Buffer, src func(ffn, i int) int) error {
	wrong, err := mutated(k, w, func(t *tensor.Tensor) {
		rows, h := t.Shape[0], t.Shape[1]
		orig := append([]float16.Float16(nil), t.F16...)
		for i := 0; i < rows; i++ {
			copy(t.F16[i*h:(i+1)*h], orig[src(rows/2, i)*h:(src(rows/2, i)+1)*h])
		}
	})
	if err != nil {
		return err
	}
	defer wrong.Free()
	return k.Backend.GemmSwiGLU(out, x, wrong)
}

// rmsnormGemmNoNormWeight normalises without the norm's weight (all ones).
type rmsnormGemmNoNormWeight struct{ *cpu.Backend }

func (k rmsnormGemmNoNormWeight) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	ones, err := mutated(k, normW, func(t *tensor.Tensor) {
		for i := range t.F16 {
			t.F16[i] = float16.Fromfloat32(1)
		}
	})
	if err != nil {
		return err
	}
	defer ones.Free()
	return k.Backend.RMSNormGemm(out, sum, x, residual, ones, w, bias, eps)
}

// rmsnormGemmUnsummed stores the sum but normalises and projects x alone.
type rmsnormGemmUnsummed struct{ *cpu.Backend }

func (k rmsnormGemmUnsummed) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	if residual == nil {
		return k.Backend.RMSNormGemm(out, sum, x, residual, normW, w, bias, eps)
	}
	if err := k.ResidualAdd(sum, x, residual); err != nil {
		return err
	}
	return k.Backend.RMSNormGemm(out, nil, x, nil, normW, w, bias, eps)
}

// rmsnormGemmKTail leaves the last hidden % 8 columns out of the product, as a loop over
// 8-element vectors without a scalar tail would.
type rmsnormGemmKTail struct{ *cpu.Backend }

func (k rmsnormGemmKTail) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	cut, err := mutated(k, w, func(t *tensor.Tensor) {
		rows, h := lastDim(t)
		for r := 0; r < rows; r++ {
			for i := h - h%8; i < h; i++ {
				t.F16[r*h+i] = 0
			}
		}
	})
	if err != nil {
		return err
	}
	defer cut.Free()
	return k.Backend.RMSNormGemm(out, sum, x, residual, normW, cut, bias, eps)
}

// layernormGemmNoBeta normalises without LayerNorm's shift (beta all zeros).
type layernormGemmNoBeta struct{ *cpu.Backend }

func (k layernormGemmNoBeta) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	zeros, err := mutated(k, beta, func(t *tensor.Tensor) {
		for i := range t.F16 {
			t.F16[i] = 0
		}
	})
	if err != nil {
		return err
	}
	defer zeros.Free()
	return k.Backend.LayerNormGemm(out, sum, x, residual, gamma, zeros, w, bias, eps)
}

// layernormGemmOnePassVariance takes each row's variance as E[x^2] - mean^2, both sums in one
// fp32 pass (a fused kernel saving a barrier might): a mean of 300 over a std of 1 cancels most
// of it away.
type layernormGemmOnePassVariance struct{ *cpu.Backend }

func (k layernormGemmOnePassVariance) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	s := x
	if residual != nil {
		if err := k.ResidualAdd(sum, x, residual); err != nil {
			return err
		}
		s = sum
	}
	gt, err := k.Download(gamma)
	if err != nil {
		return err
	}
	bt, err := k.Download(beta)
	if err != nil {
		return err
	}
	g, b := gt.Float32(), bt.Float32()
	h, err := mutated(k, s, func(t *tensor.Tensor) {
		rows, n := lastDim(t)
		v := t.Float32()
		for r := 0; r < rows; r++ {
			row := v[r*n : (r+1)*n]
			var s1, s2 float32
			for _, e := range row {
				s1 += e
				s2 += e * e
			}
			mean := s1 / float32(n)
			inv := 1 / float32(math.Sqrt(float64(s2/float32(n)-mean*mean+eps)))
			for i, e := range row {
				t.F16[r*n+i] = float16.Fromfloat32(((e-mean)*inv)*g[i] + b[i])
			}
		}
	})
	if err != nil {
		return err
	}
	defer h.Free()
	return k.Gemm(out, h, w, bias)
}

// layernormGemmUnsummed stores the sum but normalises and projects x alone.
type layernormGemmUnsummed struct{ *cpu.Backend }

func (k layernormGemmUnsummed) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	if residual == nil {
		return k.Backend.LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps)
	}
	if err := k.ResidualAdd(sum, x, residual); err != nil {
		return err
	}
	return k.Backend.LayerNormGemm(out, nil, x, nil, gamma, beta, w, bias, eps)
}

// gptFFNFlippedGELU applies the other GELU form than the one asked.
type gptFFNFlippedGELU struct{ *cpu.Backend }

func (k gptFFNFlippedGELU) GPTFFN(out, x, w1, b1, w2, b2 backend.Buffer, tanh bool) error {
	return k.Backend.GPTFFN(out, x, w1, b1, w2, b2, !tanh)
}

// gptFFNNoB2 drops the down projection's bias (an epilogue that adds only the first).
type gptFFNNoB2 struct{ *cpu.Backend }

func (k gptFFNNoB2) GPTFFN(out, x, w1, b1, w2, _ backend.Buffer, tanh bool) error {
	return k.Backend.GPTFFN(out, x, w1, b1, w2, nil, tanh)
}

// scoresNoMask lets every query see every key.
type scoresNoMask struct{ *cpu.Backend }

func (k scoresNoMask) AttentionScoresSoftmax(probs, q, kk backend.Buffer, cfg backend.AttentionConfig) error {
	cfg.Causal = false
	return k.Backend.AttentionScoresSoftmax(probs, q, kk, cfg)
}

// scoresMaskFromZero masks as if the queries were the first positions: in a chunk of Sq < Sk
// queries, query i sees keys 0..i instead of 0..Sk-Sq+i. It runs the op on the first Sq keys'
// worth of mask by computing it on each query row alone.
type scoresMaskFromZero struct{ *cpu.Backend }

func (k scoresMaskFromZero) AttentionScoresSoftmax(probs, q, kk backend.Buffer, cfg backend.AttentionConfig) error {
	if err := k.Backend.AttentionScoresSoftmax(probs, q, kk, cfg); err != nil || !cfg.Causal {
		return err
	}
	t, err := k.Download(probs)
	if err != nil {
		return err
	}
	sq, sk := t.Shape[2], t.Shape[3]
	for r := 0; r < len(t.F32)/sk; r++ {
		i := r % sq
		row := t.F32[r*sk : (r+1)*sk]
		sum := float32(0)
		for j := range row {
			if j > i {
				row[j] = 0
			}
			sum += row[j]
		}
		for j := range row {
			row[j] /= sum
		}
	}
	return copyIntoF32(k, probs, t)
}

// scoresWrongGQA maps query head h to kv head h mod n_kv instead of h / (n_heads / n_kv).
type scoresWrongGQA struct{ *cpu.Backend }

func (k scoresWrongGQA) AttentionScoresSoftmax(probs, q, kk backend.Buffer, cfg backend.AttentionConfig) error {
	wide, err := expandKVModulo(k, kk, cfg)
	if err != nil {
		return err
	}
	defer wide.Free()
	cfg.NumKVHeads = cfg.NumHeads
	return k.Backend.AttentionScoresSoftmax(probs, q, wide, cfg)
}

// scoresF16 rounds each score to fp16 before the softmax: computed by scaling q by 1 + the
// rounding's relative error is not possible through the interface, so the rows are recomputed
// from the exact probabilities (p_j ∝ exp(s_j)): s_j - s_max = log(p_j / p_max), rounded.
type scoresF16 struct{ *cpu.Backend }

func (k scoresF16) AttentionScoresSoftmax(probs, q, kk backend.Buffer, cfg backend.AttentionConfig) error {
	if err := k.Backend.AttentionScoresSoftmax(probs, q, kk, cfg); err != nil {
		return err
	}
	t, err := k.Download(probs)
	if err != nil {
		return err
	}
	qt, err := k.Download(q)
	if err != nil {
		return err
	}
	kt, err := k.Download(kk)
	if err != nil {
		return err
	}
	b, sq, sk := qt.Shape[0], qt.Shape[1], kt.Shape[1]
	nH, nKV, D := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	qv, kv := qt.Float32(), kt.Float32()
	for bi := 0; bi < b; bi++ {
		for h := 0; h < nH; h++ {
			for i := 0; i < sq; i++ {
				row := t.F32[((bi*nH+h)*sq+i)*sk:][:sk]
				visible := sk
				if cfg.Causal {
					visible = sk - sq + i + 1
				}
				s := make([]float64, visible)
				mx := math.Inf(-1)
				for j := range s {
					var dot float64
					for d := 0; d < D; d++ {
						dot += float64(qv[((bi*sq+i)*nH+h)*D+d]) * float64(kv[((bi*sk+j)*nKV+h/(nH/nKV))*D+d])
					}
					s[j] = float64(tensor.RoundF16(float32(dot * float64(cfg.Scale))))
					mx = math.Max(mx, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for j := range s {
					row[j] = float32(s[j] / sum)
				}
			}
		}
	}
	return copyIntoF32(k, probs, t)
}

// copyIntoF32 overwrites the fp32 buffer dst with t (a broken variant's post-processed output).
func copyIntoF32(b backend.Backend, dst backend.Buffer, t *tensor.Tensor) error {
	mem, ok := b.(backend.Memory)
	if !ok {
		return fmt.Errorf("backend has no Memory to write %s", tensor.ShapeString(t.Shape))
	}
	return mem.Write(dst, t)
}

// swigluGemmSwapped takes silu of up and multiplies by gate.
type swigluGemmSwapped struct{ *cpu.Backend }

func (k swigluGemmSwapped) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	return k.Backend.SwiGLUGemm(out, up, gate, w, bias)
}

// swigluGemmNoBias drops the projection's bias (an epilogue without it).
type swigluGemmNoBias struct{ *cpu.Backend }

func (k swigluGemmNoBias) SwiGLUGemm(out, gate, up, w, _ backend.Buffer) error {
	return k.Backend.SwiGLUGemm(out, gate, up, w, nil)
}
