package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// checkHeads validates the head layout shared by prefill and decode.
func checkHeads(c *backend.Check, cfg backend.AttentionConfig) {
	c.That(cfg.NumHeads > 0, "n_heads", fmtI(cfg.NumHeads), "must be positive")
	c.That(cfg.NumKVHeads > 0, "n_kv_heads", fmtI(cfg.NumKVHeads), "must be positive")
	c.That(cfg.HeadDim > 0, "head_dim", fmtI(cfg.HeadDim), "must be positive")
	c.That(cfg.Scale > 0 && !math.IsInf(float64(cfg.Scale), 0), "scale", fmtF(cfg.Scale), "must be positive and finite")
	if cfg.NumHeads > 0 && cfg.NumKVHeads > 0 {
		c.That(cfg.NumHeads%cfg.NumKVHeads == 0, "n_kv_heads", fmtI(cfg.NumKVHeads),
			"must divide n_heads (%d)", cfg.NumHeads)
	}
}

// AttentionPrefill is causal (optionally) GQA attention over whole sequences.
func (*Backend) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	c := backend.Validate("attention_prefill")
	checkHeads(c, cfg)
	c.DType("q", q, tensor.F16)
	c.Rank("q", q, 4)
	if c.Err() == nil {
		b, s := q.Shape()[0], q.Shape()[1]
		c.Shape("q", q, []int{b, s, cfg.NumHeads, cfg.HeadDim}, "[batch, seq, n_heads, head_dim]")
		kv := []int{b, s, cfg.NumKVHeads, cfg.HeadDim}
		c.DType("k", k, tensor.F16)
		c.Shape("k", k, kv, "[batch, seq, n_kv_heads, head_dim] of q")
		c.DType("v", v, tensor.F16)
		c.Shape("v", v, kv, "[batch, seq, n_kv_heads, head_dim] of q")
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	if err := c.Err(); err != nil {
		return err
	}
	ts, err := tensors("attention_prefill", out, q, k, v)
	if err != nil {
		return err
	}
	qv, kv, vv := ts[1].Float32(), ts[2].Float32(), ts[3].Float32()
	b, s := ts[1].Shape[0], ts[1].Shape[1]
	res := make([]float32, len(qv))
	for bi := 0; bi < b; bi++ {
		for i := 0; i < s; i++ {
			visible := s
			if cfg.Causal {
				visible = i + 1
			}
			attendOne(res, qv, kv, vv, cfg, (bi*s+i)*cfg.NumHeads, bi*s, visible)
		}
	}
	store(ts[0], res)
	return nil
}

// AttentionDecode attends one new query per sequence to its KV cache.
func (*Backend) AttentionDecode(out, q, kCache, vCache, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	c := backend.Validate("attention_decode")
	checkHeads(c, cfg)
	c.DType("q", q, tensor.F16)
	c.Rank("q", q, 3)
	c.DType("k_cache", kCache, tensor.F16)
	c.Rank("k_cache", kCache, 4)
	if c.Err() == nil {
		b, l := q.Shape()[0], kCache.Shape()[1]
		c.Shape("q", q, []int{b, cfg.NumHeads, cfg.HeadDim}, "[batch, n_heads, head_dim]")
		cache := []int{b, l, cfg.NumKVHeads, cfg.HeadDim}
		c.Shape("k_cache", kCache, cache, "[batch, max_len, n_kv_heads, head_dim]")
		c.DType("v_cache", vCache, tensor.F16)
		c.Shape("v_cache", vCache, cache, "the shape of k_cache")
		c.DType("cache_lens", cacheLens, tensor.I32)
		c.Shape("cache_lens", cacheLens, []int{b}, "one length per sequence")
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, q.Shape(), "the shape of q")
	}
	if err := c.Err(); err != nil {
		return err
	}
	ts, err := tensors("attention_decode", out, q, kCache, vCache, cacheLens)
	if err != nil {
		return err
	}
	maxLen := ts[2].Shape[1]
	for i, n := range ts[4].I32 {
		if n < 1 || int(n) > maxLen {
			return &backend.ArgError{Op: "attention_decode", Arg: "cache_lens[" + fmtI(i) + "]", Value: fmtI(int(n)),
				Reason: "must be in [1, " + fmtI(maxLen) + "] (the cache capacity)"}
		}
	}
	qv, kv, vv := ts[1].Float32(), ts[2].Float32(), ts[3].Float32()
	res := make([]float32, len(qv))
	for bi, n := range ts[4].I32 {
		attendOne(res, qv, kv, vv, cfg, bi*cfg.NumHeads, bi*maxLen, int(n))
	}
	store(ts[0], res)
	return nil
}

// attendOne computes every head of one query token. qRow is the index of the token's
// first head in q/out (in heads), kvRow the index of the sequence's first position in the
// key/value tensors (in positions), and visible how many positions it sees. Scores,
// softmax and the weighted sum are fp64: the only rounding is the fp16 store of out.
func attendOne(out, q, k, v []float32, cfg backend.AttentionConfig, qRow, kvRow, visible int) {
	d, group := cfg.HeadDim, cfg.NumHeads/cfg.NumKVHeads
	scores := make([]float64, visible)
	acc := make([]float64, d)
	for h := 0; h < cfg.NumHeads; h++ {
		qh := q[(qRow+h)*d : (qRow+h+1)*d]
		kvh := h / group
		maxScore := math.Inf(-1)
		for j := 0; j < visible; j++ {
			kj := k[((kvRow+j)*cfg.NumKVHeads+kvh)*d:][:d]
			var dot float64
			for i := range qh {
				dot += float64(qh[i]) * float64(kj[i])
			}
			scores[j] = dot * float64(cfg.Scale)
			maxScore = math.Max(maxScore, scores[j])
		}
		var denom float64
		for j := range scores {
			scores[j] = math.Exp(scores[j] - maxScore)
			denom += scores[j]
		}
		clear(acc)
		for j, p := range scores {
			vj := v[((kvRow+j)*cfg.NumKVHeads+kvh)*d:][:d]
			for i := range acc {
				acc[i] += p * float64(vj[i])
			}
		}
		o := out[(qRow+h)*d : (qRow+h+1)*d]
		for i := range o {
			o[i] = float32(acc[i] / denom)
		}
	}
}
