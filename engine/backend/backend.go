// Package backend defines the operations every touchstone backend implements and a
// registry through which backends make themselves available by name.
//
// The interface is op by op, with no graph: a suite (or a model forward pass) uploads
// tensors, calls ops on device buffers the caller owns, and downloads what it wants to
// compare. Every op writes into an output buffer allocated by the caller, so hot paths
// never allocate, and every op validates its arguments and returns an *ArgError naming
// the op, the argument and the bad value instead of computing garbage.
package backend

import (
	"time"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Buffer is a tensor living on a backend's device. Its shape and dtype are fixed at
// allocation. Buffers are freed explicitly so device memory is never left to a GC.
type Buffer interface {
	DType() tensor.DType
	Shape() []int
	Free()
}

// DeviceInfo describes what a backend runs on, for reports and conformance tables.
type DeviceInfo struct {
	Backend    string // registry name, e.g. "cpu"
	Name       string // e.g. "pure Go (fp32 math)" or "NVIDIA H100 80GB HBM3"
	Index      int    // device ordinal; 0 for the CPU
	Processors int    // CPU cores or streaming multiprocessors
	MemoryMiB  int64  // device memory, 0 when not meaningful
}

// RoPEConfig configures rotary position embedding. Pairs are NeoX / Hugging Face
// rotate_half style: dimension i rotates with i+RopeDim/2 for i < RopeDim/2 by the angle
// pos · FreqBase^(-2i/RopeDim) / divisor_i, and the dimensions from RopeDim to HeadDim pass
// through unchanged (partial rotary).
//
// RoPE scaling (Llama 3's llama3, YaRN, LongRoPE) is carried as tables, computed once per model
// from its config: FreqDivisor (f32 [RopeDim/2], nil: all 1) divides each pair's inverse
// frequency; for a token at a position >= LongFrom, LongDivisor replaces it (LongRoPE's long
// factors; nil: none); AttentionFactor multiplies the rotated pairs (YaRN's mscale, LongRoPE's
// scaling; 0 means 1). The zero value of the scaling fields is plain RoPE.
type RoPEConfig struct {
	HeadDim  int
	RopeDim  int
	FreqBase float32

	FreqDivisor     Buffer
	LongDivisor     Buffer
	LongFrom        int
	AttentionFactor float32
}

// Factor is the multiplier of the rotated pairs: AttentionFactor, or 1 when it is unset.
func (c RoPEConfig) Factor() float32 {
	if c.AttentionFactor == 0 {
		return 1
	}
	return c.AttentionFactor
}

// AttentionConfig configures scaled dot-product attention. Query head h reads key/value
// head h / (NumHeads/NumKVHeads), the GQA mapping of Qwen2 and Llama.
type AttentionConfig struct {
	NumHeads   int
	NumKVHeads int
	HeadDim    int
	Causal     bool    // prefill only: query i sees keys 0..i
	Scale      float32 // applied to q·k before the softmax; usually 1/sqrt(HeadDim)
	// Window is the sliding window (0: none): the query at position p sees only keys p -
	// Window + 1 .. p (transformers' sliding_window: key > p - window). A prefill with one must
	// be causal; attention_scores_softmax and attention_decode_fp8 refuse one.
	Window int
	// Softcap is Gemma 2's attention logit soft-capping (0: none): each score s = Scale · q·k
	// becomes Softcap · tanh(s / Softcap) before the causal/window mask and the softmax
	// (transformers' eager_attention_forward with attn_logit_softcapping). Positive and finite
	// when set.
	Softcap float32
}

// Kernels is the set of ops under test. Shapes are read from the buffers; the layouts are
// those of docs/golden-format.md. Unless stated otherwise inputs and outputs are fp16 and
// math is fp32.
type Kernels interface {
	// ResidualAdd computes out = x + residual elementwise. out may be x (in place).
	ResidualAdd(out, x, residual Buffer) error
	// RMSNorm normalises each row of x [T, H] by its root mean square and scales by weight [H]:
	// in x's storage dtype, or f32 (Gemma's 1 + w, folded once at load; the math is fp32 either
	// way, out rounded once).
	RMSNorm(out, x, weight Buffer, eps float32) error
	// LayerNorm normalises each row of x [T, H] to zero mean and unit variance, then applies
	// gamma and beta [H].
	LayerNorm(out, x, gamma, beta Buffer, eps float32) error
	// LayerNormResidual is the fused pre-norm step of GPT-2. Unfused equivalent:
	// ResidualAdd(sum, x, residual) followed by LayerNorm(out, sum, gamma, beta, eps).
	LayerNormResidual(sum, out, x, residual, gamma, beta Buffer, eps float32) error
	// RMSNormResidual is the fused pre-norm step of Qwen2, Phi-3 and Llama. Unfused
	// equivalent: ResidualAdd(sum, x, residual) followed by RMSNorm(out, sum, weight, eps), so
	// out normalises the fp16-rounded sum. sum may be x or residual (in place: the residual
	// stream updated where it lies); out must not overlap sum, x or residual. weight as RMSNorm's
	// (f32 or the storage dtype).
	RMSNormResidual(sum, out, x, residual, weight Buffer, eps float32) error
	// RoPE rotates x [T, heads, HeadDim] by the positions [T] (i32). out may be x.
	RoPE(out, x, positions Buffer, cfg RoPEConfig) error
	// AttentionPrefill computes softmax(q·kᵀ·scale + mask)·v for q [B, S, nH, D] and
	// k, v [B, S, nKV, D] into out [B, S, nH, D].
	AttentionPrefill(out, q, k, v Buffer, cfg AttentionConfig) error
	// AttentionScoresSoftmax writes the attention probabilities probs [B, nH, Sq, Sk] (f32) =
	// softmax(q·kᵀ·scale + causal mask) per head for q [B, Sq, nH, D] and k [B, Sk, nKV, D],
	// Sq <= Sk: the queries are the last Sq positions, causal query i sees keys 0..Sk-Sq+i and
	// the rest get 0. Unfused equivalent, per batch and head: Gemm into fp32, the scale, the
	// mask as -inf, Softmax.
	AttentionScoresSoftmax(probs, q, k Buffer, cfg AttentionConfig) error
	// AttentionDecode attends one query per sequence, q [B, nH, D], to the first
	// cacheLens[b] (i32 [B]) positions of kCache, vCache [B, L, nKV, D]; out is [B, nH, D].
	AttentionDecode(out, q, kCache, vCache, cacheLens Buffer, cfg AttentionConfig) error
	// AttentionDecodeFP8 is AttentionDecode over an FP8 KV cache: kCache, vCache (f8e4m3) [B,
	// L, nKV, D] stand for code · kScale[h] and code · vScale[h], h the kv head (f32 [nKV]) or
	// 0 (f32 [1]); q and out f16 or bf16. Unfused equivalent: the caches dequantised to f32,
	// then attention over them.
	AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale Buffer, cfg AttentionConfig) error
	// AttentionDecodePaged is AttentionDecode over a paged KV cache (vLLM's layout): kCache,
	// vCache [numBlocks, blockSize, nKV, D] are a pool of pages, blockTable (i32 [B, W]) maps
	// sequence b's position p to slot p % blockSize of page blockTable[b][p / blockSize].
	// blockSize is a power of two in [1, 256]; only the first ceil(cacheLens[b] / blockSize)
	// entries of a row are read (each in [0, numBlocks)), and cacheLens[b] is in [1, W ·
	// blockSize]. Unfused equivalent: each sequence's pages gathered into a contiguous cache,
	// then AttentionDecode. The KV append into pages is SetRows on the pool viewed as
	// [numBlocks · blockSize, nKV · D] with each new token's slot as its row (vLLM's
	// slot_mapping).
	AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens Buffer, cfg AttentionConfig) error
	// AttentionPrefillPaged attends new tokens to their sequences' paged caches (chunked
	// prefill, prefix caching; a sequence with one new token is a decode inside the launch):
	// q [T, nH, D] holds every sequence's new queries in order, sequence b's the rows qStarts[b]
	// .. qStarts[b+1]-1 (i32 [B+1], qStarts[0] = 0, qStarts[B] = T, each sequence at least
	// one); kCache, vCache and blockTable as AttentionDecodePaged's, already holding the new
	// tokens' keys and values; kvLens (i32 [B]) the whole lengths, from the sequence's new-token
	// count up to W · blockSize. Query i of sequence b is at position kvLens[b] - qLen + i and
	// attends causally to positions 0 .. kvLens[b] - qLen + i. Unfused equivalent: each
	// sequence's pages gathered, then causal attention with the prefix offset.
	AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens Buffer, cfg AttentionConfig) error
	// AttentionDecodePagedFP8 is AttentionDecodePaged over an f8e4m3 pool whose codes stand for
	// code · kScale[h] and code · vScale[h] as AttentionDecodeFP8's (vLLM's paged cache with
	// kv_cache_dtype "fp8"; the append is SetRowsFP8 on the pool viewed as rows). Unfused
	// equivalent: the pool dequantised to f32, then AttentionDecodePaged's arithmetic.
	AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale Buffer, cfg AttentionConfig) error
	// AttentionPrefillPagedFP8 is AttentionPrefillPaged over an f8e4m3 pool with
	// AttentionDecodePagedFP8's scales: chunked prefill and prefix caching against an FP8 cache.
	AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale Buffer, cfg AttentionConfig) error
	// SwiGLU computes out = silu(gate) * up elementwise.
	SwiGLU(out, gate, up Buffer) error
	// GeGLU computes out = GELU(gate) * up elementwise, the exact GELU or (tanh) the tanh form
	// (Gemma's gelu_pytorch_tanh MLP), in fp32 from the 16-bit inputs with one rounding. out may
	// be gate or up.
	GeGLU(out, gate, up Buffer, tanh bool) error
	// SwiGLUFFN is the whole gated FFN. Unfused equivalent, each step rounding to fp16:
	// Gemm(g, x, wGate), Gemm(u, x, wUp), SwiGLU(a, g, u), Gemm(out, a, wDown).
	SwiGLUFFN(out, x, wGate, wUp, wDown Buffer) error
	// GemmSwiGLU is out [T, F] = silu(x Wg^T) * (x Wu^T) over the stacked weight wGateUp =
	// [Wg; Wu] [2F, H] (Phi-3's gate_up_proj), gate and up kept in fp32 until the one rounding.
	// Unfused equivalent: Gemm(g, x, wGateUp[:F]), Gemm(u, x, wGateUp[F:]), SwiGLU(out, g, u).
	GemmSwiGLU(out, x, wGateUp Buffer) error
	// RMSNormGemm is the pre-norm and the projection after it: out [T, N] = RMSNorm(s, normW)
	// w^T (+ bias [N]) for w [N, H], the normalised row rounded to fp16 as RMSNorm stores it
	// and the product to out once. s = x, or with a residual (sum and residual both non-nil)
	// s = fp16(x + residual), stored in sum, which must not overlap x or residual. Unfused
	// equivalent: RMSNormResidual(sum, h, x, residual, normW, eps) (or RMSNorm(h, x, normW,
	// eps)), then Gemm(out, h, w, bias).
	RMSNormGemm(out, sum, x, residual, normW, w, bias Buffer, eps float32) error
	// LayerNormGemm is the same for a LayerNorm family (GPT-2): out [T, N] = LayerNorm(s, gamma,
	// beta) w^T (+ bias [N]), s, sum and residual as RMSNormGemm's, the normalised row rounded to
	// fp16 as LayerNorm stores it. Unfused equivalent: LayerNormResidual(sum, h, x, residual,
	// gamma, beta, eps) (or LayerNorm(h, x, gamma, beta, eps)), then Gemm(out, h, w, bias).
	LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias Buffer, eps float32) error
	// SwiGLUGemm is a SwiGLU FFN's activation and down projection: out [T, N] = (silu(gate) *
	// up) w^T (+ bias [N]) for gate, up [T, K] and w [N, K], the activation rounded to fp16 as
	// SwiGLU stores it, the product once. Unfused equivalent: SwiGLU(a, gate, up), then
	// Gemm(out, a, w, bias).
	SwiGLUGemm(out, gate, up, w, bias Buffer) error
	// GPTFFN is GPT-2's MLP: out [T, H] = GELU(x W1^T + b1) W2^T + b2 for w1 [F, H], w2 [H, F]
	// (biases may be nil), the exact GELU or (tanh) the tanh form, the first product kept in
	// fp32 through the bias and the GELU until one rounding. Unfused equivalent: Gemm(h, x, w1,
	// b1), GELU or GELUTanh(a, h), Gemm(out, a, w2, b2).
	GPTFFN(out, x, w1, b1, w2, b2 Buffer, tanh bool) error
	// GELU is the exact, erf-based GELU.
	GELU(out, x Buffer) error
	// GELUTanh is the tanh approximation (GPT-2's gelu_new).
	GELUTanh(out, x Buffer) error
	// GELUScale computes out = GELU(x) * scale elementwise, the exact GELU or (tanh) the tanh
	// form, kept in fp32 through the scale until one rounding; scale is any finite float and out
	// may be x. Unfused equivalent: GELU or GELUTanh(h, x), then Gemm(out, h, w, nil) with h and
	// out viewed as [n, 1] and w = [[fp16(scale)]] [1, 1] (one exact product, one rounding).
	GELUScale(out, x Buffer, tanh bool, scale float32) error
	// PosEmbedding adds learned absolute position rows: out = x [T, H] + table[positions].
	PosEmbedding(out, x, table, positions Buffer) error
	// Embedding gathers rows of table [V, H] by the i32 ids [T] into out [T, H], each multiplied
	// by scale and rounded once to the storage dtype (Gemma's embed_scale, sqrt(H), which the
	// caller rounds to that dtype as transformers does: the product of two 16-bit values is exact
	// in fp32). scale is finite and nonzero; 1 is none, a bit-exact gather.
	Embedding(out, ids, table Buffer, scale float32) error
	// SetRows scatters the rows of src [T, ...] into dst [R, ...] in place, dst[rows[i]] =
	// src[i] for the i32 rows [T], each in [0, R), and leaves every other row of dst as it was:
	// the KV-cache append. dst and src are both f16 or both f32 with the same number of
	// elements per row (the product of the dims after the first); the copy is exact. Rows must
	// be distinct: which write wins for a repeated row is unspecified. The indices are device
	// data, so a captured decode step can replay its append at a new position.
	SetRows(dst, src, rows Buffer) error
	// SetRowsFP8 is the KV-cache append into an FP8 cache: dst (f8e4m3) [R, ...] row rows[i] =
	// e4m3(src[i] / scale[head]) for the i32 rows [T] as SetRows, src [T, ...] f16, bf16 or f32
	// with dst's elements per row; scale f32 [1] (per tensor) or [heads] for dst [R, heads, D]
	// (per head): docs/quantization.md's static quantisation, the same bytes on every backend.
	// Unfused equivalent: QuantFP8 of src with each head's scale, then SetRows of the codes.
	SetRowsFP8(dst, src, rows, scale Buffer) error
	// Gemm computes out = x [M, K] · wᵀ (w is [N, K]) + bias [N] with fp32 accumulation.
	// bias may be nil. out may be fp16 or fp32; the result is rounded to out's dtype.
	Gemm(out, x, w, bias Buffer) error
	// Softmax normalises each row of x (fp16 or fp32) over its last dimension into the
	// fp32 out. -inf entries get probability 0.
	Softmax(out, x Buffer) error
	// LogitSoftcap is Gemma 2's final logit soft-capping: out = softcap · tanh(x / softcap)
	// elementwise (transformers' Gemma2ForCausalLM: logits / cap, tanh, * cap;
	// final_logit_softcapping is 30 in every published config), computed in fp32 or better and
	// rounded once to out's dtype. x and out are both f32 (the engine's logits: the lm-head Gemm
	// writes f32) or both f16 or bf16, of one shape; out may be x (in place). softcap is positive
	// and finite.
	LogitSoftcap(out, x Buffer, softcap float32) error
	// QuantFP8 quantises x [T, H] (f16, bf16 or f32) into the f8e4m3 out [T, H] exactly as
	// docs/quantization.md defines it, bit for bit. Dynamic (scale nil): each row in groups of
	// groupSize elements (H: per token; 128: the 1x128 groups of fine-grained FP8), the group's
	// scale max(amax, 1e-10) / 448 written to the f32 scales [T, H/groupSize]. Static (scale
	// the f32 [1] per-tensor scale, scales nil, groupSize 0): out = e4m3(x / scale).
	QuantFP8(out, scales, x, scale Buffer, groupSize int) error
	// GemmFP8 computes out [M, N] (f16 or bf16) = dequant(x) [M, K] · dequant(w)ᵀ for the
	// f8e4m3 x and w [N, K], fp32 accumulation: the w8a8 GEMM of FP8 checkpoints. block: x's
	// f32 scales are [M, K/128] (1x128 groups, K % 128 == 0) and w's [ceil(N/128), K/128]
	// (128x128 blocks, transformers' weight_scale_inv); else per token [M, 1] and per output
	// channel [N, 1] (compressed-tensors' FP8-dynamic). A value dequantises as float(q) · scale.
	GemmFP8(out, x, xScales, w, wScales Buffer, block bool) error
	// RMSNormQuantFP8 is the pre-norm of an FP8 model and the quantisation of its output for the
	// FP8 projection after it: y = RMSNorm(s, weight, eps) rounded to the storage dtype as RMSNorm
	// stores it, then out [T, H] (f8e4m3) and scales = QuantFP8(y), dynamic (scale nil, groupSize
	// dividing H, scales f32 [T, H/groupSize]) or static (the f32 [1] scale, scales nil,
	// groupSize 0). s = x, or with a residual (sum and residual both non-nil) s = x + residual
	// rounded to the storage dtype and stored in sum, which may be x or residual (in place) but
	// must not overlap out. Unfused equivalent: RMSNormResidual(sum, y, x, residual, weight, eps)
	// (or RMSNorm(y, x, weight, eps)), then QuantFP8(out, scales, y, scale, groupSize).
	RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale Buffer, groupSize int, eps float32) error
	// SwiGLUQuantFP8 is a SwiGLU activation quantised for the FP8 down projection after it:
	// y = silu(gate) * up rounded to the storage dtype as SwiGLU stores it, for gate, up [T, F],
	// then out [T, F] (f8e4m3) and scales = QuantFP8(y) as RMSNormQuantFP8's. Unfused
	// equivalent: SwiGLU(y, gate, up), then QuantFP8(out, scales, y, scale, groupSize).
	SwiGLUQuantFP8(out, scales, gate, up, scale Buffer, groupSize int) error
	// GemmW4A16 computes out [M, N] = x [M, K] · Wᵀ for a 4-bit weight in one of the packings
	// of docs/quantization.md ("4-bit weights"): Wᵀ[k, n] = (q - z[g(k), n]) · scales[g(k), n],
	// rounded once to x's storage type (f16 or bf16), then fp32 accumulation and one rounding.
	// W4AWQ: qweight i32 [K, N/8], qzeros i32 [K/G, N/8], gIdx nil; W4GPTQ: qweight i32
	// [K/8, N], qzeros i32 [K/G, N/8] (storing z - 1), gIdx i32 [K] (each input's group).
	// scales [K/G, N] in x's type. Unfused equivalent: the dequantised weight, then Gemm.
	GemmW4A16(out, x, qweight, qzeros, scales, gIdx Buffer, format W4Format, groupSize int) error
	// MoERouter chooses each token's experts from the router's logits [T, E] (f16 or bf16), as
	// transformers' MoE routers do: p = softmax(float32(logits)) over the E experts, the topK
	// largest p in descending order (equal logits: the lower expert index first) into ids i32
	// [T, topK] and their p into weights f32 [T, topK], renormalised to sum to 1 when
	// renormalize (Mixtral; Qwen3-MoE's norm_topk_prob). 1 <= topK <= E <= 1024.
	MoERouter(weights, ids, logits Buffer, topK int, renormalize bool) error
	// MoEFFN is the expert block of a mixture-of-experts layer after its router, SwiGLU experts
	// stored as transformers stores them: for x [T, H] and each token's chosen experts ids i32
	// [T, k] (distinct within a row, each in [0, E)) with their weights f32 [T, k], out [T, H] =
	// sum_j weights[t, j] · down[e] · (silu(g) ⊙ u), e = ids[t, j], g and u the rows 0..F-1 and
	// F..2F-1 of gate_up[e] [2F, H] times x[t]; gate_up [E, 2F, H] and down [E, H, F] in x's
	// storage type. Unfused equivalent, per expert with tokens: the rows of x that chose it
	// (Embedding over x), Gemm by its gate and up rows, SwiGLU, Gemm by its down projection, each
	// rounding to the storage type, then the weighted sum over each token's experts in fp32 and
	// one rounding.
	MoEFFN(out, x, ids, weights, gateUp, down Buffer) error
	// MoESharedAdd adds a shared expert to a sparse block's output through its sigmoid gate, as
	// transformers' Qwen2MoeSparseMoeBlock does: out [T, H] = routed + sigmoid(x · gate) ⊙ shared,
	// one gate value a token (x [T, H] the block's input, gate [1, H] its shared_expert_gate
	// weight), routed the experts' sum (MoEFFN), shared the shared expert's SwiGLU output; all in
	// one storage type. The dot product, the sigmoid and the sum in fp32 or better, one rounding
	// to the storage type; out may be routed (in place). Unfused equivalent: Gemm(g [T, 1], x,
	// gate), then sigmoid(g) ⊙ shared + routed, each step rounded to the storage type.
	MoESharedAdd(out, routed, shared, x, gate Buffer) error
}

// SampleConfig configures seeded sampling as docs/sampling.md defines it.
type SampleConfig struct {
	Temperature float32 // 0 = greedy, else finite and > 0
	TopK        int     // 0 = off
	TopP        float32 // in (0, 1]; 1 = off
	Seed        uint64  // the Philox key
	Step        uint64  // the token's position in the generation; row r uses counter (Step, r)
}

// Sampler draws tokens from logits, bit-exactly as docs/sampling.md specifies, so that the
// reference, the cpu backend and the GPU agree token for token.
type Sampler interface {
	// Sample writes one token per row of the fp32 logits [rows, vocab] into the i32 tokens
	// [rows]. Bad logits (NaN, +inf, a row all -inf) are errors; a backend that checks them
	// on the device reports them at the next Download or Synchronize.
	Sample(tokens, logits Buffer, cfg SampleConfig) error
	// Philox writes the raw Philox4x32-10 stream into out, i32 [n, 4] holding the uint32
	// words' bits: row i is the output for key seed and counter (step + i, row).
	Philox(out Buffer, seed, step uint64, row uint32) error
}

// OwnRNGSampler is implemented by a backend whose Sample draws from its own random numbers
// rather than docs/sampling.md's Philox stream: another library's sampler behind an external
// adapter. Its tokens cannot be compared one by one with the reference's; engine/sample judges
// them by what every correct sampler satisfies (the support of each draw, the distribution of
// many), and the backend's Philox refuses.
type OwnRNGSampler interface {
	SamplesWithOwnRNG() bool
}

// Backend is a device plus the ops it runs.
type Backend interface {
	Kernels
	Sampler
	Info() DeviceInfo
	// Supports reports whether the backend implements an op (golden op name, such as
	// "rope"), so a suite reports an unclaimed op as skipped instead of failing it.
	Supports(op string) bool
	// Alloc returns a zeroed buffer.
	Alloc(dt tensor.DType, shape ...int) (Buffer, error)
	// Upload copies a host tensor into a new buffer of the same dtype and shape.
	Upload(t *tensor.Tensor) (Buffer, error)
	// Download copies a buffer back into a new host tensor, after all work queued on the
	// buffer has finished.
	Download(b Buffer) (*tensor.Tensor, error)
	// Close releases the device. Buffers must be freed before.
	Close() error
}

// OpRunner is implemented by backends that run a golden op as a whole, by its golden-format
// name and params, instead of through the Kernels methods: the external backends
// (docs/external-backends.md), whose adapters implement ops against docs/golden-format.md.
// The conformance runner hands RunOp the set's params (its manifest's JSON), the inputs it
// uploaded and the outputs it allocated, each by its golden name; RunOp fills the outputs
// (an in-place op's output is one of its inputs' buffers). An op or a case the backend does
// not implement is an error wrapping ErrUnsupported that says why.
type OpRunner interface {
	RunOp(op string, params []byte, inputs, outputs []NamedBuffer) error
}

// OpTimer is an OpRunner that times a whole op on its own device (an external backend whose
// adapter offers timing): Warmup untimed launches, then Repeats launches each after an L2
// flush of FlushBytes, timed with the device's events, one time in milliseconds each.
// TimingDevice names the device, or says it has none (then TimeOp is unsupported).
type OpTimer interface {
	OpRunner
	TimingDevice() (string, bool)
	TimeOp(op string, params []byte, inputs, outputs []NamedBuffer, t TimeRequest) ([]float64, error)
	// CopyBandwidthGBps is the device's copy bandwidth (bytes read plus written per second).
	CopyBandwidthGBps() (float64, error)
}

// TimeRequest is how an OpTimer times an op.
type TimeRequest struct {
	Warmup, Repeats, FlushBytes int
}

// NamedBuffer is a buffer with its golden-set name.
type NamedBuffer struct {
	Name string
	Buf  Buffer
}

// Ops lists every op of Kernels by its golden-set name, in the order reports print them.
var Ops = []string{
	"residual_add", "rmsnorm", "layernorm", "layernorm_residual", "rmsnorm_residual", "rope",
	"attention_prefill", "attention_decode", "attention_scores_softmax", "swiglu", "geglu", "swiglu_ffn", "gemm_swiglu", "rmsnorm_gemm", "layernorm_gemm", "swiglu_gemm", "gpt_ffn",
	"gelu", "gelu_tanh", "gelu_scale",
	"pos_embedding", "embedding", "set_rows", "gemm", "softmax", "logit_softcap",
	"quant_fp8", "gemm_fp8", "rmsnorm_quant_fp8", "swiglu_quant_fp8", "gemm_w4a16", "set_rows_fp8",
	"attention_decode_fp8", "attention_decode_paged", "attention_prefill_paged",
	"attention_decode_paged_fp8", "attention_prefill_paged_fp8",
	"moe_router", "moe_ffn", "moe_shared_add",
}

// Timer brackets device work with device events, for benchmarks.
type Timer interface {
	Start() error
	// Stop waits for the work queued since Start and returns its device time.
	Stop() (time.Duration, error)
	Close() error
}

// DeviceMemory is implemented by backends whose buffers live in device memory, so suites can
// prove that nothing leaks.
type DeviceMemory interface {
	// LiveBytes and LiveBuffers count what the backend has allocated and not yet freed.
	LiveBytes() int64
	LiveBuffers() int64
	// MemoryInUse is the device memory in use by all processes (total - free).
	MemoryInUse() (int64, error)
	// ReleaseWorkspaces frees memory the backend keeps between ops; it regrows on demand.
	ReleaseWorkspaces() error
}

// PathRecorder is implemented by backends whose ops dispatch to several kernels by size,
// alignment and layout (the cuda backend): while recording is on, every kernel launch, library
// call and device fault is counted under its op, so a test can demand that each dispatch path
// of a kernel table was taken.
type PathRecorder interface {
	// RecordPaths(true) clears the counts and starts recording; false stops.
	RecordPaths(on bool) error
	// RecordedPaths returns the counts since recording started.
	RecordedPaths() (map[PathKey]int64, error)
}

// BatchInvariance is implemented by backends whose decode ops can be switched between the
// fastest kernel for each call's size and batch-invariant kernels (the cuda backend's
// ts_set_batch_invariant): with the mode on, a sequence's logits are bit-identical whether it is
// decoded alone or in a batch of up to 16. A backend without the interface computes every row
// the same way whatever the batch (the cpu backend), which the batch-invariance check verifies
// rather than assumes. The mode is process-wide; a captured graph keeps the mode of its capture.
type BatchInvariance interface {
	SetBatchInvariant(on bool) error
	BatchInvariant() (bool, error)
}

// GemvRows is implemented by backends whose decode projections choose between a gemv and a
// library GEMM by row count (the cuda backend's ts_set_gemv_rows): up to MaxRows rows take the
// gemv. bench-batch times the settings side by side, which is how the default is chosen. The
// setting is process-wide; a captured graph keeps the setting of its capture.
type GemvRows interface {
	SetGemvRows(maxRows int) error
	GemvRows() (int, error)
}

// PathKey names one recorded path: the op and what ran for it (a kernel's name with its
// template arguments, a library call, or "fault:<kind>").
type PathKey struct{ Op, What string }
