package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// checkRows fails unless every index is a row of a table with n rows.
func checkRows(op, arg string, idx []int32, n int) error {
	for i, v := range idx {
		if v < 0 || int(v) >= n {
			return &backend.ArgError{Op: op, Arg: arg + "[" + fmtI(i) + "]", Value: fmtI(int(v)),
				Reason: "must be in [0, " + fmtI(n) + ") (the rows of table)"}
		}
	}
	return nil
}

// Embedding gathers table rows: out[t] = table[ids[t]]. The copy is exact.
func (*Backend) Embedding(out, ids, table backend.Buffer) error {
	c := backend.Validate("embedding")
	c.DType("ids", ids, tensor.I32)
	c.MinRank("ids", ids, 1)
	c.DType("table", table, tensor.F16)
	c.Rank("table", table, 2)
	if c.Err() == nil {
		want := append(append([]int{}, ids.Shape()...), table.Shape()[1])
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, want, "the shape of ids plus the hidden size of table")
	}
	if err := c.Err(); err != nil {
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
	for t, id := range ts[1].I32 {
		copy(ts[0].F16[t*h:(t+1)*h], ts[2].F16[int(id)*h:(int(id)+1)*h])
	}
	return nil
}

// PosEmbedding adds learned position rows: out[t] = x[t] + table[positions[t]].
func (*Backend) PosEmbedding(out, x, table, positions backend.Buffer) error {
	c := backend.Validate("pos_embedding")
	c.DType("x", x, tensor.F16)
	c.Rank("x", x, 2)
	c.DType("table", table, tensor.F16)
	c.Rank("table", table, 2)
	if c.Err() == nil {
		c.That(table.Shape()[1] == x.Shape()[1], "table", describe(table), "hidden size must equal x's (%d)", x.Shape()[1])
		c.DType("positions", positions, tensor.I32)
		c.Shape("positions", positions, x.Shape()[:1], "one position per token of x")
		c.DType("out", out, tensor.F16)
		c.Shape("out", out, x.Shape(), "the shape of x")
	}
	if err := c.Err(); err != nil {
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
	xv, tab := ts[1].Float32(), ts[2].F16
	for t, p := range ts[3].I32 {
		for i := 0; i < h; i++ {
			xv[t*h+i] += tab[int(p)*h+i].Float32()
		}
	}
	store(ts[0], xv)
	return nil
}

func describe(b backend.Buffer) string { return b.DType().String() + tensor.ShapeString(b.Shape()) }
