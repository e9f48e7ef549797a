package conformance

import (
	"fmt"
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// scoresSoftmaxUnfused runs attention_scores_softmax as the ABI's unfused equivalent, per batch
// b and query head h (key head g = h / (n_heads / n_kv_heads)): gemm(s, q_bh, k_bg) into fp32
// [seq_q, seq_k], s * scale, -inf above the causal diagonal, softmax(probs, s). The products and
// the softmax are the backend's; the per-head gathers of q and k (token-major in the set, a
// head's rows strided) and the scale and mask are done on the host, exactly: a copy, and the one
// fp32 product by scale the fused kernel also forms (and, with a softcap, cap · tanh(s / cap)
// of it in fp32, before the mask, as the fused kernel does). Its time therefore includes a round trip of
// the scores through the host: a correctness reference, not a speed one.
func scoresSoftmaxUnfused(c *call) {
	var p attentionParams
	c.params(&p)
	cfg := backend.AttentionConfig{NumHeads: p.NumHeads, NumKVHeads: p.NumKVHeads, HeadDim: p.HeadDim, Causal: p.Causal, Scale: p.Scale, Softcap: p.Softcap}
	qt, kt := c.host("q"), c.host("k")
	if c.err != nil {
		return
	}
	mem, ok := c.b.(backend.Memory)
	if !ok {
		c.fail(fmt.Errorf("%s backend has no views to hold each head's scores", c.b.Info().Backend))
		return
	}
	q, k := c.input("q"), c.input("k")
	if c.err != nil {
		return
	}
	if len(qt.Shape) != 4 || len(kt.Shape) != 4 {
		c.fail(backend.CheckAttentionScoresSoftmax(nil, q, k, cfg))
		return
	}
	nb, sq, sk, nH, nKV, d := qt.Shape[0], qt.Shape[1], kt.Shape[1], p.NumHeads, p.NumKVHeads, p.HeadDim
	probs := c.alloc(tensor.F32, []int{nb, nH, sq, sk})
	if c.err == nil {
		c.fail(backend.CheckAttentionScoresSoftmax(probs, q, k, cfg))
	}
	scores := c.alloc(tensor.F32, []int{nb * nH * sq, sk})
	if c.err != nil {
		return
	}
	flat, err := mem.View(probs, nb*nH*sq, sk)
	if err != nil {
		c.fail(fmt.Errorf("view probs as rows: %w", err))
		return
	}
	// headRows copies head h of batch b out of a token-major [batch, seq, heads, d] tensor.
	headRows := func(t *tensor.Tensor, b, h, heads int) backend.Buffer {
		seq := t.Shape[1]
		rows := tensor.New(t.DType, seq, d)
		for i := 0; i < seq; i++ {
			from := ((b*seq+i)*heads + h) * d
			switch t.DType {
			case tensor.BF16:
				copy(rows.BF16[i*d:(i+1)*d], t.BF16[from:][:d])
			default:
				copy(rows.F16[i*d:(i+1)*d], t.F16[from:][:d])
			}
		}
		buf, err := c.b.Upload(rows)
		if err != nil {
			c.fail(fmt.Errorf("upload a head of q or k: %w", err))
			return nil
		}
		c.bufs = append(c.bufs, buf)
		return buf
	}
	type product struct{ s, q, k backend.Buffer }
	var products []product
	keys := make([]backend.Buffer, nb*nKV)
	for b := 0; b < nb && c.err == nil; b++ {
		for g := 0; g < nKV; g++ {
			keys[b*nKV+g] = headRows(kt, b, g, nKV)
		}
		for h := 0; h < nH && c.err == nil; h++ {
			s, err := mem.Rows(scores, (b*nH+h)*sq, sq)
			c.fail(err)
			products = append(products, product{s, headRows(qt, b, h, nH), keys[b*nKV+h/(nH/nKV)]})
		}
	}
	c.do(func() error {
		for _, pr := range products {
			if err := c.b.Gemm(pr.s, pr.q, pr.k, nil); err != nil {
				return err
			}
		}
		st, err := c.b.Download(scores)
		if err != nil {
			return err
		}
		for r := 0; r < nb*nH*sq; r++ {
			row, visible := st.F32[r*sk:(r+1)*sk], sk
			if p.Causal {
				visible = sk - sq + r%sq + 1
			}
			for j := range row {
				if j < visible {
					row[j] *= p.Scale
					if p.Softcap > 0 {
						row[j] = p.Softcap * float32(math.Tanh(float64(row[j]/p.Softcap)))
					}
				} else {
					row[j] = float32(math.Inf(-1))
				}
			}
		}
		if err := mem.Write(scores, st); err != nil {
			return err
		}
		return c.b.Softmax(flat, scores)
	})
	c.output("probs", probs)
}
