package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// AttentionDecodePaged attends one new query per sequence to its cache through the
// sequence's block table: its pages are gathered into a contiguous cache, then attended to
// as AttentionDecode attends (the same fp64 arithmetic, one rounding of out). Only the
// table entries a sequence's length reaches are read and range-checked.
func (*Backend) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_paged"
	if err := backend.CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg); err != nil {
		return err
	}
	ts, err := tensors(op, out, q, kCache, vCache, blockTable, cacheLens)
	if err != nil {
		return err
	}
	return decodePaged(op, ts, ts[2].Float32(), ts[3].Float32(), cfg)
}

// AttentionDecodePagedFP8 is AttentionDecodePaged over an f8e4m3 pool: each code decoded
// exactly and multiplied by its kv head's scale in float64 (AttentionDecodeFP8's values), then
// AttentionDecodePaged's gather and attention.
func (*Backend) AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_paged_fp8"
	if err := backend.CheckAttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale, cfg); err != nil {
		return err
	}
	ts, err := tensors(op, out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale)
	if err != nil {
		return err
	}
	return decodePaged(op, ts, dequantCache(ts[2], ts[6].F32, cfg), dequantCache(ts[3], ts[7].F32, cfg), cfg)
}

// decodePaged is the paged decode over ts (out, q, the pool, block_table, cache_lens) with the
// pool's values k and v.
func decodePaged[KV float32 | float64](op string, ts []*tensor.Tensor, k, v []KV, cfg backend.AttentionConfig) error {
	numBlocks, pageSize, width := ts[2].Shape[0], ts[2].Shape[1], ts[4].Shape[1]
	table := ts[4].I32
	for b, n := range ts[5].I32 {
		if n < 1 || int(n) > width*pageSize {
			return backend.IndexError(op, "cache_lens", b, int(n), "must be in [1, "+fmtI(width*pageSize)+"] (table_width x block_size)")
		}
		if err := checkPages(op, table, b, width, int(n), pageSize, numBlocks); err != nil {
			return err
		}
	}
	qv := ts[1].Float32()
	pool := pagedPool[KV]{k: k, v: v, table: table, width: width, pageSize: pageSize, row: cfg.NumKVHeads * cfg.HeadDim}
	res := make([]float32, len(qv))
	for b, n := range ts[5].I32 {
		kg, vg := pool.gather(b, int(n))
		attendOne(res, qv, kg, vg, cfg, b*cfg.NumHeads, 0, int(n))
	}
	store(ts[0], res)
	return nil
}

// AttentionPrefillPaged attends each sequence's new tokens to its paged cache: its pages are
// gathered into a contiguous cache, then query i attends causally to the positions up to its
// own (the prefix and the new tokens before it), as AttentionPrefill attends.
func (*Backend) AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_prefill_paged"
	if err := backend.CheckAttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg); err != nil {
		return err
	}
	ts, err := tensors(op, out, q, kCache, vCache, blockTable, qStarts, kvLens)
	if err != nil {
		return err
	}
	return prefillPaged(op, ts, ts[2].Float32(), ts[3].Float32(), cfg)
}

// AttentionPrefillPagedFP8 is AttentionPrefillPaged over an f8e4m3 pool, its values those of
// AttentionDecodePagedFP8.
func (*Backend) AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_prefill_paged_fp8"
	if err := backend.CheckAttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale, cfg); err != nil {
		return err
	}
	ts, err := tensors(op, out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale)
	if err != nil {
		return err
	}
	return prefillPaged(op, ts, dequantCache(ts[2], ts[7].F32, cfg), dequantCache(ts[3], ts[8].F32, cfg), cfg)
}

// prefillPaged is the paged prefill over ts (out, q, the pool, block_table, q_starts, kv_lens)
// with the pool's values k and v.
func prefillPaged[KV float32 | float64](op string, ts []*tensor.Tensor, k, v []KV, cfg backend.AttentionConfig) error {
	tokens := ts[1].Shape[0]
	numBlocks, pageSize, width := ts[2].Shape[0], ts[2].Shape[1], ts[4].Shape[1]
	table, starts := ts[4].I32, ts[5].I32
	startsReason := "must be 0 at 0, then above the previous start and at most " + fmtI(tokens) + ", the last exactly that (every sequence has a new token; q's rows)"
	if starts[0] != 0 {
		return backend.IndexError(op, "q_starts", 0, int(starts[0]), startsReason)
	}
	for b, n := range ts[6].I32 {
		qLen := int(starts[b+1]) - int(starts[b])
		if qLen < 1 || int(starts[b+1]) > tokens {
			return backend.IndexError(op, "q_starts", b+1, int(starts[b+1]), startsReason)
		}
		if int(n) < qLen || int(n) > width*pageSize {
			return backend.IndexError(op, "kv_lens", b, int(n), "must be at least its new tokens and at most "+fmtI(width*pageSize)+" (table_width x block_size)")
		}
		if err := checkPages(op, table, b, width, int(n), pageSize, numBlocks); err != nil {
			return err
		}
	}
	if last := len(starts) - 1; int(starts[last]) != tokens {
		return backend.IndexError(op, "q_starts", last, int(starts[last]), startsReason)
	}
	qv := ts[1].Float32()
	pool := pagedPool[KV]{k: k, v: v, table: table, width: width, pageSize: pageSize, row: cfg.NumKVHeads * cfg.HeadDim}
	res := make([]float32, len(qv))
	for b, n := range ts[6].I32 {
		kg, vg := pool.gather(b, int(n))
		first, qLen := int(starts[b]), int(starts[b+1]-starts[b])
		for i := range qLen {
			attendOne(res, qv, kg, vg, cfg, (first+i)*cfg.NumHeads, 0, int(n)-qLen+i+1)
		}
	}
	store(ts[0], res)
	return nil
}

// checkPages checks the block table entries that sequence b's first n positions reach.
func checkPages(op string, table []int32, b, width, n, pageSize, numBlocks int) error {
	for p := 0; p < (n+pageSize-1)/pageSize; p++ {
		if page := table[b*width+p]; page < 0 || int(page) >= numBlocks {
			return backend.IndexError(op, "block_table", b*width+p, int(page), "must be in [0, "+fmtI(numBlocks)+") (num_blocks), or past the sequence's pages")
		}
	}
	return nil
}

// pagedPool is a paged cache on the host: k, v [num_blocks · pageSize, row] and the block
// table [batch, width].
type pagedPool[KV float32 | float64] struct {
	k, v                 []KV
	table                []int32
	width, pageSize, row int
}

// gather returns sequence b's first n positions as contiguous caches [n, row].
func (p pagedPool[KV]) gather(b, n int) (k, v []KV) {
	k, v = make([]KV, n*p.row), make([]KV, n*p.row)
	for i := range n {
		slot := int(p.table[b*p.width+i/p.pageSize])*p.pageSize + i%p.pageSize
		copy(k[i*p.row:(i+1)*p.row], p.k[slot*p.row:(slot+1)*p.row])
		copy(v[i*p.row:(i+1)*p.row], p.v[slot*p.row:(slot+1)*p.row])
	}
	return k, v
}
