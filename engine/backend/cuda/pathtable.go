package cuda

import (
	"sort"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// KernelPaths lists every path of every op of libtouchstone_cuda, named as ts_recorded_paths
// names them (the demangled kernel with its template arguments, the library call, or the
// device-side index check that reports fault:<kind>). The kernels suite's "kernel paths" spec
// and the sampling suite's "sampling paths" spec fail when a listed path is never taken by the
// committed tier or when a path runs that is not listed: a new dispatch branch, template
// instance or kernel needs its row here and a committed case that takes it.
//
// Every kernel that reads or writes 16-bit data takes the storage type as its last template
// argument (touchstone.h's TS_F16 is __half, TS_BF16 __nv_bfloat16), so it runs as two
// instances. Its row is written once with {T} standing for the type, and withStorageTwins
// expands it into both: the __half row as written and the __nv_bfloat16 row, whose When says
// "bf16 storage"; the committed tier must take each (its fp16 and its bf16- cases). Rows
// without {T} are one path whatever the dtype: library calls, which name no type (cuBLAS is told
// it in an argument), the byte copies of embedding and set_rows, the fp32 softmax, quant_fp8 and
// sampling kernels, and the device-side index checks.
//
// The attention kernels take the soft cap (softcap > 0, Gemma 2) as a bool template argument
// before the storage type: false is the kernel without it (softcap 0), true the soft-capping
// instance. Every dispatch branch has its true instance, but only those the committed capped
// cases take are listed (Gemma 2's head dims 128 and 256 at its group of 2); a committed case
// that takes another must add its row.
var KernelPaths = withStorageTwins([]KernelPath{
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<1, {T}, {T}>", When: "row in registers, 1 vector of 8 values per thread: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<2, {T}, {T}>", When: "as vec<1> with 2048 < hidden <= 4096"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<4, {T}, {T}>", When: "as vec<1> with 4096 < hidden <= 8192"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<8, {T}, {T}>", When: "as vec<1> with 8192 < hidden <= 16384"},
	{Op: "rmsnorm", What: "rmsnorm_generic_kernel<{T}, {T}>", When: "hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<1, float, {T}>", When: "an fp32 weight (weight_dtype TS_F32: Gemma's 1 + w), as vec<1>: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<2, float, {T}>", When: "an fp32 weight, 2048 < hidden <= 4096 (Gemma-3-4B's 2560)"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<4, float, {T}>", When: "an fp32 weight, 4096 < hidden <= 8192"},
	{Op: "rmsnorm", What: "rmsnorm_vec_kernel<8, float, {T}>", When: "an fp32 weight, 8192 < hidden <= 16384"},
	{Op: "rmsnorm", What: "rmsnorm_generic_kernel<float, {T}>", When: "an fp32 weight with hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<1, {T}, {T}>", When: "row in registers, 1 vector of 8 values per thread: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<2, {T}, {T}>", When: "as vec<1> with 2048 < hidden <= 4096"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<4, {T}, {T}>", When: "as vec<1> with 4096 < hidden <= 8192"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<8, {T}, {T}>", When: "as vec<1> with 8192 < hidden <= 16384"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_generic_kernel<{T}, {T}>", When: "hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<1, float, {T}>", When: "an fp32 weight (weight_dtype TS_F32: Gemma's 1 + w), as vec<1>: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<2, float, {T}>", When: "an fp32 weight, 2048 < hidden <= 4096 (Gemma-3-4B's 2560)"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<4, float, {T}>", When: "an fp32 weight, 4096 < hidden <= 8192"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_vec_kernel<8, float, {T}>", When: "an fp32 weight, 8192 < hidden <= 16384"},
	{Op: "rmsnorm_residual", What: "rmsnorm_residual_generic_kernel<float, {T}>", When: "an fp32 weight with hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm_quant_fp8", What: "rmsnorm_quant_vec_kernel<1, {T}>", When: "rmsnorm's vec<1> plan (hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned), static or per-token or groups of 8 x 2^k <= 256 values: y in registers, a group's amax by lane shuffles"},
	{Op: "rmsnorm_quant_fp8", What: "rmsnorm_quant_vec_kernel<2, {T}>", When: "as vec<1> with 2048 < hidden <= 4096"},
	{Op: "rmsnorm_quant_fp8", What: "rmsnorm_quant_vec_kernel<4, {T}>", When: "as vec<1> with 4096 < hidden <= 8192"},
	{Op: "rmsnorm_quant_fp8", What: "rmsnorm_quant_vec_kernel<8, {T}>", When: "as vec<1> with 8192 < hidden <= 16384"},
	{Op: "rmsnorm_quant_fp8", What: "rmsnorm_quant_generic_kernel<{T}>", When: "hidden % 8 != 0, hidden > 16384, another group size, or a pointer off a 16-byte boundary: scalar passes, group maxima in shared memory"},
	{Op: "layernorm", What: "layernorm_vec_kernel<1, {T}>", When: "row in registers, 1 vector of 8 values per thread: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "layernorm", What: "layernorm_vec_kernel<2, {T}>", When: "as vec<1> with 2048 < hidden <= 4096"},
	{Op: "layernorm", What: "layernorm_vec_kernel<4, {T}>", When: "as vec<1> with 4096 < hidden <= 8192"},
	{Op: "layernorm", What: "layernorm_vec_kernel<8, {T}>", When: "as vec<1> with 8192 < hidden <= 16384"},
	{Op: "layernorm", What: "layernorm_generic_kernel<{T}>", When: "hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "layernorm_residual", What: "layernorm_residual_vec_kernel<1, {T}>", When: "row in registers, 1 vector of 8 values per thread: hidden % 8 == 0, hidden <= 2048, every pointer 16-byte aligned"},
	{Op: "layernorm_residual", What: "layernorm_residual_vec_kernel<2, {T}>", When: "as vec<1> with 2048 < hidden <= 4096"},
	{Op: "layernorm_residual", What: "layernorm_residual_vec_kernel<4, {T}>", When: "as vec<1> with 4096 < hidden <= 8192"},
	{Op: "layernorm_residual", What: "layernorm_residual_vec_kernel<8, {T}>", When: "as vec<1> with 8192 < hidden <= 16384"},
	{Op: "layernorm_residual", What: "layernorm_residual_generic_kernel<{T}>", When: "hidden % 8 != 0, hidden > 16384, or a pointer off a 16-byte boundary"},
	{Op: "residual_add", What: "binary_kernel<true, (anonymous namespace)::AddOp, {T}>", When: "every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "residual_add", What: "binary_kernel<false, (anonymous namespace)::AddOp, {T}>", When: "a pointer off a 16-byte boundary (element by element)"},
	{Op: "gelu", What: "unary_kernel<true, (anonymous namespace)::GeluOp, {T}>", When: "every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "gelu", What: "unary_kernel<false, (anonymous namespace)::GeluOp, {T}>", When: "a pointer off a 16-byte boundary (element by element)"},
	{Op: "gelu_tanh", What: "unary_kernel<true, (anonymous namespace)::GeluTanhOp, {T}>", When: "every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "gelu_tanh", What: "unary_kernel<false, (anonymous namespace)::GeluTanhOp, {T}>", When: "a pointer off a 16-byte boundary (element by element)"},
	{Op: "gelu_scale", What: "unary_kernel<true, (anonymous namespace)::GeluScaleErfOp, {T}>", When: "exact GELU, every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "gelu_scale", What: "unary_kernel<false, (anonymous namespace)::GeluScaleErfOp, {T}>", When: "exact GELU, a pointer off a 16-byte boundary (element by element)"},
	{Op: "gelu_scale", What: "unary_kernel<true, (anonymous namespace)::GeluScaleTanhOp, {T}>", When: "tanh GELU, every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "gelu_scale", What: "unary_kernel<false, (anonymous namespace)::GeluScaleTanhOp, {T}>", When: "tanh GELU, a pointer off a 16-byte boundary (element by element)"},
	{Op: "swiglu", What: "binary_kernel<true, (anonymous namespace)::SwiGLUOp, {T}>", When: "every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "swiglu", What: "binary_kernel<false, (anonymous namespace)::SwiGLUOp, {T}>", When: "a pointer off a 16-byte boundary (element by element)"},
	{Op: "geglu", What: "binary_kernel<true, (anonymous namespace)::GeGLUTanhOp, {T}>", When: "tanh GELU (Gemma's gelu_pytorch_tanh), every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "geglu", What: "binary_kernel<false, (anonymous namespace)::GeGLUTanhOp, {T}>", When: "tanh GELU, a pointer off a 16-byte boundary (element by element)"},
	{Op: "geglu", What: "binary_kernel<true, (anonymous namespace)::GeGLUErfOp, {T}>", When: "exact GELU, every pointer 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "geglu", What: "binary_kernel<false, (anonymous namespace)::GeGLUErfOp, {T}>", When: "exact GELU, a pointer off a 16-byte boundary (element by element)"},
	{Op: "swiglu_quant_fp8", What: "swiglu_quant_g128_kernel<{T}>", When: "dynamic, group_size 128, gate and up 16-byte and out 8-byte aligned: 16 lanes a group, 8 values a lane"},
	{Op: "swiglu_quant_fp8", What: "swiglu_quant_dynamic_kernel<{T}>", When: "dynamic, any other group size or alignment: one block per group, scalar loads"},
	{Op: "swiglu_quant_fp8", What: "swiglu_quant_static_kernel<{T}>", When: "static (a per-tensor scale): grid-stride, scalar loads"},
	{Op: "swiglu_ffn", What: "cublasGemmEx", When: "the gate, up and down projections (no bias), fp32 accumulation"},
	{Op: "swiglu_ffn", What: "gemv_kernel<1, ts::GemvBiasStore<{T}>, {T}>", When: "the three projections at decode (gemm's gemv path): rows == 1"},
	{Op: "swiglu_ffn", What: "gemv_kernel<4, ts::GemvBiasStore<{T}>, {T}>", When: "as above, 3 <= rows <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "swiglu_ffn", What: "binary_kernel<true, (anonymous namespace)::SwiGLUOp, {T}>", When: "the activation between them, on the library's aligned workspace"},
	{Op: "gemm_swiglu", What: "cublasGemmEx", When: "one GEMM over the stacked gate and up weights into an fp32 workspace"},
	{Op: "gemm_swiglu", What: "gemm_swiglu_epilogue_kernel<{T}>", When: "the activation of the fp32 accumulators, one rounding"},
	{Op: "attention_scores_softmax", What: "scores_softmax_kernel<{T}>", When: "always: one block per 2 query rows, the scores kept in the rows of probs"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_gemv_kernel<1, {T}>", When: "decode, one kernel: rows == 1, a weight of at most 32 MiB, hidden % 8 == 0, every pointer 16-byte aligned, the rows fit in shared memory"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_gemv_kernel<2, {T}>", When: "as gemv<1> with rows == 2, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_gemv_kernel<4, {T}>", When: "as gemv<1> with 3 <= rows <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_residual_vec_kernel<1, {T}, {T}>", When: "otherwise (rows above the gemv row limit, odd hidden, misaligned), with a residual: the norm into a workspace (hidden <= 2048)"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_residual_vec_kernel<2, {T}, {T}>", When: "as above with 2048 < hidden <= 4096 (Phi-3's 3072)"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_residual_generic_kernel<{T}, {T}>", When: "as above with hidden % 8 != 0 or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_vec_kernel<1, {T}, {T}>", When: "otherwise, without a residual (hidden <= 2048)"},
	{Op: "rmsnorm_gemm", What: "rmsnorm_generic_kernel<{T}, {T}>", When: "as above with hidden % 8 != 0 or a pointer off a 16-byte boundary"},
	{Op: "rmsnorm_gemm", What: "cublasGemmEx", When: "the projection after the workspace norm: no bias, or the bias fallback"},
	{Op: "rmsnorm_gemm", What: "cublasLtMatmul(epilogue=BIAS)", When: "the projection with a bias, where cublasLt has an algorithm"},
	{Op: "rmsnorm_gemm", What: "bias_add_kernel<{T}, {T}>", When: "the projection with a bias where cublasLt has none (TOUCHSTONE_GEMM_LT=0)"},
	{Op: "layernorm_gemm", What: "layernorm_gemv_kernel<1, {T}>", When: "decode, one kernel: rows == 1, a weight of at most 32 MiB, hidden % 8 == 0, every pointer 16-byte aligned, the rows fit in shared memory"},
	{Op: "layernorm_gemm", What: "layernorm_gemv_kernel<2, {T}>", When: "as gemv<1> with rows == 2, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "layernorm_gemm", What: "layernorm_gemv_kernel<4, {T}>", When: "as gemv<1> with 3 <= rows <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "layernorm_gemm", What: "layernorm_residual_vec_kernel<1, {T}>", When: "otherwise (rows above the gemv row limit, odd hidden, misaligned), with a residual: the norm into a workspace (hidden <= 2048)"},
	{Op: "layernorm_gemm", What: "layernorm_residual_vec_kernel<2, {T}>", When: "as above with 2048 < hidden <= 4096 (Phi-2's 2560)"},
	{Op: "layernorm_gemm", What: "layernorm_residual_generic_kernel<{T}>", When: "as above with hidden % 8 != 0 or a pointer off a 16-byte boundary"},
	{Op: "layernorm_gemm", What: "layernorm_vec_kernel<1, {T}>", When: "otherwise, without a residual (hidden <= 2048)"},
	{Op: "layernorm_gemm", What: "layernorm_generic_kernel<{T}>", When: "as above with hidden % 8 != 0 or a pointer off a 16-byte boundary"},
	{Op: "layernorm_gemm", What: "cublasGemmEx", When: "the projection after the workspace norm: no bias, or the bias fallback"},
	{Op: "layernorm_gemm", What: "cublasLtMatmul(epilogue=BIAS)", When: "the projection with a bias, where cublasLt has an algorithm"},
	{Op: "layernorm_gemm", What: "bias_add_kernel<{T}, {T}>", When: "the projection with a bias where cublasLt has none (TOUCHSTONE_GEMM_LT=0)"},
	{Op: "swiglu_gemm", What: "swiglu_gemv_kernel<1, {T}>", When: "decode, one kernel: rows == 1, k % 8 == 0, every pointer 16-byte aligned, a weight of at most 32 MiB"},
	{Op: "swiglu_gemm", What: "swiglu_gemv_kernel<2, {T}>", When: "as gemv<1> with rows == 2, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "swiglu_gemm", What: "swiglu_gemv_kernel<4, {T}>", When: "as gemv<1> with 3 <= rows <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "swiglu_gemm", What: "binary_kernel<true, (anonymous namespace)::SwiGLUOp, {T}>", When: "otherwise: the activation into an aligned workspace (16-byte vectors)"},
	{Op: "swiglu_gemm", What: "binary_kernel<false, (anonymous namespace)::SwiGLUOp, {T}>", When: "as above with gate or up off a 16-byte boundary"},
	{Op: "swiglu_gemm", What: "cublasGemmEx", When: "the projection after the workspace activation: no bias, or the bias fallback"},
	{Op: "swiglu_gemm", What: "cublasLtMatmul(epilogue=BIAS)", When: "the projection with a bias, where cublasLt has an algorithm"},
	{Op: "swiglu_gemm", What: "bias_add_kernel<{T}, {T}>", When: "the projection with a bias where cublasLt has none (TOUCHSTONE_GEMM_LT=0)"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<1, true, {T}>", When: "decode up projection with bias and tanh GELU in one kernel: rows == 1, hidden and ffn % 8 == 0, x and w1 16-byte aligned"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<4, false, {T}>", When: "as above, exact GELU, 3 <= rows <= 4"},
	{Op: "gpt_ffn", What: "gemv_kernel<1, ts::GemvBiasStore<{T}>, {T}>", When: "the down projection at decode (gemm's gemv path): rows == 1"},
	{Op: "gpt_ffn", What: "gemv_kernel<2, ts::GemvBiasStore<{T}>, {T}>", When: "as above, rows == 2, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "gpt_ffn", What: "gemv_kernel<4, ts::GemvBiasStore<{T}>, {T}>", When: "as above, 3 <= rows <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "gpt_ffn", What: "bias_add_kernel<{T}, {T}>", When: "the down projection with a bias where cublasLt has none (TOUCHSTONE_GEMM_LT=0)"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<2, true, {T}>", When: "as above, tanh GELU, rows == 2"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<2, false, {T}>", When: "as above, exact GELU, rows == 2"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<8, false, {T}>", When: "as above, exact GELU, 5 <= rows <= 8"},
	{Op: "gpt_ffn", What: "gelu_gemv_kernel<16, true, {T}>", When: "as above, tanh GELU, 9 <= rows <= 16"},
	{Op: "gpt_ffn", What: "cublasGemmEx", When: "the up projection into fp32 (rows > 16, odd widths, misaligned) and the down projection without bias or in the bias fallback"},
	{Op: "gpt_ffn", What: "bias_gelu_kernel<true, {T}>", When: "tanh GELU on the fp32 accumulators of the cuBLAS up projection"},
	{Op: "gpt_ffn", What: "bias_gelu_kernel<false, {T}>", When: "exact GELU on the fp32 accumulators of the cuBLAS up projection"},
	{Op: "gpt_ffn", What: "cublasLtMatmul(epilogue=BIAS)", When: "the down projection with a bias, where cublasLt has an algorithm"},
	{Op: "gemm", What: "gemv_kernel<1, ts::GemvBiasStore<{T}>, {T}>", When: "decode: m == 1, 16-bit out, k % 8 == 0, x and w 16-byte aligned, a weight of at most 32 MiB (bias or not)"},
	{Op: "gemm", What: "gemv_kernel<2, ts::GemvBiasStore<{T}>, {T}>", When: "as gemv<1> with m == 2, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "gemm", What: "gemv_kernel<4, ts::GemvBiasStore<{T}>, {T}>", When: "as gemv<1> with 3 <= m <= 4, the gemv row limit (ts_set_gemv_rows, default 1) at least the rows"},
	{Op: "gemm", What: "cublasGemmEx", When: "either storage dtype (the call names no type): no bias; or fp32 out with a bias (then bias_add_kernel<float, T>); or the 16-bit fallback below"},
	{Op: "gemm", What: "bias_add_kernel<float, {T}>", When: "fp32 out with a bias, added after the GEMM"},
	{Op: "gemm", What: "cublasLtMatmul(epilogue=BIAS)", When: "either storage dtype: 16-bit out with a bias, when cublasLt has an algorithm for the type, shape and alignments"},
	{Op: "gemm", What: "bias_add_kernel<{T}, {T}>", When: "16-bit out with a bias when cublasLt has none: GEMM into fp32, then bias and one rounding"},
	{Op: "softmax", What: "softmax_cluster_kernel", When: "fp32 in, n >= 8192, n % 4 == 0, 16-byte aligned, the row fits a cluster's shared memory"},
	{Op: "softmax", What: "softmax_kernel<float, true>", When: "fp32 in, not the cluster path, n % 4 == 0, 16-byte aligned"},
	{Op: "softmax", What: "softmax_kernel<float, false>", When: "fp32 in, n % 4 != 0 or off a 16-byte boundary"},
	{Op: "softmax", What: "softmax_kernel<{T}, true>", When: "16-bit in, n % 4 == 0, aligned"},
	{Op: "softmax", What: "softmax_kernel<{T}, false>", When: "16-bit in, n % 4 != 0 or off a boundary"},
	{Op: "logit_softcap", What: "logit_softcap_f32_kernel<true>", When: "fp32 logits, both pointers 16-byte aligned (4 values per load; a scalar loop takes the n % 4 tail)"},
	{Op: "logit_softcap", What: "logit_softcap_f32_kernel<false>", When: "fp32 logits, a pointer off a 16-byte boundary (element by element)"},
	{Op: "logit_softcap", What: "unary_kernel<true, (anonymous namespace)::LogitSoftcapOp, {T}>", When: "16-bit logits, both pointers 16-byte aligned (8 values per load; a scalar loop takes the n % 8 tail)"},
	{Op: "logit_softcap", What: "unary_kernel<false, (anonymous namespace)::LogitSoftcapOp, {T}>", When: "16-bit logits, a pointer off a 16-byte boundary (element by element)"},
	{Op: "quant_fp8", What: "quant_g128_kernel<{T}>", When: "dynamic, group_size 128, x 16-byte and out 4-byte aligned: a warp per group"},
	{Op: "quant_fp8", What: "quant_g128_kernel<float>", When: "as above, fp32 in"},
	{Op: "quant_fp8", What: "quant_dynamic_kernel<{T}>", When: "dynamic, any other group size or alignment: one block per group"},
	{Op: "quant_fp8", What: "quant_dynamic_kernel<float>", When: "as above, fp32 in"},
	{Op: "quant_fp8", What: "quant_static_kernel<{T}>", When: "static (a per-tensor scale)"},
	{Op: "quant_fp8", What: "quant_static_kernel<float>", When: "static, fp32 in"},
	{Op: "gemm_fp8", What: "gemm_fp8_decode_kernel<true, false, {T}>", When: "decode, block scales: m <= 8, k % 16 == 0, x and w 16-byte aligned (FP8 mma.sync, k split over warps; one split writes out)"},
	{Op: "gemm_fp8", What: "gemm_fp8_decode_kernel<true, true, {T}>", When: "as above with 9 <= m <= 16 (x's rows 8-15 loaded too)"},
	{Op: "gemm_fp8", What: "gemm_fp8_decode_kernel<false, false, {T}>", When: "decode, per-channel scales, m <= 8: as above"},
	{Op: "gemm_fp8", What: "gemm_fp8_decode_kernel<false, true, {T}>", When: "decode, per-channel scales, 9 <= m <= 16"},
	{Op: "gemm_fp8", What: "gemm_fp8_reduce_kernel<true, {T}>", When: "after the decode kernel when k is split, block scales: the splits summed in order, one rounding"},
	{Op: "gemm_fp8", What: "gemm_fp8_reduce_kernel<false, {T}>", When: "after the decode kernel, per channel: the splits summed, the two scales, one rounding"},
	{Op: "gemm_fp8", What: "cublasLtMatmul(fp8, 1x128 x 128x128 block scales)", When: "m > 16 with block scales, x and w 16-byte aligned, where cuBLASLt has an algorithm"},
	{Op: "gemm_fp8", What: "cublasLtMatmul(fp8, per-channel scales as 1x128 blocks)", When: "m > 16 with per-channel scales, k % 128 == 0, as above"},
	{Op: "gemm_fp8", What: "fp8_lt_scales_kernel", When: "before either cuBLASLt GEMM: the scales laid out as cuBLASLt reads them"},
	{Op: "gemm_fp8", What: "gemm_fp8_kernel<{T}>", When: "otherwise: k % 16 != 0 at decode or k % 128 != 0 past 16 rows, an operand off a 16-byte boundary, or no cuBLASLt algorithm (64x64 output tiles on CUDA cores)"},
	{Op: "gemm_w4a16", What: "w4a16_decode_kernel<0, false, {T}>", When: "AWQ, m <= 8: the fused gemv (nibbles to T pairs, mma.sync m16n8k16, k split over warps; one split writes out)"},
	{Op: "gemm_w4a16", What: "w4a16_decode_kernel<0, true, {T}>", When: "AWQ, 9 <= m <= 16 (x's rows 8-15 loaded too)"},
	{Op: "gemm_w4a16", What: "w4a16_decode_kernel<1, false, {T}>", When: "GPTQ, m <= 8: as above, g_idx read per row (a lane's 8 rows in several groups take per-pair scales)"},
	{Op: "gemm_w4a16", What: "w4a16_decode_kernel<1, true, {T}>", When: "GPTQ, 9 <= m <= 16"},
	{Op: "gemm_w4a16", What: "w4a16_reduce_kernel<{T}>", When: "after either decode kernel (packed or tiled) when k is split: the splits summed in order, one rounding"},
	{Op: "gemm_w4a16", What: "w4a16_dequant_kernel<0, {T}>", When: "AWQ, m > 16: the weight dequantised into a workspace, then gemm's cuBLAS GEMM"},
	{Op: "gemm_w4a16", What: "w4a16_dequant_kernel<1, {T}>", When: "GPTQ, m > 16 (g_idx read on the device), as above"},
	{Op: "gemm_w4a16", What: "cublasGemmEx", When: "m > 16, over the dequantised weight"},
	{Op: "gemm_w4a16", What: "fault:g_idx", When: "a GPTQ g_idx outside [0, k / group_size) in device data"},
	{Op: "gemm_w4a16", What: "w4a16_tiled_decode_kernel<false, {T}>", When: "TS_W4_TILED, m <= 8: the tiled gemv (two 16-byte loads a lane a 32-row step, 4 steps ahead in registers, no byte permutes, the weight as the mma's A operand)"},
	{Op: "gemm_w4a16", What: "w4a16_tiled_decode_kernel<true, {T}>", When: "TS_W4_TILED, 9 <= m <= 16 (a second mma for tokens 8-15)"},
	{Op: "gemm_w4a16", What: "w4a16_tiled_dequant_kernel<{T}>", When: "TS_W4_TILED, m > 16: the tiled weight dequantised into the workspace, then cuBLAS"},
	{Op: "w4a16_tile", What: "w4a16_tile_codes_kernel<0>", When: "an AWQ weight's codes into the tiled order (load time)"},
	{Op: "w4a16_tile", What: "w4a16_tile_codes_kernel<1>", When: "a GPTQ weight's codes (groups in order)"},
	{Op: "w4a16_tile", What: "w4a16_tile_groups_kernel<0>", When: "AWQ scales and zero points into the tiled order"},
	{Op: "w4a16_tile", What: "w4a16_tile_groups_kernel<1>", When: "GPTQ scales and zero points (stored z - 1 written as z)"},
	{Op: "moe_router", What: "moe_router_kernel<{T}>", When: "always: a warp per token, the row in shared memory (up to 1024 experts)"},
	{Op: "moe_ffn", What: "moe_count_kernel", When: "always: a warp per expert counts its choices (ballots over ids); block 0 checks every id"},
	{Op: "moe_ffn", What: "moe_permute_kernel<16>", When: "fewer than 16 choices an expert on average (tokens x top_k < 16 x experts: decode): the sorted rows, the inverse map and 16-row tiles"},
	{Op: "moe_ffn", What: "moe_permute_kernel<64>", When: "16 choices an expert or more on average (prefill): 64-row tiles"},
	{Op: "moe_ffn", What: "moe_gemv_kernel<true, {T}>", When: "16-row tiles (decode): gate and up with SwiGLU, a warp per column of the tile's expert over its every row"},
	{Op: "moe_ffn", What: "moe_gemv_kernel<false, {T}>", When: "16-row tiles (decode): the down projection, a warp per column"},
	{Op: "moe_ffn", What: "moe_grouped_gemm_kernel<64, true, {T}>", When: "gate and up with SwiGLU over 64-row tiles"},
	{Op: "moe_ffn", What: "moe_grouped_gemm_kernel<64, false, {T}>", When: "the down projection over 64-row tiles"},
	{Op: "moe_ffn", What: "moe_combine_kernel<{T}>", When: "always: a block per token sums its experts' rows, weighted, in fp32"},
	{Op: "moe_ffn", What: "fault:id", When: "an expert id outside [0, experts) in device data"},
	{Op: "moe_shared_add", What: "moe_shared_add_vec_kernel<1, {T}>", When: "a block per token, 1 vector of 8 values of x, routed and shared per thread: hidden % 8 == 0, hidden <= 2048 (a warp up to 256: Qwen1.5-MoE-A2.7B's 2048 at 256 threads), every pointer 16-byte aligned"},
	{Op: "moe_shared_add", What: "moe_shared_add_vec_kernel<2, {T}>", When: "as vec<1> with 2048 < hidden <= 4096 (Qwen2-57B-A14B's 3584)"},
	{Op: "moe_shared_add", What: "moe_shared_add_generic_kernel<{T}>", When: "hidden % 8 != 0, hidden > 4096, or a pointer off a 16-byte boundary: scalar loads, the dot's pass over x then the sum's over routed and shared"},
	{Op: "rope", What: "rope_kernel<true, {T}>", When: "rope_dim % 16 == 0, head_dim % 8 == 0, rope_dim <= 8192, 16-byte aligned: 8 pairs per vector"},
	{Op: "rope", What: "rope_kernel<false, {T}>", When: "rope_dim % 16 != 0 (24 of 80, say), head_dim % 8 != 0, rope_dim > 8192 or a pointer off a boundary: pair by pair"},
	{Op: "rope", What: "fault:position", When: "a negative position in device data, reported by either kernel"},
	{Op: "embedding", What: "embedding_kernel<uint4>", When: "hidden % 8 == 0, out and table 16-byte aligned"},
	{Op: "embedding", What: "embedding_kernel<unsigned int>", When: "hidden even, 4-byte aligned, not the uint4 case"},
	{Op: "embedding", What: "embedding_kernel<unsigned short>", When: "hidden odd, or a pointer 2-byte aligned only"},
	{Op: "embedding", What: "embedding_scale_kernel<true, {T}>", When: "scaled (a scale other than 0 and 1: Gemma's embed_scale), hidden % 8 == 0, out and table 16-byte aligned: one fp32 product a value, one rounding"},
	{Op: "embedding", What: "embedding_scale_kernel<false, {T}>", When: "scaled, hidden % 8 != 0 or a pointer off a 16-byte boundary (value by value)"},
	{Op: "embedding", What: "fault:id", When: "an id outside the table in device data (either kernel)"},
	{Op: "pos_embedding", What: "pos_embedding_kernel<true, {T}>", When: "hidden % 8 == 0, every pointer 16-byte aligned"},
	{Op: "pos_embedding", What: "pos_embedding_kernel<false, {T}>", When: "otherwise"},
	{Op: "pos_embedding", What: "fault:position", When: "a position outside the table in device data"},
	{Op: "set_rows", What: "set_rows_kernel<uint4>", When: "row bytes % 16 == 0, dst and src 16-byte aligned"},
	{Op: "set_rows", What: "set_rows_kernel<unsigned int>", When: "row bytes % 4 == 0 and 4-byte aligned, not the uint4 case"},
	{Op: "set_rows", What: "set_rows_kernel<unsigned short>", When: "otherwise"},
	{Op: "set_rows", What: "fault:row", When: "a row outside dst in device data"},
	{Op: "set_rows_fp8", What: "set_rows_fp8_kernel<true, {T}>", When: "16-bit src, row and head lengths % 8 == 0, src 16-byte and dst 8-byte aligned: 8 codes a thread"},
	{Op: "set_rows_fp8", What: "set_rows_fp8_kernel<false, {T}>", When: "16-bit src otherwise: a code a thread"},
	{Op: "set_rows_fp8", What: "set_rows_fp8_kernel<false, float>", When: "fp32 src"},
	{Op: "set_rows_fp8", What: "fault:row", When: "a row outside dst in device data"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<32, 1, false, {T}>", When: "head_dim in 8..32 (multiple of 8), padded to 32; 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<32, 2, false, {T}>", When: "head_dim in 8..32 (multiple of 8), padded to 32; 32 query rows a warp: non-causal, or causal with seq_len >= 1024 and batch x n_heads >= 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<64, 1, false, {T}>", When: "head_dim in 40..64 (multiple of 8), padded to 64; 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<64, 2, false, {T}>", When: "head_dim in 40..64 (multiple of 8), padded to 64; 32 query rows a warp: non-causal, or causal with seq_len >= 1024 and batch x n_heads >= 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<80, 1, false, {T}>", When: "head_dim 72 or 80, padded to 80; 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<80, 2, false, {T}>", When: "head_dim 72 or 80, padded to 80; 32 query rows a warp: non-causal, or causal with seq_len >= 1024 and batch x n_heads >= 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<96, 1, false, {T}>", When: "head_dim 88 or 96, padded to 96; 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<96, 2, false, {T}>", When: "head_dim 88 or 96, padded to 96; 32 query rows a warp: non-causal, or causal with seq_len >= 1024 and batch x n_heads >= 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<128, 1, false, {T}>", When: "head_dim in 104..128 (multiple of 8), padded to 128; 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<128, 1, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, 1, false>): head_dim in 104..128, 16 query rows a warp: causal with seq_len < 1024 or batch x n_heads < 24 (Gemma-2-27B's 128)"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<128, 2, false, {T}>", When: "head_dim in 104..128 (multiple of 8), padded to 128; 32 query rows a warp: non-causal, or causal with seq_len >= 1024 and batch x n_heads >= 24"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<160, 1, false, {T}>", When: "head_dim in 136..160 (multiple of 8), padded to 160; 16 query rows a warp, 32-key tiles, Q re-read from shared memory"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<192, 1, false, {T}>", When: "head_dim in 168..192 (multiple of 8), padded to 192; 16 query rows a warp, 32-key tiles, Q re-read from shared memory"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<256, 1, false, {T}>", When: "head_dim in 200..256 (multiple of 8), padded to 256; 16 query rows a warp, 32-key tiles, Q re-read from shared memory"},
	{Op: "attention_prefill", What: "attention_prefill_kernel<256, 1, true, {T}>", When: "softcap > 0 (the soft-capping instance of <256, 1, false>): head_dim in 200..256 (Gemma-2-2B's and 9B's 256)"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<32, 8, 2, false, {T}>", When: "tensor cores, head_dim 32, up to 8 query heads per KV head"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<32, 16, 2, false, {T}>", When: "tensor cores, head_dim 32, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<64, 8, 2, false, {T}>", When: "tensor cores, head_dim 64, up to 8 query heads per KV head"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<64, 16, 2, false, {T}>", When: "tensor cores, head_dim 64, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<96, 8, 1, false, {T}>", When: "tensor cores, head_dim 96, up to 8 query heads per KV head"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<96, 16, 1, false, {T}>", When: "tensor cores, head_dim 96, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<128, 8, 1, false, {T}>", When: "tensor cores, head_dim 128, up to 8 query heads per KV head"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<128, 8, 1, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, 8, 1, false>): tensor cores, head_dim 128, up to 8 query heads per KV head (Gemma-2-27B)"},
	{Op: "attention_decode", What: "attention_decode_mma_kernel<128, 16, 1, false, {T}>", When: "tensor cores, head_dim 128, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode", What: "attention_decode_split_kernel<1, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 1 query head per KV head (MHA)"},
	{Op: "attention_decode", What: "attention_decode_split_kernel<2, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 2 per KV head"},
	{Op: "attention_decode", What: "attention_decode_split_kernel<2, true, {T}>", When: "softcap > 0 (the soft-capping instance of <2, false>): head_dim not 32/64/96/128, 2 query heads per KV head (Gemma-2-2B and 9B: 256)"},
	{Op: "attention_decode", What: "attention_decode_split_kernel<4, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 3 or 4 per KV head"},
	{Op: "attention_decode", What: "attention_decode_split_kernel<8, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), more than 4 per KV head"},
	{Op: "attention_decode", What: "attention_decode_combine_kernel<{T}>", When: "the split kernel's partial results merged when the cache is split (max_len > 64, few KV heads)"},
	{Op: "attention_decode", What: "fault:cache_len", When: "a cache length outside [1, max_len] in device data, reported by either kernel"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<32, 8, 2, false, {T}>", When: "tensor cores, head_dim 32, up to 8 query heads per KV head (attention_decode's body, rows through the block table)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<32, 16, 2, false, {T}>", When: "tensor cores, head_dim 32, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<64, 8, 2, false, {T}>", When: "tensor cores, head_dim 64, up to 8 query heads per KV head (attention_decode's body, rows through the block table)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<64, 16, 2, false, {T}>", When: "tensor cores, head_dim 64, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<96, 8, 1, false, {T}>", When: "tensor cores, head_dim 96, up to 8 query heads per KV head (attention_decode's body, rows through the block table)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<96, 16, 1, false, {T}>", When: "tensor cores, head_dim 96, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<128, 8, 1, false, {T}>", When: "tensor cores, head_dim 128, up to 8 query heads per KV head (attention_decode's body, rows through the block table)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<128, 8, 1, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, 8, 1, false>): tensor cores, head_dim 128, up to 8 query heads per KV head (Gemma-2-27B)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_kernel<128, 16, 1, false, {T}>", When: "tensor cores, head_dim 128, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_split_kernel<1, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 1 query head per KV head (MHA)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_split_kernel<2, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 2 per KV head"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_split_kernel<2, true, {T}>", When: "softcap > 0 (the soft-capping instance of <2, false>): head_dim not 32/64/96/128, 2 query heads per KV head (Gemma-2-2B and 9B: 256)"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_split_kernel<4, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), 3 or 4 per KV head"},
	{Op: "attention_decode_paged", What: "attention_decode_paged_split_kernel<8, false, {T}>", When: "head_dim not 32/64/96/128 (80, 256, ...), more than 4 per KV head"},
	{Op: "attention_decode_paged", What: "attention_decode_combine_kernel<{T}>", When: "the split kernel's partial results merged when a sequence's reach is split (table_width x block_size > 64, few KV heads)"},
	{Op: "attention_decode_paged", What: "fault:cache_len", When: "a cache length outside [1, table_width x block_size] in device data"},
	{Op: "attention_decode_paged", What: "fault:block_table", When: "a block table entry a sequence reaches outside [0, num_blocks) in device data"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<32, false, {T}>", When: "head_dim up to 32 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<64, false, {T}>", When: "head_dim 33-64 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<80, false, {T}>", When: "head_dim 65-80 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<96, false, {T}>", When: "head_dim 81-96 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<128, false, {T}>", When: "head_dim 97-128 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<128, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, false>): head_dim 97-128 (Gemma-2-27B)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<160, false, {T}>", When: "head_dim 129-160 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<192, false, {T}>", When: "head_dim 161-192 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "attention_prefill_paged_kernel<256, false, {T}>", When: "head_dim 193-256 (attention_prefill's flash body, 64 query rows a block, rows through the block table)"},
	{Op: "attention_prefill_paged", What: "fault:q_starts", When: "q_starts not 0, increasing and ending at total_q, in device data"},
	{Op: "attention_prefill_paged", What: "fault:kv_len", When: "a length under its new tokens or past table_width x block_size, in device data"},
	{Op: "attention_prefill_paged", What: "fault:block_table", When: "a block table entry a sequence reaches outside [0, num_blocks), in device data"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<32, 8, 3, false, {T}>", When: "E4M3 pool, head_dim 32, up to 8 query heads per KV head (attention_decode_fp8's tensor-core body, rows through the block table)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<32, 16, 3, false, {T}>", When: "E4M3 pool, head_dim 32, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<64, 8, 3, false, {T}>", When: "E4M3 pool, head_dim 64, up to 8 query heads per KV head (attention_decode_fp8's tensor-core body, rows through the block table)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<64, 16, 3, false, {T}>", When: "E4M3 pool, head_dim 64, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<96, 8, 2, false, {T}>", When: "E4M3 pool, head_dim 96, up to 8 query heads per KV head (attention_decode_fp8's tensor-core body, rows through the block table)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<96, 16, 2, false, {T}>", When: "E4M3 pool, head_dim 96, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<128, 8, 2, false, {T}>", When: "E4M3 pool, head_dim 128, up to 8 query heads per KV head (attention_decode_fp8's tensor-core body, rows through the block table)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<128, 8, 2, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, 8, 2, false>): E4M3 pool, head_dim 128, up to 8 query heads per KV head (Gemma-2-27B)"},
	{Op: "attention_decode_paged_fp8", What: "attention_decode_paged_fp8_kernel<128, 16, 2, false, {T}>", When: "E4M3 pool, head_dim 128, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_paged_fp8", What: "fault:cache_len", When: "a cache length outside [1, table_width x block_size] in device data"},
	{Op: "attention_decode_paged_fp8", What: "fault:block_table", When: "a block table entry a sequence reaches outside [0, num_blocks) in device data"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<32, false, {T}>", When: "E4M3 pool, head_dim up to 32 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<64, false, {T}>", When: "E4M3 pool, head_dim 33-64 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<80, false, {T}>", When: "E4M3 pool, head_dim 65-80 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<96, false, {T}>", When: "E4M3 pool, head_dim 81-96 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<128, false, {T}>", When: "E4M3 pool, head_dim 97-128 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<128, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, false>): E4M3 pool, head_dim 97-128 (Gemma-2-27B)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<160, false, {T}>", When: "E4M3 pool, head_dim 129-160 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<192, false, {T}>", When: "E4M3 pool, head_dim 161-192 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "attention_prefill_paged_fp8_kernel<256, false, {T}>", When: "E4M3 pool, head_dim 193-256 (attention_prefill_paged's flash body, K and V tiles landed as codes and converted in shared memory)"},
	{Op: "attention_prefill_paged_fp8", What: "fault:q_starts", When: "q_starts not 0, increasing and ending at total_q, in device data"},
	{Op: "attention_prefill_paged_fp8", What: "fault:kv_len", When: "a length under its new tokens or past table_width x block_size, in device data"},
	{Op: "attention_prefill_paged_fp8", What: "fault:block_table", When: "a block table entry a sequence reaches outside [0, num_blocks), in device data"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<32, 8, 3, false, {T}>", When: "E4M3 cache, head_dim 32, up to 8 query heads per KV head (attention_decode's tensor-core body, codes converted in registers)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<32, 16, 3, false, {T}>", When: "E4M3 cache, head_dim 32, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<64, 8, 3, false, {T}>", When: "E4M3 cache, head_dim 64, up to 8 query heads per KV head (attention_decode's tensor-core body, codes converted in registers)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<64, 16, 3, false, {T}>", When: "E4M3 cache, head_dim 64, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<96, 8, 2, false, {T}>", When: "E4M3 cache, head_dim 96, up to 8 query heads per KV head (attention_decode's tensor-core body, codes converted in registers)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<96, 16, 2, false, {T}>", When: "E4M3 cache, head_dim 96, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<128, 8, 2, false, {T}>", When: "E4M3 cache, head_dim 128, up to 8 query heads per KV head (attention_decode's tensor-core body, codes converted in registers)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<128, 8, 2, true, {T}>", When: "softcap > 0 (the soft-capping instance of <128, 8, 2, false>): E4M3 cache, head_dim 128, up to 8 query heads per KV head (Gemma-2-27B)"},
	{Op: "attention_decode_fp8", What: "attention_decode_fp8_kernel<128, 16, 2, false, {T}>", When: "E4M3 cache, head_dim 128, more than 8 query heads per KV head (groups of 16)"},
	{Op: "attention_decode_fp8", What: "fault:cache_len", When: "a cache length outside [1, max_len] in device data"},
	{Op: "sample", What: "sample_stats_kernel<true, true>", When: "vocab % 4 == 0 and aligned, greedy (temperature 0): the argmax"},
	{Op: "sample", What: "sample_stats_kernel<true, false>", When: "vocab % 4 == 0 and aligned, sampled: row max and sums"},
	{Op: "sample", What: "sample_stats_kernel<false, true>", When: "vocab % 4 != 0 or unaligned, greedy (temperature 0): the argmax"},
	{Op: "sample", What: "sample_stats_kernel<false, false>", When: "vocab % 4 != 0 or unaligned, sampled: row max and sums"},
	{Op: "sample", What: "sample_hist_kernel", When: "sampled: the histogram of the row's probabilities"},
	{Op: "sample", What: "sample_scatter_kernel", When: "sampled: candidates of the chosen bin, then the draw"},
	{Op: "sample", What: "fault:logit", When: "a NaN or +inf logit in device data"},
	{Op: "sample", What: "fault:all_neg_inf", When: "a row whose logits are all -inf"},
	{Op: "philox", What: "philox_kernel", When: "every philox call"},
})

// storageType is the placeholder for the storage type in a KernelPaths row's What.
const storageType = "{T}"

// withStorageTwins expands each row whose What holds storageType into its fp16 instance (the
// type __half, When as written) and its bf16 instance (__nv_bfloat16, When prefixed with
// "bf16 storage"), in that order; other rows stay as they are.
func withStorageTwins(rows []KernelPath) []KernelPath {
	out := make([]KernelPath, 0, 2*len(rows))
	for _, r := range rows {
		if !strings.Contains(r.What, storageType) {
			out = append(out, r)
			continue
		}
		out = append(out,
			KernelPath{Op: r.Op, What: strings.ReplaceAll(r.What, storageType, "__half"), When: r.When},
			KernelPath{Op: r.Op, What: strings.ReplaceAll(r.What, storageType, "__nv_bfloat16"), When: "bf16 storage (TS_BF16), " + r.When})
	}
	return out
}

// KernelPath is one way an op of the CUDA library can run: a kernel with its template
// arguments, a library call, or a device-side check that reports a bad index (fault:<kind>),
// exactly as ts_recorded_paths names it, and the condition under which the dispatch takes it.
type KernelPath struct {
	Op, What, When string
}

// Key is the path's name in recorded counts.
func (p KernelPath) Key() backend.PathKey { return backend.PathKey{Op: p.Op, What: p.What} }

// PathCoverage compares recorded counts with the table, for the given ops only (the ops a
// test exercised): the listed paths never taken, and the taken ones the table does not list
// (a new kernel or template instance whose row is missing). Both sorted.
// LoadTimeOps are the library's ops that prepare a weight once, at load time: they have no golden
// files of their own (their output is judged through the op that reads it), but their paths are
// listed and covered like every op's.
var LoadTimeOps = []string{"w4a16_tile"}

func PathCoverage(table []KernelPath, recorded map[backend.PathKey]int64, ops []string) (missing []KernelPath, unlisted []backend.PathKey) {
	inScope := map[string]bool{}
	for _, op := range ops {
		inScope[op] = true
	}
	listed := map[backend.PathKey]bool{}
	for _, p := range table {
		listed[p.Key()] = true
		if inScope[p.Op] && recorded[p.Key()] == 0 {
			missing = append(missing, p)
		}
	}
	for k := range recorded {
		if inScope[k.Op] && !listed[k] {
			unlisted = append(unlisted, k)
		}
	}
	sort.Slice(missing, func(i, j int) bool {
		return missing[i].Op < missing[j].Op || missing[i].Op == missing[j].Op && missing[i].What < missing[j].What
	})
	sort.Slice(unlisted, func(i, j int) bool {
		return unlisted[i].Op < unlisted[j].Op || unlisted[i].Op == unlisted[j].Op && unlisted[i].What < unlisted[j].What
	})
	return missing, unlisted
}
