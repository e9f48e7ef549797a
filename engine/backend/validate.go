package backend

import (
	"fmt"
	"math"
	"strconv"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// The shape and parameter checks of every op, shared by all backends so that each refuses
// exactly the same calls with exactly the same messages. Activations and weights are stored in
// fp16 or bf16 (Check.Storage): the first 16-bit operand of a call sets the storage dtype and
// every other one must match it (Check.Same); outputs that may be fp32 (gemm's, the logits) say
// so. Checks of index values that live
// in buffers (positions, ids, cache_lens, rows) are the backends' own: only they can read them.

func fmtF(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

func fmtI(v int) string { return strconv.Itoa(v) }

// CheckUnary validates a 16-bit (fp16 or bf16) elementwise op out = f(x).
func CheckUnary(op string, out, x Buffer) error {
	c := Validate(op)
	c.Storage("x", x)
	c.MinRank("x", x, 1)
	if c.Err() == nil {
		c.Same("out", out)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// CheckGELUScale validates gelu_scale: a finite scale, then CheckUnary's shapes.
func CheckGELUScale(out, x Buffer, scale float32) error {
	c := Validate("gelu_scale")
	s := float64(scale)
	c.That(!math.IsInf(s, 0) && !math.IsNaN(s), "scale", fmtF(scale), "must be finite")
	if err := c.Err(); err != nil {
		return err
	}
	return CheckUnary("gelu_scale", out, x)
}

// CheckBinary validates a 16-bit elementwise op of two tensors of one shape and dtype.
func CheckBinary(op, aName, bName string, out, a, b Buffer) error {
	c := Validate(op)
	c.Storage(aName, a)
	c.MinRank(aName, a, 1)
	if c.Err() == nil {
		c.Same(bName, b)
		c.Shape(bName, b, a.Shape(), "the shape of "+aName)
		c.Same("out", out)
		c.Shape("out", out, a.Shape(), "the shape of "+aName)
	}
	return c.Err()
}

// checkNorm validates x [T, H], out like x, eps, and each [H] parameter vector: in the storage
// dtype, or for RMSNorm's weight also f32 (Gemma's 1 + w, which no 16-bit type holds exactly).
func checkNorm(c *Check, out, x Buffer, eps float32, params map[string]Buffer) {
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.That(eps > 0 && !math.IsInf(float64(eps), 0), "eps", fmtF(eps), "must be positive and finite")
	if c.Err() != nil {
		return
	}
	h := x.Shape()[1]
	for _, name := range []string{"weight", "gamma", "beta"} {
		p, ok := params[name]
		if !ok {
			continue
		}
		if name != "weight" || p == nil || p.DType() != tensor.F32 {
			refuseF32NormWeight(c, name, p)
			c.Same(name, p)
		}
		c.Shape(name, p, []int{h}, "the hidden size of x")
	}
	c.Same("out", out)
	c.Shape("out", out, x.Shape(), "the shape of x")
}

// refuseF32NormWeight fails an op other than RMSNorm and RMSNormResidual whose norm weight
// (named arg) is f32: only those two take Gemma's fp32 1 + w; the others (the LayerNorms, the
// fused norms) read their weights in the storage dtype, and a silent conversion would hide a
// loader that handed them the wrong one.
func refuseF32NormWeight(c *Check, arg string, w Buffer) {
	if w != nil && w.DType() == tensor.F32 {
		c.fail(arg, describe(w), "an f32 norm weight (Gemma's 1 + w) is taken by rmsnorm and rmsnorm_residual only; "+
			"%s needs it in the storage dtype %v", c.op, c.Stored())
	}
}

// CheckRMSNorm validates RMSNorm: weight [H] in x's storage dtype or f32.
func CheckRMSNorm(out, x, weight Buffer, eps float32) error {
	c := Validate("rmsnorm")
	checkNorm(c, out, x, eps, map[string]Buffer{"weight": weight})
	return c.Err()
}

// CheckLayerNorm validates LayerNorm.
func CheckLayerNorm(out, x, gamma, beta Buffer, eps float32) error {
	c := Validate("layernorm")
	checkNorm(c, out, x, eps, map[string]Buffer{"gamma": gamma, "beta": beta})
	return c.Err()
}

// CheckLayerNormResidual validates the fused residual add + LayerNorm.
func CheckLayerNormResidual(sum, out, x, residual, gamma, beta Buffer, eps float32) error {
	return checkNormResidual("layernorm_residual", sum, out, x, residual, eps, map[string]Buffer{"gamma": gamma, "beta": beta})
}

// CheckRMSNormResidual validates the fused residual add + RMSNorm: weight as RMSNorm's.
func CheckRMSNormResidual(sum, out, x, residual, weight Buffer, eps float32) error {
	return checkNormResidual("rmsnorm_residual", sum, out, x, residual, eps, map[string]Buffer{"weight": weight})
}

// checkNormResidual validates a fused residual add + norm: the norm's checks, then residual
// and sum like x.
func checkNormResidual(op string, sum, out, x, residual Buffer, eps float32, params map[string]Buffer) error {
	c := Validate(op)
	checkNorm(c, out, x, eps, params)
	if c.Err() == nil {
		c.Same("residual", residual)
		c.Shape("residual", residual, x.Shape(), "the shape of x")
		c.Same("sum", sum)
		c.Shape("sum", sum, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// CheckRoPE validates RoPE on x [T, heads, HeadDim].
func CheckRoPE(out, x, positions Buffer, cfg RoPEConfig) error {
	c := Validate("rope")
	c.Storage("x", x)
	c.Rank("x", x, 3)
	c.That(cfg.HeadDim > 0 && cfg.HeadDim%2 == 0, "head_dim", fmtI(cfg.HeadDim), "must be positive and even")
	c.That(cfg.RopeDim > 0 && cfg.RopeDim%2 == 0 && cfg.RopeDim <= cfg.HeadDim, "rope_dim", fmtI(cfg.RopeDim),
		"must be positive, even and at most head_dim (%d)", cfg.HeadDim)
	c.That(cfg.FreqBase > 1 && !math.IsInf(float64(cfg.FreqBase), 0), "freq_base", fmtF(cfg.FreqBase), "must be finite and > 1")
	if c.Err() == nil {
		c.That(x.Shape()[2] == cfg.HeadDim, "x", describe(x), "last dim must equal head_dim (%d)", cfg.HeadDim)
		c.DType("positions", positions, tensor.I32)
		c.Shape("positions", positions, x.Shape()[:1], "one position per token of x")
		c.Same("out", out)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	f := cfg.AttentionFactor
	c.That(f == 0 || (f > 0 && !math.IsInf(float64(f), 0)), "attention_factor", fmtF(f), "must be finite and > 0 (0: unscaled, 1)")
	if cfg.LongDivisor != nil {
		c.That(cfg.LongFrom >= 0, "long_from", fmtI(cfg.LongFrom), "must be >= 0 with a long_divisor table")
	}
	if c.Err() == nil {
		for _, t := range []struct {
			name string
			buf  Buffer
		}{{"freq_divisor", cfg.FreqDivisor}, {"long_divisor", cfg.LongDivisor}} {
			if t.buf != nil {
				c.DType(t.name, t.buf, tensor.F32)
				c.Shape(t.name, t.buf, []int{cfg.RopeDim / 2}, "one divisor per rotated pair (rope_dim/2)")
			}
		}
	}
	return c.Err()
}

// checkHeads validates the head layout shared by prefill and decode.
func checkHeads(c *Check, cfg AttentionConfig) {
	c.That(cfg.NumHeads > 0, "n_heads", fmtI(cfg.NumHeads), "must be positive")
	c.That(cfg.NumKVHeads > 0, "n_kv_heads", fmtI(cfg.NumKVHeads), "must be positive")
	c.That(cfg.HeadDim > 0, "head_dim", fmtI(cfg.HeadDim), "must be positive")
	c.That(cfg.Scale > 0 && !math.IsInf(float64(cfg.Scale), 0), "scale", fmtF(cfg.Scale), "must be positive and finite")
	if cfg.NumHeads > 0 && cfg.NumKVHeads > 0 {
		c.That(cfg.NumHeads%cfg.NumKVHeads == 0, "n_kv_heads", fmtI(cfg.NumKVHeads),
			"must divide n_heads (%d)", cfg.NumHeads)
	}
	c.That(cfg.Window >= 0, "window", fmtI(cfg.Window), "must be >= 0 (0: no sliding window)")
	c.That(cfg.Softcap >= 0 && !math.IsInf(float64(cfg.Softcap), 0), "softcap", fmtF(cfg.Softcap),
		"must be 0 (none) or positive and finite")
}

// refuseWindow fails an op that has no sliding window, naming it, for cfg.Window > 0.
func refuseWindow(c *Check, cfg AttentionConfig) {
	c.That(cfg.Window <= 0, "window", fmtI(cfg.Window), "this op has no sliding window (not implemented)")
}

// CheckAttentionPrefill validates prefill attention.
func CheckAttentionPrefill(out, q, k, v Buffer, cfg AttentionConfig) error {
	c := Validate("attention_prefill")
	checkHeads(c, cfg)
	c.That(cfg.Window <= 0 || cfg.Causal, "window", fmtI(cfg.Window), "a sliding window needs causal attention")
	c.Storage("q", q)
	c.Rank("q", q, 4)
	if c.Err() == nil {
		b, s := q.Shape()[0], q.Shape()[1]
		c.Shape("q", q, []int{b, s, cfg.NumHeads, cfg.HeadDim}, "[batch, seq, n_heads, head_dim]")
		kv := []int{b, s, cfg.NumKVHeads, cfg.HeadDim}
		c.Same("k", k)
		c.Shape("k", k, kv, "[batch, seq, n_kv_heads, head_dim] of q")
		c.Same("v", v)
		c.Shape("v", v, kv, "[batch, seq, n_kv_heads, head_dim] of q")
		c.Same("out", out)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	return c.Err()
}

// CheckAttentionScoresSoftmax validates the attention probabilities.
func CheckAttentionScoresSoftmax(probs, q, k Buffer, cfg AttentionConfig) error {
	c := Validate("attention_scores_softmax")
	checkHeads(c, cfg)
	refuseWindow(c, cfg)
	c.Storage("q", q)
	c.Rank("q", q, 4)
	c.Same("k", k)
	c.Rank("k", k, 4)
	if c.Err() == nil {
		b, sq, sk := q.Shape()[0], q.Shape()[1], k.Shape()[1]
		c.Shape("q", q, []int{b, sq, cfg.NumHeads, cfg.HeadDim}, "[batch, seq_q, n_heads, head_dim]")
		c.Shape("k", k, []int{b, sk, cfg.NumKVHeads, cfg.HeadDim}, "[batch of q, seq_k, n_kv_heads, head_dim]")
		c.That(sq <= sk, "q", describe(q), "seq_q must not exceed seq_k (%d): the queries are the last keys' positions", sk)
		c.DType("probs", probs, tensor.F32)
		c.Shape("probs", probs, []int{b, cfg.NumHeads, sq, sk}, "[batch, n_heads, seq_q, seq_k]")
	}
	return c.Err()
}

// CheckAttentionDecode validates decode attention against a KV cache.
func CheckAttentionDecode(out, q, kCache, vCache, cacheLens Buffer, cfg AttentionConfig) error {
	c := Validate("attention_decode")
	checkHeads(c, cfg)
	c.Storage("q", q)
	c.Rank("q", q, 3)
	c.Same("k_cache", kCache)
	c.Rank("k_cache", kCache, 4)
	if c.Err() == nil {
		b, l := q.Shape()[0], kCache.Shape()[1]
		c.Shape("q", q, []int{b, cfg.NumHeads, cfg.HeadDim}, "[batch, n_heads, head_dim]")
		cache := []int{b, l, cfg.NumKVHeads, cfg.HeadDim}
		c.Shape("k_cache", kCache, cache, "[batch, max_len, n_kv_heads, head_dim]")
		c.Same("v_cache", vCache)
		c.Shape("v_cache", vCache, cache, "the shape of k_cache")
		c.DType("cache_lens", cacheLens, tensor.I32)
		c.Shape("cache_lens", cacheLens, []int{b}, "one length per sequence")
		c.Same("out", out)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	return c.Err()
}

// MaxPageSize is the largest page (block) of a paged KV cache, in positions.
const MaxPageSize = 256

// CheckAttentionDecodePaged validates decode attention through a block table into a pool of
// pages [num_blocks, block_size, n_kv_heads, head_dim].
func CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens Buffer, cfg AttentionConfig) error {
	return checkDecodePaged(Validate("attention_decode_paged"), out, q, kCache, vCache, blockTable, cacheLens, cfg, false)
}

// CheckAttentionDecodePagedFP8 validates decode attention through a block table into an
// f8e4m3 pool with f32 [1] or [n_kv_heads] key and value scales.
func CheckAttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale Buffer, cfg AttentionConfig) error {
	c := Validate("attention_decode_paged_fp8")
	if err := checkDecodePaged(c, out, q, kCache, vCache, blockTable, cacheLens, cfg, true); err != nil {
		return err
	}
	checkKVScales(c, kScale, vScale, cfg)
	return c.Err()
}

// checkDecodePaged is attention_decode_paged's check under c's op name, its pool of codes when
// codes.
func checkDecodePaged(c *Check, out, q, kCache, vCache, blockTable, cacheLens Buffer, cfg AttentionConfig, codes bool) error {
	checkHeads(c, cfg)
	c.Storage("q", q)
	c.Rank("q", q, 3)
	if c.Err() == nil {
		b := q.Shape()[0]
		c.Shape("q", q, []int{b, cfg.NumHeads, cfg.HeadDim}, "[batch, n_heads, head_dim]")
		checkPagedPool(c, kCache, vCache, blockTable, b, cfg, codes)
		c.DType("cache_lens", cacheLens, tensor.I32)
		c.Shape("cache_lens", cacheLens, []int{b}, "one length per sequence")
		c.Same("out", out)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	return c.Err()
}

// checkPagedPool checks a paged pool [num_blocks, block_size, n_kv_heads, head_dim] (k_cache,
// and v_cache of the same shape, both of q's dtype, checked by the caller, or both f8e4m3 when
// codes) and its block table [batch, width].
func checkPagedPool(c *Check, kCache, vCache, blockTable Buffer, batch int, cfg AttentionConfig, codes bool) {
	poolDType := func(arg string, b Buffer) {
		if codes {
			c.DType(arg, b, tensor.F8E4M3)
		} else {
			c.Same(arg, b)
		}
	}
	poolDType("k_cache", kCache)
	c.Rank("k_cache", kCache, 4)
	c.DType("block_table", blockTable, tensor.I32)
	c.Rank("block_table", blockTable, 2)
	if c.Err() != nil {
		return
	}
	nb, bs := kCache.Shape()[0], kCache.Shape()[1]
	c.That(bs >= 1 && bs <= MaxPageSize && bs&(bs-1) == 0, "k_cache", describe(kCache),
		"its dim 1 is the page size %d: want a power of two in [1, %d]", bs, MaxPageSize)
	pool := []int{nb, bs, cfg.NumKVHeads, cfg.HeadDim}
	c.Shape("k_cache", kCache, pool, "[num_blocks, block_size, n_kv_heads, head_dim]")
	poolDType("v_cache", vCache)
	c.Shape("v_cache", vCache, pool, "the shape of k_cache")
	c.That(blockTable.Shape()[0] == batch && blockTable.Shape()[1] >= 1, "block_table", describe(blockTable),
		"want [batch = %d, table_width >= 1]", batch)
}

// CheckAttentionPrefillPaged validates prefill of new tokens q [T, n_heads, head_dim] against
// paged caches, with q_starts [batch + 1] and kv_lens [batch] (int32).
func CheckAttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens Buffer, cfg AttentionConfig) error {
	return checkPrefillPaged(Validate("attention_prefill_paged"), out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg, false)
}

// CheckAttentionPrefillPagedFP8 validates paged prefill against an f8e4m3 pool with f32 [1] or
// [n_kv_heads] key and value scales.
func CheckAttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale Buffer, cfg AttentionConfig) error {
	c := Validate("attention_prefill_paged_fp8")
	if err := checkPrefillPaged(c, out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg, true); err != nil {
		return err
	}
	checkKVScales(c, kScale, vScale, cfg)
	return c.Err()
}

// checkPrefillPaged is attention_prefill_paged's check under c's op name, its pool of codes
// when codes.
func checkPrefillPaged(c *Check, out, q, kCache, vCache, blockTable, qStarts, kvLens Buffer, cfg AttentionConfig, codes bool) error {
	checkHeads(c, cfg)
	c.Storage("q", q)
	c.Rank("q", q, 3)
	c.DType("kv_lens", kvLens, tensor.I32)
	c.Rank("kv_lens", kvLens, 1)
	if c.Err() != nil {
		return c.Err()
	}
	t, batch := q.Shape()[0], kvLens.Shape()[0]
	c.Shape("q", q, []int{t, cfg.NumHeads, cfg.HeadDim}, "[tokens, n_heads, head_dim]")
	checkPagedPool(c, kCache, vCache, blockTable, batch, cfg, codes)
	c.DType("q_starts", qStarts, tensor.I32)
	c.Shape("q_starts", qStarts, []int{batch + 1}, "one start per sequence and the end")
	c.Same("out", out)
	c.Shape("out", out, q.Shape(), "the shape of q")
	return c.Err()
}

// CheckAttentionDecodeFP8 validates decode attention over f8e4m3 caches with f32 [1] or
// [n_kv_heads] key and value scales.
func CheckAttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale Buffer, cfg AttentionConfig) error {
	c := Validate("attention_decode_fp8")
	checkHeads(c, cfg)
	refuseWindow(c, cfg)
	c.Storage("q", q)
	c.Rank("q", q, 3)
	c.DType("k_cache", kCache, tensor.F8E4M3)
	c.Rank("k_cache", kCache, 4)
	if c.Err() == nil {
		b, l := q.Shape()[0], kCache.Shape()[1]
		c.Shape("q", q, []int{b, cfg.NumHeads, cfg.HeadDim}, "[batch, n_heads, head_dim]")
		cache := []int{b, l, cfg.NumKVHeads, cfg.HeadDim}
		c.Shape("k_cache", kCache, cache, "[batch, max_len, n_kv_heads, head_dim]")
		c.DType("v_cache", vCache, tensor.F8E4M3)
		c.Shape("v_cache", vCache, cache, "the shape of k_cache")
		c.DType("cache_lens", cacheLens, tensor.I32)
		c.Shape("cache_lens", cacheLens, []int{b}, "one length per sequence")
		checkKVScales(c, kScale, vScale, cfg)
		c.Same("out", out)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	return c.Err()
}

// CheckEmbedding validates a token embedding gather, scaled by a finite nonzero scale (1: none).
func CheckEmbedding(out, ids, table Buffer, scale float32) error {
	c := Validate("embedding")
	s := float64(scale)
	c.That(s != 0 && !math.IsInf(s, 0) && !math.IsNaN(s), "scale", fmtF(scale), "must be finite and nonzero (1: no scaling)")
	c.DType("ids", ids, tensor.I32)
	c.MinRank("ids", ids, 1)
	c.Storage("table", table)
	c.Rank("table", table, 2)
	if c.Err() == nil {
		want := append(append([]int{}, ids.Shape()...), table.Shape()[1])
		c.Same("out", out)
		c.Shape("out", out, want, "the shape of ids plus the hidden size of table")
	}
	return c.Err()
}

// CheckSetRowsFP8 validates the quantising row scatter into an f8e4m3 dst: src (f16, bf16 or
// f32) like dst's rows, one i32 row index per row of src, scale f32 [1] or [heads] of a dst
// [R, heads, D].
func CheckSetRowsFP8(dst, src, rows, scale Buffer) error {
	c := Validate("set_rows_fp8")
	c.DType("dst", dst, tensor.F8E4M3)
	c.MinRank("dst", dst, 1)
	if c.Err() == nil {
		per := tensor.NumElements(dst.Shape()[1:])
		c.DType("src", src, tensor.F16, tensor.BF16, tensor.F32)
		c.MinRank("src", src, 1)
		if c.Err() == nil {
			c.That(tensor.NumElements(src.Shape()[1:]) == per, "src", describe(src),
				"want %d elements per row (the row size of dst)", per)
		}
		c.DType("rows", rows, tensor.I32)
		if c.Err() == nil {
			c.Shape("rows", rows, src.Shape()[:1], "one row index per row of src")
		}
		c.DType("scale", scale, tensor.F32)
		if c.Err() == nil {
			n, heads := tensor.NumElements(scale.Shape()), 0
			if len(dst.Shape()) == 3 {
				heads = dst.Shape()[1]
			}
			c.That(len(scale.Shape()) == 1 && (n == 1 || n == heads), "scale", describe(scale),
				"want [1] (per tensor) or [heads] of a dst [rows, heads, head_dim] (per head); dst is %v", dst.Shape())
		}
	}
	return c.Err()
}

// CheckSetRows validates a row scatter into dst: src like dst's rows, one i32 row index per
// row of src. The index values are the backends' to check.
func CheckSetRows(dst, src, rows Buffer) error {
	c := Validate("set_rows")
	c.DType("dst", dst, tensor.F16, tensor.BF16, tensor.F32)
	c.MinRank("dst", dst, 1)
	if c.Err() == nil {
		per := tensor.NumElements(dst.Shape()[1:])
		c.DType("src", src, dst.DType())
		c.MinRank("src", src, 1)
		if c.Err() == nil {
			c.That(tensor.NumElements(src.Shape()[1:]) == per, "src", describe(src),
				"want %d elements per row (the row size of dst)", per)
		}
		c.DType("rows", rows, tensor.I32)
		if c.Err() == nil {
			c.Shape("rows", rows, src.Shape()[:1], "one row index per row of src")
		}
	}
	return c.Err()
}

// CheckPosEmbedding validates the learned position embedding add.
func CheckPosEmbedding(out, x, table, positions Buffer) error {
	c := Validate("pos_embedding")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("table", table)
	c.Rank("table", table, 2)
	if c.Err() == nil {
		c.That(table.Shape()[1] == x.Shape()[1], "table", describe(table), "hidden size must equal x's (%d)", x.Shape()[1])
		c.DType("positions", positions, tensor.I32)
		c.Shape("positions", positions, x.Shape()[:1], "one position per token of x")
		c.Same("out", out)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// CheckGemm validates out = x · wᵀ + bias.
func CheckGemm(out, x, w, bias Buffer) error {
	c := Validate("gemm")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("w", w)
	c.Rank("w", w, 2)
	if c.Err() == nil {
		m, k, n := x.Shape()[0], x.Shape()[1], w.Shape()[0]
		c.That(w.Shape()[1] == k, "w", describe(w), "want [N, %d]: its last dim must equal x's K", k)
		c.Optional("bias", bias, []int{n}, "one bias per output feature (rows of w)")
		c.DType("out", out, c.Stored(), tensor.F32)
		c.Shape("out", out, []int{m, n}, "[rows of x, rows of w]")
	}
	return c.Err()
}

// CheckGemmSwiGLU validates the fused gate/up projection and activation.
func CheckGemmSwiGLU(out, x, wGateUp Buffer) error {
	c := Validate("gemm_swiglu")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("w_gate_up", wGateUp)
	c.Rank("w_gate_up", wGateUp, 2)
	if c.Err() == nil {
		t, h, f2 := x.Shape()[0], x.Shape()[1], wGateUp.Shape()[0]
		c.That(f2%2 == 0, "w_gate_up", tensor.ShapeString(wGateUp.Shape()), "its rows must be even: the ffn gate rows, then the ffn up rows")
		c.Shape("w_gate_up", wGateUp, []int{f2, h}, "[2 ffn, hidden of x]")
		c.Same("out", out)
		c.Shape("out", out, []int{t, f2 / 2}, "[rows of x, ffn]")
	}
	return c.Err()
}

// CheckRMSNormGemm validates the fused pre-norm and projection.
func CheckRMSNormGemm(out, sum, x, residual, normW, w, bias Buffer, eps float32) error {
	return checkNormGemm("rmsnorm_gemm", out, sum, x, residual, w, bias, eps, []string{"norm_weight"}, normW)
}

// CheckLayerNormGemm validates the fused LayerNorm and projection.
func CheckLayerNormGemm(out, sum, x, residual, gamma, beta, w, bias Buffer, eps float32) error {
	return checkNormGemm("layernorm_gemm", out, sum, x, residual, w, bias, eps, []string{"gamma", "beta"}, gamma, beta)
}

// checkNormGemm validates a fused norm and projection whose norm takes the [hidden] vectors
// vecs, named by names.
func checkNormGemm(op string, out, sum, x, residual, w, bias Buffer, eps float32, names []string, vecs ...Buffer) error {
	c := Validate(op)
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.That(eps > 0 && !math.IsInf(float64(eps), 0), "eps", fmtF(eps), "must be positive and finite")
	c.That((sum == nil) == (residual == nil), "sum", fmt.Sprintf("given %v, residual given %v", sum != nil, residual != nil),
		"give both (a residual add) or neither")
	c.Same("w", w)
	c.Rank("w", w, 2)
	if c.Err() != nil {
		return c.Err()
	}
	t, h, n := x.Shape()[0], x.Shape()[1], w.Shape()[0]
	for i, v := range vecs {
		refuseF32NormWeight(c, names[i], v)
		c.Same(names[i], v)
		c.Shape(names[i], v, []int{h}, "the hidden size of x")
	}
	c.Shape("w", w, []int{n, h}, "[N, hidden of x]")
	c.Optional("bias", bias, []int{n}, "one bias per output feature (rows of w)")
	if residual != nil {
		c.Same("residual", residual)
		c.Shape("residual", residual, x.Shape(), "the shape of x")
		c.Same("sum", sum)
		c.Shape("sum", sum, x.Shape(), "the shape of x")
	}
	c.Same("out", out)
	c.Shape("out", out, []int{t, n}, "[rows of x, rows of w]")
	return c.Err()
}

// CheckSwiGLUGemm validates the fused activation and down projection.
func CheckSwiGLUGemm(out, gate, up, w, bias Buffer) error {
	c := Validate("swiglu_gemm")
	c.Storage("gate", gate)
	c.Rank("gate", gate, 2)
	c.Same("w", w)
	c.Rank("w", w, 2)
	if c.Err() != nil {
		return c.Err()
	}
	t, k, n := gate.Shape()[0], gate.Shape()[1], w.Shape()[0]
	c.Same("up", up)
	c.Shape("up", up, gate.Shape(), "the shape of gate")
	c.Shape("w", w, []int{n, k}, "[N, the width of gate]")
	c.Optional("bias", bias, []int{n}, "one bias per output feature (rows of w)")
	c.Same("out", out)
	c.Shape("out", out, []int{t, n}, "[rows of gate, rows of w]")
	return c.Err()
}

// CheckGPTFFN validates GPT-2's fused MLP.
func CheckGPTFFN(out, x, w1, b1, w2, b2 Buffer) error {
	c := Validate("gpt_ffn")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("w1", w1)
	c.Rank("w1", w1, 2)
	if c.Err() != nil {
		return c.Err()
	}
	t, h, f := x.Shape()[0], x.Shape()[1], w1.Shape()[0]
	c.Shape("w1", w1, []int{f, h}, "[ffn, hidden of x]")
	c.Same("w2", w2)
	c.Shape("w2", w2, []int{h, f}, "[hidden, ffn] of w1")
	c.Optional("b1", b1, []int{f}, "one bias per row of w1")
	c.Optional("b2", b2, []int{h}, "one bias per row of w2")
	c.Same("out", out)
	c.Shape("out", out, []int{t, h}, "the shape of x")
	return c.Err()
}

// CheckSwiGLUFFN validates the gated FFN.
func CheckSwiGLUFFN(out, x, wGate, wUp, wDown Buffer) error {
	c := Validate("swiglu_ffn")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("w_gate", wGate)
	c.Rank("w_gate", wGate, 2)
	if c.Err() == nil {
		t, h, f := x.Shape()[0], x.Shape()[1], wGate.Shape()[0]
		c.Shape("w_gate", wGate, []int{f, h}, "[ffn, hidden of x]")
		c.Same("w_up", wUp)
		c.Shape("w_up", wUp, []int{f, h}, "the shape of w_gate")
		c.Same("w_down", wDown)
		c.Shape("w_down", wDown, []int{h, f}, "[hidden, ffn] of w_gate")
		c.Same("out", out)
		c.Shape("out", out, []int{t, h}, "the shape of x")
	}
	return c.Err()
}

// CheckSoftmax validates a row softmax into fp32.
func CheckSoftmax(out, x Buffer) error {
	c := Validate("softmax")
	c.DType("x", x, tensor.F16, tensor.BF16, tensor.F32)
	c.MinRank("x", x, 1)
	if c.Err() == nil {
		c.DType("out", out, tensor.F32)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// CheckLogitSoftcap validates the final logit soft cap (Kernels.LogitSoftcap): a positive
// finite softcap, x f32, f16 or bf16 of any shape (the f32 logits of the lm-head Gemm, or
// logits kept in the storage dtype), out of x's dtype and shape.
func CheckLogitSoftcap(out, x Buffer, softcap float32) error {
	c := Validate("logit_softcap")
	s := float64(softcap)
	c.That(s > 0 && !math.IsInf(s, 0), "softcap", fmtF(softcap), "must be positive and finite")
	c.DType("x", x, tensor.F32, tensor.F16, tensor.BF16)
	c.MinRank("x", x, 1)
	if c.Err() == nil {
		c.DType("out", out, x.DType())
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// CheckQuantFP8 validates an FP8 quantisation (Kernels.QuantFP8): x f16, bf16 or f32 [T, H],
// out f8e4m3 [T, H]; dynamic (scale nil) with groupSize dividing H and scales f32
// [T, H/groupSize]; static with the f32 scale [1], no scales and groupSize 0.
func CheckQuantFP8(out, scales, x, scale Buffer, groupSize int) error {
	c := Validate("quant_fp8")
	c.DType("x", x, tensor.F16, tensor.BF16, tensor.F32)
	c.Rank("x", x, 2)
	if c.Err() != nil {
		return c.Err()
	}
	checkQuantOutputs(c, out, scales, scale, groupSize, "x", x.Shape()[0], x.Shape()[1])
	return c.Err()
}

// checkQuantOutputs validates what an FP8 quantisation of a [t, h] operand (named by of) writes
// and reads beside it: out f8e4m3 [t, h]; dynamic (scale nil) with groupSize dividing h and the
// f32 scales [t, h/groupSize]; static with the f32 scale [1], no scales and groupSize 0.
func checkQuantOutputs(c *Check, out, scales, scale Buffer, groupSize int, of string, t, h int) {
	c.DType("out", out, tensor.F8E4M3)
	c.Shape("out", out, []int{t, h}, "the shape of "+of)
	if scale == nil {
		c.That(groupSize > 0 && h%groupSize == 0, "group_size", fmtI(groupSize), "must be positive and divide the hidden size %d of %s (dynamic)", h, of)
		if c.Err() == nil && c.Present("scales", scales) {
			c.DType("scales", scales, tensor.F32)
			c.Shape("scales", scales, []int{t, h / groupSize}, "[T, H / group_size]")
		}
		return
	}
	c.That(groupSize == 0, "group_size", fmtI(groupSize), "must be 0 with a static scale (one per tensor)")
	c.That(scales == nil, "scales", "a buffer", "must be nil with a static scale")
	if c.Err() == nil {
		c.DType("scale", scale, tensor.F32)
		c.Shape("scale", scale, []int{1}, "[1] (one scale per tensor)")
	}
}

// CheckRMSNormQuantFP8 validates the fused RMSNorm and FP8 quantisation
// (Kernels.RMSNormQuantFP8): x [T, H] in a storage dtype, weight [H] and, with a residual
// (sum and residual both given), residual and sum like x; then the quantisation's out, scales
// and scale as CheckQuantFP8's.
func CheckRMSNormQuantFP8(out, scales, sum, x, residual, weight, scale Buffer, groupSize int, eps float32) error {
	c := Validate("rmsnorm_quant_fp8")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.That(eps > 0 && !math.IsInf(float64(eps), 0), "eps", fmtF(eps), "must be positive and finite")
	c.That((sum == nil) == (residual == nil), "sum", fmt.Sprintf("given %v, residual given %v", sum != nil, residual != nil),
		"give both (a residual add) or neither")
	if c.Err() != nil {
		return c.Err()
	}
	t, h := x.Shape()[0], x.Shape()[1]
	refuseF32NormWeight(c, "weight", weight)
	c.Same("weight", weight)
	c.Shape("weight", weight, []int{h}, "the hidden size of x")
	if residual != nil {
		c.Same("residual", residual)
		c.Shape("residual", residual, x.Shape(), "the shape of x")
		c.Same("sum", sum)
		c.Shape("sum", sum, x.Shape(), "the shape of x")
	}
	if c.Err() == nil {
		checkQuantOutputs(c, out, scales, scale, groupSize, "x", t, h)
	}
	return c.Err()
}

// CheckSwiGLUQuantFP8 validates the fused SwiGLU and FP8 quantisation (Kernels.SwiGLUQuantFP8):
// gate [T, F] in a storage dtype, up like gate, then the quantisation's out, scales and scale as
// CheckQuantFP8's.
func CheckSwiGLUQuantFP8(out, scales, gate, up, scale Buffer, groupSize int) error {
	c := Validate("swiglu_quant_fp8")
	c.Storage("gate", gate)
	c.Rank("gate", gate, 2)
	if c.Err() != nil {
		return c.Err()
	}
	c.Same("up", up)
	c.Shape("up", up, gate.Shape(), "the shape of gate")
	if c.Err() == nil {
		checkQuantOutputs(c, out, scales, scale, groupSize, "gate", gate.Shape()[0], gate.Shape()[1])
	}
	return c.Err()
}

// FP8BlockSize is the side of the fine-grained FP8 scale blocks: 1x128 activation groups,
// 128x128 weight blocks.
const FP8BlockSize = 128

// CheckGemmFP8 validates an FP8 GEMM (Kernels.GemmFP8): x f8e4m3 [M, K], w f8e4m3 [N, K], their
// f32 scales in the block or per-channel layout, out f16 or bf16 [M, N].
func CheckGemmFP8(out, x, xScales, w, wScales Buffer, block bool) error {
	c := Validate("gemm_fp8")
	c.DType("x", x, tensor.F8E4M3)
	c.Rank("x", x, 2)
	c.DType("w", w, tensor.F8E4M3)
	c.Rank("w", w, 2)
	if c.Err() != nil {
		return c.Err()
	}
	m, k, n := x.Shape()[0], x.Shape()[1], w.Shape()[0]
	c.That(w.Shape()[1] == k, "w", describe(w), "want [N, %d]: its last dim must equal x's K", k)
	c.DType("x_scales", xScales, tensor.F32)
	c.DType("w_scales", wScales, tensor.F32)
	if c.Err() != nil {
		return c.Err()
	}
	if block {
		const b = FP8BlockSize
		c.That(k%b == 0, "x", describe(x), "block scales need K %% %d == 0 (1x%d activation groups)", b, b)
		if c.Err() == nil {
			c.Shape("x_scales", xScales, []int{m, k / b}, "[M, K/128]: one scale per 1x128 group")
			c.Shape("w_scales", wScales, []int{(n + b - 1) / b, k / b}, "[ceil(N/128), K/128]: one scale per 128x128 block")
		}
	} else {
		c.Shape("x_scales", xScales, []int{m, 1}, "[M, 1]: one scale per token")
		c.Shape("w_scales", wScales, []int{n, 1}, "[N, 1]: one scale per output channel")
	}
	if c.Err() == nil {
		c.DType("out", out, tensor.F16, tensor.BF16)
		c.Shape("out", out, []int{m, n}, "[rows of x, rows of w]")
	}
	return c.Err()
}

// W4Format is a 4-bit weight packing (docs/quantization.md, "4-bit weights").
type W4Format int

const (
	// W4AWQ is AutoAWQ's GEMM packing: qweight [K, N/8] along n in the interleaved order.
	W4AWQ W4Format = iota
	// W4GPTQ is GPTQ's: qweight [K/8, N] along k, zero points stored minus one, g_idx.
	W4GPTQ
)

func (f W4Format) String() string {
	switch f {
	case W4AWQ:
		return "awq"
	case W4GPTQ:
		return "gptq"
	}
	return "W4Format(" + fmtI(int(f)) + ")"
}

// CheckGemmW4A16 validates a 4-bit weight GEMM (Kernels.GemmW4A16): x f16 or bf16 [M, K], the
// packed weight, zero points and scales of its format for groups of groupSize inputs, g_idx
// (GPTQ) i32 [K], out [M, N] in x's type.
func CheckGemmW4A16(out, x, qweight, qzeros, scales, gIdx Buffer, format W4Format, groupSize int) error {
	c := Validate("gemm_w4a16")
	c.That(format == W4AWQ || format == W4GPTQ, "format", format.String(), "want awq or gptq")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.DType("qweight", qweight, tensor.I32)
	c.Rank("qweight", qweight, 2)
	c.DType("qzeros", qzeros, tensor.I32)
	c.Rank("qzeros", qzeros, 2)
	if c.Err() != nil {
		return c.Err()
	}
	m, k := x.Shape()[0], x.Shape()[1]
	c.That(groupSize > 0 && k%groupSize == 0, "group_size", fmtI(groupSize), "must be positive and divide K = %d", k)
	c.That(k%8 == 0, "x", describe(x), "K must be a multiple of 8 (eight 4-bit codes a word)")
	if c.Err() != nil {
		return c.Err()
	}
	var n int
	if format == W4AWQ {
		c.That(qweight.Shape()[0] == k, "qweight", describe(qweight), "want [K = %d, N/8] (AWQ)", k)
		n = qweight.Shape()[1] * 8
		c.That(gIdx == nil, "g_idx", "a buffer", "AWQ has none: must be nil")
	} else {
		c.That(qweight.Shape()[0] == k/8, "qweight", describe(qweight), "want [K/8 = %d, N] (GPTQ)", k/8)
		n = qweight.Shape()[1]
		c.DType("g_idx", gIdx, tensor.I32)
		if c.Err() == nil {
			c.Shape("g_idx", gIdx, []int{k}, "[K]: the group of each input")
		}
	}
	if c.Err() != nil {
		return c.Err()
	}
	c.That(n%8 == 0, "qweight", describe(qweight), "N = %d must be a multiple of 8 (qzeros packs 8 columns a word)", n)
	c.Shape("qzeros", qzeros, []int{k / groupSize, n / 8}, "[K/G, N/8]: one packed zero point per group and column")
	c.Same("scales", scales)
	c.Shape("scales", scales, []int{k / groupSize, n}, "[K/G, N]: one scale per group and column")
	c.Same("out", out)
	c.Shape("out", out, []int{m, n}, "[rows of x, N]")
	return c.Err()
}

// IndexError reports an index value read from a buffer that is out of range.
func IndexError(op, arg string, i, value int, reason string) error {
	return &ArgError{Op: op, Arg: arg + "[" + fmtI(i) + "]", Value: fmtI(value), Reason: reason}
}

// CheckSample validates a Sample call: logits f32 [rows, vocab], tokens i32 [rows], and the
// config ranges of docs/sampling.md. The logit values are checked by the backends.
func CheckSample(tokens, logits Buffer, cfg SampleConfig) error {
	c := Validate("sample")
	c.DType("logits", logits, tensor.F32)
	c.Rank("logits", logits, 2)
	t, p := float64(cfg.Temperature), float64(cfg.TopP)
	c.That(t >= 0 && !math.IsInf(t, 0), "temperature", fmtF(cfg.Temperature), "must be 0 (greedy) or positive and finite")
	c.That(cfg.TopK >= 0 && cfg.TopK <= math.MaxInt32, "top_k", fmtI(cfg.TopK), "must be 0 (off) or a positive int32")
	c.That(p > 0 && p <= 1, "top_p", fmtF(cfg.TopP), "must be in (0, 1]")
	if c.Err() == nil {
		c.DType("tokens", tokens, tensor.I32)
		c.Shape("tokens", tokens, logits.Shape()[:1], "[rows] of logits")
	}
	return c.Err()
}

// CheckPhilox validates a Philox call: out i32 [n, 4] with n >= 1.
func CheckPhilox(out Buffer) error {
	c := Validate("philox")
	c.DType("out", out, tensor.I32)
	c.Rank("out", out, 2)
	if c.Err() == nil {
		c.That(out.Shape()[1] == 4, "out", describe(out), "must be [n, 4]: one row of four words per counter")
	}
	return c.Err()
}

// MaxMoEExperts is the most experts MoERouter takes in one row (the widest published router is
// 256; a block of the CUDA kernel holds a row of 1024).
const MaxMoEExperts = 1024

// CheckMoERouter validates the router's top-k: logits f16 or bf16 [T, E], 1 <= topK <= E <=
// MaxMoEExperts, weights f32 and ids i32 [T, topK].
func CheckMoERouter(weights, ids, logits Buffer, topK int) error {
	c := Validate("moe_router")
	c.DType("logits", logits, tensor.F16, tensor.BF16)
	c.Rank("logits", logits, 2)
	if c.Err() == nil {
		t, e := logits.Shape()[0], logits.Shape()[1]
		c.That(e <= MaxMoEExperts, "logits", describe(logits), "want at most %d experts (its last dimension)", MaxMoEExperts)
		c.That(topK >= 1 && topK <= e, "top_k", fmt.Sprint(topK), "want 1..%d (the experts of logits)", e)
		if c.Err() == nil {
			c.DType("weights", weights, tensor.F32)
			c.Shape("weights", weights, []int{t, topK}, "[tokens of logits, top_k]")
			c.DType("ids", ids, tensor.I32)
			c.Shape("ids", ids, []int{t, topK}, "[tokens of logits, top_k]")
		}
	}
	return c.Err()
}

// CheckMoEFFN validates the expert block: x [T, H], ids i32 and weights f32 [T, k] with k <= E,
// gate_up [E, 2F, H] and down [E, H, F] in x's storage type, out like x. The expert indices
// are device data, the backends' to check.
func CheckMoEFFN(out, x, ids, weights, gateUp, down Buffer) error {
	c := Validate("moe_ffn")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	c.Same("gate_up", gateUp)
	c.Rank("gate_up", gateUp, 3)
	c.DType("ids", ids, tensor.I32)
	c.Rank("ids", ids, 2)
	if c.Err() == nil {
		t, h := x.Shape()[0], x.Shape()[1]
		e, f2 := gateUp.Shape()[0], gateUp.Shape()[1]
		k := ids.Shape()[1]
		c.That(f2%2 == 0 && f2 > 0, "gate_up", describe(gateUp), "want [experts, 2 x ffn, hidden]: an even, non-zero second dimension")
		c.Shape("gate_up", gateUp, []int{e, f2, h}, "[experts, 2 x ffn, hidden of x]")
		c.Shape("ids", ids, []int{t, k}, "[tokens of x, top_k]")
		c.That(k >= 1 && k <= e, "ids", describe(ids), "want 1..%d experts a token (the experts of gate_up)", e)
		c.DType("weights", weights, tensor.F32)
		c.Shape("weights", weights, []int{t, k}, "the shape of ids")
		c.Same("down", down)
		c.Shape("down", down, []int{e, h, f2 / 2}, "[experts, hidden, ffn] of gate_up")
		c.Same("out", out)
		c.Shape("out", out, []int{t, h}, "the shape of x")
	}
	return c.Err()
}

// CheckMoESharedAdd validates the gated shared expert's add (Kernels.MoESharedAdd): x [T, H] in
// a storage type, gate [1, H] (shared_expert_gate.weight), routed, shared and out [T, H], all of
// x's dtype.
func CheckMoESharedAdd(out, routed, shared, x, gate Buffer) error {
	c := Validate("moe_shared_add")
	c.Storage("x", x)
	c.Rank("x", x, 2)
	if c.Err() == nil {
		h := x.Shape()[1]
		c.Same("gate", gate)
		c.Shape("gate", gate, []int{1, h}, "[1, hidden of x] (shared_expert_gate.weight)")
		c.Same("routed", routed)
		c.Shape("routed", routed, x.Shape(), "the shape of x")
		c.Same("shared", shared)
		c.Shape("shared", shared, x.Shape(), "the shape of x")
		c.Same("out", out)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	return c.Err()
}

// checkKVScales checks an FP8 cache's key and value scales: f32 [1] (per tensor) or
// [n_kv_heads], both of one shape.
func checkKVScales(c *Check, kScale, vScale Buffer, cfg AttentionConfig) {
	for _, s := range []struct {
		name string
		buf  Buffer
	}{{"k_scale", kScale}, {"v_scale", vScale}} {
		c.DType(s.name, s.buf, tensor.F32)
		if c.Err() == nil {
			n := tensor.NumElements(s.buf.Shape())
			c.That(len(s.buf.Shape()) == 1 && (n == 1 || n == cfg.NumKVHeads), s.name, describe(s.buf),
				"want [1] (per tensor) or [%d] (one a kv head)", cfg.NumKVHeads)
		}
	}
	if c.Err() == nil {
		c.That(kScale.Shape()[0] == vScale.Shape()[0], "v_scale", describe(vScale), "want k_scale's shape %v", kScale.Shape())
	}
}
