package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
)

// checkRows fails unless every index is a row of a table with n rows.
func checkRows(op, arg string, idx []int32, n int) error {
	for i, v := range idx {
		if v < 0 || int(v) >= n {
			return backend.IndexError(op, arg, i, int(v), "must be in [0, "+fmtI(n)+") (the rows of table)")
		}
	}
	return nil
}

// Embedding gathers table rows: out[t] = table[ids[t]] · scale. Unscaled (1) the copy is exact;
// scaled, each value is the fp32 product of two 16-bit values (exact) rounded once on the store.
func (*Backend) Embedding(out, ids, table backend.Buffer, scale float32) error {
	if err := backend.CheckEmbedding(out, ids, table, scale); err != nil {
		return err
	}
	ts, err := tensors("embedding", out, ids, table)
	if err != nil {
		return err
	}
	vocab, h := ts[2].Shape[0], ts[2].Shape[1]
	if err := checkRows("embedding", "ids", ts[1].I32, vocab); err != nil {
		return err
	}
	if scale == 1 {
		for t, id := range ts[1].I32 {
			copyElems(ts[0], t*h, ts[2], int(id)*h, h)
		}
		return nil
	}
	tab := ts[2].Float32()
	vals := make([]float32, len(ts[1].I32)*h)
	for t, id := range ts[1].I32 {
		for i, v := range tab[int(id)*h : (int(id)+1)*h] {
			vals[t*h+i] = v * scale
		}
	}
	store(ts[0], vals)
	return nil
}

// PosEmbedding adds learned position rows: out[t] = x[t] + table[positions[t]].
func (*Backend) PosEmbedding(out, x, table, positions backend.Buffer) error {
	if err := backend.CheckPosEmbedding(out, x, table, positions); err != nil {
		return err
	}
	ts, err := tensors("pos_embedding", out, x, table, positions)
	if err != nil {
		return err
	}
	h := ts[1].Shape[1]
	if err := checkRows("pos_embedding", "positions", ts[3].I32, ts[2].Shape[0]); err != nil {
		return err
	}
	xv, tab := ts[1].Float32(), ts[2].Float32()
	for t, p := range ts[3].I32 {
		for i := 0; i < h; i++ {
			xv[t*h+i] += tab[int(p)*h+i]
		}
	}
	store(ts[0], xv)
	return nil
}
