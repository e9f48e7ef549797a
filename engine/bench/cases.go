package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

var (
	in     = conformance.Spec
	normal = conformance.Normal
	ones   = conformance.Normal(0.1, 1)
)

const f16, f32, i32 = 2, 4, 4 // bytes per element

// Memory-bound cases use 4096 x 4096 = 16.8M elements: the size at which the targets apply
// (>= 80% of copy bandwidth), far beyond L2.
const rows, hidden = 4096, 4096

func elems(shape ...int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// Cases is the standard benchmark set: every op, at sizes where it is memory- or
// compute-bound, with model dimensions (Qwen2.5-0.5B, Phi-3-mini) where they apply.
func Cases() []Case {
	n := elems(rows, hidden)
	x := in("x", tensor.F16, []int{rows, hidden}, nil)
	return []Case{
		{Name: "residual_add 4096x4096", Op: "residual_add", Params: `{"inplace": false}`,
			Inputs: []conformance.InputSpec{x, in("residual", tensor.F16, []int{rows, hidden}, nil)}, Bytes: 3 * n * f16},
		{Name: "rmsnorm 4096x4096", Op: "rmsnorm", Params: `{"eps": 1e-6}`,
			Inputs: []conformance.InputSpec{x, in("weight", tensor.F16, []int{hidden}, ones)}, Bytes: 2*n*f16 + hidden*f16},
		{Name: "layernorm 4096x4096", Op: "layernorm", Params: `{"eps": 1e-5}`,
			Inputs: []conformance.InputSpec{x, in("gamma", tensor.F16, []int{hidden}, ones), in("beta", tensor.F16, []int{hidden}, normal(0.1, 0))},
			Bytes:  2*n*f16 + 2*hidden*f16},
		{Name: "layernorm_residual 4096x4096", Op: "layernorm_residual", Params: `{"eps": 1e-5}`,
			Inputs: []conformance.InputSpec{x, in("residual", tensor.F16, []int{rows, hidden}, nil),
				in("gamma", tensor.F16, []int{hidden}, ones), in("beta", tensor.F16, []int{hidden}, normal(0.1, 0))},
			Bytes: 4*n*f16 + 2*hidden*f16},
		{Name: "rmsnorm_residual 4096x4096", Op: "rmsnorm_residual", Params: `{"eps": 1e-6, "inplace": false}`,
			Inputs: []conformance.InputSpec{x, in("residual", tensor.F16, []int{rows, hidden}, nil), in("weight", tensor.F16, []int{hidden}, ones)},
			Bytes:  4*n*f16 + hidden*f16},
		{Name: "gelu 4096x4096", Op: "gelu", Params: `{"inplace": false}`, Inputs: []conformance.InputSpec{x}, Bytes: 2 * n * f16},
		{Name: "gelu_tanh 4096x4096", Op: "gelu_tanh", Params: `{"inplace": false}`, Inputs: []conformance.InputSpec{x}, Bytes: 2 * n * f16},
		{Name: "gelu_scale 4096x4096 erf", Op: "gelu_scale", Params: `{"gelu": "erf", "scale": 0.125, "inplace": false}`, Inputs: []conformance.InputSpec{x}, Bytes: 2 * n * f16},
		{Name: "gelu_scale 4096x4096 tanh", Op: "gelu_scale", Params: `{"gelu": "tanh", "scale": -0.75, "inplace": false}`, Inputs: []conformance.InputSpec{x}, Bytes: 2 * n * f16},
		{Name: "swiglu 4096x4096", Op: "swiglu", Params: `{}`,
			Inputs: []conformance.InputSpec{in("gate", tensor.F16, []int{rows, hidden}, normal(2, 0)), in("up", tensor.F16, []int{rows, hidden}, nil)},
			Bytes:  3 * n * f16},
		// Gemma 3: its GeGLU activation at Gemma-3-4B's intermediate size (10240) for a 4096-token
		// prefill, its RMSNorm with the fp32 weight 1 + w (Gemma3RMSNorm eager: x.float() ... *
		// (1 + w), then .to(dtype)) and its scaled embedding (embed(ids) * embed_scale.to(dtype)).
		{Name: "geglu tanh 4096x10240 (gemma-3-4b) bf16", Op: "geglu", Params: `{"gelu": "tanh"}`,
			Inputs: []conformance.InputSpec{in("gate", tensor.BF16, []int{rows, 10240}, normal(2, 0)), in("up", tensor.BF16, []int{rows, 10240}, nil)},
			Bytes:  3 * elems(rows, 10240) * f16},
		{Name: "rmsnorm fp32 weight 4096x2560 (gemma-3-4b) bf16", Op: "rmsnorm", Params: `{"eps": 1e-6}`,
			Inputs: []conformance.InputSpec{in("x", tensor.BF16, []int{rows, 2560}, nil), in("weight", tensor.F32, []int{2560}, ones)},
			Bytes:  2*elems(rows, 2560)*f16 + 2560*f32},
		{Name: "embedding scaled 4096 ids x 1152 (gemma-3-1b, vocab 262144) bf16", Op: "embedding", Params: `{"scale": 34}`,
			Inputs: []conformance.InputSpec{in("ids", tensor.I32, []int{rows}, conformance.IntsBelow(262144)), in("table", tensor.BF16, []int{262144, 1152}, nil)},
			Bytes:  2*elems(rows, 1152)*f16 + rows*i32},
		{Name: "pos_embedding 4096x4096", Op: "pos_embedding", Params: `{}`,
			Inputs: []conformance.InputSpec{x, in("table", tensor.F16, []int{rows, hidden}, nil), in("positions", tensor.I32, []int{rows}, conformance.IntsBelow(rows))},
			Bytes:  3*n*f16 + rows*i32},
		{Name: "embedding 4096 ids x 4096 (vocab 32064)", Op: "embedding", Params: `{}`,
			Inputs: []conformance.InputSpec{in("ids", tensor.I32, []int{rows}, conformance.IntsBelow(32064)), in("table", tensor.F16, []int{32064, hidden}, nil)},
			Bytes:  2*n*f16 + rows*i32},
		{Name: "set_rows 2048 rows of 8x128 into a 4096-row KV cache", Op: "set_rows", Params: `{}`,
			Inputs: []conformance.InputSpec{in("dst", tensor.F16, []int{4096, 8, 128}, nil), in("src", tensor.F16, []int{2048, 8, 128}, nil),
				in("rows", tensor.I32, []int{2048}, conformance.OnePerBucket(4096, 2048))},
			Bytes: 2*elems(2048, 8, 128)*f16 + 2048*i32},
		{Name: "rope 4096 tok, 32+32 heads x 128 (q and k)", Op: "rope", Params: `{"freq_base": 10000, "rope_dim": 128, "head_dim": 128}`,
			Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{rows, 32, 128}, nil), in("k", tensor.F16, []int{rows, 32, 128}, nil),
				in("positions", tensor.I32, []int{rows}, conformance.IntsBelow(8192))},
			Bytes: 2*2*elems(rows, 32, 128)*f16 + 2*rows*i32},
		// The same with RoPE scaling's divisor tables (LongRoPE: two, switching at 4096) and an
		// attention factor: the tables must cost no bandwidth.
		{Name: "rope scaled 4096 tok, 32+32 heads x 128 (q and k)", Op: "rope", Params: `{"freq_base": 10000, "rope_dim": 128, "head_dim": 128, "attention_factor": 1.19, "long_from": 4096}`,
			Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{rows, 32, 128}, nil), in("k", tensor.F16, []int{rows, 32, 128}, nil),
				in("positions", tensor.I32, []int{rows}, conformance.IntsBelow(8192)),
				in("freq_divisor", tensor.F32, []int{64}, normal(0.2, 2)), in("long_divisor", tensor.F32, []int{64}, normal(5, 32))},
			Bytes: 2*2*elems(rows, 32, 128)*f16 + 2*rows*i32},
		{Name: "softmax 128x151936 f32", Op: "softmax", Params: `{}`,
			Inputs: []conformance.InputSpec{in("x", tensor.F32, []int{128, 151936}, normal(3, 0))}, Bytes: 2 * elems(128, 151936) * f32},
		// Gemma 2's final logit soft cap over fp32 logits at its vocabulary (256000): a decode
		// step's row (1 MB each way: launch-bound) and a 2048-token prefill's (2.1 GB each way).
		logitSoftcap("logit_softcap gemma2 V=256000 T=1 f32", 1),
		logitSoftcap("logit_softcap gemma2 V=256000 T=64 f32", 64),
		// FP8 activation quantisation: DeepSeek-V3's hidden 7168 in 1x128 groups at a prefill of
		// 4096 tokens, and per token at Llama-3-8B's 4096 for a decode batch of 16. Traffic: x
		// read, one byte a value and one fp32 scale a group written.
		{Name: "quant_fp8 dynamic g128 4096x7168 bf16", Op: "quant_fp8", Params: `{"mode": "dynamic", "group_size": 128}`,
			Inputs: []conformance.InputSpec{in("x", tensor.BF16, []int{4096, 7168}, normal(3, 0))},
			Bytes:  elems(4096, 7168)*(f16+1) + elems(4096, 7168/128)*f32},
		gemmFP8Case("gemm_fp8 block deepseek-v3 prefill M=4096 N=K=7168", 4096, 7168, 7168, true),
		gemmFP8Case("gemm_fp8 block decode M=16 N=K=7168", 16, 7168, 7168, true),
		gemmFP8Case("gemm_fp8 channel llama3-8b M=2048 N=K=4096", 2048, 4096, 4096, false),
		gemmFP8Case("gemm_fp8 block prefill M=512 N=K=4096", 512, 4096, 4096, true),
		gemmFP8Case("gemm_fp8 channel llama3-8b decode M=1 N=14336 K=4096", 1, 14336, 4096, false),
		gemmFP8Case("gemm_fp8 block llama3-8b decode M=4 N=4096 K=14336", 4, 4096, 14336, true),
		w4a16Case("gemm_w4a16 awq llama3-8b up decode M=1 N=14336 K=4096", "awq", 1, 14336, 4096),
		w4a16Case("gemm_w4a16 gptq llama3-8b down decode M=1 N=4096 K=14336", "gptq", 1, 4096, 14336),
		w4a16Case("gemm_w4a16 awq llama3-8b up decode M=16 N=14336 K=4096", "awq", 16, 14336, 4096),
		w4a16Case("gemm_w4a16 gptq llama3-8b down M=512 N=4096 K=14336", "gptq", 512, 4096, 14336),
		tiled(w4a16Case("gemm_w4a16 tiled awq llama3-8b up decode M=1 N=14336 K=4096", "awq", 1, 14336, 4096)),
		tiled(w4a16Case("gemm_w4a16 tiled gptq llama3-8b down decode M=1 N=4096 K=14336", "gptq", 1, 4096, 14336)),
		tiled(w4a16Case("gemm_w4a16 tiled awq llama3-8b up decode M=16 N=14336 K=4096", "awq", 16, 14336, 4096)),
		tiled(w4a16Case("gemm_w4a16 tiled awq llama3.2-1b gate decode M=1 N=8192 K=2048", "awq", 1, 8192, 2048)),
		tiled(w4a16Case("gemm_w4a16 tiled awq llama3.2-1b down decode M=1 N=2048 K=8192", "awq", 1, 2048, 8192)),
		tiled(w4a16Case("gemm_w4a16 tiled awq llama3.2-1b o decode M=1 N=2048 K=2048", "awq", 1, 2048, 2048)),
		w4a16Case("gemm_w4a16 awq llama3.2-1b gate decode M=1 N=8192 K=2048", "awq", 1, 8192, 2048),
		w4a16Case("gemm_w4a16 awq llama3.2-1b down decode M=1 N=2048 K=8192", "awq", 1, 2048, 8192),
		{Name: "quant_fp8 dynamic per-token 16x4096 f16", Op: "quant_fp8", Params: `{"mode": "dynamic", "group_size": 4096}`,
			Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{16, 4096}, normal(3, 0))},
			Bytes:  elems(16, 4096)*(f16+1) + 16*f32},
		// The fused FP8 quantisers, against their eager torch composition: DeepSeek-V3's pre-norm
		// with its residual add in 1x128 groups at a 4096-token prefill and Llama-3-8B's per token
		// for a decode batch of 16; Llama-3-8B's SwiGLU activation (14336) in 1x128 groups at a
		// 2048-token prefill and per token at decode. Traffic: the inputs read, the sum written
		// (a residual), one byte a value and one fp32 scale a group written.
		{Name: "rmsnorm_quant_fp8 g128 residual 4096x7168 bf16", Op: "rmsnorm_quant_fp8",
			Params: `{"eps": 1e-6, "mode": "dynamic", "group_size": 128, "has_residual": true, "inplace": false}`,
			Inputs: []conformance.InputSpec{in("x", tensor.BF16, []int{4096, 7168}, nil), in("residual", tensor.BF16, []int{4096, 7168}, nil),
				in("weight", tensor.BF16, []int{7168}, ones)},
			Bytes: elems(4096, 7168)*(3*f16+1) + elems(4096, 7168/128)*f32 + 7168*f16},
		{Name: "rmsnorm_quant_fp8 per-token 16x4096 f16", Op: "rmsnorm_quant_fp8",
			Params: `{"eps": 1e-5, "mode": "dynamic", "group_size": 4096, "has_residual": false, "inplace": false}`,
			Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{16, 4096}, nil), in("weight", tensor.F16, []int{4096}, ones)},
			Bytes:  elems(16, 4096)*(f16+1) + 16*f32 + 4096*f16},
		{Name: "swiglu_quant_fp8 g128 2048x14336 bf16", Op: "swiglu_quant_fp8", Params: `{"mode": "dynamic", "group_size": 128}`,
			Inputs: []conformance.InputSpec{in("gate", tensor.BF16, []int{2048, 14336}, normal(2, 0)), in("up", tensor.BF16, []int{2048, 14336}, nil)},
			Bytes:  elems(2048, 14336)*(2*f16+1) + elems(2048, 14336/128)*f32},
		{Name: "swiglu_quant_fp8 per-token 16x14336 f16", Op: "swiglu_quant_fp8", Params: `{"mode": "dynamic", "group_size": 14336}`,
			Inputs: []conformance.InputSpec{in("gate", tensor.F16, []int{16, 14336}, normal(2, 0)), in("up", tensor.F16, []int{16, 14336}, nil)},
			Bytes:  elems(16, 14336)*(2*f16+1) + 16*f32},
		// One token per call at Qwen2.5's vocabulary: greedy, full-vocabulary nucleus, top-k.
		sampleCase("sample greedy V=151936", 151936, `{"temperature": 0, "top_k": 0, "top_p": 1, "seed": 7}`),
		sampleCase("sample T=0.8 top_p=0.95 V=151936", 151936, `{"temperature": 0.8, "top_k": 0, "top_p": 0.95, "seed": 7}`),
		sampleCase("sample T=0.8 top_k=40 top_p=0.95 V=151936", 151936, `{"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 7}`),
		// The FP8 KV cache beside the 16-bit decode of the same shapes: half the cache bytes.
		decodeFP8("attention_decode_fp8 llama3-8b gqa4 d128 B=4 L=4096", 4, 4096, 32, 8, 128),
		decodeFP8("attention_decode_fp8 qwen2.5-0.5b B=16 L=4096", 16, 4096, 14, 2, 64),
		decodeFP8("attention_decode_fp8 phi3-mini B=16 L=4096", 16, 4096, 32, 32, 96),
		moeRouter("moe_router qwen3-moe T=1 E=128 k=8", 1, 128, 8, true),
		moeRouter("moe_router qwen3-moe T=4096 E=128 k=8", 4096, 128, 8, true),
		moeRouter("moe_router mixtral T=4096 E=8 k=2", 4096, 8, 2, true),
		moeFFN("moe_ffn qwen3-30b-a3b decode T=1", 1, 2048, 768, 128, 8),
		moeFFN("moe_ffn qwen3-30b-a3b decode T=16", 16, 2048, 768, 128, 8),
		moeFFN("moe_ffn qwen3-30b-a3b prefill T=1024", 1024, 2048, 768, 128, 8),
		moeFFN("moe_ffn mixtral-8x7b decode T=1", 1, 4096, 14336, 8, 2),
		moeFFN("moe_ffn mixtral-8x7b decode T=4", 4, 4096, 14336, 8, 2),
		moeFFN("moe_ffn mixtral-8x7b decode T=16", 16, 4096, 14336, 8, 2),
		moeFFN("moe_ffn mixtral-8x7b prefill T=512", 512, 4096, 14336, 8, 2),
		moeFFNDType("moe_ffn mixtral-8x7b prefill T=512 bf16", 512, 4096, 14336, 8, 2, tensor.BF16),
		moeFFN("moe_ffn qwen1.5-moe-a2.7b decode T=1", 1, 2048, 1408, 60, 4),
		moeFFN("moe_ffn qwen1.5-moe-a2.7b prefill T=1024", 1024, 2048, 1408, 60, 4),
		// Qwen2-MoE's gated shared expert at Qwen1.5-MoE-A2.7B's 2048 and Qwen2-57B-A14B's 3584: a
		// decode step's row (launch-bound) and a 4096-token prefill's (its copy-bandwidth target).
		moeSharedAdd("moe_shared_add qwen1.5-moe-a2.7b decode T=1", 1, 2048),
		moeSharedAdd("moe_shared_add qwen1.5-moe-a2.7b prefill T=4096", 4096, 2048),
		moeSharedAdd("moe_shared_add qwen2-57b-a14b decode T=1", 1, 3584),
		moeSharedAdd("moe_shared_add qwen2-57b-a14b prefill T=4096", 4096, 3584),
		setRowsFP8("set_rows_fp8 llama3-8b decode T=16 per-head", 4096, 16, 8, 128),
		setRowsFP8("set_rows_fp8 llama3-8b prefill T=2048 per-head", 4096, 2048, 8, 128),
		// Paged decode at the same shapes as the contiguous rows below (pages of 16, in order).
		decodePaged("attention_decode_paged qwen2.5-0.5b B=16 L=4096 page 16", 16, 4096, 16, 14, 2, 64),
		decodePaged("attention_decode_paged llama3-8b gqa4 d128 B=4 L=4096 page 16", 4, 4096, 16, 32, 8, 128),
		// Chunked prefill through pages: 512 new tokens on a 3584-token prefix at Llama-3.2-1B's
		// heads, and 2048 tokens from an empty prefix at Qwen2.5-0.5B's (attention_prefill's shape).
		prefillPaged("attention_prefill_paged llama3.2-1b 512 new on 3584 page 16", 512, 4096, 16, 32, 8, 64),
		prefillPaged("attention_prefill_paged qwen2.5-0.5b S=2048 page 16", 2048, 2048, 16, 14, 2, 64),
		// The same through a paged E4M3 pool (per-head scales): half the cache bytes.
		pagedFP8(decodePaged("attention_decode_paged_fp8 qwen2.5-0.5b B=16 L=4096 page 16", 16, 4096, 16, 14, 2, 64)),
		pagedFP8(decodePaged("attention_decode_paged_fp8 llama3-8b gqa4 d128 B=4 L=4096 page 16", 4, 4096, 16, 32, 8, 128)),
		pagedFP8(prefillPaged("attention_prefill_paged_fp8 llama3.2-1b 512 new on 3584 page 16", 512, 4096, 16, 32, 8, 64)),
		decode("attention_decode phi3-mini B=4 L=4096", 4, 4096, 32, 32, 96),
		decode("attention_decode qwen2.5-0.5b B=16 L=4096", 16, 4096, 14, 2, 64),
		// The GQA shape at one sequence and at a shorter cache (fewer, longer key splits), and
		// Llama-3-8B's head_dim 128 with 4 query heads per KV head.
		decode("attention_decode qwen2.5-0.5b B=1 L=4096", 1, 4096, 14, 2, 64),
		decode("attention_decode qwen2.5-0.5b B=16 L=1024", 16, 1024, 14, 2, 64),
		decode("attention_decode llama3-8b gqa4 d128 B=4 L=4096", 4, 4096, 32, 8, 128),
		// The bandwidth-heavy shape (805 MB of K/V): goal >= 80% of copy bandwidth.
		decode("attention_decode phi3-mini B=16 L=4096", 16, 4096, 32, 32, 96),
		// Prefill at the served head layouts (goal: >= 0.8x SDPA at S=2048, no slower at S <= 256).
		prefill("attention_prefill qwen2.5-0.5b S=2048", 1, 2048, 14, 2, 64, true),
		prefill("attention_prefill qwen2.5-0.5b S=2048 non-causal", 1, 2048, 14, 2, 64, false),
		prefill("attention_prefill qwen2.5-0.5b S=256", 1, 256, 14, 2, 64, true),
		prefill("attention_prefill qwen2.5-0.5b S=128", 1, 128, 14, 2, 64, true),
		prefill("attention_prefill gpt2 S=1024", 1, 1024, 12, 12, 64, true),
		prefill("attention_prefill phi2 d80 S=2048", 1, 2048, 32, 32, 80, true),
		prefill("attention_prefill phi3-mini S=2048", 1, 2048, 32, 32, 96, true),
		prefill("attention_prefill phi3-mini S=256", 1, 256, 32, 32, 96, true),
		prefill("attention_prefill llama3-8b gqa4 d128 S=2048", 1, 2048, 32, 8, 128, true),
		prefill("attention_prefill llama3-8b gqa4 d128 S=256", 1, 256, 32, 8, 128, true),
		prefill("attention_prefill gemma mqa d256 S=2048", 1, 2048, 8, 1, 256, true),
		// Gemma 2's attention logit soft-capping (softcap 50) at Gemma-2-9B's 16 query heads on 8
		// KV heads of 256; the same shapes without the cap beside them measure what it costs.
		softcapped(prefill("attention_prefill gemma2-9b softcap 50 S=2048", 1, 2048, 16, 8, 256, true), 50),
		prefill("attention_prefill gemma2-9b S=2048", 1, 2048, 16, 8, 256, true),
		softcapped(decode("attention_decode gemma2-9b softcap 50 B=4 L=4096", 4, 4096, 16, 8, 256), 50),
		decode("attention_decode gemma2-9b B=4 L=4096", 4, 4096, 16, 8, 256),
		gemm("gemm phi3-mini qkv_proj M=128", 128, 9216, 3072),
		gemm("gemm qwen2.5-0.5b lm_head M=16 f32", 16, 151936, 896),
		gemmSwiGLU("gemm_swiglu qwen2.5-0.5b decode T=1", 1, 896, 4864),
		gemmSwiGLU("gemm_swiglu phi3-mini decode T=1", 1, 3072, 8192),
		gemmSwiGLU("gemm_swiglu qwen2.5-0.5b prefill T=128", 128, 896, 4864),
		scores("attention_scores_softmax qwen2.5-0.5b S=512", 1, 512, 512, 14, 2, 64),
		scores("attention_scores_softmax gpt2 chunk 64 of 1024", 1, 64, 1024, 12, 12, 64),
		rmsnormGemm("rmsnorm_gemm qwen2.5-0.5b qkv decode T=1", 1, 896, 1152, true),
		rmsnormGemm("rmsnorm_gemm qwen2.5-0.5b gate_up decode T=1", 1, 896, 9728, false),
		layernormGemm("layernorm_gemm gpt2 qkv decode T=1", 1, 768, 2304),
		rmsnormGemm("rmsnorm_gemm phi3-mini qkv decode T=1", 1, 3072, 9216, false),
		rmsnormGemm("rmsnorm_gemm qwen2.5-0.5b qkv prefill T=512", 512, 896, 1152, true),
		swigluGemm("swiglu_gemm qwen2.5-0.5b down decode T=1", 1, 4864, 896),
		swigluGemm("swiglu_gemm phi3-mini down decode T=1", 1, 8192, 3072),
		gptFFN("gpt_ffn gpt2 decode T=1", 1, 768, 3072),
		gptFFN("gpt_ffn gpt2 prefill T=128", 128, 768, 3072),
		{Name: "swiglu_ffn qwen2.5-0.5b T=128", Op: "swiglu_ffn", Params: `{}`,
			Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{128, 896}, nil),
				in("w_gate", tensor.F16, []int{4864, 896}, normal(1/math.Sqrt(896), 0)), in("w_up", tensor.F16, []int{4864, 896}, normal(1/math.Sqrt(896), 0)),
				in("w_down", tensor.F16, []int{896, 4864}, normal(1/math.Sqrt(4864), 0))},
			Flops: 2 * 128 * 3 * 896 * 4864, Bytes: 3*elems(4864, 896)*f16 + 2*elems(128, 896)*f16},
	}
}

// logitSoftcap reads t rows of Gemma 2's fp32 logits (std 40: most past the cap of 30) and
// writes their capped values; its peer is transformers' eager logits / cap, tanh, * cap.
func logitSoftcap(name string, t int) Case {
	const vocab = 256000
	return Case{Name: name, Op: "logit_softcap", Params: `{"softcap": 30, "inplace": false}`,
		Inputs: []conformance.InputSpec{in("x", tensor.F32, []int{t, vocab}, normal(40, 0))},
		Bytes:  2 * elems(t, vocab) * f32}
}

// rmsnormGemm reads x and the residual, writes the sum, and reads the projection once.
func rmsnormGemm(name string, t, h, n int, bias bool) Case {
	scale := normal(1/math.Sqrt(float64(h)), 0)
	inputs := []conformance.InputSpec{in("x", tensor.F16, []int{t, h}, nil), in("residual", tensor.F16, []int{t, h}, nil),
		in("weight", tensor.F16, []int{h}, ones), in("w", tensor.F16, []int{n, h}, scale)}
	bytes := elems(n, h)*f16 + 3*elems(t, h)*f16 + elems(t, n)*f16
	if bias {
		inputs = append(inputs, in("bias", tensor.F16, []int{n}, nil))
		bytes += int64(n) * f16
	}
	return Case{Name: name, Op: "rmsnorm_gemm", Params: fmt.Sprintf(`{"eps": 1e-6, "has_bias": %v, "has_residual": true}`, bias),
		Inputs: inputs, Flops: int64(2 * t * n * h), Bytes: bytes}
}

// layernormGemm is rmsnormGemm with LayerNorm's gamma and beta.
func layernormGemm(name string, t, h, n int) Case {
	scale := normal(1/math.Sqrt(float64(h)), 0)
	inputs := []conformance.InputSpec{in("x", tensor.F16, []int{t, h}, nil), in("residual", tensor.F16, []int{t, h}, nil),
		in("gamma", tensor.F16, []int{h}, ones), in("beta", tensor.F16, []int{h}, nil),
		in("w", tensor.F16, []int{n, h}, scale), in("bias", tensor.F16, []int{n}, nil)}
	bytes := elems(n, h)*f16 + 3*elems(t, h)*f16 + elems(t, n)*f16 + 2*int64(h)*f16 + int64(n)*f16
	return Case{Name: name, Op: "layernorm_gemm", Params: `{"eps": 1e-5, "has_bias": true, "has_residual": true}`,
		Inputs: inputs, Flops: int64(2 * t * n * h), Bytes: bytes}
}

// swigluGemm reads gate, up and the down projection once and writes out.
func swigluGemm(name string, t, f, n int) Case {
	return Case{Name: name, Op: "swiglu_gemm", Params: `{"has_bias": false}`,
		Inputs: []conformance.InputSpec{in("gate", tensor.F16, []int{t, f}, normal(2, 0)), in("up", tensor.F16, []int{t, f}, nil),
			in("w", tensor.F16, []int{n, f}, normal(1/math.Sqrt(float64(f)), 0))},
		Flops: int64(2 * t * f * n), Bytes: elems(n, f)*f16 + 2*elems(t, f)*f16 + elems(t, n)*f16}
}

// gptFFN reads both projections once, x, and writes out (the activation stays in L2 at decode).
func gptFFN(name string, t, h, f int) Case {
	return Case{Name: name, Op: "gpt_ffn", Params: `{"gelu": "tanh", "has_bias": true}`,
		Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{t, h}, nil),
			in("w1", tensor.F16, []int{f, h}, normal(1/math.Sqrt(float64(h)), 0)), in("b1", tensor.F16, []int{f}, nil),
			in("w2", tensor.F16, []int{h, f}, normal(1/math.Sqrt(float64(f)), 0)), in("b2", tensor.F16, []int{h}, nil)},
		Flops: int64(4 * t * f * h), Bytes: 2*elems(f, h)*f16 + 2*elems(t, h)*f16 + int64(f+h)*f16}
}

// gemmSwiGLU reads the stacked gate/up weight and x once and writes the activation.
func gemmSwiGLU(name string, t, h, f int) Case {
	return Case{Name: name, Op: "gemm_swiglu", Params: `{}`,
		Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{t, h}, nil),
			in("w_gate_up", tensor.F16, []int{2 * f, h}, normal(1/math.Sqrt(float64(h)), 0))},
		Flops: int64(2 * t * 2 * f * h), Bytes: elems(2*f, h)*f16 + elems(t, h)*f16 + elems(t, f)*f16}
}

// softcapped gives an attention case Gemma 2's logit soft cap (params.softcap; its peer caps
// the scores too: torch_peer.py's flex_attention score_mod, or eager math).
func softcapped(c Case, softcap float64) Case {
	c.Params = strings.TrimSuffix(c.Params, "}") + fmt.Sprintf(`, "softcap": %v}`, softcap)
	return c
}

// decode reads each sequence's whole K and V cache once.
func decode(name string, b, l, nH, nKV, d int) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "scale": %v}`, nH, nKV, d, 1/math.Sqrt(float64(d)))
	return Case{Name: name, Op: "attention_decode", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{b, nH, d}, nil),
			in("k_cache", tensor.F16, []int{b, l, nKV, d}, nil), in("v_cache", tensor.F16, []int{b, l, nKV, d}, nil),
			in("cache_lens", tensor.I32, []int{b}, conformance.Const(float64(l)))},
		Bytes: 2*elems(b, l, nKV, d)*f16 + 2*elems(b, nH, d)*f16,
	}
}

// decodePaged is decode over a paged cache: b sequences of l positions in pages of bs, the
// pool exactly their pages, each table the sequence's pages in order.
func decodePaged(name string, b, l, bs, nH, nKV, d int) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "scale": %v}`, nH, nKV, d, 1/math.Sqrt(float64(d)))
	w := l / bs
	return Case{Name: name, Op: "attention_decode_paged", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{b, nH, d}, nil),
			in("k_cache", tensor.F16, []int{b * w, bs, nKV, d}, nil), in("v_cache", tensor.F16, []int{b * w, bs, nKV, d}, nil),
			in("block_table", tensor.I32, []int{b, w}, conformance.OnePerBucket(b*w, b*w)),
			in("cache_lens", tensor.I32, []int{b}, conformance.Const(float64(l)))},
		Bytes: 2*elems(b, l, nKV, d)*f16 + 2*elems(b, nH, d)*f16 + int64(b*w*4),
	}
}

// prefillPaged is one sequence's prefill of t new tokens whose cache (prefix and new tokens,
// l positions) is in pages of bs, the pool exactly its pages in order.
func prefillPaged(name string, t, l, bs, nH, nKV, d int) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "scale": %v}`, nH, nKV, d, 1/math.Sqrt(float64(d)))
	w := l / bs
	return Case{Name: name, Op: "attention_prefill_paged", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{t, nH, d}, nil),
			in("k_cache", tensor.F16, []int{w, bs, nKV, d}, nil), in("v_cache", tensor.F16, []int{w, bs, nKV, d}, nil),
			in("block_table", tensor.I32, []int{1, w}, conformance.OnePerBucket(w, w)),
			in("q_starts", tensor.I32, []int{2}, func(_ *rand.Rand, i int) float64 { return float64(i * t) }),
			in("kv_lens", tensor.I32, []int{1}, conformance.Const(float64(l)))},
		Bytes: 2*elems(l, nKV, d)*f16 + 2*elems(t, nH, d)*f16,
	}
}

// pagedFP8 is a paged attention case over an E4M3 pool instead of a 16-bit one (its name
// already the FP8 op's): the codes drawn as decodeFP8 draws them, per-head scales, half the
// pool's bytes.
func pagedFP8(c Case) Case {
	c.Op += "_fp8"
	var pool []int
	for i, spec := range c.Inputs {
		if spec.Name == "k_cache" || spec.Name == "v_cache" {
			c.Inputs[i] = in(spec.Name, tensor.F8E4M3, spec.Shape, normal(100, 0))
			pool = spec.Shape
		}
	}
	nKV := pool[2]
	c.Inputs = append(c.Inputs, in("k_scale", tensor.F32, []int{nKV}, normal(0.0002, 0.002)),
		in("v_scale", tensor.F32, []int{nKV}, normal(0.001, 0.01)))
	c.Bytes -= elems(pool...) * 2 * (f16 - 1)
	return c
}

// decodeFP8 is decode over E4M3 caches with per-head scales: one byte a cached value.
func decodeFP8(name string, b, l, nH, nKV, d int) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "scale": %v}`, nH, nKV, d, 1/math.Sqrt(float64(d)))
	return Case{Name: name, Op: "attention_decode_fp8", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{b, nH, d}, nil),
			in("k_cache", tensor.F8E4M3, []int{b, l, nKV, d}, normal(100, 0)), in("v_cache", tensor.F8E4M3, []int{b, l, nKV, d}, normal(100, 0)),
			in("cache_lens", tensor.I32, []int{b}, conformance.Const(float64(l))),
			in("k_scale", tensor.F32, []int{nKV}, normal(0.0002, 0.002)), in("v_scale", tensor.F32, []int{nKV}, normal(0.001, 0.01))},
		Bytes: 2*elems(b, l, nKV, d) + 2*elems(b, nH, d)*f16,
	}
}

// setRowsFP8 appends t 16-bit rows of heads x d into an E4M3 cache of r rows with per-head
// scales: the rows read, their codes written.
func setRowsFP8(name string, r, t, heads, d int) Case {
	return Case{Name: name, Op: "set_rows_fp8", Params: `{}`,
		Inputs: []conformance.InputSpec{in("dst", tensor.F8E4M3, []int{r, heads, d}, normal(100, 0)), in("src", tensor.F16, []int{t, heads, d}, normal(3, 0)),
			in("rows", tensor.I32, []int{t}, conformance.OnePerBucket(r, t)), in("scale", tensor.F32, []int{heads}, normal(0.001, 0.01))},
		Bytes: elems(t, heads, d) * (f16 + 1),
	}
}

// prefill counts the multiply-adds of QKᵀ and PV that the mask keeps: 2 matmuls x 2 flops x
// S² x D per head, halved when causal.
func prefill(name string, b, s, nH, nKV, d int, causal bool) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "causal": %v, "scale": %v}`, nH, nKV, d, causal, 1/math.Sqrt(float64(d)))
	flops := 2 * elems(b, nH, s, s, d)
	if !causal {
		flops *= 2
	}
	return Case{Name: name, Op: "attention_prefill", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{b, s, nH, d}, nil),
			in("k", tensor.F16, []int{b, s, nKV, d}, nil), in("v", tensor.F16, []int{b, s, nKV, d}, nil)},
		Flops: flops,
		Bytes: 2*elems(b, s, nH, d)*f16 + 2*elems(b, s, nKV, d)*f16,
	}
}

// scores writes the fp32 probabilities of every head and reads q and k once.
func scores(name string, b, sq, sk, nH, nKV, d int) Case {
	params := fmt.Sprintf(`{"n_heads": %d, "n_kv_heads": %d, "head_dim": %d, "causal": true, "scale": %v}`, nH, nKV, d, 1/math.Sqrt(float64(d)))
	return Case{Name: name, Op: "attention_scores_softmax", Params: params,
		Inputs: []conformance.InputSpec{in("q", tensor.F16, []int{b, sq, nH, d}, nil), in("k", tensor.F16, []int{b, sk, nKV, d}, nil)},
		Flops:  2 * elems(b, nH, sq, sk, d),
		Bytes:  elems(b, sq, nH, d)*f16 + elems(b, sk, nKV, d)*f16 + elems(b, nH, sq, sk)*f32,
	}
}

func gemm(name string, m, n, k int) Case {
	out, outBytes := "f16", int64(f16)
	if n > 100000 {
		out, outBytes = "f32", f32 // an LM head writes fp32 logits
	}
	return Case{Name: name, Op: "gemm", Params: fmt.Sprintf(`{"has_bias": false, "out_dtype": %q}`, out),
		Inputs: []conformance.InputSpec{in("x", tensor.F16, []int{m, k}, nil), in("w", tensor.F16, []int{n, k}, normal(1/math.Sqrt(float64(k)), 0))},
		Flops:  2 * elems(m, n, k),
		Bytes:  elems(m, k)*f16 + elems(n, k)*f16 + elems(m, n)*outBytes,
	}
}

// gemmFP8Case is an FP8 GEMM into bf16 with block (1x128, 128x128) or per-channel scales: FP8
// values spread over the format, scales ~0.01 so the sums stay O(sqrt(K)).
func gemmFP8Case(name string, m, n, k int, block bool) Case {
	scales, xs, ws := "channel", []int{m, 1}, []int{n, 1}
	if block {
		scales, xs, ws = "block", []int{m, k / 128}, []int{(n + 127) / 128, k / 128}
	}
	sc := normal(0.001, 0.01)
	return Case{Name: name, Op: "gemm_fp8", Params: fmt.Sprintf(`{"scales": %q, "out_dtype": "bf16"}`, scales),
		Inputs: []conformance.InputSpec{in("x", tensor.F8E4M3, []int{m, k}, normal(100, 0)), in("x_scales", tensor.F32, xs, sc),
			in("w", tensor.F8E4M3, []int{n, k}, normal(100, 0)), in("w_scales", tensor.F32, ws, sc)},
		Flops: 2 * elems(m, n, k),
		Bytes: elems(m, k) + elems(n, k) + elems(m, n)*f16 + int64(xs[0]*xs[1]+ws[0]*ws[1])*f32,
	}
}

// w4a16Case is a 4-bit weight GEMM in groups of 128, bf16 activations: the packed words (any bits
// are codes), fp16 scales' bf16 twin, g_idx k / 128 for GPTQ. Its floor is the packed weight read
// once (k n / 2 bytes), the scales and zero points, x and out.
func w4a16Case(name, format string, m, n, k int) Case {
	const g = 128
	words := conformance.IntsIn(-1<<31, 1<<31)
	qw := []int{k, n / 8}
	var gIdx []conformance.InputSpec
	if format == "gptq" {
		qw = []int{k / 8, n}
		gIdx = []conformance.InputSpec{in("g_idx", tensor.I32, []int{k}, func(_ *rand.Rand, i int) float64 { return float64(i / g) })}
	}
	return Case{Name: name, Op: "gemm_w4a16", Params: fmt.Sprintf(`{"format": %q, "group_size": %d}`, format, g),
		Inputs: append([]conformance.InputSpec{in("x", tensor.BF16, []int{m, k}, nil),
			in("qweight", tensor.I32, qw, words), in("qzeros", tensor.I32, []int{k / g, n / 8}, words),
			in("scales", tensor.BF16, []int{k / g, n}, normal(0.002, 0.01))}, gIdx...),
		Flops: 2 * elems(m, n, k),
		Bytes: elems(k, n)/2 + elems(k/g, n)*(f16+1) + elems(m, k)*f16 + elems(m, n)*f16,
	}
}

// tiled is c on the weight in the backend's own layout (Case.Tiled).
func tiled(c Case) Case {
	c.Tiled = true
	return c
}

// moeRouter chooses k of e experts for t tokens: the logits read, the choices written.
func moeRouter(name string, t, e, k int, renormalize bool) Case {
	return Case{Name: name, Op: "moe_router", Params: fmt.Sprintf(`{"top_k": %d, "renormalize": %v}`, k, renormalize),
		Inputs: []conformance.InputSpec{in("logits", tensor.F16, []int{t, e}, normal(2, 0))},
		Bytes:  elems(t, e)*f16 + elems(t, k)*(f32+i32),
	}
}

// moeSharedAdd reads x, routed and shared [t, h] and the gate row, and writes out: the shared
// expert's add after the experts' sum; its peer is transformers' eager `routed +
// sigmoid(F.linear(x, gate)) * shared`. The gate is drawn so that the logits have std 2.
func moeSharedAdd(name string, t, h int) Case {
	return Case{Name: name, Op: "moe_shared_add", Params: `{"inplace": false}`,
		Inputs: []conformance.InputSpec{in("routed", tensor.F16, []int{t, h}, nil), in("shared", tensor.F16, []int{t, h}, nil),
			in("x", tensor.F16, []int{t, h}, nil), in("gate", tensor.F16, []int{1, h}, normal(2/math.Sqrt(float64(h)), 0))},
		Bytes: 4*elems(t, h)*f16 + int64(h)*f16,
	}
}

// moeFFN is the expert block of t tokens, each routed to k distinct experts of e drawn
// uniformly, SwiGLU experts of hidden h and ffn f. Bytes is the floor: the weights of the
// experts a uniform routing reaches on average, e (1 - (1 - k/e)^t), read once, plus x and out.
func moeFFN(name string, t, h, f, e, k int) Case {
	return moeFFNDType(name, t, h, f, e, k, tensor.F16)
}

// moeFFNDType is moeFFN in the storage type dt.
func moeFFNDType(name string, t, h, f, e, k int, dt tensor.DType) Case {
	touched := float64(e) * (1 - math.Pow(1-float64(k)/float64(e), float64(t)))
	return Case{Name: name, Op: "moe_ffn", Params: `{}`,
		Inputs: []conformance.InputSpec{in("x", dt, []int{t, h}, nil),
			in("ids", tensor.I32, []int{t, k}, conformance.DistinctPerRow(e, k)),
			in("weights", tensor.F32, []int{t, k}, conformance.Const(1/float64(k))),
			in("gate_up", dt, []int{e, 2 * f, h}, normal(1/math.Sqrt(float64(h)), 0)),
			in("down", dt, []int{e, h, f}, normal(1/math.Sqrt(float64(f)), 0))},
		Flops: int64(6 * t * k * h * f),
		Bytes: int64(touched*float64(3*f*h*f16)) + 2*elems(t, h)*f16,
	}
}
