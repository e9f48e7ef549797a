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
		for p := 0; p < (int(n)+pageSize-1)/pageSize; p++ {
			if page := table[b*width+p]; page < 0 || int(page) >= numBlocks {
				return backend.IndexError(op, "block_table", b*width+p, int(page), "must be in [0, "+fmtI(numBlocks)+") (num_blocks), or past the sequence's pages")
			}
		}
	}
	qv, kv, vv := ts[1].Float32(), ts[2].Float32(), ts[3].Float32()
	row := cfg.NumKVHeads * cfg.HeadDim
	res := make([]float32, len(qv))
	for b, n := range ts[5].I32 {
		k, v := make([]float32, int(n)*row), make([]float32, int(n)*row)
		for p := 0; p < int(n); p++ {
			slot := int(table[b*width+p/pageSize])*pageSize + p%pageSize
			copy(k[p*row:(p+1)*row], kv[slot*row:(slot+1)*row])
			copy(v[p*row:(p+1)*row], vv[slot*row:(slot+1)*row])
		}
		attendOne(res, qv, k, v, cfg, b*cfg.NumHeads, 0, int(n))
	}
	store(ts[0], res)
	return nil
}
