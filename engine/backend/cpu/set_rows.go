package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetRows scatters src rows into dst in place: dst[rows[i]] = src[i]. Every index is checked
// before the first row is written, so a refused call leaves dst as it was. The copy is exact.
func (*Backend) SetRows(dst, src, rows backend.Buffer) error {
	const op = "set_rows"
	if err := backend.CheckSetRows(dst, src, rows); err != nil {
		return err
	}
	ts, err := tensors(op, dst, src, rows)
	if err != nil {
		return err
	}
	r := ts[0].Shape[0]
	for i, v := range ts[2].I32 {
		if v < 0 || int(v) >= r {
			return backend.IndexError(op, "rows", i, int(v), "must be in [0, "+fmtI(r)+") (the rows of dst)")
		}
	}
	n := tensor.NumElements(ts[0].Shape[1:])
	for i, v := range ts[2].I32 {
		to, from := int(v)*n, i*n
		copyElems(ts[0], to, ts[1], from, n)
	}
	return nil
}
