package cpu

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func buf(t *testing.T, dt tensor.DType, shape ...int) backend.Buffer {
	t.Helper()
	b, err := New().Alloc(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ints(t *testing.T, vals ...int32) backend.Buffer {
	t.Helper()
	b, err := New().Upload(tensor.FromI32([]int{len(vals)}, vals))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every bad call must be refused with an ArgError naming the op, the argument and the
// value, and must leave the output untouched.
func TestBadArgumentsAreNamedErrors(t *testing.T) {
	b := New()
	f16 := func(shape ...int) backend.Buffer { return buf(t, tensor.F16, shape...) }
	attn := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
	rope := backend.RoPEConfig{HeadDim: 64, RopeDim: 64, FreqBase: 1e6}
	cases := []struct {
		name, op, arg, value string
		call                 func() error
	}{
		{"residual shape", "residual_add", "residual", "f16[4,895]", func() error { return b.ResidualAdd(f16(4, 896), f16(4, 896), f16(4, 895)) }},
		{"zero dim", "residual_add", "x", "f16[0,896]", func() error { return b.ResidualAdd(f16(0, 896), f16(0, 896), f16(0, 896)) }},
		{"nil input", "gelu", "x", "nil", func() error { return b.GELU(f16(3), nil) }},
		{"f32 input", "gelu", "x", "f32[3]", func() error { return b.GELU(f16(3), buf(t, tensor.F32, 3)) }},
		{"gelu_scale inf scale", "gelu_scale", "scale", "+Inf", func() error { return b.GELUScale(f16(3), f16(3), false, float32(math.Inf(1))) }},
		{"gelu_scale out shape", "gelu_scale", "out", "f16[4]", func() error { return b.GELUScale(f16(4), f16(3), true, -0.5) }},
		{"logit_softcap zero cap", "logit_softcap", "softcap", "0", func() error { return b.LogitSoftcap(f16(3), f16(3), 0) }},
		{"logit_softcap negative cap", "logit_softcap", "softcap", "-30", func() error {
			return b.LogitSoftcap(buf(t, tensor.F32, 2, 5), buf(t, tensor.F32, 2, 5), -30)
		}},
		{"logit_softcap NaN cap", "logit_softcap", "softcap", "NaN", func() error { return b.LogitSoftcap(f16(3), f16(3), float32(math.NaN())) }},
		{"logit_softcap inf cap", "logit_softcap", "softcap", "+Inf", func() error { return b.LogitSoftcap(f16(3), f16(3), float32(math.Inf(1))) }},
		{"logit_softcap i32 logits", "logit_softcap", "x", "i32[3]", func() error { return b.LogitSoftcap(f16(3), buf(t, tensor.I32, 3), 30) }},
		{"logit_softcap f16 out of f32 logits", "logit_softcap", "out", "f16[2,5]", func() error {
			return b.LogitSoftcap(f16(2, 5), buf(t, tensor.F32, 2, 5), 30)
		}},
		{"logit_softcap out shape", "logit_softcap", "out", "f32[2,4]", func() error {
			return b.LogitSoftcap(buf(t, tensor.F32, 2, 4), buf(t, tensor.F32, 2, 5), 30)
		}},
		{"rmsnorm weight", "rmsnorm", "weight", "f16[895]", func() error { return b.RMSNorm(f16(2, 896), f16(2, 896), f16(895), 1e-6) }},
		{"rmsnorm eps", "rmsnorm", "eps", "0", func() error { return b.RMSNorm(f16(2, 896), f16(2, 896), f16(896), 0) }},
		{"rmsnorm_residual sum", "rmsnorm_residual", "sum", "f16[2,895]", func() error {
			return b.RMSNormResidual(f16(2, 895), f16(2, 896), f16(2, 896), f16(2, 896), f16(896), 1e-6)
		}},
		{"layernorm out", "layernorm", "out", "f16[2,897]", func() error { return b.LayerNorm(f16(2, 897), f16(2, 896), f16(896), f16(896), 1e-5) }},
		{"rope odd head_dim", "rope", "head_dim", "63", func() error {
			return b.RoPE(f16(1, 2, 63), f16(1, 2, 63), ints(t, 0), backend.RoPEConfig{HeadDim: 63, RopeDim: 62, FreqBase: 1e4})
		}},
		{"rope_dim > head_dim", "rope", "rope_dim", "128", func() error {
			return b.RoPE(f16(1, 2, 64), f16(1, 2, 64), ints(t, 0), backend.RoPEConfig{HeadDim: 64, RopeDim: 128, FreqBase: 1e4})
		}},
		{"rope positions", "rope", "positions", "i32[1]", func() error { return b.RoPE(f16(2, 2, 64), f16(2, 2, 64), ints(t, 0), rope) }},
		{"rope negative position", "rope", "positions[1]", "-1", func() error { return b.RoPE(f16(2, 2, 64), f16(2, 2, 64), ints(t, 0, -1), rope) }},
		{"rope attention_factor", "rope", "attention_factor", "-1", func() error {
			cfg := rope
			cfg.AttentionFactor = -1
			return b.RoPE(f16(1, 2, 64), f16(1, 2, 64), ints(t, 0), cfg)
		}},
		{"rope divisor length", "rope", "freq_divisor", "f32[64]", func() error {
			cfg := rope
			cfg.FreqDivisor = buf(t, tensor.F32, 64)
			return b.RoPE(f16(1, 2, 64), f16(1, 2, 64), ints(t, 0), cfg)
		}},
		{"rope divisor dtype", "rope", "long_divisor", "f16[32]", func() error {
			cfg := rope
			cfg.FreqDivisor, cfg.LongDivisor = buf(t, tensor.F32, 32), f16(32)
			return b.RoPE(f16(1, 2, 64), f16(1, 2, 64), ints(t, 0), cfg)
		}},
		{"rope long_from", "rope", "long_from", "-4", func() error {
			cfg := rope
			cfg.FreqDivisor, cfg.LongDivisor, cfg.LongFrom = buf(t, tensor.F32, 32), buf(t, tensor.F32, 32), -4
			return b.RoPE(f16(1, 2, 64), f16(1, 2, 64), ints(t, 0), cfg)
		}},
		{"heads do not divide", "attention_prefill", "n_kv_heads", "3", func() error {
			cfg := attn
			cfg.NumKVHeads = 3
			return b.AttentionPrefill(f16(1, 4, 14, 64), f16(1, 4, 14, 64), f16(1, 4, 3, 64), f16(1, 4, 3, 64), cfg)
		}},
		{"prefill k heads", "attention_prefill", "k", "f16[1,4,14,64]", func() error {
			return b.AttentionPrefill(f16(1, 4, 14, 64), f16(1, 4, 14, 64), f16(1, 4, 14, 64), f16(1, 4, 2, 64), attn)
		}},
		{"cache overflow", "attention_decode", "cache_lens[0]", "17", func() error {
			return b.AttentionDecode(f16(1, 14, 64), f16(1, 14, 64), f16(1, 16, 2, 64), f16(1, 16, 2, 64), ints(t, 17), attn)
		}},
		{"empty cache", "attention_decode", "cache_lens[0]", "0", func() error {
			return b.AttentionDecode(f16(1, 14, 64), f16(1, 14, 64), f16(1, 16, 2, 64), f16(1, 16, 2, 64), ints(t, 0), attn)
		}},
		{"id out of vocab", "embedding", "ids[1]", "10", func() error { return b.Embedding(f16(2, 8), ints(t, 0, 10), f16(10, 8), 1) }},
		{"vocab 0", "embedding", "table", "f16[0,8]", func() error { return b.Embedding(f16(1, 8), ints(t, 0), f16(0, 8), 1) }},
		{"embedding scale 0", "embedding", "scale", "0", func() error { return b.Embedding(f16(1, 8), ints(t, 0), f16(4, 8), 0) }},
		{"embedding scale NaN", "embedding", "scale", "NaN", func() error {
			return b.Embedding(f16(1, 8), ints(t, 0), f16(4, 8), float32(math.NaN()))
		}},
		{"scaled id out of vocab", "embedding", "ids[0]", "4", func() error { return b.Embedding(f16(1, 8), ints(t, 4), f16(4, 8), 33.9375) }},
		{"geglu up shape", "geglu", "up", "f16[2,6911]", func() error { return b.GeGLU(f16(2, 6912), f16(2, 6912), f16(2, 6911), true) }},
		{"geglu bf16 up", "geglu", "up", "bf16[4]", func() error { return b.GeGLU(f16(4), f16(4), buf(t, tensor.BF16, 4), false) }},
		// An f32 norm weight (Gemma's 1 + w) is RMSNorm's and RMSNormResidual's alone: every other
		// op with a norm weight refuses it, naming the weight.
		{"rmsnorm f32 weight length", "rmsnorm", "weight", "f32[895]", func() error {
			return b.RMSNorm(f16(2, 896), f16(2, 896), buf(t, tensor.F32, 895), 1e-6)
		}},
		{"rmsnorm bf16 weight of f16 x", "rmsnorm", "weight", "bf16[896]", func() error {
			return b.RMSNorm(f16(2, 896), f16(2, 896), buf(t, tensor.BF16, 896), 1e-6)
		}},
		{"layernorm f32 gamma", "layernorm", "gamma", "f32[896]", func() error {
			return b.LayerNorm(f16(2, 896), f16(2, 896), buf(t, tensor.F32, 896), f16(896), 1e-5)
		}},
		{"layernorm_residual f32 beta", "layernorm_residual", "beta", "f32[896]", func() error {
			return b.LayerNormResidual(f16(2, 896), f16(2, 896), f16(2, 896), f16(2, 896), f16(896), buf(t, tensor.F32, 896), 1e-5)
		}},
		{"rmsnorm_gemm f32 norm weight", "rmsnorm_gemm", "norm_weight", "f32[896]", func() error {
			return b.RMSNormGemm(f16(2, 64), nil, f16(2, 896), nil, buf(t, tensor.F32, 896), f16(64, 896), nil, 1e-6)
		}},
		{"layernorm_gemm f32 gamma", "layernorm_gemm", "gamma", "f32[896]", func() error {
			return b.LayerNormGemm(f16(2, 64), nil, f16(2, 896), nil, buf(t, tensor.F32, 896), f16(896), f16(64, 896), nil, 1e-5)
		}},
		{"rmsnorm_quant_fp8 f32 weight", "rmsnorm_quant_fp8", "weight", "f32[896]", func() error {
			return b.RMSNormQuantFP8(buf(t, tensor.F8E4M3, 2, 896), buf(t, tensor.F32, 2, 7), nil, f16(2, 896), nil,
				buf(t, tensor.F32, 896), nil, 128, 1e-6)
		}},
		{"position beyond table", "pos_embedding", "positions[0]", "64", func() error { return b.PosEmbedding(f16(1, 8), f16(1, 8), f16(64, 8), ints(t, 64)) }},
		{"row beyond dst", "set_rows", "rows[1]", "16", func() error { return b.SetRows(f16(16, 2, 8), f16(2, 2, 8), ints(t, 3, 16)) }},
		{"negative row", "set_rows", "rows[0]", "-1", func() error { return b.SetRows(f16(16, 2, 8), f16(1, 16), ints(t, -1)) }},
		{"set_rows src row size", "set_rows", "src", "f16[1,2,7]", func() error { return b.SetRows(f16(16, 2, 8), f16(1, 2, 7), ints(t, 0)) }},
		{"set_rows src dtype", "set_rows", "src", "f32[1,16]", func() error { return b.SetRows(f16(16, 16), buf(t, tensor.F32, 1, 16), ints(t, 0)) }},
		{"set_rows i32 dst", "set_rows", "dst", "i32[16,16]", func() error { return b.SetRows(buf(t, tensor.I32, 16, 16), f16(1, 16), ints(t, 0)) }},
		{"set_rows rows count", "set_rows", "rows", "i32[1]", func() error { return b.SetRows(f16(16, 16), f16(2, 16), ints(t, 0)) }},
		{"gemm K", "gemm", "w", "f16[16,31]", func() error { return b.Gemm(f16(2, 16), f16(2, 32), f16(16, 31), nil) }},
		{"gemm bias", "gemm", "bias", "f16[15]", func() error { return b.Gemm(f16(2, 16), f16(2, 32), f16(16, 32), f16(15)) }},
		{"ffn w_down", "swiglu_ffn", "w_down", "f16[64,31]", func() error { return b.SwiGLUFFN(f16(2, 64), f16(2, 64), f16(32, 64), f16(32, 64), f16(64, 31)) }},
		{"softmax out dtype", "softmax", "out", "f16[2,8]", func() error { return b.Softmax(f16(2, 8), f16(2, 8)) }},
		// moe_shared_add: each operand refused by name, x first (it sets the storage dtype and
		// the shape the others must have); no token (a zero dim) is refused as the row ops
		// refuse it.
		{"moe_shared_add f32 x", "moe_shared_add", "x", "f32[2,64]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 64), buf(t, tensor.F32, 2, 64), f16(1, 64))
		}},
		{"moe_shared_add x of one dimension", "moe_shared_add", "x", "f16[64]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 64), f16(64), f16(1, 64))
		}},
		{"moe_shared_add no token", "moe_shared_add", "x", "f16[0,64]", func() error {
			return b.MoESharedAdd(f16(0, 64), f16(0, 64), f16(0, 64), f16(0, 64), f16(1, 64))
		}},
		{"moe_shared_add gate of shape [H]", "moe_shared_add", "gate", "f16[64]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 64), f16(2, 64), f16(64))
		}},
		{"moe_shared_add gate hidden", "moe_shared_add", "gate", "f16[1,63]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 64), f16(2, 64), f16(1, 63))
		}},
		{"moe_shared_add bf16 gate", "moe_shared_add", "gate", "bf16[1,64]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 64), f16(2, 64), buf(t, tensor.BF16, 1, 64))
		}},
		{"moe_shared_add routed rows", "moe_shared_add", "routed", "f16[3,64]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(3, 64), f16(2, 64), f16(2, 64), f16(1, 64))
		}},
		{"moe_shared_add shared width", "moe_shared_add", "shared", "f16[2,63]", func() error {
			return b.MoESharedAdd(f16(2, 64), f16(2, 64), f16(2, 63), f16(2, 64), f16(1, 64))
		}},
		{"moe_shared_add f32 out", "moe_shared_add", "out", "f32[2,64]", func() error {
			return b.MoESharedAdd(buf(t, tensor.F32, 2, 64), f16(2, 64), f16(2, 64), f16(2, 64), f16(1, 64))
		}},
		{"moe_shared_add nil out", "moe_shared_add", "out", "nil", func() error {
			return b.MoESharedAdd(nil, f16(2, 64), f16(2, 64), f16(2, 64), f16(1, 64))
		}},
	}
	for _, tc := range cases {
		err := tc.call()
		var ae *backend.ArgError
		if !errors.As(err, &ae) || !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an ArgError", tc.name, err)
			continue
		}
		if ae.Op != tc.op || ae.Arg != tc.arg || ae.Value != tc.value {
			t.Errorf("%s: error names op=%s arg=%s value=%s, want %s %s %s (%v)", tc.name, ae.Op, ae.Arg, ae.Value, tc.op, tc.arg, tc.value, err)
		}
		if !strings.Contains(err.Error(), tc.op) {
			t.Errorf("%s: message %q does not name the op", tc.name, err)
		}
	}
}

func TestRejectedCallLeavesOutputUntouched(t *testing.T) {
	b := New()
	x, _ := b.Upload(half(1, 2))
	out, _ := b.Upload(half(7, 7))
	if err := b.RMSNorm(out, x, buf(t, tensor.F16, 3), 1e-6); err == nil {
		t.Fatal("bad weight accepted")
	}
	got, _ := b.Download(out)
	if got.F16[0].Float32() != 7 || got.F16[1].Float32() != 7 {
		t.Fatalf("output changed by a rejected call: %v", got.Float32())
	}
}

// half returns a [1, n] fp16 tensor of vals.
func half(vals ...float32) *tensor.Tensor {
	t := tensor.New(tensor.F16, 1, len(vals))
	for i, v := range vals {
		t.F16[i] = f16(v)
	}
	return t
}
