package exec

// The Kernels methods and Sampler's Philox, each refused by name (Sample is sample.go's): a
// method added to engine/backend/backend.go's interfaces breaks this package's build until it is
// added here.

import "github.com/touchstone-llm/touchstone/engine/backend"

func (b *Backend) ResidualAdd(out, x, residual backend.Buffer) error        { return refuse("ResidualAdd") }
func (b *Backend) RMSNorm(out, x, weight backend.Buffer, eps float32) error { return refuse("RMSNorm") }
func (b *Backend) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	return refuse("LayerNorm")
}
func (b *Backend) LayerNormResidual(sum, out, x, residual, gamma, beta backend.Buffer, eps float32) error {
	return refuse("LayerNormResidual")
}
func (b *Backend) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return refuse("RMSNormResidual")
}
func (b *Backend) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	return refuse("RoPE")
}
func (b *Backend) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionPrefill")
}
func (b *Backend) AttentionScoresSoftmax(probs, q, k backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionScoresSoftmax")
}
func (b *Backend) AttentionDecode(out, q, kCache, vCache, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionDecode")
}
func (b *Backend) AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionDecodeFP8")
}
func (b *Backend) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionDecodePaged")
}
func (b *Backend) AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionPrefillPaged")
}
func (b *Backend) AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionDecodePagedFP8")
}
func (b *Backend) AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return refuse("AttentionPrefillPagedFP8")
}
func (b *Backend) SwiGLU(out, gate, up backend.Buffer) error           { return refuse("SwiGLU") }
func (b *Backend) GeGLU(out, gate, up backend.Buffer, tanh bool) error { return refuse("GeGLU") }
func (b *Backend) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	return refuse("SwiGLUFFN")
}
func (b *Backend) GemmSwiGLU(out, x, wGateUp backend.Buffer) error { return refuse("GemmSwiGLU") }
func (b *Backend) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	return refuse("RMSNormGemm")
}
func (b *Backend) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	return refuse("LayerNormGemm")
}
func (b *Backend) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	return refuse("SwiGLUGemm")
}
func (b *Backend) GPTFFN(out, x, w1, b1, w2, b2 backend.Buffer, tanh bool) error {
	return refuse("GPTFFN")
}
func (b *Backend) GELU(out, x backend.Buffer) error     { return refuse("GELU") }
func (b *Backend) GELUTanh(out, x backend.Buffer) error { return refuse("GELUTanh") }
func (b *Backend) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	return refuse("GELUScale")
}
func (b *Backend) PosEmbedding(out, x, table, positions backend.Buffer) error {
	return refuse("PosEmbedding")
}
func (b *Backend) Embedding(out, ids, table backend.Buffer, scale float32) error {
	return refuse("Embedding")
}
func (b *Backend) SetRows(dst, src, rows backend.Buffer) error           { return refuse("SetRows") }
func (b *Backend) SetRowsFP8(dst, src, rows, scale backend.Buffer) error { return refuse("SetRowsFP8") }
func (b *Backend) Gemm(out, x, w, bias backend.Buffer) error             { return refuse("Gemm") }
func (b *Backend) Softmax(out, x backend.Buffer) error                   { return refuse("Softmax") }
func (b *Backend) LogitSoftcap(out, x backend.Buffer, softcap float32) error {
	return refuse("LogitSoftcap")
}
func (b *Backend) QuantFP8(out, scales, x, scale backend.Buffer, groupSize int) error {
	return refuse("QuantFP8")
}
func (b *Backend) GemmFP8(out, x, xScales, w, wScales backend.Buffer, block bool) error {
	return refuse("GemmFP8")
}
func (b *Backend) RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale backend.Buffer, groupSize int, eps float32) error {
	return refuse("RMSNormQuantFP8")
}
func (b *Backend) SwiGLUQuantFP8(out, scales, gate, up, scale backend.Buffer, groupSize int) error {
	return refuse("SwiGLUQuantFP8")
}
func (b *Backend) GemmW4A16(out, x, qweight, qzeros, scales, gIdx backend.Buffer, format backend.W4Format, groupSize int) error {
	return refuse("GemmW4A16")
}
func (b *Backend) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	return refuse("MoERouter")
}
func (b *Backend) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	return refuse("MoEFFN")
}
func (b *Backend) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	return refuse("MoESharedAdd")
}
func (b *Backend) Philox(out backend.Buffer, seed, step uint64, row uint32) error {
	return refuse("Philox")
}
