package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// AttentionPrefill is causal (optionally) GQA attention over whole sequences.
func (*Backend) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionPrefill(out, q, k, v, cfg); err != nil {
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
	if err := backend.CheckAttentionDecode(out, q, kCache, vCache, cacheLens, cfg); err != nil {
		return err
	}
	ts, err := tensors("attention_decode", out, q, kCache, vCache, cacheLens)
	if err != nil {
		return err
	}
	maxLen := ts[2].Shape[1]
	for i, n := range ts[4].I32 {
		if n < 1 || int(n) > maxLen {
			return backend.IndexError("attention_decode", "cache_lens", i, int(n), "must be in [1, "+fmtI(maxLen)+"] (the cache capacity)")
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

// softcap is the attention configs' logit soft-capping of a scaled score s: cap · tanh(s / cap)
// for cap > 0 (Gemma 2's attn_logit_softcapping, transformers' eager_attention_forward: the scaled
// scores divided by the cap, tanh, multiplied back, before the mask), s itself for cap 0. In
// the fp64 of the scores around it (the kernels' fp32 tanh is within the ops' tolerance of it).
func softcap(s float64, c float32) float64 {
	if c <= 0 {
		return s
	}
	limit := float64(c)
	return limit * math.Tanh(s/limit)
}

// attendOne computes every head of one query token. qRow is the index of the token's
// first head in q/out (in heads), kvRow the index of the sequence's first position in the
// key/value tensors (in positions), and visible how many positions it sees (the query is at
// position visible-1); a sliding window (cfg.Window > 0) keeps only the last cfg.Window. Scores,
// softmax and the weighted sum are fp64: the only rounding is the 16-bit store of out. The keys
// and values are the stored ones (float32) or an FP8 cache's dequantised ones (float64).
func attendOne[KV float32 | float64](out, q []float32, k, v []KV, cfg backend.AttentionConfig, qRow, kvRow, visible int) {
	d, group := cfg.HeadDim, cfg.NumHeads/cfg.NumKVHeads
	if w := cfg.Window; w > 0 && visible > w {
		kvRow, visible = kvRow+visible-w, w
	}
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
			scores[j] = softcap(dot*float64(cfg.Scale), cfg.Softcap)
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
