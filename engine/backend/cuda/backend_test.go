package cuda

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func TestRoundTripEveryDType(t *testing.T) {
	for _, guards := range []bool{false, true} {
		b := openFake(t)
		b.guards = guards
		for _, h := range []*tensor.Tensor{
			halfs([]int{2, 3}, 1, -2.5, 65504, 0.0001, -0, 3),
			tensor.FromF32([]int{5}, []float32{1, -1e30, float32(math.Inf(1)), 0x1p-140, 7}),
			tensor.FromI32([]int{2, 2, 2}, []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 5, 6, 7}),
			tensor.FromF32([]int{}, []float32{42}), // 0-d: one element
			tensor.New(tensor.F16, 0, 4),           // empty
		} {
			d := upload(t, b, h)
			got, err := b.Download(d)
			if err != nil {
				t.Fatalf("guards=%v %v: %v", guards, h, err)
			}
			if got.DType != h.DType || !slices.Equal(got.Shape, h.Shape) || !slices.Equal(got.F16, h.F16) ||
				!slices.Equal(got.F32, h.F32) || !slices.Equal(got.I32, h.I32) {
				t.Errorf("guards=%v: uploaded %v %v, downloaded %v %v", guards, h, h.Float64(), got, got.Float64())
			}
		}
	}
}

func TestAllocZeroesAndLiveBytesReturnToZero(t *testing.T) {
	b := openFake(t)
	memBefore, err := b.MemoryInUse()
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.Alloc(tensor.F16, 4, 896)
	if err != nil {
		t.Fatal(err)
	}
	u, err := b.Upload(tensor.FromI32([]int{3}, []int32{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	if b.LiveBytes() != 4*896*2+12 || b.LiveBuffers() != 2 {
		t.Errorf("live %d bytes in %d buffers, want %d in 2", b.LiveBytes(), b.LiveBuffers(), 4*896*2+12)
	}
	if mem, _ := b.MemoryInUse(); mem != memBefore+4*896*2+12 {
		t.Errorf("memory in use %d, want %d", mem, memBefore+4*896*2+12)
	}
	// The fake's malloc hands out 0xCD garbage, as cudaMalloc may: Alloc must zero.
	got, err := b.Download(a)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got.F16 {
		if v != 0 {
			t.Fatalf("Alloc left element %d = %#x", i, v)
		}
	}
	n := len(calls(t))
	a.Free()
	a.Free() // no-op
	u.Free()
	if b.LiveBytes() != 0 || b.LiveBuffers() != 0 {
		t.Errorf("after Free: live %d bytes in %d buffers", b.LiveBytes(), b.LiveBuffers())
	}
	if frees := callsSince(t, n); len(frees) != 2 || frees[0] != "ts_free" || frees[1] != "ts_free" {
		t.Errorf("three Free calls on two buffers made library calls %q, want two ts_free", frees)
	}
	if mem, _ := b.MemoryInUse(); mem != memBefore {
		t.Errorf("memory in use %d after Free, want %d", mem, memBefore)
	}
	// Use after free is refused without a library call.
	n = len(calls(t))
	if _, err := b.Download(a); err == nil || !strings.Contains(err.Error(), "was freed") {
		t.Errorf("download of a freed buffer: %v", err)
	}
	if err := b.GELU(alloc(t, b, tensor.F16, 4, 896), a); err == nil || !strings.Contains(err.Error(), "x f16[4,896] was freed") {
		t.Errorf("gelu of a freed buffer: %v", err)
	}
	if c := callsSince(t, n); len(c) != 2 || !strings.HasPrefix(c[0], "ts_malloc") {
		t.Errorf("use after free reached the library: %q", c)
	}
}

func TestBadUploadsAndAllocs(t *testing.T) {
	b := openFake(t)
	bad := &tensor.Tensor{DType: tensor.F16, Shape: []int{2, 3}, F16: halfs([]int{5}).F16}
	for name, f := range map[string]func() error{
		"nil tensor":     func() error { _, err := b.Upload(nil); return err },
		"short data":     func() error { _, err := b.Upload(bad); return err },
		"negative dim":   func() error { _, err := b.Alloc(tensor.F16, 2, -1); return err },
		"invalid dtype":  func() error { _, err := b.Alloc(tensor.Invalid, 2); return err },
		"foreign buffer": func() error { return b.GELU(alloc(t, b, tensor.F16, 2), foreign{}) },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if b.LiveBuffers() != 1 {
		t.Errorf("%d live buffers, want the one alloc'ed for the foreign-buffer case", b.LiveBuffers())
	}
}

type foreign struct{}

func (foreign) DType() tensor.DType { return tensor.F16 }
func (foreign) Shape() []int        { return []int{2} }
func (foreign) Free()               {}

func TestResidualAddComputesOnTheDevice(t *testing.T) {
	b := openFake(t)
	x := upload(t, b, halfs([]int{2, 3}, 1, 2, 3, 4, 5, 6))
	r := upload(t, b, halfs([]int{2, 3}, 0.5, -2, 10))
	out := alloc(t, b, tensor.F16, 2, 3)
	for _, dst := range []backend.Buffer{out, x} { // out, then in place
		if err := b.ResidualAdd(dst, x, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Download(x)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1.5, 0, 13, 4.5, 3, 16}; !slices.Equal(got.Float32(), want) {
		t.Errorf("in-place residual add gave %v, want %v", got.Float32(), want)
	}
	if log := strings.Join(calls(t), "\n"); !strings.Contains(log, "ts_residual_add dtype=1 n=6 inplace=1 stream=0") {
		t.Errorf("no in-place call in the log:\n%s", log)
	}
}

// Every op builds its config from the buffer shapes and the Go config, passes the library
// stream (NULL), and makes exactly one call into the library.
func TestOpsPassConfigsToTheLibrary(t *testing.T) {
	b := openFake(t)
	f16 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F16, shape...) }
	f32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F32, shape...) }
	i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
	attn := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Causal: true, Scale: 0.125}
	x := f16(4, 896)
	for _, tc := range []struct {
		op, want string
		call     func() error
	}{
		{"residual_add", "ts_residual_add dtype=1 n=3584 inplace=0 stream=0", func() error { return b.ResidualAdd(f16(4, 896), x, f16(4, 896)) }},
		{"rmsnorm", "ts_rmsnorm dtype=1 rows=4 hidden=896 eps=1e-06 weight_dtype=0 stream=0", func() error { return b.RMSNorm(f16(4, 896), x, f16(896), 1e-6) }},
		{"rmsnorm", "ts_rmsnorm dtype=4 rows=2 hidden=1152 eps=1e-06 weight_dtype=2 stream=0", func() error {
			return b.RMSNorm(alloc(t, b, tensor.BF16, 2, 1152), alloc(t, b, tensor.BF16, 2, 1152), f32(1152), 1e-6)
		}},
		{"layernorm", "ts_layernorm dtype=1 rows=4 hidden=896 eps=1e-05 stream=0", func() error { return b.LayerNorm(f16(4, 896), x, f16(896), f16(896), 1e-5) }},
		{"layernorm_residual", "ts_layernorm_residual dtype=1 rows=4 hidden=896 eps=1e-05 stream=0", func() error {
			return b.LayerNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), f16(896), f16(896), 1e-5)
		}},
		{"rmsnorm_residual", "ts_rmsnorm_residual dtype=1 rows=4 hidden=896 eps=1e-06 weight_dtype=0 stream=0", func() error {
			return b.RMSNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), f16(896), 1e-6)
		}},
		{"rmsnorm_residual", "ts_rmsnorm_residual dtype=1 rows=4 hidden=896 eps=1e-06 weight_dtype=2 stream=0", func() error {
			return b.RMSNormResidual(f16(4, 896), f16(4, 896), x, f16(4, 896), f32(896), 1e-6)
		}},
		{"rope", "ts_rope dtype=1 tokens=3 heads=14 head_dim=64 rope_dim=32 freq_base=1e+06 freq_divisor=0 long_divisor=0 long_from=0 attention_factor=1 stream=0", func() error {
			return b.RoPE(f16(3, 14, 64), f16(3, 14, 64), i32(3), backend.RoPEConfig{HeadDim: 64, RopeDim: 32, FreqBase: 1e6})
		}},
		{"rope", "ts_rope dtype=1 tokens=3 heads=14 head_dim=64 rope_dim=64 freq_base=10000 freq_divisor=1 long_divisor=1 long_from=4096 attention_factor=1.19024 stream=0", func() error {
			return b.RoPE(f16(3, 14, 64), f16(3, 14, 64), i32(3), backend.RoPEConfig{HeadDim: 64, RopeDim: 64, FreqBase: 1e4,
				FreqDivisor: f32(32), LongDivisor: f32(32), LongFrom: 4096, AttentionFactor: 1.1902381})
		}},
		{"attention_prefill", "ts_attention_prefill dtype=1 batch=2 seq_len=5 n_heads=14 n_kv_heads=2 head_dim=64 causal=1 scale=0.125 softcap=0 stream=0", func() error {
			return b.AttentionPrefill(f16(2, 5, 14, 64), f16(2, 5, 14, 64), f16(2, 5, 2, 64), f16(2, 5, 2, 64), attn)
		}},
		{"attention_decode", "ts_attention_decode dtype=1 batch=2 max_len=16 n_heads=14 n_kv_heads=2 head_dim=64 scale=0.125 softcap=0 stream=0", func() error {
			return b.AttentionDecode(f16(2, 14, 64), f16(2, 14, 64), f16(2, 16, 2, 64), f16(2, 16, 2, 64), i32(2), attn)
		}},
		{"attention_prefill", "ts_attention_prefill dtype=1 batch=1 seq_len=5 n_heads=8 n_kv_heads=4 head_dim=256 causal=1 scale=0.0625 softcap=50 stream=0", func() error {
			capped := backend.AttentionConfig{NumHeads: 8, NumKVHeads: 4, HeadDim: 256, Causal: true, Scale: 0.0625, Softcap: 50}
			return b.AttentionPrefill(f16(1, 5, 8, 256), f16(1, 5, 8, 256), f16(1, 5, 4, 256), f16(1, 5, 4, 256), capped)
		}},
		{"attention_decode", "ts_attention_decode dtype=1 batch=2 max_len=16 n_heads=14 n_kv_heads=2 head_dim=64 scale=0.125 softcap=50 stream=0", func() error {
			capped := attn
			capped.Softcap = 50
			return b.AttentionDecode(f16(2, 14, 64), f16(2, 14, 64), f16(2, 16, 2, 64), f16(2, 16, 2, 64), i32(2), capped)
		}},
		{"attention_scores_softmax", "ts_attention_scores_softmax dtype=1 batch=2 seq_q=3 seq_k=5 n_heads=14 n_kv_heads=2 head_dim=64 causal=1 scale=0.125 softcap=50 stream=0", func() error {
			capped := attn
			capped.Softcap = 50
			return b.AttentionScoresSoftmax(f32(2, 14, 3, 5), f16(2, 3, 14, 64), f16(2, 5, 2, 64), capped)
		}},
		{"swiglu", "ts_swiglu dtype=1 n=3584 stream=0", func() error { return b.SwiGLU(f16(4, 896), x, f16(4, 896)) }},
		{"geglu", "ts_geglu dtype=1 n=3584 gelu=1 stream=0", func() error { return b.GeGLU(f16(4, 896), x, f16(4, 896), true) }},
		{"geglu", "ts_geglu dtype=4 n=6912 gelu=0 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			g := bf(1, 6912)
			return b.GeGLU(g, g, bf(1, 6912), false)
		}},
		{"gemm_swiglu", "ts_gemm_swiglu dtype=1 rows=4 hidden=896 ffn=4864 stream=0", func() error {
			return b.GemmSwiGLU(f16(4, 4864), x, f16(2*4864, 896))
		}},
		{"attention_scores_softmax", "ts_attention_scores_softmax dtype=1 batch=2 seq_q=3 seq_k=5 n_heads=14 n_kv_heads=2 head_dim=64 causal=1 scale=0.125 softcap=0 stream=0", func() error {
			return b.AttentionScoresSoftmax(f32(2, 14, 3, 5), f16(2, 3, 14, 64), f16(2, 5, 2, 64), attn)
		}},
		{"rmsnorm_gemm", "ts_rmsnorm_gemm dtype=1 rows=4 hidden=896 n=1152 eps=1e-06 residual=1 bias=1 stream=0", func() error {
			return b.RMSNormGemm(f16(4, 1152), f16(4, 896), x, f16(4, 896), f16(896), f16(1152, 896), f16(1152), 1e-6)
		}},
		{"rmsnorm_gemm", "ts_rmsnorm_gemm dtype=1 rows=4 hidden=896 n=64 eps=1e-05 residual=0 bias=0 stream=0", func() error {
			return b.RMSNormGemm(f16(4, 64), nil, x, nil, f16(896), f16(64, 896), nil, 1e-5)
		}},
		{"layernorm_gemm", "ts_layernorm_gemm dtype=1 rows=4 hidden=896 n=1152 eps=1e-05 residual=1 bias=1 stream=0", func() error {
			return b.LayerNormGemm(f16(4, 1152), f16(4, 896), x, f16(4, 896), f16(896), f16(896), f16(1152, 896), f16(1152), 1e-5)
		}},
		{"swiglu_gemm", "ts_swiglu_gemm in=1 out=1 m=1 n=896 k=4864 bias=0 stream=0", func() error {
			return b.SwiGLUGemm(f16(1, 896), f16(1, 4864), f16(1, 4864), f16(896, 4864), nil)
		}},
		{"gpt_ffn", "ts_gpt_ffn dtype=1 rows=4 hidden=896 ffn=3584 gelu=1 b1=1 b2=1 stream=0", func() error {
			return b.GPTFFN(f16(4, 896), x, f16(3584, 896), f16(3584), f16(896, 3584), f16(896), true)
		}},
		{"gpt_ffn", "ts_gpt_ffn dtype=1 rows=4 hidden=896 ffn=3584 gelu=0 b1=0 b2=0 stream=0", func() error {
			return b.GPTFFN(f16(4, 896), x, f16(3584, 896), nil, f16(896, 3584), nil, false)
		}},
		{"swiglu_ffn", "ts_swiglu_ffn dtype=1 rows=4 hidden=896 ffn=4864 stream=0", func() error {
			return b.SwiGLUFFN(f16(4, 896), x, f16(4864, 896), f16(4864, 896), f16(896, 4864))
		}},
		{"gelu", "ts_gelu dtype=1 n=3584 stream=0", func() error { return b.GELU(f16(4, 896), x) }},
		{"gelu_tanh", "ts_gelu_tanh dtype=1 n=3584 stream=0", func() error { return b.GELUTanh(f16(4, 896), x) }},
		{"gelu_scale", "ts_gelu_scale dtype=1 n=3584 gelu=0 scale=-0.75 stream=0", func() error { return b.GELUScale(f16(4, 896), x, false, -0.75) }},
		{"gelu_scale", "ts_gelu_scale dtype=1 n=3584 gelu=1 scale=0.125 stream=0", func() error { return b.GELUScale(x, x, true, 0.125) }},
		{"pos_embedding", "ts_pos_embedding dtype=1 tokens=4 hidden=896 table_rows=1024 scale=0 stream=0", func() error {
			return b.PosEmbedding(f16(4, 896), x, f16(1024, 896), i32(4))
		}},
		{"embedding", "ts_embedding dtype=1 tokens=6 hidden=896 table_rows=151936 scale=1 stream=0", func() error {
			return b.Embedding(f16(2, 3, 896), i32(2, 3), f16(151936, 896), 1)
		}},
		{"embedding", "ts_embedding dtype=4 tokens=3 hidden=1152 table_rows=262144 scale=34 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			return b.Embedding(bf(3, 1152), i32(3), bf(262144, 1152), 34)
		}},
		{"set_rows", "ts_set_rows dtype=1 dst_rows=4096 src_rows=1 row_elems=128 stream=0", func() error {
			return b.SetRows(f16(4096, 2, 64), f16(1, 2, 64), i32(1))
		}},
		{"set_rows", "ts_set_rows dtype=2 dst_rows=64 src_rows=5 row_elems=3072 stream=0", func() error {
			return b.SetRows(f32(64, 32, 96), f32(5, 3072), i32(5))
		}},
		{"gemm", "ts_gemm in_dtype=1 out_dtype=2 m=4 n=128 k=896 bias=1 stream=0", func() error { return b.Gemm(f32(4, 128), x, f16(128, 896), f16(128)) }},
		{"gemm", "ts_gemm in_dtype=1 out_dtype=1 m=4 n=128 k=896 bias=0 stream=0", func() error { return b.Gemm(f16(4, 128), x, f16(128, 896), nil) }},
		{"softmax", "ts_softmax in_dtype=2 rows=6 n=50 stream=0", func() error { return b.Softmax(f32(2, 3, 50), f32(2, 3, 50)) }},
		{"softmax", "ts_softmax in_dtype=1 rows=2 n=50 stream=0", func() error { return b.Softmax(f32(2, 50), f16(2, 50)) }},
		// Gemma 2's final soft cap: fp32 logits at its vocabulary in place, and bf16 logits out of place.
		{"logit_softcap", "ts_logit_softcap dtype=2 n=512000 softcap=30 inplace=1 stream=0", func() error {
			logits := f32(2, 256000)
			return b.LogitSoftcap(logits, logits, 30)
		}},
		{"logit_softcap", "ts_logit_softcap dtype=4 n=3003 softcap=50 inplace=0 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			return b.LogitSoftcap(bf(3, 1001), bf(3, 1001), 50)
		}},
		{"quant_fp8", "ts_quant_fp8 in_dtype=4 rows=3 hidden=2048 group_size=128 static=0 stream=0", func() error {
			return b.QuantFP8(alloc(t, b, tensor.F8E4M3, 3, 2048), f32(3, 16), alloc(t, b, tensor.BF16, 3, 2048), nil, 128)
		}},
		{"quant_fp8", "ts_quant_fp8 in_dtype=2 rows=2 hidden=128 group_size=0 static=1 stream=0", func() error {
			return b.QuantFP8(alloc(t, b, tensor.F8E4M3, 2, 128), nil, f32(2, 128), f32(1), 0)
		}},
		{"gemm_fp8", "ts_gemm_fp8 out_dtype=4 m=4 n=200 k=512 block=1 stream=0", func() error {
			f8 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F8E4M3, shape...) }
			return b.GemmFP8(alloc(t, b, tensor.BF16, 4, 200), f8(4, 512), f32(4, 4), f8(200, 512), f32(2, 4), true)
		}},
		{"gemm_fp8", "ts_gemm_fp8 out_dtype=1 m=1 n=320 k=256 block=0 stream=0", func() error {
			f8 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F8E4M3, shape...) }
			return b.GemmFP8(f16(1, 320), f8(1, 256), f32(1, 1), f8(320, 256), f32(320, 1), false)
		}},
		{"rmsnorm_quant_fp8", "ts_rmsnorm_quant_fp8 dtype=4 rows=3 hidden=2048 group_size=128 eps=1e-05 residual=1 static=0 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			r := bf(3, 2048)
			return b.RMSNormQuantFP8(alloc(t, b, tensor.F8E4M3, 3, 2048), f32(3, 16), r, bf(3, 2048), r, bf(2048), nil, 128, 1e-5)
		}},
		{"rmsnorm_quant_fp8", "ts_rmsnorm_quant_fp8 dtype=1 rows=4 hidden=896 group_size=0 eps=1e-06 residual=0 static=1 stream=0", func() error {
			return b.RMSNormQuantFP8(alloc(t, b, tensor.F8E4M3, 4, 896), nil, nil, x, nil, f16(896), f32(1), 0, 1e-6)
		}},
		{"swiglu_quant_fp8", "ts_swiglu_quant_fp8 in_dtype=1 rows=4 hidden=896 group_size=896 static=0 stream=0", func() error {
			return b.SwiGLUQuantFP8(alloc(t, b, tensor.F8E4M3, 4, 896), f32(4, 1), x, f16(4, 896), nil, 896)
		}},
		{"swiglu_quant_fp8", "ts_swiglu_quant_fp8 in_dtype=4 rows=2 hidden=8192 group_size=0 static=1 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			return b.SwiGLUQuantFP8(alloc(t, b, tensor.F8E4M3, 2, 8192), nil, bf(2, 8192), bf(2, 8192), f32(1), 0)
		}},
		{"gemm_w4a16", "ts_gemm_w4a16 dtype=1 m=1 n=64 k=256 group_size=128 format=0 g_idx=0 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			return b.GemmW4A16(f16(1, 64), f16(1, 256), i32(256, 8), i32(2, 8), f16(2, 64), nil, backend.W4AWQ, 128)
		}},
		{"gemm_w4a16", "ts_gemm_w4a16 dtype=4 m=3 n=64 k=256 group_size=128 format=1 g_idx=1 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			return b.GemmW4A16(bf(3, 64), bf(3, 256), i32(32, 64), i32(2, 8), bf(2, 64), i32(256), backend.W4GPTQ, 128)
		}},
		{"set_rows_fp8", "ts_set_rows_fp8 dtype=1 dst_rows=16 src_rows=2 row_elems=128 scale_heads=2 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			return b.SetRowsFP8(alloc(t, b, tensor.F8E4M3, 16, 2, 64), f16(2, 2, 64), i32(2), f32(2))
		}},
		{"moe_router", "ts_moe_router dtype=4 tokens=3 experts=60 top_k=4 renormalize=0 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			return b.MoERouter(f32(3, 4), alloc(t, b, tensor.I32, 3, 4), bf(3, 60), 4, false)
		}},
		{"moe_ffn", "ts_moe_ffn dtype=1 tokens=5 hidden=64 ffn=32 experts=8 top_k=2 stream=0", func() error {
			return b.MoEFFN(f16(5, 64), f16(5, 64), alloc(t, b, tensor.I32, 5, 2), f32(5, 2), f16(8, 64, 64), f16(8, 64, 32))
		}},
		// Qwen2-MoE's gated shared expert: a bf16 prefill at Qwen2-57B-A14B's 3584 in place over
		// routed (as a decode step adds it), and an fp16 decode at Qwen1.5-MoE-A2.7B's 2048.
		{"moe_shared_add", "ts_moe_shared_add dtype=4 tokens=17 hidden=3584 inplace=1 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			routed := bf(17, 3584)
			return b.MoESharedAdd(routed, routed, bf(17, 3584), bf(17, 3584), bf(1, 3584))
		}},
		{"moe_shared_add", "ts_moe_shared_add dtype=1 tokens=1 hidden=2048 inplace=0 stream=0", func() error {
			return b.MoESharedAdd(f16(1, 2048), f16(1, 2048), f16(1, 2048), f16(1, 2048), f16(1, 2048))
		}},
		{"attention_decode_fp8", "ts_attention_decode_fp8 dtype=4 batch=2 max_len=32 n_heads=8 n_kv_heads=2 head_dim=128 scale_heads=1 softcap=50 stream=0", func() error {
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			f8 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F8E4M3, shape...) }
			cfg := backend.AttentionConfig{NumHeads: 8, NumKVHeads: 2, HeadDim: 128, Scale: 0.088, Softcap: 50}
			return b.AttentionDecodeFP8(bf(2, 8, 128), bf(2, 8, 128), f8(2, 32, 2, 128), f8(2, 32, 2, 128),
				alloc(t, b, tensor.I32, 2), f32(1), f32(1), cfg)
		}},
		{"attention_decode_paged", "ts_attention_decode_paged dtype=1 batch=2 num_blocks=9 block_size=16 table_width=4 n_heads=14 n_kv_heads=2 head_dim=64 softcap=30 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Scale: 0.125, Softcap: 30}
			return b.AttentionDecodePaged(f16(2, 14, 64), f16(2, 14, 64), f16(9, 16, 2, 64), f16(9, 16, 2, 64), i32(2, 4), i32(2), cfg)
		}},
		{"attention_prefill_paged", "ts_attention_prefill_paged dtype=4 batch=2 total_q=5 num_blocks=9 block_size=16 table_width=4 n_heads=32 n_kv_heads=8 head_dim=64 softcap=50 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			cfg := backend.AttentionConfig{NumHeads: 32, NumKVHeads: 8, HeadDim: 64, Scale: 0.125, Softcap: 50}
			return b.AttentionPrefillPaged(bf(5, 32, 64), bf(5, 32, 64), bf(9, 16, 8, 64), bf(9, 16, 8, 64), i32(2, 4), i32(3), i32(2), cfg)
		}},
		// The E4M3 pools: the scale count (per tensor, per head) and the window reach the library.
		{"attention_decode_paged_fp8", "ts_attention_decode_paged_fp8 dtype=1 batch=2 num_blocks=9 block_size=16 table_width=4 n_heads=14 n_kv_heads=2 head_dim=64 window=40 softcap=0 scale_heads=2 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			f8 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F8E4M3, shape...) }
			cfg := backend.AttentionConfig{NumHeads: 14, NumKVHeads: 2, HeadDim: 64, Scale: 0.125, Window: 40}
			return b.AttentionDecodePagedFP8(f16(2, 14, 64), f16(2, 14, 64), f8(9, 16, 2, 64), f8(9, 16, 2, 64), i32(2, 4), i32(2), f32(2), f32(2), cfg)
		}},
		{"attention_prefill_paged_fp8", "ts_attention_prefill_paged_fp8 dtype=4 batch=2 total_q=5 num_blocks=9 block_size=16 table_width=4 n_heads=32 n_kv_heads=8 head_dim=128 window=0 softcap=50 scale_heads=1 stream=0", func() error {
			i32 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.I32, shape...) }
			bf := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.BF16, shape...) }
			f8 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F8E4M3, shape...) }
			cfg := backend.AttentionConfig{NumHeads: 32, NumKVHeads: 8, HeadDim: 128, Scale: 0.088, Softcap: 50}
			return b.AttentionPrefillPagedFP8(bf(5, 32, 128), bf(5, 32, 128), f8(9, 16, 8, 128), f8(9, 16, 8, 128), i32(2, 4), i32(3), i32(2), f32(1), f32(1), cfg)
		}},
	} {
		expectOneCall(t, tc.op, tc.want, tc.call)
	}
	if !slices.Equal(opsCovered(t), backend.Ops) {
		t.Errorf("ops reaching the library %v, want every op of backend.Ops %v", opsCovered(t), backend.Ops)
	}
}

// opsCovered lists, in backend.Ops order, the ops the log shows were called.
func opsCovered(t *testing.T) []string {
	var seen []string
	log := strings.Join(calls(t), "\n")
	for _, op := range backend.Ops {
		if strings.Contains(log, "ts_"+op+" ") {
			seen = append(seen, op)
		}
	}
	return seen
}

// The shared checks refuse a bad call before it reaches the library, with the CPU
// backend's error.
func TestSharedChecksRunFirst(t *testing.T) {
	b := openFake(t)
	f16 := func(shape ...int) backend.Buffer { return alloc(t, b, tensor.F16, shape...) }
	out, x, w, o2, w2 := f16(2, 896), f16(2, 896), f16(895), f16(2, 3), f16(3, 3)
	n := len(calls(t))
	err := b.RMSNorm(out, x, w, 1e-6)
	if want := backend.CheckRMSNorm(out, x, w, 1e-6); want == nil || err == nil || err.Error() != want.Error() {
		t.Fatalf("err = %v, want the shared check's %v", err, want)
	}
	var ae *backend.ArgError
	if !errors.As(err, &ae) || ae.Op != "rmsnorm" || ae.Arg != "weight" {
		t.Errorf("err = %#v, want an ArgError for rmsnorm weight", err)
	}
	if err := b.Gemm(o2, nil, w2, nil); err == nil {
		t.Error("gemm with a nil x accepted")
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("refused calls reached the library: %q", c)
	}
}

// A failure of the library carries its status and message into the Go error, mapped to the
// sentinel a caller can act on; none of them poisons the backend.
func TestLibraryErrorsCarryTheMessage(t *testing.T) {
	b := openFake(t)
	out, x, w := alloc(t, b, tensor.F16, 4, 896), alloc(t, b, tensor.F16, 4, 896), alloc(t, b, tensor.F16, 896)
	for _, tc := range []struct {
		status   string
		msg      string
		sentinel error
	}{
		{"-1", "rmsnorm: cfg->hidden = 0: must be positive", backend.ErrInvalidArgument},
		{"-2", "rmsnorm: weight = 895 elements: want cfg->hidden (896)", backend.ErrInvalidArgument},
		{"-3", "rmsnorm: cfg->dtype = TS_F32: only TS_F16 is implemented", ErrUnsupported},
		{"-4", "rmsnorm: cudaMalloc of the workspace (1 GiB) failed", ErrOutOfMemory},
		{"-5", "rmsnorm: cudaErrorInvalidConfiguration (invalid configuration argument) at rmsnorm.cu:88", ErrCUDA},
		{"-7", "rmsnorm: ts_init has not succeeded", ErrCUDA},
	} {
		t.Setenv("FAKETS_FAIL", "ts_rmsnorm:"+tc.status+":"+tc.msg)
		err := b.RMSNorm(out, x, w, 1e-6)
		if !errors.Is(err, tc.sentinel) {
			t.Errorf("status %s: err = %v, want %v", tc.status, err, tc.sentinel)
		}
		var se *StatusError
		if !errors.As(err, &se) || se.Op != "rmsnorm" || se.Message != tc.msg || se.Sticky {
			t.Errorf("status %s: err = %#v", tc.status, err)
		} else if !strings.HasPrefix(err.Error(), tc.msg+" [TS_ERR_") {
			t.Errorf("status %s: message %q does not start with the library's %q", tc.status, err, tc.msg)
		}
		if errors.Is(err, ErrPoisoned) {
			t.Errorf("status %s poisoned the backend: %v", tc.status, err)
		}
	}
	// An argument error reads like the CPU backend's: errors.As finds the ArgError.
	t.Setenv("FAKETS_FAIL", "ts_rmsnorm:-1:rmsnorm: cfg->hidden = 0: must be positive")
	var ae *backend.ArgError
	if err := b.RMSNorm(out, x, w, 1e-6); !errors.As(err, &ae) || ae.Op != "rmsnorm" || ae.Arg != "cfg->hidden" || ae.Value != "0" || ae.Reason != "must be positive" {
		t.Errorf("ArgError view of %v: %+v", err, ae)
	}
	// A message in another shape still yields an ArgError naming the op.
	t.Setenv("FAKETS_FAIL", "ts_rmsnorm:-2:heads do not divide")
	if err := b.RMSNorm(out, x, w, 1e-6); !errors.As(err, &ae) || ae.Op != "rmsnorm" || ae.Reason != "heads do not divide" ||
		err.Error() != "rmsnorm: heads do not divide [TS_ERR_SHAPE_MISMATCH]" {
		t.Errorf("ArgError view of %v: %+v", err, ae)
	}
	// A CUDA error that is not sticky was told apart by one ts_synchronize.
	t.Setenv("FAKETS_FAIL", "ts_rmsnorm:-5:rmsnorm: cudaErrorInvalidConfiguration")
	n := len(calls(t))
	_ = b.RMSNorm(out, x, w, 1e-6)
	if c := callsSince(t, n); len(c) != 2 || c[1] != "ts_synchronize stream=0" {
		t.Errorf("a CUDA error was not probed with one ts_synchronize: %q", c)
	}
	t.Setenv("FAKETS_FAIL", "")
	if err := b.RMSNorm(out, x, w, 1e-6); err != nil {
		t.Errorf("after the failures: %v", err)
	}
}

// Index data on the device is checked by the kernels and reported by the next call that
// drains the stream, as an argument error naming the op, index and value.
func TestIndexFaultIsAnArgumentError(t *testing.T) {
	b := openFake(t)
	ids := upload(t, b, tensor.FromI32([]int{2}, []int32{0, 10}))
	out := alloc(t, b, tensor.F16, 2, 8)
	if err := b.Embedding(out, ids, alloc(t, b, tensor.F16, 10, 8), 1); err != nil {
		t.Fatal(err) // asynchronous: the launch succeeds
	}
	const msg = "embedding: ids[1] = 10: must be in [0, 10) (the rows of table)"
	for _, tc := range []struct {
		op, fails string
		call      func() error
	}{
		{"download", "ts_copy_to_host", func() error { _, err := b.Download(out); return err }},
		{"synchronize", "ts_synchronize", b.Synchronize},
	} {
		t.Setenv("FAKETS_FAIL", tc.fails+":-8:"+msg)
		err := tc.call()
		var ae *backend.ArgError
		if !errors.Is(err, backend.ErrInvalidArgument) || !errors.As(err, &ae) {
			t.Fatalf("%s: err = %v, want an argument error", tc.op, err)
		}
		if ae.Op != "embedding" || ae.Arg != "ids[1]" || ae.Value != "10" {
			t.Errorf("%s: ArgError %+v, want embedding ids[1] = 10 (as the CPU backend reports it)", tc.op, ae)
		}
		if want := tc.op + ": " + msg + " [TS_ERR_INDEX]"; err.Error() != want {
			t.Errorf("%s: message %q, want %q", tc.op, err, want)
		}
	}
	t.Setenv("FAKETS_FAIL", "")
	if _, err := b.Download(out); err != nil {
		t.Errorf("an index fault poisoned the backend: %v", err)
	}
}

func TestInfoSupportsAndBenchmarkHelpers(t *testing.T) {
	b := openFake(t)
	want := backend.DeviceInfo{Backend: "cuda", Name: "Fake GPU (host memory)", Index: 0, Processors: 7, MemoryMiB: 8192}
	if got := b.Info(); got != want {
		t.Errorf("Info() = %+v, want %+v", got, want)
	}
	for _, op := range backend.Ops {
		if !b.Supports(op) {
			t.Errorf("Supports(%q) = false", op)
		}
	}
	if b.Supports("flash_attention_v9") {
		t.Error("Supports an op that does not exist")
	}
	if bw, err := b.CopyBandwidthGBps(); err != nil || bw != 123.5 {
		t.Errorf("CopyBandwidthGBps() = %v, %v", bw, err)
	}
	tm, err := b.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Stop(); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("Stop before Start: %v", err)
	}
	if err := tm.Start(); err != nil {
		t.Fatal(err)
	}
	if d, err := tm.Stop(); err != nil || d != 1500*time.Microsecond {
		t.Errorf("Stop() = %v, %v; want 1.5ms", d, err)
	}
	if err := tm.Close(); err != nil {
		t.Error(err)
	}
	if err := tm.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := tm.Start(); err == nil {
		t.Error("Start on a closed timer succeeded")
	}
	if err := b.Synchronize(); err != nil {
		t.Error(err)
	}
}

func TestClose(t *testing.T) {
	fakeEnv(t)
	open := func() *Backend {
		b, err := New(backend.Options{Device: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := open(), open()
	leaked, err := a.Alloc(tensor.F16, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err == nil || !strings.Contains(err.Error(), "1 buffers (16 bytes) still allocated") {
		t.Errorf("close with a live buffer: %v", err)
	}
	shutdowns := func() int {
		n := 0
		for _, c := range calls(t) {
			if c == "ts_shutdown" {
				n++
			}
		}
		return n
	}
	if shutdowns() != 0 {
		t.Error("the library shut down while another backend was open")
	}
	// A closed backend refuses calls without entering the library.
	n := len(calls(t))
	if _, err := a.Alloc(tensor.F16, 8); !errors.Is(err, ErrClosed) {
		t.Errorf("alloc after close: %v", err)
	}
	if err := a.GELU(leaked, leaked); !errors.Is(err, ErrClosed) {
		t.Errorf("gelu after close: %v", err)
	}
	if c := callsSince(t, n); len(c) != 0 {
		t.Errorf("calls after close reached the library: %q", c)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	leaked.Free() // reaches ts_free: b still holds the library initialised
	if err := b.Close(); err != nil {
		t.Error(err)
	}
	if shutdowns() != 1 {
		t.Errorf("%d ts_shutdown calls after both backends closed, want 1", shutdowns())
	}
}

func TestDimsBeyondInt32AreRefused(t *testing.T) {
	c := dims{op: "gemm"}
	c.int("m", 7)
	c.int("k", math.MaxInt32+1)
	var ae *backend.ArgError
	if !errors.As(c.err, &ae) || ae.Arg != "k" || !errors.Is(c.err, backend.ErrInvalidArgument) {
		t.Errorf("err = %v", c.err)
	}
}

func TestStatusErrorText(t *testing.T) {
	for _, tc := range []struct {
		e    StatusError
		want string
	}{
		{StatusError{Op: "gemm", Name: "TS_ERR_CUDA", Message: "gemm: cublasGemmEx failed"}, "gemm: cublasGemmEx failed [TS_ERR_CUDA]"},
		{StatusError{Op: "download", Name: "TS_ERR_INDEX", Message: "rope: positions[3] = -1: must be >= 0"}, "download: rope: positions[3] = -1: must be >= 0 [TS_ERR_INDEX]"},
		{StatusError{Op: "alloc", Name: "TS_ERR_CUDA"}, "alloc: (the library gave no message) [TS_ERR_CUDA]"},
		{StatusError{Op: "gelu", Sticky: true, Message: "gelu: an illegal memory access was encountered"}, "the GPU context is corrupted by gelu: an illegal memory access was encountered"},
		{StatusError{Op: "download", After: "rope", Sticky: true, Message: "rope: an illegal memory access was encountered"},
			"the GPU context is corrupted by download: rope: an illegal memory access was encountered (last op launched: rope)"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

// The op of an index fault is the library message's, not the call's that surfaced it: with
// guards on, an FP8 twin's own call reports at once, and its message must name it (the kernels
// suite's device-data specs compare ArgError.Op with the op called).
func TestStatusErrorArgOpIsTheMessages(t *testing.T) {
	for _, tc := range []struct {
		e      StatusError
		wantOp string
	}{
		{StatusError{Op: "attention_decode_paged_fp8", Status: statusIndex, Message: "attention_decode_paged_fp8: cache_lens[1] = 17: must be in [1, 16] (table_width x block_size)"}, "attention_decode_paged_fp8"},
		{StatusError{Op: "attention_decode_paged_fp8", Status: statusIndex, Message: "attention_decode_paged: cache_lens[1] = 17: must be in [1, 16] (table_width x block_size)"}, "attention_decode_paged"},
		{StatusError{Op: "download", Status: statusIndex, Message: "attention_prefill_paged_fp8: kv_lens[1] = 1: must be at least its new tokens and at most 32 (table_width x block_size)"}, "attention_prefill_paged_fp8"},
	} {
		var ae *backend.ArgError
		if !errors.As(&tc.e, &ae) || ae.Op != tc.wantOp {
			t.Errorf("%q: ArgError %+v, want op %q", tc.e.Error(), ae, tc.wantOp)
		}
	}
}

// expectOneCall runs call and checks it made exactly the library call want, besides the
// allocations of its arguments.
func expectOneCall(t *testing.T, op, want string, call func() error) {
	t.Helper()
	n := len(calls(t))
	if err := call(); err != nil {
		t.Errorf("%s: %v", op, err)
		return
	}
	var made []string
	for _, c := range callsSince(t, n) {
		if !strings.HasPrefix(c, "ts_malloc") && !strings.HasPrefix(c, "ts_memset") {
			made = append(made, c) // what the op made, not the allocations of its arguments
		}
	}
	if len(made) != 1 || made[0] != want {
		t.Errorf("%s made library calls %q, want [%q]", op, made, want)
	}
}
