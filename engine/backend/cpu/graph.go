package cpu

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Capture records the ops that record issues as a list of calls that Launch replays: the
// CPU backend's stand-in for a device graph, with the CUDA backend's rules (arguments checked
// when an op is issued, index data when it runs; no allocation, host copy or wait during a
// capture). It lets CI run a model's replayed decode step and catch what a graph would get
// wrong: a position or a KV-cache offset baked into the recording instead of read from a
// buffer at launch.
func (b *Backend) Capture(record func(backend.Backend) error) (backend.Graph, error) {
	r := &recorder{be: b}
	err := record(r)
	r.closed = true
	if err != nil {
		return nil, err
	}
	b.liveGraphs.Add(1)
	return &graph{b: b, calls: r.calls}, nil
}

// LiveGraphs counts the graphs captured and not yet freed.
func (b *Backend) LiveGraphs() int64 { return b.liveGraphs.Load() }

var _ backend.Graphs = (*Backend)(nil)

type graph struct {
	b     *Backend
	calls []func() error
}

// Launch runs the recorded calls in order; the first error stops it.
func (g *graph) Launch() error {
	if g.calls == nil {
		return fmt.Errorf("cpu graph: launch after Free")
	}
	for _, c := range g.calls {
		if err := c(); err != nil {
			return fmt.Errorf("cpu graph replay: %w", err)
		}
	}
	return nil
}

// Free drops the recorded calls; a second Free is a no-op.
func (g *graph) Free() {
	if g.calls != nil {
		g.b.liveGraphs.Add(-1)
	}
	g.calls = nil
}

// recorder is the backend a capture's ops are issued on: ops are checked and appended, views
// are made at once (they are host bookkeeping), and whatever a device graph cannot record
// fails.
type recorder struct {
	be     *Backend
	calls  []func() error
	closed bool
}

var (
	_ backend.Backend = (*recorder)(nil)
	_ backend.Memory  = (*recorder)(nil)
)

func (r *recorder) add(check error, call func() error) error {
	switch {
	case r.closed:
		return fmt.Errorf("cpu graph: an op issued after its capture ended")
	case check != nil:
		return check
	}
	r.calls = append(r.calls, call)
	return nil
}

func (r *recorder) refuse(call string) error {
	return fmt.Errorf("cpu graph: %s during a capture: a capture records device work only (allocate, upload and write before it, download after it)", call)
}

func (r *recorder) Info() backend.DeviceInfo { return r.be.Info() }
func (r *recorder) Supports(op string) bool  { return r.be.Supports(op) }
func (r *recorder) Close() error             { return r.refuse("close") }
func (r *recorder) Download(backend.Buffer) (*tensor.Tensor, error) {
	return nil, r.refuse("download")
}
func (r *recorder) Alloc(tensor.DType, ...int) (backend.Buffer, error) {
	return nil, r.refuse("alloc")
}
func (r *recorder) Upload(*tensor.Tensor) (backend.Buffer, error) {
	return nil, r.refuse("upload")
}
func (r *recorder) Write(backend.Buffer, *tensor.Tensor) error { return r.refuse("write") }

func (r *recorder) View(b backend.Buffer, shape ...int) (backend.Buffer, error) {
	return r.be.View(b, shape...)
}
func (r *recorder) Rows(b backend.Buffer, start, n int) (backend.Buffer, error) {
	return r.be.Rows(b, start, n)
}
func (r *recorder) WriteRows(dst backend.Buffer, off int, src backend.Buffer) error {
	var check error
	if ts, err := tensors("write_rows", dst, src); err != nil {
		check = err
	} else {
		check = backend.CheckWriteRows(ts[0].DType, ts[0].Shape, off, ts[1].DType, ts[1].Shape)
	}
	return r.add(check, func() error { return r.be.WriteRows(dst, off, src) })
}

func (r *recorder) ResidualAdd(out, x, residual backend.Buffer) error {
	return r.add(backend.CheckBinary("residual_add", "x", "residual", out, x, residual),
		func() error { return r.be.ResidualAdd(out, x, residual) })
}
func (r *recorder) RMSNorm(out, x, weight backend.Buffer, eps float32) error {
	return r.add(backend.CheckRMSNorm(out, x, weight, eps), func() error { return r.be.RMSNorm(out, x, weight, eps) })
}
func (r *recorder) LayerNorm(out, x, gamma, beta backend.Buffer, eps float32) error {
	return r.add(backend.CheckLayerNorm(out, x, gamma, beta, eps),
		func() error { return r.be.LayerNorm(out, x, gamma, beta, eps) })
}
func (r *recorder) LayerNormResidual(sum, out, x, residual, gamma, beta backend.Buffer, eps float32) error {
	return r.add(backend.CheckLayerNormResidual(sum, out, x, residual, gamma, beta, eps),
		func() error { return r.be.LayerNormResidual(sum, out, x, residual, gamma, beta, eps) })
}
func (r *recorder) RMSNormResidual(sum, out, x, residual, weight backend.Buffer, eps float32) error {
	return r.add(backend.CheckRMSNormResidual(sum, out, x, residual, weight, eps),
		func() error { return r.be.RMSNormResidual(sum, out, x, residual, weight, eps) })
}
func (r *recorder) RoPE(out, x, positions backend.Buffer, cfg backend.RoPEConfig) error {
	return r.add(backend.CheckRoPE(out, x, positions, cfg), func() error { return r.be.RoPE(out, x, positions, cfg) })
}
func (r *recorder) AttentionPrefill(out, q, k, v backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionPrefill(out, q, k, v, cfg),
		func() error { return r.be.AttentionPrefill(out, q, k, v, cfg) })
}
func (r *recorder) AttentionDecode(out, q, kCache, vCache, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionDecode(out, q, kCache, vCache, cacheLens, cfg),
		func() error { return r.be.AttentionDecode(out, q, kCache, vCache, cacheLens, cfg) })
}
func (r *recorder) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg),
		func() error { return r.be.AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg) })
}
func (r *recorder) AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg),
		func() error {
			return r.be.AttentionPrefillPaged(out, q, kCache, vCache, blockTable, qStarts, kvLens, cfg)
		})
}
func (r *recorder) AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale, cfg),
		func() error {
			return r.be.AttentionDecodePagedFP8(out, q, kCache, vCache, blockTable, cacheLens, kScale, vScale, cfg)
		})
}
func (r *recorder) AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale, cfg),
		func() error {
			return r.be.AttentionPrefillPagedFP8(out, q, kCache, vCache, blockTable, qStarts, kvLens, kScale, vScale, cfg)
		})
}
func (r *recorder) SwiGLU(out, gate, up backend.Buffer) error {
	return r.add(backend.CheckBinary("swiglu", "gate", "up", out, gate, up), func() error { return r.be.SwiGLU(out, gate, up) })
}
func (r *recorder) GeGLU(out, gate, up backend.Buffer, tanh bool) error {
	return r.add(backend.CheckBinary("geglu", "gate", "up", out, gate, up), func() error { return r.be.GeGLU(out, gate, up, tanh) })
}
func (r *recorder) SwiGLUFFN(out, x, wGate, wUp, wDown backend.Buffer) error {
	return r.add(backend.CheckSwiGLUFFN(out, x, wGate, wUp, wDown),
		func() error { return r.be.SwiGLUFFN(out, x, wGate, wUp, wDown) })
}
func (r *recorder) GemmSwiGLU(out, x, wGateUp backend.Buffer) error {
	return r.add(backend.CheckGemmSwiGLU(out, x, wGateUp), func() error { return r.be.GemmSwiGLU(out, x, wGateUp) })
}
func (r *recorder) RMSNormGemm(out, sum, x, residual, normW, w, bias backend.Buffer, eps float32) error {
	return r.add(backend.CheckRMSNormGemm(out, sum, x, residual, normW, w, bias, eps),
		func() error { return r.be.RMSNormGemm(out, sum, x, residual, normW, w, bias, eps) })
}
func (r *recorder) LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias backend.Buffer, eps float32) error {
	return r.add(backend.CheckLayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps),
		func() error { return r.be.LayerNormGemm(out, sum, x, residual, gamma, beta, w, bias, eps) })
}
func (r *recorder) SwiGLUGemm(out, gate, up, w, bias backend.Buffer) error {
	return r.add(backend.CheckSwiGLUGemm(out, gate, up, w, bias), func() error { return r.be.SwiGLUGemm(out, gate, up, w, bias) })
}
func (r *recorder) GPTFFN(out, x, w1, b1, w2, b2 backend.Buffer, tanh bool) error {
	return r.add(backend.CheckGPTFFN(out, x, w1, b1, w2, b2),
		func() error { return r.be.GPTFFN(out, x, w1, b1, w2, b2, tanh) })
}
func (r *recorder) AttentionScoresSoftmax(probs, q, k backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionScoresSoftmax(probs, q, k, cfg),
		func() error { return r.be.AttentionScoresSoftmax(probs, q, k, cfg) })
}
func (r *recorder) GELU(out, x backend.Buffer) error {
	return r.add(backend.CheckUnary("gelu", out, x), func() error { return r.be.GELU(out, x) })
}
func (r *recorder) GELUTanh(out, x backend.Buffer) error {
	return r.add(backend.CheckUnary("gelu_tanh", out, x), func() error { return r.be.GELUTanh(out, x) })
}
func (r *recorder) GELUScale(out, x backend.Buffer, tanh bool, scale float32) error {
	return r.add(backend.CheckGELUScale(out, x, scale), func() error { return r.be.GELUScale(out, x, tanh, scale) })
}
func (r *recorder) PosEmbedding(out, x, table, positions backend.Buffer) error {
	return r.add(backend.CheckPosEmbedding(out, x, table, positions),
		func() error { return r.be.PosEmbedding(out, x, table, positions) })
}
func (r *recorder) Embedding(out, ids, table backend.Buffer, scale float32) error {
	return r.add(backend.CheckEmbedding(out, ids, table, scale), func() error { return r.be.Embedding(out, ids, table, scale) })
}
func (r *recorder) SetRows(dst, src, rows backend.Buffer) error {
	return r.add(backend.CheckSetRows(dst, src, rows), func() error { return r.be.SetRows(dst, src, rows) })
}
func (r *recorder) SetRowsFP8(dst, src, rows, scale backend.Buffer) error {
	return r.add(backend.CheckSetRowsFP8(dst, src, rows, scale), func() error { return r.be.SetRowsFP8(dst, src, rows, scale) })
}
func (r *recorder) AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale backend.Buffer, cfg backend.AttentionConfig) error {
	return r.add(backend.CheckAttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg),
		func() error { return r.be.AttentionDecodeFP8(out, q, kCache, vCache, cacheLens, kScale, vScale, cfg) })
}
func (r *recorder) Gemm(out, x, w, bias backend.Buffer) error {
	return r.add(backend.CheckGemm(out, x, w, bias), func() error { return r.be.Gemm(out, x, w, bias) })
}
func (r *recorder) Softmax(out, x backend.Buffer) error {
	return r.add(backend.CheckSoftmax(out, x), func() error { return r.be.Softmax(out, x) })
}
func (r *recorder) LogitSoftcap(out, x backend.Buffer, softcap float32) error {
	return r.add(backend.CheckLogitSoftcap(out, x, softcap), func() error { return r.be.LogitSoftcap(out, x, softcap) })
}

func (r *recorder) GemmFP8(out, x, xScales, w, wScales backend.Buffer, block bool) error {
	return r.add(backend.CheckGemmFP8(out, x, xScales, w, wScales, block),
		func() error { return r.be.GemmFP8(out, x, xScales, w, wScales, block) })
}

func (r *recorder) QuantFP8(out, scales, x, scale backend.Buffer, groupSize int) error {
	return r.add(backend.CheckQuantFP8(out, scales, x, scale, groupSize),
		func() error { return r.be.QuantFP8(out, scales, x, scale, groupSize) })
}

func (r *recorder) RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale backend.Buffer, groupSize int, eps float32) error {
	return r.add(backend.CheckRMSNormQuantFP8(out, scales, sum, x, residual, weight, scale, groupSize, eps),
		func() error {
			return r.be.RMSNormQuantFP8(out, scales, sum, x, residual, weight, scale, groupSize, eps)
		})
}

func (r *recorder) SwiGLUQuantFP8(out, scales, gate, up, scale backend.Buffer, groupSize int) error {
	return r.add(backend.CheckSwiGLUQuantFP8(out, scales, gate, up, scale, groupSize),
		func() error { return r.be.SwiGLUQuantFP8(out, scales, gate, up, scale, groupSize) })
}

func (r *recorder) GemmW4A16(out, x, qweight, qzeros, scales, gIdx backend.Buffer, format backend.W4Format, groupSize int) error {
	return r.add(backend.CheckGemmW4A16(out, x, qweight, qzeros, scales, gIdx, format, groupSize),
		func() error { return r.be.GemmW4A16(out, x, qweight, qzeros, scales, gIdx, format, groupSize) })
}
func (r *recorder) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	return r.add(backend.CheckMoERouter(weights, ids, logits, topK),
		func() error { return r.be.MoERouter(weights, ids, logits, topK, renormalize) })
}

func (r *recorder) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	return r.add(backend.CheckMoEFFN(out, x, ids, weights, gateUp, down),
		func() error { return r.be.MoEFFN(out, x, ids, weights, gateUp, down) })
}

func (r *recorder) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	return r.add(backend.CheckMoESharedAdd(out, routed, shared, x, gate),
		func() error { return r.be.MoESharedAdd(out, routed, shared, x, gate) })
}

func (r *recorder) Sample(tokens, logits backend.Buffer, cfg backend.SampleConfig) error {
	return r.add(backend.CheckSample(tokens, logits, cfg), func() error { return r.be.Sample(tokens, logits, cfg) })
}
func (r *recorder) Philox(out backend.Buffer, seed, step uint64, row uint32) error {
	return r.add(backend.CheckPhilox(out), func() error { return r.be.Philox(out, seed, step, row) })
}
