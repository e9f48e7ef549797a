package cpu

import (
	"math"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// AttentionScoresSoftmax computes each head's scaled scores in float64 and their softmax over
// the visible keys, storing fp32 probabilities (0 for the keys the causal mask hides).
func (*Backend) AttentionScoresSoftmax(probs, q, k backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionScoresSoftmax(probs, q, k, cfg); err != nil {
		return err
	}
	ts, err := tensors("attention_scores_softmax", probs, q, k)
	if err != nil {
		return err
	}
	qv, kv := ts[1].Float32(), ts[2].Float32()
	b, sq, sk := ts[1].Shape[0], ts[1].Shape[1], ts[2].Shape[1]
	nH, nKV, D := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	res := make([]float32, b*nH*sq*sk)
	scores := make([]float64, sk)
	for bi := 0; bi < b; bi++ {
		for h := 0; h < nH; h++ {
			kvh := h / (nH / nKV)
			for i := 0; i < sq; i++ {
				visible := sk
				if cfg.Causal {
					visible = sk - sq + i + 1
				}
				qrow := qv[((bi*sq+i)*nH+h)*D:][:D]
				mx := math.Inf(-1)
				for j := 0; j < visible; j++ {
					krow := kv[((bi*sk+j)*nKV+kvh)*D:][:D]
					var s float64
					for d, x := range qrow {
						s += float64(x) * float64(krow[d])
					}
					scores[j] = softcap(s*float64(cfg.Scale), cfg.Softcap)
					mx = math.Max(mx, scores[j])
				}
				var sum float64
				for j := 0; j < visible; j++ {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				row := res[((bi*nH+h)*sq+i)*sk:][:sk]
				for j := 0; j < visible; j++ {
					row[j] = float32(scores[j] / sum)
				}
			}
		}
	}
	store(ts[0], res)
	return nil
}
