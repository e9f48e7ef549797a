package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
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
	pool := pagedPool{k: ts[2].Float32(), v: ts[3].Float32(), table: table, width: width, pageSize: pageSize, row: cfg.NumKVHeads * cfg.HeadDim}
	res := make([]float32, len(qv))
	for b, n := range ts[5].I32 {
		k, v := pool.gather(b, int(n))
		attendOne(res, qv, k, v, cfg, b*cfg.NumHeads, 0, int(n))
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
	pool := pagedPool{k: ts[2].Float32(), v: ts[3].Float32(), table: table, width: width, pageSize: pageSize, row: cfg.NumKVHeads * cfg.HeadDim}
	res := make([]float32, len(qv))
	for b, n := range ts[6].I32 {
		k, v := pool.gather(b, int(n))
		first, qLen := int(starts[b]), int(starts[b+1]-starts[b])
		for i := range qLen {
			attendOne(res, qv, k, v, cfg, (first+i)*cfg.NumHeads, 0, int(n)-qLen+i+1)
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
type pagedPool struct {
	k, v                 []float32
	table                []int32
	width, pageSize, row int
}

// gather returns sequence b's first n positions as contiguous caches [n, row].
func (p pagedPool) gather(b, n int) (k, v []float32) {
	k, v = make([]float32, n*p.row), make([]float32, n*p.row)
	for i := range n {
		slot := int(p.table[b*p.width+i/p.pageSize])*p.pageSize + i%p.pageSize
		copy(k[i*p.row:(i+1)*p.row], p.k[slot*p.row:(slot+1)*p.row])
		copy(v[i*p.row:(i+1)*p.row], p.v[slot*p.row:(slot+1)*p.row])
	}
	return k, v
}
