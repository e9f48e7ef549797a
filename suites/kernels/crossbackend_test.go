package kernels_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// The cross-backend check runs every op on fresh random inputs larger than the golden
// cases, on the backend under test and on the CPU backend, and compares the two. New data
// every run (from Ginkgo's random seed, printed at the top of the run and in every failure),
// so it explores inputs no golden file holds.

type crossCase struct {
	op     string
	params string
	inputs []conformance.InputSpec
}

var (
	in        = conformance.Spec
	normalGen = conformance.Normal
	intsUpTo  = conformance.IntsBelow
	nearOne   = conformance.Normal(0.1, 1)
)

var crossCases = []crossCase{
	{"residual_add", `{"inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{512, 4097}, nil), in("residual", tensor.F16, []int{512, 4097}, nil)}},
	{"rmsnorm", `{"eps": 1e-6}`, []conformance.InputSpec{in("x", tensor.F16, []int{257, 5120}, nil), in("weight", tensor.F16, []int{5120}, nearOne)}},
	{"layernorm", `{"eps": 1e-5}`, []conformance.InputSpec{in("x", tensor.F16, []int{257, 3001}, normalGen(2, 10)), in("gamma", tensor.F16, []int{3001}, nearOne), in("beta", tensor.F16, []int{3001}, normalGen(0.1, 0))}},
	{"layernorm_residual", `{"eps": 1e-5}`, []conformance.InputSpec{in("x", tensor.F16, []int{129, 4096}, nil), in("residual", tensor.F16, []int{129, 4096}, nil), in("gamma", tensor.F16, []int{4096}, nearOne), in("beta", tensor.F16, []int{4096}, normalGen(0.1, 0))}},
	{"rmsnorm_residual", `{"eps": 1e-6, "inplace": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{129, 5120}, nil), in("residual", tensor.F16, []int{129, 5120}, nil), in("weight", tensor.F16, []int{5120}, nearOne)}},
	{"rope", `{"freq_base": 1e6, "rope_dim": 128, "head_dim": 128}`, []conformance.InputSpec{in("q", tensor.F16, []int{300, 16, 128}, nil), in("k", tensor.F16, []int{300, 4, 128}, nil), in("positions", tensor.I32, []int{300}, intsUpTo(8192))}},
	// LongRoPE's two tables, the switch inside the batch, and an attention factor.
	{"rope", `{"freq_base": 1e4, "rope_dim": 96, "head_dim": 96, "attention_factor": 1.1902381, "long_from": 4096}`, []conformance.InputSpec{in("q", tensor.F16, []int{300, 8, 96}, nil), in("k", tensor.F16, []int{300, 8, 96}, nil), in("positions", tensor.I32, []int{300}, intsUpTo(8192)), in("freq_divisor", tensor.F32, []int{48}, normalGen(0.2, 2)), in("long_divisor", tensor.F32, []int{48}, normalGen(5, 32))}},
	{"attention_prefill", fmt.Sprintf(`{"n_heads": 14, "n_kv_heads": 2, "head_dim": 64, "causal": true, "scale": %v}`, 1/math.Sqrt(64)), []conformance.InputSpec{in("q", tensor.F16, []int{2, 200, 14, 64}, nil), in("k", tensor.F16, []int{2, 200, 2, 64}, nil), in("v", tensor.F16, []int{2, 200, 2, 64}, nil)}},
	// Gemma 2's soft cap at Gemma-2-9B's 16 heads on 8 of 256, scores spread past the cap (q, k std 8).
	{"attention_prefill", fmt.Sprintf(`{"n_heads": 16, "n_kv_heads": 8, "head_dim": 256, "causal": true, "scale": %v, "window": 50, "softcap": 50}`, 1/math.Sqrt(256)), []conformance.InputSpec{in("q", tensor.F16, []int{1, 130, 16, 256}, normalGen(8, 0)), in("k", tensor.F16, []int{1, 130, 8, 256}, normalGen(8, 0)), in("v", tensor.F16, []int{1, 130, 8, 256}, nil)}},
	{"attention_decode", fmt.Sprintf(`{"n_heads": 32, "n_kv_heads": 16, "head_dim": 128, "scale": %v, "softcap": 50}`, 1/math.Sqrt(144)), []conformance.InputSpec{in("q", tensor.BF16, []int{2, 32, 128}, normalGen(8, 0)), in("k_cache", tensor.BF16, []int{2, 700, 16, 128}, normalGen(8, 0)), in("v_cache", tensor.BF16, []int{2, 700, 16, 128}, nil), in("cache_lens", tensor.I32, []int{2}, conformance.IntsIn(1, 701))}},
	{"attention_decode", fmt.Sprintf(`{"n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "scale": %v}`, 1/math.Sqrt(128)), []conformance.InputSpec{in("q", tensor.F16, []int{3, 32, 128}, nil), in("k_cache", tensor.F16, []int{3, 2500, 8, 128}, nil), in("v_cache", tensor.F16, []int{3, 2500, 8, 128}, nil), in("cache_lens", tensor.I32, []int{3}, conformance.IntsIn(1, 2501))}},
	{"swiglu", `{}`, []conformance.InputSpec{in("gate", tensor.F16, []int{64, 11008}, normalGen(3, 0)), in("up", tensor.F16, []int{64, 11008}, nil)}},
	{"swiglu_ffn", `{}`, []conformance.InputSpec{in("x", tensor.F16, []int{24, 1024}, nil), in("w_gate", tensor.F16, []int{2816, 1024}, normalGen(1/32.0, 0)), in("w_up", tensor.F16, []int{2816, 1024}, normalGen(1/32.0, 0)), in("w_down", tensor.F16, []int{1024, 2816}, normalGen(1/math.Sqrt(2816), 0))}},
	{"gemm_swiglu", `{}`, []conformance.InputSpec{in("x", tensor.F16, []int{24, 1024}, nil), in("w_gate_up", tensor.F16, []int{2 * 2816, 1024}, normalGen(1/32.0, 0))}},
	{"attention_scores_softmax", fmt.Sprintf(`{"n_heads": 14, "n_kv_heads": 2, "head_dim": 64, "causal": true, "scale": %v}`, 1/math.Sqrt(64)), []conformance.InputSpec{in("q", tensor.F16, []int{2, 33, 14, 64}, nil), in("k", tensor.F16, []int{2, 300, 2, 64}, nil)}},
	{"rmsnorm_gemm", `{"eps": 1e-6, "has_bias": true, "has_residual": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{5, 1536}, nil), in("residual", tensor.F16, []int{5, 1536}, nil), in("weight", tensor.F16, []int{1536}, nearOne), in("w", tensor.F16, []int{2048, 1536}, normalGen(1/math.Sqrt(1536), 0)), in("bias", tensor.F16, []int{2048}, nil)}},
	{"layernorm_gemm", `{"eps": 1e-5, "has_bias": true, "has_residual": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{3, 1280}, nil), in("residual", tensor.F16, []int{3, 1280}, nil), in("gamma", tensor.F16, []int{1280}, nearOne), in("beta", tensor.F16, []int{1280}, nil), in("w", tensor.F16, []int{1600, 1280}, normalGen(1/math.Sqrt(1280), 0)), in("bias", tensor.F16, []int{1600}, nil)}},
	{"swiglu_gemm", `{"has_bias": true}`, []conformance.InputSpec{in("gate", tensor.F16, []int{3, 2816}, normalGen(3, 0)), in("up", tensor.F16, []int{3, 2816}, nil), in("w", tensor.F16, []int{1024, 2816}, normalGen(1/math.Sqrt(2816), 0)), in("bias", tensor.F16, []int{1024}, nil)}},
	{"gpt_ffn", `{"gelu": "tanh", "has_bias": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{3, 1024}, nil), in("w1", tensor.F16, []int{4096, 1024}, normalGen(1/32.0, 0)), in("b1", tensor.F16, []int{4096}, nil), in("w2", tensor.F16, []int{1024, 4096}, normalGen(1/64.0, 0)), in("b2", tensor.F16, []int{1024}, nil)}},
	{"gelu", `{"inplace": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{96, 10001}, normalGen(2, 0))}},
	{"gelu_tanh", `{"inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{96, 10001}, normalGen(2, 0))}},
	{"gelu_scale", `{"gelu": "erf", "scale": -0.7071067811865476, "inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{96, 10001}, normalGen(2, 0))}},
	{"pos_embedding", `{}`, []conformance.InputSpec{in("x", tensor.F16, []int{700, 1024}, nil), in("table", tensor.F16, []int{2048, 1024}, nil), in("positions", tensor.I32, []int{700}, intsUpTo(2048))}},
	{"embedding", `{}`, []conformance.InputSpec{in("ids", tensor.I32, []int{333}, intsUpTo(32000)), in("table", tensor.F16, []int{32000, 512}, nil)}},
	{"set_rows", `{}`, []conformance.InputSpec{in("dst", tensor.F16, []int{4096, 8, 128}, nil), in("src", tensor.F16, []int{333, 8, 128}, nil), in("rows", tensor.I32, []int{333}, conformance.OnePerBucket(4096, 333))}},
	{"gemm", `{"has_bias": true, "out_dtype": "f16"}`, []conformance.InputSpec{in("x", tensor.F16, []int{77, 2048}, nil), in("w", tensor.F16, []int{1536, 2048}, normalGen(1/math.Sqrt(2048), 0)), in("bias", tensor.F16, []int{1536}, nil)}},
	{"softmax", `{}`, []conformance.InputSpec{in("x", tensor.F32, []int{8, 100003}, normalGen(4, 0))}},
	// Gemma 2's final logit soft cap at its vocabulary (256000) on fp32 logits of std 40, in place,
	// and on bf16 logits of an odd width.
	{"logit_softcap", `{"softcap": 30, "inplace": true}`, []conformance.InputSpec{in("x", tensor.F32, []int{4, 256000}, normalGen(40, 0))}},
	{"logit_softcap", `{"softcap": 30, "inplace": false}`, []conformance.InputSpec{in("x", tensor.BF16, []int{7, 50001}, normalGen(40, 0))}},
	{"quant_fp8", `{"mode": "dynamic", "group_size": 128}`, []conformance.InputSpec{in("x", tensor.BF16, []int{333, 7168}, normalGen(3, 0))}},
	{"quant_fp8", `{"mode": "dynamic", "group_size": 5120}`, []conformance.InputSpec{in("x", tensor.F16, []int{257, 5120}, nil)}},
	// FP8 values spread over the format (std 100 of 448), scales ~0.01: products ~1, sums ~sqrt(K)
	{"gemm_fp8", `{"scales": "block", "out_dtype": "bf16"}`, []conformance.InputSpec{in("x", tensor.F8E4M3, []int{77, 2048}, normalGen(100, 0)), in("x_scales", tensor.F32, []int{77, 16}, normalGen(0.001, 0.01)),
		in("w", tensor.F8E4M3, []int{1000, 2048}, normalGen(100, 0)), in("w_scales", tensor.F32, []int{8, 16}, normalGen(0.001, 0.01))}},
	{"gemm_fp8", `{"scales": "channel", "out_dtype": "f16"}`, []conformance.InputSpec{in("x", tensor.F8E4M3, []int{5, 1536}, normalGen(100, 0)), in("x_scales", tensor.F32, []int{5, 1}, normalGen(0.001, 0.01)),
		in("w", tensor.F8E4M3, []int{1024, 1536}, normalGen(100, 0)), in("w_scales", tensor.F32, []int{1024, 1}, normalGen(0.001, 0.01))}},
	{"quant_fp8", `{"mode": "static"}`, []conformance.InputSpec{in("x", tensor.F16, []int{129, 4096}, normalGen(200, 0)), in("scale", tensor.F32, []int{1}, nearOne)}},
	// 4-bit weights: any int32 word is eight valid codes; AWQ at a prefill of 7 rows (cuBLAS on
	// the dequantised weight), GPTQ with act-order groups at a decode row (the gemv).
	{"gemm_w4a16", `{"format": "awq", "group_size": 128}`, []conformance.InputSpec{in("x", tensor.BF16, []int{7, 2048}, nil),
		in("qweight", tensor.I32, []int{2048, 128}, conformance.IntsIn(-1<<31, 1<<31)), in("qzeros", tensor.I32, []int{16, 128}, conformance.IntsIn(-1<<31, 1<<31)),
		in("scales", tensor.BF16, []int{16, 1024}, normalGen(0.002, 0.01))}},
	{"gemm_w4a16", `{"format": "gptq", "group_size": 128, "act_order": true}`, []conformance.InputSpec{in("x", tensor.F16, []int{1, 1024}, nil),
		in("qweight", tensor.I32, []int{128, 512}, conformance.IntsIn(-1<<31, 1<<31)), in("qzeros", tensor.I32, []int{8, 64}, conformance.IntsIn(-1<<31, 1<<31)),
		in("scales", tensor.F16, []int{8, 512}, normalGen(0.002, 0.01)), in("g_idx", tensor.I32, []int{1024}, conformance.IntsBelow(8))}},
	// Mixture of experts: Qwen3-MoE's router over 128 experts (random logits rarely tie; any tie
	// is ranked by the rule both backends share), and a prefill-shaped expert block at a
	// Qwen3-30B-A3B-like width with 64-row tiles.
	{"moe_router", `{"top_k": 8, "renormalize": true}`, []conformance.InputSpec{in("logits", tensor.BF16, []int{257, 128}, normalGen(2, 0))}},
	{"moe_ffn", `{}`, []conformance.InputSpec{in("x", tensor.F16, []int{300, 256}, nil),
		in("ids", tensor.I32, []int{300, 8}, conformance.DistinctPerRow(32, 8)), in("weights", tensor.F32, []int{300, 8}, normalGen(0.05, 0.125)),
		in("gate_up", tensor.F16, []int{32, 192, 256}, normalGen(0.0625, 0)), in("down", tensor.F16, []int{32, 256, 96}, normalGen(0.1, 0))}},
	// Qwen2-MoE's gated shared expert: a prefill at Qwen2-57B-A14B's 3584 (logits of std 2 through
	// the gate's draw), and in place over routed in bf16 at Qwen1.5-MoE-A2.7B's 2048.
	{"moe_shared_add", `{"inplace": false}`, []conformance.InputSpec{in("routed", tensor.F16, []int{513, 3584}, nil),
		in("shared", tensor.F16, []int{513, 3584}, nil), in("x", tensor.F16, []int{513, 3584}, nil),
		in("gate", tensor.F16, []int{1, 3584}, normalGen(2/math.Sqrt(3584), 0))}},
	{"moe_shared_add", `{"inplace": true}`, []conformance.InputSpec{in("routed", tensor.BF16, []int{77, 2048}, nil),
		in("shared", tensor.BF16, []int{77, 2048}, nil), in("x", tensor.BF16, []int{77, 2048}, nil),
		in("gate", tensor.BF16, []int{1, 2048}, normalGen(3/math.Sqrt(2048), 0))}},
	// The FP8 KV cache: a prefill's append at Llama-3-8B's KV row with per-head scales, and a
	// ragged decode batch over 2500-position caches with them.
	{"set_rows_fp8", `{}`, []conformance.InputSpec{in("dst", tensor.F8E4M3, []int{4096, 8, 128}, normalGen(100, 0)), in("src", tensor.BF16, []int{333, 8, 128}, normalGen(3, 0)),
		in("rows", tensor.I32, []int{333}, conformance.OnePerBucket(4096, 333)), in("scale", tensor.F32, []int{8}, normalGen(0.001, 0.01))}},
	{"attention_decode_fp8", fmt.Sprintf(`{"n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "scale": %v}`, 1/math.Sqrt(128)), []conformance.InputSpec{in("q", tensor.BF16, []int{3, 32, 128}, nil),
		in("k_cache", tensor.F8E4M3, []int{3, 2500, 8, 128}, normalGen(100, 0)), in("v_cache", tensor.F8E4M3, []int{3, 2500, 8, 128}, normalGen(100, 0)),
		in("cache_lens", tensor.I32, []int{3}, conformance.IntsIn(1, 2501)), in("k_scale", tensor.F32, []int{8}, normalGen(0.0002, 0.002)), in("v_scale", tensor.F32, []int{8}, normalGen(0.001, 0.01))}},
	// Paged decode at Llama-3-8B's heads: a pool of 200 pages of 16, tables of 12 random pages
	// (some shared, as prefix caching shares them), lengths anywhere up to the tables' reach.
	{"attention_decode_paged", fmt.Sprintf(`{"n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "scale": %v}`, 1/math.Sqrt(128)), []conformance.InputSpec{in("q", tensor.F16, []int{3, 32, 128}, nil),
		in("k_cache", tensor.F16, []int{200, 16, 8, 128}, nil), in("v_cache", tensor.F16, []int{200, 16, 8, 128}, nil),
		in("block_table", tensor.I32, []int{3, 12}, conformance.IntsIn(0, 200)), in("cache_lens", tensor.I32, []int{3}, conformance.IntsIn(1, 193))}},
	// Paged prefill at Qwen2.5-0.5B's heads: a 100-token chunk on a 600 prefix, a decode on 899,
	// 199 new tokens on a 51 prefix; pages of 16 drawn at random from a pool of 300.
	{"attention_prefill_paged", fmt.Sprintf(`{"n_heads": 14, "n_kv_heads": 2, "head_dim": 64, "scale": %v}`, 1/math.Sqrt(64)), []conformance.InputSpec{in("q", tensor.F16, []int{300, 14, 64}, nil),
		in("k_cache", tensor.F16, []int{300, 16, 2, 64}, nil), in("v_cache", tensor.F16, []int{300, 16, 2, 64}, nil),
		in("block_table", tensor.I32, []int{3, 64}, conformance.IntsIn(0, 300)), in("q_starts", tensor.I32, []int{4}, listed(0, 100, 101, 300)),
		in("kv_lens", tensor.I32, []int{3}, listed(700, 900, 250))}},
	// The same two over E4M3 pools with per-head and per-tensor scales: decode at Llama-3-8B's
	// heads in bf16 with a sliding window of 700, prefill at Qwen2.5-0.5B's.
	{"attention_decode_paged_fp8", fmt.Sprintf(`{"n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "scale": %v, "window": 700}`, 1/math.Sqrt(128)), []conformance.InputSpec{in("q", tensor.BF16, []int{3, 32, 128}, nil),
		in("k_cache", tensor.F8E4M3, []int{200, 16, 8, 128}, normalGen(100, 0)), in("v_cache", tensor.F8E4M3, []int{200, 16, 8, 128}, normalGen(100, 0)),
		in("block_table", tensor.I32, []int{3, 64}, conformance.IntsIn(0, 200)), in("cache_lens", tensor.I32, []int{3}, conformance.IntsIn(1, 1025)),
		in("k_scale", tensor.F32, []int{8}, normalGen(0.0002, 0.002)), in("v_scale", tensor.F32, []int{8}, normalGen(0.001, 0.01))}},
	{"attention_prefill_paged_fp8", fmt.Sprintf(`{"n_heads": 14, "n_kv_heads": 2, "head_dim": 64, "scale": %v}`, 1/math.Sqrt(64)), []conformance.InputSpec{in("q", tensor.F16, []int{300, 14, 64}, nil),
		in("k_cache", tensor.F8E4M3, []int{300, 16, 2, 64}, normalGen(100, 0)), in("v_cache", tensor.F8E4M3, []int{300, 16, 2, 64}, normalGen(100, 0)),
		in("block_table", tensor.I32, []int{3, 64}, conformance.IntsIn(0, 300)), in("q_starts", tensor.I32, []int{4}, listed(0, 100, 101, 300)),
		in("kv_lens", tensor.I32, []int{3}, listed(700, 900, 250)), in("k_scale", tensor.F32, []int{1}, normalGen(0.0002, 0.002)), in("v_scale", tensor.F32, []int{1}, normalGen(0.001, 0.01))}},
	// The fused quantisers: DeepSeek-V3's hidden size in 1x128 groups with a residual written in
	// place, per token at 5120, static with a scale that saturates the largest values; SwiGLU at
	// Llama-3-8B's intermediate size in 1x128 groups, per token at Qwen2.5-0.5B's, static.
	{"rmsnorm_quant_fp8", `{"eps": 1e-6, "mode": "dynamic", "group_size": 128, "has_residual": true, "inplace": true}`, []conformance.InputSpec{in("x", tensor.BF16, []int{333, 7168}, nil), in("residual", tensor.BF16, []int{333, 7168}, normalGen(3, 0)), in("weight", tensor.BF16, []int{7168}, nearOne)}},
	{"rmsnorm_quant_fp8", `{"eps": 1e-5, "mode": "dynamic", "group_size": 5120, "has_residual": false, "inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{257, 5120}, nil), in("weight", tensor.F16, []int{5120}, nearOne)}},
	{"rmsnorm_quant_fp8", `{"eps": 1e-6, "mode": "static", "has_residual": true, "inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{129, 4096}, nil), in("residual", tensor.F16, []int{129, 4096}, nil), in("weight", tensor.F16, []int{4096}, nearOne), in("scale", tensor.F32, []int{1}, normalGen(0.001, 0.008))}},
	{"swiglu_quant_fp8", `{"mode": "dynamic", "group_size": 128}`, []conformance.InputSpec{in("gate", tensor.BF16, []int{64, 14336}, normalGen(2, 0)), in("up", tensor.BF16, []int{64, 14336}, nil)}},
	{"swiglu_quant_fp8", `{"mode": "dynamic", "group_size": 4864}`, []conformance.InputSpec{in("gate", tensor.F16, []int{33, 4864}, normalGen(2, 0)), in("up", tensor.F16, []int{33, 4864}, nil)}},
	{"swiglu_quant_fp8", `{"mode": "static"}`, []conformance.InputSpec{in("gate", tensor.F16, []int{64, 11008}, normalGen(2, 0)), in("up", tensor.F16, []int{64, 11008}, nil), in("scale", tensor.F32, []int{1}, normalGen(0.002, 0.02))}},
	// Gemma 3: GeGLU at Gemma-3-4B's ffn (10240) in its tanh form and an odd width in the exact
	// one; RMSNorm and its residual form with the fp32 weight 1 + w at Gemma-3-4B's hidden size
	// and at head_dim 256 (the q/k norm); the scaled embedding at Gemma-3-1B's width, sqrt(1152)
	// rounded to bf16 (34) as transformers rounds it.
	{"geglu", `{"gelu": "tanh"}`, []conformance.InputSpec{in("gate", tensor.BF16, []int{64, 10240}, normalGen(2, 0)), in("up", tensor.BF16, []int{64, 10240}, nil)}},
	{"geglu", `{"gelu": "erf"}`, []conformance.InputSpec{in("gate", tensor.F16, []int{33, 10001}, normalGen(2, 0)), in("up", tensor.F16, []int{33, 10001}, nil)}},
	{"rmsnorm", `{"eps": 1e-6}`, []conformance.InputSpec{in("x", tensor.BF16, []int{257, 2560}, nil), in("weight", tensor.F32, []int{2560}, nearOne)}},
	{"rmsnorm", `{"eps": 1e-6}`, []conformance.InputSpec{in("x", tensor.F16, []int{333 * 8, 256}, nil), in("weight", tensor.F32, []int{256}, nearOne)}},
	{"rmsnorm_residual", `{"eps": 1e-6, "inplace": false}`, []conformance.InputSpec{in("x", tensor.F16, []int{129, 2560}, nil), in("residual", tensor.F16, []int{129, 2560}, nil), in("weight", tensor.F32, []int{2560}, nearOne)}},
	{"embedding", `{"scale": 34}`, []conformance.InputSpec{in("ids", tensor.I32, []int{333}, intsUpTo(4096)), in("table", tensor.BF16, []int{4096, 1152}, nil)}},
}

// storage is the dtype of the case's 16-bit inputs (tensor.Invalid: none), which picks a
// tolerance kept per storage dtype (compare.Tolerances.KernelFor).
func (c crossCase) storage() tensor.DType {
	for _, in := range c.inputs {
		if in.DType.IsFloat16Bit() {
			return in.DType
		}
	}
	return tensor.Invalid
}

// twoRoundings widens a tolerance for comparing two fp16 results with each other rather
// than with the exact reference: each side carries its own rounding.
func twoRoundings(t compare.Tolerance) compare.Tolerance {
	scale := func(p *float64, f float64) *float64 {
		if p == nil {
			return nil
		}
		v := *p * f
		return &v
	}
	t.Atol, t.Rtol, t.MaxAbs = scale(t.Atol, 2), scale(t.Rtol, 2), scale(t.MaxAbs, 2)
	// each side may move its own share of FP8 codes by a step (max_steps stays: both lie within
	// one step of the reference's code, on the same side of it)
	t.MaxMismatch *= 2
	t.NMSE = scale(t.NMSE, 4)
	if t.MinCosine != nil {
		v := 1 - 4*(1-*t.MinCosine)
		t.MinCosine = &v
	}
	return t
}

var _ = Describe("cross-backend check", harness.Kernel, harness.GPU, func() {
	It("has a valid random case for every op, runnable on the CPU reference", func() {
		covered := map[string]bool{}
		for i, c := range crossCases {
			covered[c.op] = true
			src := conformance.Memory{Params: json.RawMessage(c.params), Tensors: conformance.RandomInputs(uint64(i), c.inputs)}
			_, err := conformance.Execute(cpu.New(), c.op, src)
			Expect(err).NotTo(HaveOccurred(), "cross-backend case %s", c.op)
		}
		for _, op := range backend.Ops {
			Expect(covered).To(HaveKey(op), "no cross-backend case for %s", op)
		}
	})

	seen := map[string]int{}
	for i, c := range crossCases {
		// spec names are unique: a restart after a hang skips the specs reported by name
		name := c.op
		if seen[c.op]++; seen[c.op] > 1 {
			name = fmt.Sprintf("%s (case %d)", c.op, seen[c.op])
		}
		It(fmt.Sprintf("%s agrees with the CPU backend on fresh random inputs", name), harness.Op(c.op), func() {
			if dev.Info().Backend == "cpu" {
				Skip("the backend under test is the CPU backend itself")
			}
			seed := uint64(GinkgoRandomSeed()) + uint64(i)
			src := conformance.Memory{Params: json.RawMessage(c.params), Tensors: conformance.RandomInputs(seed, c.inputs)}
			want, err := conformance.Execute(cpu.New(), c.op, src)
			Expect(err).NotTo(HaveOccurred())
			got, err := conformance.Execute(dev, c.op, src)
			harness.SkipUnsupported(err)
			Expect(err).NotTo(HaveOccurred(), "seed %d", seed)
			for name, g := range got {
				tol, err := tols.KernelForOutput(c.op, name, g.DType, c.storage())
				Expect(err).NotTo(HaveOccurred())
				tol = twoRoundings(tol)
				res, err := compare.Compare(g, want[name], tol)
				Expect(err).NotTo(HaveOccurred())
				Expect(res.Pass()).To(BeTrue(), "%s output %s differs from the CPU backend (inputs from seed %d; rerun with --seed %d):\n%s",
					c.op, name, seed, GinkgoRandomSeed(), res.Table())
			}
		})
	}
})

// listed fills an input with the given values in order (a spec's fixed index data).
func listed(vals ...float64) func(*rand.Rand, int) float64 {
	return func(_ *rand.Rand, i int) float64 { return vals[i] }
}
