package cpu

import (
	"math"
	"sort"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// MoERouter ranks each row's experts by logit (softmax is monotone, so the largest logits are
// the largest probabilities; equal logits rank the lower index first, as the contract breaks
// ties) and computes the chosen probabilities in float64: exp(l - max) / sum over all experts,
// divided by their own sum when renormalize.
func (*Backend) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	if err := backend.CheckMoERouter(weights, ids, logits, topK); err != nil {
		return err
	}
	ts, err := tensors("moe_router", weights, ids, logits)
	if err != nil {
		return err
	}
	t, e := ts[2].Shape[0], ts[2].Shape[1]
	lv := ts[2].Float32()
	order := make([]int, e)
	for r := 0; r < t; r++ {
		row := lv[r*e : (r+1)*e]
		maxv := math.Inf(-1)
		for _, v := range row {
			maxv = math.Max(maxv, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - maxv)
		}
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
		var chosen float64
		for j := 0; j < topK; j++ {
			chosen += math.Exp(float64(row[order[j]])-maxv) / sum
		}
		for j := 0; j < topK; j++ {
			p := math.Exp(float64(row[order[j]])-maxv) / sum
			if renormalize {
				p /= chosen
			}
			ts[0].F32[r*topK+j] = float32(p)
			ts[1].I32[r*topK+j] = int32(order[j])
		}
	}
	return nil
}

// MoEFFN runs each expert over the rows that chose it as the unfused composition does: the gate
// and up products, the activation and the down product each rounded to the storage type, then
// every token's weighted sum over its experts in float64 and one rounding. Every index is
// checked before anything is computed.
func (*Backend) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	const op = "moe_ffn"
	if err := backend.CheckMoEFFN(out, x, ids, weights, gateUp, down); err != nil {
		return err
	}
	ts, err := tensors(op, out, x, ids, weights, gateUp, down)
	if err != nil {
		return err
	}
	t, h := ts[1].Shape[0], ts[1].Shape[1]
	e, f := ts[4].Shape[0], ts[4].Shape[1]/2
	k := ts[2].Shape[1]
	for i, v := range ts[2].I32 {
		if v < 0 || int(v) >= e {
			return backend.IndexError(op, "ids", i, int(v), "must be in [0, "+fmtI(e)+") (the experts of gate_up)")
		}
	}
	dt := ts[1].DType
	xv, gu, dn := ts[1].Float32(), ts[4].Float32(), ts[5].Float32()
	acc := make([]float64, t*h)
	for ex := 0; ex < e; ex++ {
		var slots []int // token*k + j of every choice of this expert, in token order
		for s, v := range ts[2].I32 {
			if int(v) == ex {
				slots = append(slots, s)
			}
		}
		if len(slots) == 0 {
			continue
		}
		rows := make([]float32, len(slots)*h)
		for i, s := range slots {
			copy(rows[i*h:(i+1)*h], xv[(s/k)*h:(s/k+1)*h])
		}
		w := gu[ex*2*f*h : (ex+1)*2*f*h]
		gate := matmulT(rows, w[:f*h], len(slots), h, f)
		up := matmulT(rows, w[f*h:], len(slots), h, f)
		roundTo(dt, gate)
		roundTo(dt, up)
		for i := range gate {
			gate[i] = swiglu(gate[i], up[i])
		}
		roundTo(dt, gate)
		y := matmulT(gate, dn[ex*h*f:(ex+1)*h*f], len(slots), f, h)
		roundTo(dt, y)
		for i, s := range slots {
			wt := float64(ts[3].F32[s])
			for c := 0; c < h; c++ {
				acc[(s/k)*h+c] += wt * float64(y[i*h+c])
			}
		}
	}
	res := make([]float32, t*h)
	for i, v := range acc {
		res[i] = float32(v)
	}
	store(ts[0], res)
	return nil
}

// MoESharedAdd is the gated shared expert's add in float64: each token's gate
// sigmoid(x[t] · gate) from the stored values with no rounding, then routed + gate · shared and
// one rounding to the storage type, as the contract has it (out may be routed: every row is read
// before it is written).
func (*Backend) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	if err := backend.CheckMoESharedAdd(out, routed, shared, x, gate); err != nil {
		return err
	}
	ts, err := tensors("moe_shared_add", out, routed, shared, x, gate)
	if err != nil {
		return err
	}
	t, h := ts[3].Shape[0], ts[3].Shape[1]
	rv, sv, xv, gv := ts[1].Float32(), ts[2].Float32(), ts[3].Float32(), ts[4].Float32()
	res := make([]float32, t*h)
	for r := 0; r < t; r++ {
		var z float64
		for c := 0; c < h; c++ {
			z += float64(xv[r*h+c]) * float64(gv[c])
		}
		s := 1 / (1 + math.Exp(-z))
		for c := 0; c < h; c++ {
			res[r*h+c] = float32(float64(rv[r*h+c]) + s*float64(sv[r*h+c]))
		}
	}
	store(ts[0], res)
	return nil
}
