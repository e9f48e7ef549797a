package cpu

import (
	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetRowsFP8 quantises src rows into the f8e4m3 dst in place: dst[rows[i]] = e4m3(src[i] /
// scale[head]), the division a float32 one (docs/quantization.md's static quantisation). Every
// index is checked before the first row is written, so a refused call leaves dst as it was.
func (*Backend) SetRowsFP8(dst, src, rows, scale backend.Buffer) error {
	const op = "set_rows_fp8"
	if err := backend.CheckSetRowsFP8(dst, src, rows, scale); err != nil {
		return err
	}
	ts, err := tensors(op, dst, src, rows, scale)
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
	headElems := n / len(ts[3].F32)
	sv := ts[1].Float32()
	for i, v := range ts[2].I32 {
		to, from := ts[0].F8[int(v)*n:][:n], sv[i*n:][:n]
		for e, x := range from {
			to[e] = tensor.E4M3FromFloat32(x / ts[3].F32[e/headElems])
		}
	}
	return nil
}

// AttentionDecodeFP8 is AttentionDecode over f8e4m3 caches: each code is decoded exactly and
// multiplied by its kv head's scale in float64, then the fp64 attention of attendOne.
func (*Backend) AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	const op = "attention_decode_fp8"
	if err := backend.CheckAttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg); err != nil {
		return err
	}
	ts, err := tensors(op, out, q, kCache, vCache, cacheLens, kScale, vScale)
	if err != nil {
		return err
	}
	maxLen := ts[2].Shape[1]
	for i, n := range ts[4].I32 {
		if n < 1 || int(n) > maxLen {
			return backend.IndexError(op, "cache_lens", i, int(n), "must be in [1, "+fmtI(maxLen)+"] (the cache capacity)")
		}
	}
	qv := ts[1].Float32()
	kv, vv := dequantCache(ts[2], ts[5].F32, cfg), dequantCache(ts[3], ts[6].F32, cfg)
	res := make([]float32, len(qv))
	for bi, n := range ts[4].I32 {
		attendOne(res, qv, kv, vv, cfg, bi*cfg.NumHeads, bi*maxLen, int(n))
	}
	store(ts[0], res)
	return nil
}

// dequantCache decodes an f8e4m3 cache [B, L, nKV, D] into float64 code · scale[kv head] (scale
// [1] or [nKV]).
func dequantCache(c *tensor.Tensor, scale []float32, cfg backend.AttentionConfig) []float64 {
	out := make([]float64, len(c.F8))
	for i, b := range c.F8 {
		h := 0
		if len(scale) > 1 {
			h = i / cfg.HeadDim % cfg.NumKVHeads
		}
		out[i] = float64(tensor.E4M3ToFloat32(b)) * float64(scale[h])
	}
	return out
}
