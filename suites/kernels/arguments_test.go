package kernels_test

import (
	"errors"
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Bad calls on the backend under test: each must be refused with an error that names the op,
// the argument and the value, before anything runs, leaving the output as it was.

// sentinel is the value outputs hold before a refused call: it must still be there after.
const sentinel = 7.0

type badCall struct {
	op, arg, value string
	call           func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error
	outShape       []int
}

var badCalls = []badCall{
	{"attention_decode_fp8", "v_scale", "f32[3]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		// three value scales for two kv heads: neither per tensor nor per head
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		var free []backend.Buffer
		defer func() {
			for _, x := range free {
				x.Free()
			}
		}()
		alloc := func(dt tensor.DType, shape ...int) backend.Buffer {
			x, err := b.Alloc(dt, shape...)
			Expect(err).NotTo(HaveOccurred())
			free = append(free, x)
			return x
		}
		return b.AttentionDecodeFP8(out, f16(1, 4, 64), alloc(tensor.F8E4M3, 1, 8, 2, 64), alloc(tensor.F8E4M3, 1, 8, 2, 64),
			i32(8), alloc(tensor.F32, 2), alloc(tensor.F32, 3), cfg)
	}, []int{1, 4, 64}},
	{"attention_prefill_paged_fp8", "k_cache", "f16[4,8,2,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		// a 16-bit pool handed to the E4M3 op: refused by name, never read as codes
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
		var free []backend.Buffer
		defer func() {
			for _, x := range free {
				x.Free()
			}
		}()
		alloc := func(dt tensor.DType, shape ...int) backend.Buffer {
			x, err := b.Alloc(dt, shape...)
			Expect(err).NotTo(HaveOccurred())
			free = append(free, x)
			return x
		}
		return b.AttentionPrefillPagedFP8(out, f16(5, 4, 64), f16(4, 8, 2, 64), f16(4, 8, 2, 64), alloc(tensor.I32, 2, 2),
			i32(0, 3, 5), i32(8, 10), alloc(tensor.F32, 2), alloc(tensor.F32, 2), cfg)
	}, []int{5, 4, 64}},
	{"gemm_w4a16", "qweight", "i32[8]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		// a packed weight of one dimension: the words of a [K, N/8] AWQ qweight, flattened
		return b.GemmW4A16(out, f16(1, 256), i32(1, 2, 3, 4, 5, 6, 7, 8), i32(1), f16(2, 64), nil, backend.W4AWQ, 128)
	}, []int{1, 64}},
	{"residual_add", "residual", "f16[4,895]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.ResidualAdd(out, f16(4, 896), f16(4, 895))
	}, []int{4, 896}},
	{"rmsnorm", "eps", "0", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.RMSNorm(out, f16(2, 896), f16(896), 0)
	}, []int{2, 896}},
	{"layernorm", "gamma", "f16[895]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.LayerNorm(out, f16(2, 896), f16(895), f16(896), 1e-5)
	}, []int{2, 896}},
	{"rmsnorm_residual", "residual", "f16[2,895]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.RMSNormResidual(f16(2, 896), out, f16(2, 896), f16(2, 895), f16(896), 1e-6)
	}, []int{2, 896}},
	{"rope", "head_dim", "63", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.RoPE(out, f16(1, 2, 63), i32(0), backend.RoPEConfig{HeadDim: 63, RopeDim: 62, FreqBase: 1e4})
	}, []int{1, 2, 63}},
	{"rope", "rope_dim", "128", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.RoPE(out, f16(1, 2, 64), i32(0), backend.RoPEConfig{HeadDim: 64, RopeDim: 128, FreqBase: 1e4})
	}, []int{1, 2, 64}},
	{"rope", "attention_factor", "NaN", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.RoPE(out, f16(1, 2, 64), i32(0), backend.RoPEConfig{HeadDim: 64, RopeDim: 64, FreqBase: 1e4, AttentionFactor: float32(math.NaN())})
	}, []int{1, 2, 64}},
	{"rope", "freq_divisor", "f16[32]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.RoPE(out, f16(1, 2, 64), i32(0), backend.RoPEConfig{HeadDim: 64, RopeDim: 64, FreqBase: 1e4, FreqDivisor: f16(32)})
	}, []int{1, 2, 64}},
	{"attention_prefill", "n_kv_heads", "3", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 3, HeadDim: 64, Causal: true, Scale: 0.125}
		return b.AttentionPrefill(out, f16(1, 4, 14, 64), f16(1, 4, 3, 64), f16(1, 4, 3, 64), cfg)
	}, []int{1, 4, 14, 64}},
	{"attention_decode", "v_cache", "f16[1,15,2,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		return b.AttentionDecode(out, f16(1, 14, 64), f16(1, 16, 2, 64), f16(1, 15, 2, 64), i32(16), cfg)
	}, []int{1, 14, 64}},
	{"attention_prefill", "softcap", "-50", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		cfg := backend.AttentionConfig{NumHeads: 8, NumKVHeads: 4, HeadDim: 256, Causal: true, Scale: 0.0625, Softcap: -50}
		return b.AttentionPrefill(out, f16(1, 4, 8, 256), f16(1, 4, 4, 256), f16(1, 4, 4, 256), cfg)
	}, []int{1, 4, 8, 256}},
	{"attention_decode", "softcap", "NaN", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Scale: 0.125, Softcap: float32(math.NaN())}
		return b.AttentionDecode(out, f16(1, 14, 64), f16(1, 16, 2, 64), f16(1, 16, 2, 64), i32(16), cfg)
	}, []int{1, 14, 64}},
	{"attention_scores_softmax", "softcap", "+Inf", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125, Softcap: float32(math.Inf(1))}
		probs, err := b.Alloc(tensor.F32, 1, 14, 3, 5)
		if err != nil {
			return err
		}
		defer probs.Free()
		return b.AttentionScoresSoftmax(probs, f16(1, 3, 14, 64), f16(1, 5, 2, 64), cfg)
	}, []int{1, 14, 64}},
	{"swiglu_ffn", "w_down", "f16[64,31]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.SwiGLUFFN(out, f16(2, 64), f16(32, 64), f16(32, 64), f16(64, 31))
	}, []int{2, 64}},
	{"embedding", "table", "f16[0,8]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.Embedding(out, i32(0), f16(0, 8), 1)
	}, []int{1, 8}},
	{"embedding", "scale", "+Inf", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.Embedding(out, i32(0), f16(4, 8), float32(math.Inf(1)))
	}, []int{1, 8}},
	{"geglu", "up", "f16[3,4]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.GeGLU(out, f16(3, 5), f16(3, 4), true)
	}, []int{3, 5}},
	{"rmsnorm_gemm", "norm_weight", "f32[64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		// Gemma's fp32 norm weight goes to rmsnorm and rmsnorm_residual only
		w, err := b.Alloc(tensor.F32, 64)
		Expect(err).NotTo(HaveOccurred())
		defer w.Free()
		return b.RMSNormGemm(out, nil, f16(2, 64), nil, w, f16(16, 64), nil, 1e-6)
	}, []int{2, 16}},
	{"set_rows", "src", "f16[1,2,63]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer) error {
		return b.SetRows(out, f16(1, 2, 63), i32(0))
	}, []int{16, 2, 64}},
	{"gemm", "w", "f16[16,31]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.Gemm(out, f16(2, 32), f16(16, 31), nil)
	}, []int{2, 16}},
	{"gelu", "out", "f16[3,5]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.GELU(out, f16(3, 4))
	}, []int{3, 5}},
	{"gelu_scale", "scale", "NaN", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.GELUScale(out, f16(3, 5), true, float32(math.NaN()))
	}, []int{3, 5}},
	{"logit_softcap", "softcap", "0", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.LogitSoftcap(out, f16(3, 5), 0)
	}, []int{3, 5}},
	{"logit_softcap", "softcap", "-Inf", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.LogitSoftcap(out, out, float32(math.Inf(-1)))
	}, []int{2, 7}},
	{"logit_softcap", "out", "f16[3,5]", func(b backend.Backend, out backend.Buffer, _ func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		// fp32 logits capped into a 16-bit buffer: the out must be the logits' dtype
		x, err := b.Alloc(tensor.F32, 3, 5)
		Expect(err).NotTo(HaveOccurred())
		defer x.Free()
		return b.LogitSoftcap(out, x, 30)
	}, []int{3, 5}},
	// moe_shared_add: each of its operands refused, named with its dtype and shape; x first (it
	// sets the storage dtype and the shape the others must have), no token as the row ops refuse it.
	{"moe_shared_add", "x", "f32[2,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		x, err := b.Alloc(tensor.F32, 2, 64)
		Expect(err).NotTo(HaveOccurred())
		defer x.Free()
		return b.MoESharedAdd(out, f16(2, 64), f16(2, 64), x, f16(1, 64))
	}, []int{2, 64}},
	{"moe_shared_add", "x", "f16[0,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.MoESharedAdd(out, f16(2, 64), f16(2, 64), f16(0, 64), f16(1, 64))
	}, []int{2, 64}},
	{"moe_shared_add", "gate", "f16[64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		// shared_expert_gate.weight is [1, H]; a flattened [H] is a loader's slip
		return b.MoESharedAdd(out, f16(2, 64), f16(2, 64), f16(2, 64), f16(64))
	}, []int{2, 64}},
	{"moe_shared_add", "gate", "f16[1,63]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.MoESharedAdd(out, f16(2, 64), f16(2, 64), f16(2, 64), f16(1, 63))
	}, []int{2, 64}},
	{"moe_shared_add", "routed", "f16[3,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.MoESharedAdd(out, f16(3, 64), f16(2, 64), f16(2, 64), f16(1, 64))
	}, []int{2, 64}},
	{"moe_shared_add", "shared", "bf16[2,64]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		sh, err := b.Alloc(tensor.BF16, 2, 64)
		Expect(err).NotTo(HaveOccurred())
		defer sh.Free()
		return b.MoESharedAdd(out, f16(2, 64), sh, f16(2, 64), f16(1, 64))
	}, []int{2, 64}},
	{"moe_shared_add", "out", "f16[2,63]", func(b backend.Backend, out backend.Buffer, f16 func(...int) backend.Buffer, _ func(...int32) backend.Buffer) error {
		return b.MoESharedAdd(out, f16(2, 64), f16(2, 64), f16(2, 64), f16(1, 64))
	}, []int{2, 63}},
}

var _ = Describe("bad arguments", harness.Kernel, func() {
	BeforeEach(func() {
		harness.SkipExternal(dev, "argument checks are the library's and the CPU backend's own")
	})
	var bufs []backend.Buffer
	track := func(b backend.Buffer, err error) backend.Buffer {
		ExpectWithOffset(2, err).NotTo(HaveOccurred())
		bufs = append(bufs, b)
		return b
	}
	AfterEach(func() {
		for _, b := range bufs {
			b.Free()
		}
		bufs = nil
	})
	f16 := func(shape ...int) backend.Buffer { return track(dev.Alloc(tensor.F16, shape...)) }
	i32 := func(vals ...int32) backend.Buffer {
		return track(dev.Upload(tensor.FromI32([]int{len(vals)}, vals)))
	}
	zeros := func(dt tensor.DType, shape ...int) backend.Buffer {
		return track(dev.Upload(tensor.New(dt, shape...)))
	}
	shaped := func(shape []int, vals ...int32) backend.Buffer {
		return track(dev.Upload(tensor.FromI32(shape, vals)))
	}

	for _, bc := range badCalls {
		It("refuses "+bc.op+" with a bad "+bc.arg+" ("+bc.value+") and leaves the output untouched", harness.Op(bc.op), func() {
			before := tensor.New(tensor.F16, bc.outShape...)
			for i := range before.F16 {
				before.F16[i] = float16.Fromfloat32(sentinel)
			}
			out := track(dev.Upload(before))
			err := bc.call(dev, out, f16, i32)
			var ae *backend.ArgError
			Expect(errors.As(err, &ae)).To(BeTrue(), "want an argument error, got %v", err)
			Expect(ae.Op).To(Equal(bc.op))
			Expect(ae.Arg).To(Equal(bc.arg))
			Expect(ae.Value).To(Equal(bc.value))
			after, err := dev.Download(out)
			Expect(err).NotTo(HaveOccurred())
			Expect(after.F16).To(Equal(before.F16), "a refused call wrote its output")
		})
	}

	for _, ic := range indexCalls {
		It("reports "+ic.what+" in device data, naming it, without a crash", harness.Op(ic.op), func() {
			err := runIndexCall(dev, ic, f16, i32, zeros, shaped)
			// the op that read the value, by its own name: the library's message names it (an FP8
			// twin reports as itself, not as the 16-bit op whose checks it shares)
			var ae *backend.ArgError
			Expect(errors.As(err, &ae)).To(BeTrue(), "%v", err)
			Expect(ae.Op).To(Equal(ic.op), "%v", err)
			Expect(err).To(MatchError(ContainSubstring(ic.elem)))
			Expect(err).To(MatchError(ContainSubstring(ic.value)))
			Expect(errors.Is(err, backend.ErrInvalidArgument)).To(BeTrue(), "%v", err)
		})
	}

	It("reports an out-of-range row of set_rows in device data, naming it, and writes no other row", harness.Op("set_rows"), func() {
		before := tensor.New(tensor.F16, 16, 2, 8)
		for i := range before.F16 {
			before.F16[i] = float16.Fromfloat32(sentinel)
		}
		dst := track(dev.Upload(before))
		err := dev.SetRows(dst, f16(2, 2, 8), i32(3, 16))
		if err == nil { // a GPU reads rows on the device: the fault surfaces at the next download
			_, err = dev.Download(dst)
		}
		Expect(err).To(MatchError(ContainSubstring("rows[1]")))
		Expect(err).To(MatchError(ContainSubstring("16")))
		Expect(errors.Is(err, backend.ErrInvalidArgument)).To(BeTrue(), "%v", err)
		// The CPU refuses the whole call; a GPU writes the valid row 3 and skips the bad one.
		// Either way no other row of dst changed.
		after, err := dev.Download(dst)
		Expect(err).NotTo(HaveOccurred())
		row := 2 * 8
		Expect(after.F16[:3*row]).To(Equal(before.F16[:3*row]), "rows 0..2 changed")
		Expect(after.F16[4*row:]).To(Equal(before.F16[4*row:]), "rows 4..15 changed")
	})
})

// indexCall is a call of an indexed op whose index tensor holds one bad value. A GPU reads
// indices on the device, so each kernel that reads them must check and report the bad one
// (through the device fault record) instead of reading out of bounds; the CPU checks them
// before computing. Every indexed op, and each kernel of an op that has several, is here.
type indexCall struct {
	op, what    string
	elem, value string // the bad element and its value, as the error must name them
	call        func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (out backend.Buffer, err error)
}

var indexCalls = []indexCall{
	{"embedding", "an out-of-range id", "ids[1]", "10", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 8)
		return out, b.Embedding(out, i32(0, 10), f16(10, 8), 1)
	}},
	{"embedding", "an out-of-range id, scaled (the scaling kernel's own check)", "ids[0]", "-1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 8)
		return out, b.Embedding(out, i32(-1, 3), f16(10, 8), 33.9375)
	}},
	{"pos_embedding", "an out-of-range position", "positions[2]", "16", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(3, 8)
		return out, b.PosEmbedding(out, f16(3, 8), f16(16, 8), i32(0, 15, 16))
	}},
	{"set_rows", "an out-of-range row", "rows[1]", "16", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		dst := f16(16, 2, 8)
		return dst, b.SetRows(dst, f16(2, 2, 8), i32(3, 16))
	}},
	{"rope", "a negative position", "positions[1]", "-1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 2, 64)
		return out, b.RoPE(out, f16(2, 2, 64), i32(5, -1), backend.RoPEConfig{HeadDim: 64, RopeDim: 64, FreqBase: 1e4})
	}},
	// The decode kernels: tensor cores for head_dim 64 (as 32, 96, 128), the second kernel for
	// any other head_dim (80 here); both read cache_lens on the device.
	{"attention_decode", "a cache length past the capacity (head_dim 64)", "cache_lens[1]", "17", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		return out, b.AttentionDecode(out, f16(2, 4, 64), f16(2, 16, 2, 64), f16(2, 16, 2, 64), i32(16, 17), cfg)
	}},
	{"attention_decode", "a zero cache length (head_dim 80)", "cache_lens[0]", "0", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 80)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 1, HeadDim: 80, Scale: 0.125}
		return out, b.AttentionDecode(out, f16(2, 4, 80), f16(2, 16, 1, 80), f16(2, 16, 1, 80), i32(0, 16), cfg)
	}},
	{"set_rows_fp8", "an out-of-range row of an FP8 cache", "rows[0]", "-1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		dst := zeros(tensor.F8E4M3, 8, 2, 16)
		return dst, b.SetRowsFP8(dst, f16(2, 2, 16), i32(-1, 3), zeros(tensor.F32, 1))
	}},
	// The expert ids are device data (a captured decode step replays the router's new choice).
	{"moe_ffn", "an expert id past the experts", "ids[3]", "4", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 16)
		return out, b.MoEFFN(out, f16(2, 16), shaped([]int{2, 2}, 0, 1, 2, 4), zeros(tensor.F32, 2, 2), f16(4, 16, 16), f16(4, 16, 8))
	}},
	{"attention_decode_fp8", "a cache length past an FP8 cache's capacity", "cache_lens[0]", "9", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		return out, b.AttentionDecodeFP8(out, f16(2, 4, 64), zeros(tensor.F8E4M3, 2, 8, 2, 64), zeros(tensor.F8E4M3, 2, 8, 2, 64),
			i32(9, 8), zeros(tensor.F32, 2), zeros(tensor.F32, 2), cfg)
	}},
	// Paged decode: both kernels read the lengths and the table entries they reach on the
	// device (tensor cores at head_dim 64, the second kernel at 80).
	{"attention_decode_paged", "a block table entry past the pool (head_dim 64)", "block_table[1]", "5", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		return out, b.AttentionDecodePaged(out, f16(2, 4, 64), f16(4, 8, 2, 64), f16(4, 8, 2, 64), shaped([]int{2, 2}, 0, 5, 1, 2), i32(16, 9), cfg)
	}},
	{"attention_decode_paged", "a cache length past the table's reach (head_dim 80)", "cache_lens[1]", "17", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 80)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 1, HeadDim: 80, Scale: 0.125}
		return out, b.AttentionDecodePaged(out, f16(2, 4, 80), f16(4, 8, 1, 80), f16(4, 8, 1, 80), shaped([]int{2, 2}, 0, 1, 2, 3), i32(16, 17), cfg)
	}},
	{"attention_decode_paged", "a negative block table entry (head_dim 80)", "block_table[2]", "-1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 80)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 1, HeadDim: 80, Scale: 0.125}
		return out, b.AttentionDecodePaged(out, f16(2, 4, 80), f16(4, 8, 1, 80), f16(4, 8, 1, 80), shaped([]int{2, 2}, 0, 1, -1, 3), i32(16, 5), cfg)
	}},
	// Paged prefill: the starts, the lengths and the table entries, all read on the device.
	{"attention_prefill_paged", "a sequence without new tokens in q_starts", "q_starts[2]", "3", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPaged(out, f16(5, 4, 64), f16(4, 8, 2, 64), f16(4, 8, 2, 64), shaped([]int{3, 1}, 0, 1, 2), i32(0, 3, 3, 5), i32(3, 1, 2), cfg)
	}},
	{"attention_prefill_paged", "a length under its new tokens", "kv_lens[1]", "1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPaged(out, f16(5, 4, 64), f16(4, 8, 2, 64), f16(4, 8, 2, 64), shaped([]int{2, 1}, 0, 1), i32(0, 3, 5), i32(8, 1), cfg)
	}},
	{"attention_prefill_paged", "a block table entry past the pool", "block_table[3]", "4", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 80)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 80, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPaged(out, f16(5, 4, 80), f16(4, 8, 2, 80), f16(4, 8, 2, 80), shaped([]int{2, 2}, 0, 1, 2, 4), i32(0, 3, 5), i32(8, 10), cfg)
	}},
	// The paged E4M3 ops read the same device data under their own names.
	{"attention_decode_paged_fp8", "a block table entry past an E4M3 pool (decode)", "block_table[1]", "5", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
		return out, b.AttentionDecodePagedFP8(out, f16(2, 4, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64),
			shaped([]int{2, 2}, 0, 5, 1, 2), i32(16, 9), zeros(tensor.F32, 2), zeros(tensor.F32, 2), cfg)
	}},
	{"attention_decode_paged_fp8", "a cache length past an E4M3 table's reach", "cache_lens[1]", "17", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(2, 4, 128)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 1, HeadDim: 128, Scale: 0.125}
		return out, b.AttentionDecodePagedFP8(out, f16(2, 4, 128), zeros(tensor.F8E4M3, 4, 8, 1, 128), zeros(tensor.F8E4M3, 4, 8, 1, 128),
			shaped([]int{2, 2}, 0, 1, 2, 3), i32(16, 17), zeros(tensor.F32, 1), zeros(tensor.F32, 1), cfg)
	}},
	{"attention_prefill_paged_fp8", "a sequence without new tokens in q_starts (E4M3 pool)", "q_starts[2]", "3", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPagedFP8(out, f16(5, 4, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64),
			shaped([]int{3, 1}, 0, 1, 2), i32(0, 3, 3, 5), i32(3, 1, 2), zeros(tensor.F32, 2), zeros(tensor.F32, 2), cfg)
	}},
	{"attention_prefill_paged_fp8", "a length under its new tokens (E4M3 pool)", "kv_lens[1]", "1", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 64)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPagedFP8(out, f16(5, 4, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64), zeros(tensor.F8E4M3, 4, 8, 2, 64),
			shaped([]int{2, 1}, 0, 1), i32(0, 3, 5), i32(8, 1), zeros(tensor.F32, 1), zeros(tensor.F32, 1), cfg)
	}},
	{"attention_prefill_paged_fp8", "a block table entry past an E4M3 pool (prefill)", "block_table[3]", "4", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(5, 4, 80)
		cfg := backend.AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 80, Causal: true, Scale: 0.125}
		return out, b.AttentionPrefillPagedFP8(out, f16(5, 4, 80), zeros(tensor.F8E4M3, 4, 8, 2, 80), zeros(tensor.F8E4M3, 4, 8, 2, 80),
			shaped([]int{2, 2}, 0, 1, 2, 4), i32(0, 3, 5), i32(8, 10), zeros(tensor.F32, 2), zeros(tensor.F32, 2), cfg)
	}},
	// The 4-bit GEMM: at a decode row (the fused gemv) and at 17 rows (the dequantiser).
	{"gemm_w4a16", "a GPTQ group index past the groups", "g_idx[9]", "2", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(1, 8)
		g := make([]int32, 16)
		g[9] = 2 // two groups of 8
		return out, b.GemmW4A16(out, f16(1, 16), zeros(tensor.I32, 2, 8), zeros(tensor.I32, 2, 1), f16(2, 8), i32(g...), backend.W4GPTQ, 8)
	}},
	{"gemm_w4a16", "a GPTQ group index past the groups at 17 rows", "g_idx[12]", "-3", func(b backend.Backend, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) (backend.Buffer, error) {
		out := f16(17, 8)
		g := make([]int32, 16)
		g[12] = -3
		return out, b.GemmW4A16(out, f16(17, 16), zeros(tensor.I32, 2, 8), zeros(tensor.I32, 2, 1), f16(2, 8), i32(g...), backend.W4GPTQ, 8)
	}},
}

// runIndexCall makes the call and returns its error, or, where the op only queued work (a GPU
// reads the indices on the device), the error the next download reports.
func runIndexCall(b backend.Backend, ic indexCall, f16 func(...int) backend.Buffer, i32 func(...int32) backend.Buffer, zeros func(tensor.DType, ...int) backend.Buffer, shaped func([]int, ...int32) backend.Buffer) error {
	out, err := ic.call(b, f16, i32, zeros, shaped)
	if err == nil {
		_, err = b.Download(out)
	}
	return err
}
