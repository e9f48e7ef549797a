package model

import (
	"fmt"
	"path/filepath"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Model is a loaded checkpoint on a backend, with its KV cache.
type Model struct {
	// Cfg is read at every pass, so a test may change it after Load (a broken variant).
	Cfg    Config
	be     backend.Backend
	w      map[string]backend.Buffer
	q      map[string]*QLinear // the quantized linears by engine name (layers.0.wq): qlinear.go
	Layers []*Layer
	MaxLen int

	mem  backend.Memory
	pos  int             // tokens in the cache
	step int             // decode steps run since the last prefill
	want map[string]bool // requested taps (bare names: "embed", "layers.0.q", "logits")
	taps map[string]*tensor.Tensor
	// inject holds reference taps by canonical name that a pass writes over its own right
	// after tapping them (isolate.go); nil in a normal pass.
	inject map[string]*tensor.Tensor
	// routes holds the reference's choice of experts at the ambiguous rows of router_logits taps
	// by canonical name (FollowAmbiguousRoutes); nil: every choice is the engine's own.
	routes map[string]*routeGuide

	pool      map[string][]backend.Buffer // activations by dtype and shape, reused across passes
	inUse     []backend.Buffer            // this pass's activations, back to the pool at its end
	views     []backend.Buffer            // this pass's views, dropped at its end
	positions backend.Buffer              // i32 [MaxLen]: 0..MaxLen-1; a prefill's positions are a view of it
	// stepIn holds what changes from one decode step to the next, i32 [4]: the token, the
	// cache length after it, its position (also its key's row in the layers' caches) and its
	// value's row (MaxLen + position: kvCache). One host write per step, and the step's ops read
	// it on the device: what lets a captured step be replayed.
	stepIn backend.Buffer
	// promptIn holds a prefill's tokens, i32 [MaxLen] (its first T rows): written before the
	// pass, read on the device, so a prefill captured at one length replays with the next.
	promptIn backend.Buffer
	logits   backend.Buffer // f32 [1, V]: the last position's logits of the last pass
	token    backend.Buffer // i32 [1]: Sample's output
	rope     ropeTables     // RoPE scaling's divisor tables on the device (rope.go)

	graphs *graphState // nil: every pass runs op by op (graph.go)

	// Fused selects the fused ops at decode (prenorm.go): each pre-norm with the projection
	// after it (RMSNormGemm), SwiGLU with the down projection (SwiGLUGemm) and GPT-2's MLP
	// (GPTFFN). On by default (TOUCHSTONE_FUSED=0 at Load turns it off); false runs every decode
	// step op by op as a prefill does, the composition the fused ops must match. Read at every
	// pass.
	Fused bool
}

// Load reads dir/config.json and the safetensors checkpoint in dir and uploads the weights, in
// the storage dtype config.json names (Config.DType). maxLen is the KV cache length (prompt plus
// every decoded token).
func Load(be backend.Backend, dir string, maxLen int) (*Model, error) {
	return LoadAs(be, dir, maxLen, tensor.Invalid)
}

// LoadAs is Load running in storage dtype dt (F16 or BF16) whatever config.json says; Invalid
// keeps config.json's.
func LoadAs(be backend.Backend, dir string, maxLen int, dt tensor.DType) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	switch dt {
	case tensor.Invalid:
	case tensor.F16, tensor.BF16:
		cfg.DType = dt
	default:
		return nil, fmt.Errorf("model: storage dtype %s: want f16 or bf16", dt)
	}
	if limit, why := cfg.PositionLimit(); maxLen < 1 || maxLen > limit {
		return nil, fmt.Errorf("model: cache length %d: must be in 1..%d (%s)", maxLen, limit, why)
	}
	mem, ok := be.(backend.Memory)
	if !ok {
		return nil, fmt.Errorf("model: backend %s has no device views and copies (backend.Memory)", be.Info().Backend)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	w, err := loadWeights(be, cfg, ck)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
	}
	m := &Model{Cfg: *cfg, be: be, w: w, MaxLen: maxLen, mem: mem, pool: map[string][]backend.Buffer{}, Fused: fusedDefault()}
	if m.q, err = loadQuantLinears(be, cfg, ck, m.w); err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
	}
	if cfg.TiedHead {
		// loadWeights never uploads a stored lm_head.weight when tied (TiedTo), so nothing
		// is overwritten here and left unfreed; Close frees the shared buffer once.
		m.w["head"] = m.w["embed"]
	} else if m.w["head"] == nil {
		m.Close()
		return nil, fmt.Errorf("model: checkpoint has no tensor lm_head.weight and tie_word_embeddings is false")
	}
	for l := 0; l < cfg.Layers; l++ {
		name := func(s string) string { return fmt.Sprintf("layers.%d.%s", l, s) }
		g := func(s string) backend.Buffer { return m.w[name(s)] }
		gq := func(s string) *QLinear { return m.q[name(s)] }
		// Decode steps compute q, k and v, and gate and up, with one GEMM each (fuse.go), where
		// every one of them is a 16-bit weight (a quantized linear runs alone).
		var fw [3]*fused
		var fq [2]*fusedFP8 // q/k/v and gate/up of FP8 projections (fuseq.go)
		var f4 [2]*fusedW4  // q/k/v and gate/up of tiled 4-bit projections (fusew4.go)
		for k, set := range [][]string{{"wqkv", "wq", "wk", "wv"}, {"bqkv", "bq", "bk", "bv"}, {"wgate_up", "wgate", "wup"}} {
			names := make([]string, len(set))
			quantized := false
			for j, s := range set {
				names[j] = name(s)
				quantized = quantized || m.q[names[j]] != nil
			}
			if quantized {
				if k != 1 {
					if fq[k/2], err = fuseFP8(be, mem, m.w, m.q, names[0], names[1:]...); err != nil {
						m.Close()
						return nil, err
					}
					if f4[k/2], err = fuseW4(be, m.w, m.q, names[0], names[1:]...); err != nil {
						m.Close()
						return nil, err
					}
				}
				continue
			}
			if fw[k], err = fuse(be, mem, m.w, names[0], names[1:]...); err != nil {
				m.Close()
				return nil, err
			}
		}
		var moe [3]backend.Buffer
		if cfg.Experts > 0 {
			if moe, err = stackExperts(be, mem, m.w, cfg, name); err != nil {
				m.Close()
				return nil, err
			}
		}
		mlp := &MLP{Gate: g("wgate"), Up: g("wup"), UpB: g("bup"), Down: g("wdown"), DownB: g("bdown"), gateUp: fw[2],
			QGate: gq("wgate"), QUp: gq("wup"), QDown: gq("wdown"), gateUpQ: fq[1], gateUpW4: f4[1],
			Router: moe[0], ExpertsGateUp: moe[1], ExpertsDown: moe[2]}
		if cfg.SharedIntermediate > 0 {
			// Qwen2-MoE: the dense projections are the shared expert's (weights.go's qwen2MoEShared)
			mlp = &MLP{Router: moe[0], ExpertsGateUp: moe[1], ExpertsDown: moe[2], SharedGate: g("shared_gate"),
				Shared: &MLP{Gate: mlp.Gate, Up: mlp.Up, Down: mlp.Down, gateUp: fw[2], Width: cfg.SharedIntermediate}}
		}
		m.Layers = append(m.Layers, &Layer{
			Index:    l,
			AttnNorm: Norm{W: g("attn_norm"), B: g("attn_norm_b")},
			FFNNorm:  Norm{W: g("ffn_norm"), B: g("ffn_norm_b")},
			// Gemma 3's norms after attention and after the MLP; nil elsewhere
			PostAttnNorm: Norm{W: g("attn_post_norm")},
			PostFFNNorm:  Norm{W: g("ffn_post_norm")},
			Attn: &Attention{Wq: g("wq"), Bq: g("bq"), Wk: g("wk"), Bk: g("bk"), Wv: g("wv"), Bv: g("bv"),
				Wo: g("wo"), Bo: g("bo"), QNorm: g("q_norm"), KNorm: g("k_norm"), qkvW: fw[0], qkvB: fw[1],
				Qq: gq("wq"), Qk: gq("wk"), Qv: gq("wv"), Qo: gq("wo"), qkvQ: fq[0], qkvW4: f4[0]},
			MLP: mlp,
		})
	}
	if err := uploadBiasBroadcast(be, m); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.allocState(); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.initGraphs(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// allocState allocates what lives as long as the model: KV caches, the positions table and
// the last logits and token.
func (m *Model) allocState() error {
	c := &m.Cfg
	for _, l := range m.Layers {
		cache, err := newCache(m.be, m.mem, c.StorageDType(), 1, m.MaxLen, c.KVHeads, c.HeadDim)
		if err != nil {
			return err
		}
		l.Attn.cache = cache
	}
	pos := make([]int32, m.MaxLen)
	for i := range pos {
		pos[i] = int32(i)
	}
	var err error
	if m.positions, err = m.be.Upload(tensor.FromI32([]int{len(pos)}, pos)); err != nil {
		return err
	}
	if m.stepIn, err = m.be.Alloc(tensor.I32, 4); err != nil {
		return err
	}
	if m.promptIn, err = m.be.Alloc(tensor.I32, m.MaxLen); err != nil {
		return err
	}
	if m.logits, err = m.be.Alloc(tensor.F32, 1, c.Vocab); err != nil {
		return err
	}
	m.token, err = m.be.Alloc(tensor.I32, 1)
	return err
}

// Close frees the weights and the cache.
func (m *Model) Close() {
	m.dropGraph()
	freed := map[backend.Buffer]bool{}
	for _, b := range m.w {
		if b != nil && !freed[b] {
			freed[b] = true
			b.Free()
		}
	}
	for _, l := range m.Layers {
		l.Attn.cache.free()
	}
	for _, b := range []backend.Buffer{m.positions, m.stepIn, m.promptIn, m.logits, m.token} {
		if b != nil {
			b.Free()
		}
	}
	m.rope.free()
	m.freePool()
}

// Reset empties the KV cache (its memory is kept and overwritten by the next prefill).
func (m *Model) Reset() { m.pos, m.step = 0, 0 }

// Pos is the number of tokens in the KV cache.
func (m *Model) Pos() int { return m.pos }

// RequestTaps sets the taps the following passes copy to the host, by bare name ("embed",
// "layers.1.q_rope", "logits"); nil requests none.
func (m *Model) RequestTaps(names []string) {
	m.want = map[string]bool{}
	for _, n := range names {
		m.want[n] = true
	}
}

// Taps returns the taps captured since the last call, under their canonical golden names
// (prefill.<tap>, decode.<step>.<tap>), as f32 tensors, and forgets them.
func (m *Model) Taps() map[string]*tensor.Tensor {
	t := m.taps
	m.taps = nil
	return t
}

// Prefill runs the prompt from an empty cache and returns the last position's logits
// [1, V] (f32). The logits of every position are computed only when the "logits" tap is
// requested.
func (m *Model) Prefill(ids []int32) (*tensor.Tensor, error) {
	if err := m.PrefillOnDevice(ids); err != nil {
		return nil, err
	}
	return m.be.Download(m.logits)
}

// Decode runs one token at the next position and returns its logits [1, V] (f32).
func (m *Model) Decode(token int32) (*tensor.Tensor, error) {
	if err := m.DecodeOnDevice(token); err != nil {
		return nil, err
	}
	return m.be.Download(m.logits)
}

// PrefillOnDevice is Prefill leaving the logits on the device, for Sample or Logits. With a
// backend that has graphs, the second prefill of a length (up to maxPrefillGraphTokens) is
// captured and later ones are replayed (graph.go), unless taps are requested.
func (m *Model) PrefillOnDevice(ids []int32) error {
	m.Reset()
	if err := m.admit(ids); err != nil {
		return err
	}
	T := len(ids)
	// Every prefill reads its tokens from promptIn's first rows, so a captured one replays
	// with the next prompt of its length.
	in, err := m.mem.Rows(m.promptIn, 0, T)
	if err != nil {
		return err
	}
	err = m.mem.Write(in, tensor.FromI32([]int{T}, ids))
	in.Free()
	if err != nil {
		return err
	}
	done, err := m.prefillGraphs(T)
	if !done && err == nil {
		err = m.eagerPrefill(T)
	}
	if err != nil {
		return err
	}
	m.pos = T
	return nil
}

func (m *Model) eagerPrefill(T int) error {
	defer m.endPass()
	return m.prefillPass(m.be, m.mem, T)
}

// prefillPass runs the prefill of promptIn's first T tokens on be. It leaves the pass's
// buffers in use: the caller ends the pass, or keeps them for a captured graph.
func (m *Model) prefillPass(be backend.Backend, mem backend.Memory, T int) (err error) {
	defer recoverPass(&err)
	p := &pass{m: m, be: be, mem: mem, prefix: "prefill.", T: T, out: m.logits}
	p.ids = p.rows(m.promptIn, 0, T)
	p.posBuf = p.rows(m.positions, 0, T)
	p.cacheRows = p.posBuf
	p.run()
	return nil
}

// DecodeOnDevice is Decode leaving the logits on the device, for Sample or Logits. With a
// backend that has graphs (backend.Graphs), a step after the first is replayed from a graph
// captured once (graph.go), unless taps are requested: same ops, same results, a fraction
// of the host's work.
func (m *Model) DecodeOnDevice(token int32) error {
	if m.pos == 0 {
		return fmt.Errorf("model: decode before prefill")
	}
	if err := m.admit([]int32{token}); err != nil {
		return err
	}
	pos := int32(m.pos)
	in := tensor.FromI32([]int{4}, []int32{token, pos + 1, pos, int32(m.MaxLen) + pos})
	if err := m.mem.Write(m.stepIn, in); err != nil {
		return err
	}
	if err := m.decodeStep(fmt.Sprintf("decode.%d.", m.step)); err != nil {
		return err
	}
	m.pos++
	m.step++
	return nil
}

// decodePass runs one decode step's ops on be, reading the token, position and cache length
// from stepIn. It leaves the pass's buffers in use: the caller ends the pass, or keeps them
// for a captured graph.
func (m *Model) decodePass(be backend.Backend, mem backend.Memory, prefix string) (err error) {
	defer recoverPass(&err)
	p := &pass{m: m, be: be, mem: mem, prefix: prefix, T: 1, decode: true, out: m.logits}
	p.ids = p.rows(m.stepIn, 0, 1)
	p.lens = p.rows(m.stepIn, 1, 1)
	p.posBuf = p.rows(m.stepIn, 2, 1)
	p.cacheRows = p.posBuf
	p.kvRows = p.rows(m.stepIn, 2, 2)
	p.run()
	return nil
}

// Logits is the device buffer of the last pass's last-position logits, f32 [1, V]; the
// next pass overwrites it.
func (m *Model) Logits() backend.Buffer { return m.logits }

// Sample draws the next token from the last pass's logits on the device (docs/sampling.md);
// only the token comes back to the host.
func (m *Model) Sample(cfg backend.SampleConfig) (int32, error) {
	if m.pos == 0 {
		return 0, fmt.Errorf("model: sample before prefill")
	}
	if err := m.be.Sample(m.token, m.logits, cfg); err != nil {
		return 0, err
	}
	t, err := m.be.Download(m.token)
	if err != nil {
		return 0, err
	}
	return t.I32[0], nil
}

// pass is the state of one forward: the backend its ops are issued on (the model's, or a
// graph capture's), its tokens, positions and tap prefix.
type pass struct {
	m      *Model
	be     backend.Backend
	mem    backend.Memory
	prefix string
	T      int
	decode bool           // one token after a non-empty cache
	ids    backend.Buffer // i32 [T]
	posBuf backend.Buffer // i32 [T]: the positions, which are also the KV-cache rows written
	lens   backend.Buffer // i32 [T]: each token's cache length after it (decode only)
	kvRows backend.Buffer // i32 [2]: its key's and value's rows in the combined caches (single-sequence decode only)
	// cacheRows are the rows of the layers' kRows and vRows the pass's keys and values go to,
	// i32 [T]: the positions for the model's own cache; slot x MaxLen + position in a batch.
	cacheRows backend.Buffer
	// out receives the logits: the last position's [1, V], or in a batched decode every
	// row's [T, V] (allLogits).
	out       backend.Buffer
	allLogits bool
	// batch is the batch whose caches the pass uses (batch.go), nil for the model's own;
	// served is the paged step a served pass runs (served.go), nil for any other. rowSpans,
	// when not nil, are the pass's rows by sequence, each tapped under its own prefix (a batched
	// decode's rows, a served step's chunks).
	batch    *Batch
	served   *servedStep
	rowSpans []rowSpan
}

// rowSpan is rows [start, start+n) of a pass, tapped under prefix.
type rowSpan struct {
	prefix   string
	start, n int
}

// singleStep reports whether the pass is one token of the model's own sequence: the decode step
// whose q, k and v (and gate and up) are adjacent columns of one GEMM's output row. A batch
// runs every row through the same ops whatever its size, so that a sequence's arithmetic does
// not depend on its company (batch invariance).
func (p *pass) singleStep() bool { return p.decode && p.batch == nil && p.T == 1 }

// cache is the KV cache of layer l that this pass reads and appends to.
func (p *pass) cache(l *Layer) *kvCache {
	if p.served != nil {
		return p.served.s.pools[l.Index]
	}
	if p.batch != nil {
		return p.batch.caches[l.Index]
	}
	return l.Attn.cache
}

// admit checks that ids can run as the next pass.
func (m *Model) admit(ids []int32) error { return m.admitIn(m.MaxLen, m.pos, ids) }

// admitIn checks that ids can run after pos tokens of a sequence whose cache holds maxLen.
func (m *Model) admitIn(maxLen, pos int, ids []int32) error {
	c := &m.Cfg
	T := len(ids)
	if T == 0 {
		return fmt.Errorf("model: no tokens")
	}
	if pos+T > maxLen {
		return fmt.Errorf("model: %d tokens after %d exceed the cache length %d", T, pos, maxLen)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= c.Vocab {
			return fmt.Errorf("model: token id %d outside the vocabulary 0..%d", id, c.Vocab-1)
		}
	}
	return nil
}

// run issues the forward of the pass's tokens, leaving the last position's logits in
// m.logits; errors panic as passError.
func (p *pass) run() {
	m, c, T := p.m, &p.m.Cfg, p.T
	x := p.alloc(T, c.Hidden)
	p.do(p.be.Embedding(x, p.ids, m.w["embed"], c.embedScale()))
	if pe := m.w["pos_embed"]; pe != nil {
		x2 := p.alloc(T, c.Hidden)
		p.do(p.be.PosEmbedding(x2, x, pe, p.posBuf))
		x = x2
	}
	p.tap("embed", x)
	// Every residual add is fused with the norm that follows it (the next layer's attention
	// norm, or the final norm), and in a fused decode also with the projection after that norm;
	// the first norm has no add before it.
	in := pending{x: x, n: m.Layers[0].AttnNorm, normTap: "layers.0.attn_norm"}
	for i, l := range m.Layers {
		next, nextTap := Norm{W: m.w["final_norm"], B: m.w["final_norm_b"]}, "final_norm"
		if i+1 < len(m.Layers) {
			next, nextTap = m.Layers[i+1].AttnNorm, fmt.Sprintf("layers.%d.attn_norm", i+1)
		}
		in = l.Forward(p, in, next, nextTap)
	}
	_, fn := p.settle(in)
	switch {
	case p.allLogits:
		// A batched decode step: every row is a sequence's next-token logits.
		p.do(p.be.Gemm(p.out, fn, m.w["head"], nil))
		p.softcap(p.out)
		p.tap("logits", p.out)
	case m.want["logits"]:
		all := p.allocT(tensor.F32, T, c.Vocab)
		p.do(p.be.Gemm(all, fn, m.w["head"], nil))
		p.softcap(all)
		p.tap("logits", all)
		p.do(p.mem.WriteRows(p.out, 0, p.rows(all, T-1, 1)))
	default:
		// Only the last position's logits feed the next token: one GEMV instead of T.
		p.do(p.be.Gemm(p.out, p.rows(fn, T-1, 1), m.w["head"], nil))
		p.softcap(p.out)
	}
}

// softcap applies the final logit soft cap (Gemma 2's final_logit_softcapping) to the fp32
// logits in place, as the model's output and the logits tap hold them; nothing without one.
func (p *pass) softcap(logits backend.Buffer) {
	if c := p.m.Cfg.FinalSoftcap; c > 0 {
		p.do(p.be.LogitSoftcap(logits, logits, c))
	}
}

// Layer is one transformer block: pre-norm attention and pre-norm MLP with residuals.
type Layer struct {
	Index             int
	AttnNorm, FFNNorm Norm
	// PostAttnNorm and PostFFNNorm normalise the attention's and the MLP's outputs before their
	// residual adds (Gemma 3's post_attention_layernorm and post_feedforward_layernorm); zero
	// Norms where the family has none.
	PostAttnNorm, PostFFNNorm Norm
	Attn                      *Attention
	MLP                       *MLP
}

// Forward runs the layer on its input in (the residual stream, not yet added and normalised:
// pending) and returns the stream after the layer, pending the add and the norm next (the next
// layer's attention norm, or the final norm), tapped as nextTap.
func (l *Layer) Forward(p *pass, in pending, next Norm, nextTap string) pending {
	name := func(s string) string { return fmt.Sprintf("layers.%d.%s", l.Index, s) }
	a, x := l.Attn.Forward(p, in, p.cache(l), l.Index, p.m.Cfg.LayerWindow(l.Index), name)
	a = l.PostAttnNorm.post(p, a, name("attn_post_norm"))
	f, r := l.MLP.Forward(p, pending{x: x, y: a, n: l.FFNNorm, sumTap: name("resid_attn"), normTap: name("ffn_norm")}, name)
	f = l.PostFFNNorm.post(p, f, name("ffn_post_norm"))
	return pending{x: r, y: f, n: next, sumTap: name("resid_ffn"), normTap: nextTap}
}

// post is a block output's own norm before its residual add (Gemma 3), tapped as tap; x itself
// where the layer has none.
func (n Norm) post(p *pass, x backend.Buffer, tap string) backend.Buffer {
	if n.W == nil {
		return x
	}
	out := p.alloc(p.T, p.m.Cfg.Hidden)
	n.Forward(p, out, x)
	p.tap(tap, out)
	return out
}

// addNorm returns sum = x + y and n(sum), tapped as sumTap and normTap, with one fused op:
// both fused ops normalise the fp16 sum they store, as the unfused pair would.
func (p *pass) addNorm(x, y backend.Buffer, n Norm, sumTap, normTap string) (sum, normed backend.Buffer) {
	c := &p.m.Cfg
	sum, normed = p.alloc(p.T, c.Hidden), p.alloc(p.T, c.Hidden)
	if n.B != nil {
		p.do(p.be.LayerNormResidual(sum, normed, x, y, n.W, n.B, c.NormEps))
	} else {
		p.do(p.be.RMSNormResidual(sum, normed, x, y, n.W, c.NormEps))
	}
	p.tap(sumTap, sum)
	p.tap(normTap, normed)
	return sum, normed
}

// Norm is RMSNorm (no bias) or LayerNorm (with bias).
type Norm struct{ W, B backend.Buffer }

// Forward normalises x into out.
func (n Norm) Forward(p *pass, out, x backend.Buffer) {
	if n.B != nil {
		p.do(p.be.LayerNorm(out, x, n.W, n.B, p.m.Cfg.NormEps))
	} else {
		p.do(p.be.RMSNorm(out, x, n.W, p.m.Cfg.NormEps))
	}
}

// Attention is the self-attention block; biases are nil where the family has none.
type Attention struct {
	Wq, Bq, Wk, Bk, Wv, Bv, Wo, Bo backend.Buffer
	// QNorm and KNorm are the RMSNorm weights [head_dim] applied to each head of q and of k
	// before RoPE (Qwen3); nil where the family has none.
	QNorm, KNorm backend.Buffer
	cache        *kvCache
	qkvW, qkvB   *fused // Wq, Wk, Wv (Bq, Bk, Bv) as one buffer; nil biases: none
	// Qq, Qk, Qv, Qo are the projections a quantized checkpoint stores in its format (their
	// W fields then nil); nil for a 16-bit projection.
	Qq, Qk, Qv, Qo *QLinear
	qkvQ           *fusedFP8 // Qq, Qk, Qv as one FP8 projection; nil when they cannot be
	qkvW4          *fusedW4  // Qq, Qk, Qv as one tiled 4-bit projection; nil when they cannot be
}

// Forward returns attn_out [T, H] for the input in (its residual add and norm run here, x the
// residual stream after the add), appending this pass's keys and values to cache.
func (a *Attention) Forward(p *pass, in pending, cache *kvCache, layer, window int, name func(string) string) (out, x backend.Buffer) {
	c, be, T := &p.m.Cfg, p.be, p.T
	nH, nKV, D := c.Heads, c.KVHeads, c.HeadDim
	var qb, kb, vb backend.Buffer
	var qk backend.Buffer // fused decode: q's and k's heads as one [1, nH+nKV, D] view
	var kv backend.Buffer // fused decode: k's and v's heads as one [2, nKV, D] view
	dense := a.qkvW != nil && a.qkvW.intact(a.Wq, a.Wk, a.Wv) && a.qkvB.intact(a.Bq, a.Bk, a.Bv)
	w4 := a.qkvW4.usable(p, a.Qq, a.Qk, a.Qv) && a.qkvB.intact(a.Bq, a.Bk, a.Bv)
	if p.singleStep() && (dense || w4 || (a.qkvQ.intact(a.Qq, a.Qk, a.Qv) && a.qkvB.intact(a.Bq, a.Bk, a.Bv))) {
		// One token: q, k and v are consecutive columns of one GEMM's output row.
		qkv := p.alloc(T, (nH+2*nKV)*D)
		var parts []backend.Buffer
		if dense {
			var bias backend.Buffer
			if a.qkvB != nil {
				bias = a.qkvB.all
			}
			x = p.normGemm(in, qkv, a.qkvW.all, bias)
			parts = a.qkvW.outputs(p, qkv)
		} else if w4 {
			var hn backend.Buffer
			x, hn = p.settle(in)
			a.qkvW4.forward(p, qkv, hn)
			if a.qkvB != nil {
				p.addBias(qkv, a.qkvB.all)
			}
			parts = a.qkvW4.outputs(p, qkv)
		} else {
			var xin *fp8Input
			x, xin = p.normQuant(in, a.qkvQ.all.Group)
			a.qkvQ.all.forwardFP8(p, qkv, xin)
			if a.qkvB != nil {
				p.addBias(qkv, a.qkvB.all)
			}
			parts = a.qkvQ.rows.outputs(p, qkv)
		}
		qb, kb, vb = parts[0], parts[1], parts[2]
		qk = p.view(p.rows(p.view(qkv, (nH+2*nKV)*D), 0, (nH+nKV)*D), T, nH+nKV, D)
		kv = p.view(p.rows(p.view(qkv, (nH+2*nKV)*D), nH*D, 2*nKV*D), 2, nKV, D)
	} else if g := fp8Group(a.Qq, a.Qk, a.Qv); g > 0 {
		// FP8 projections: the norm quantised once for all three
		var xin *fp8Input
		x, xin = p.normQuant(in, g)
		qb, kb, vb = p.alloc(T, nH*D), p.alloc(T, nKV*D), p.alloc(T, nKV*D)
		a.Qq.forwardFP8(p, qb, xin)
		a.Qk.forwardFP8(p, kb, xin)
		a.Qv.forwardFP8(p, vb, xin)
		for _, o := range [][2]backend.Buffer{{qb, a.Bq}, {kb, a.Bk}, {vb, a.Bv}} {
			if o[1] != nil {
				p.addBias(o[0], o[1])
			}
		}
	} else {
		var hn backend.Buffer
		x, hn = p.settle(in)
		qb, kb, vb = p.alloc(T, nH*D), p.alloc(T, nKV*D), p.alloc(T, nKV*D)
		p.linear(qb, hn, a.Wq, a.Qq, a.Bq)
		p.linear(kb, hn, a.Wk, a.Qk, a.Bk)
		p.linear(vb, hn, a.Wv, a.Qv, a.Bv)
	}
	q, k, v := p.view(qb, T, nH, D), p.view(kb, T, nKV, D), p.view(vb, T, nKV, D)
	p.tap(name("q"), q)
	p.tap(name("k"), k)
	p.tap(name("v"), v)
	if a.QNorm != nil {
		// Each head of q and k normalised over head_dim (one row a head), into buffers of their
		// own: the fused step's in-place RoPE of q and k and its one append of k and v beside
		// them in the qkv row would read the unnormalised values.
		qn, kn := p.alloc(T, nH, D), p.alloc(T, nKV, D)
		p.do(be.RMSNorm(p.view(qn, T*nH, D), p.view(q, T*nH, D), a.QNorm, c.NormEps))
		p.do(be.RMSNorm(p.view(kn, T*nKV, D), p.view(k, T*nKV, D), a.KNorm, c.NormEps))
		q, k, qk, kv = qn, kn, nil, nil
		p.tap(name("q_norm"), q)
		p.tap(name("k_norm"), k)
	}
	if c.RopeTheta != 0 {
		rc := p.ropeConfig(layer)
		if qk != nil {
			// Adjacent heads of one row, one position: rotate q and k in place in one launch
			// (their taps above were copied before).
			p.do(be.RoPE(qk, qk, p.posBuf, rc))
		} else {
			qr, kr := p.alloc(T, nH, D), p.alloc(T, nKV, D)
			p.do(be.RoPE(qr, q, p.posBuf, rc))
			p.do(be.RoPE(kr, k, p.posBuf, rc))
			q, k = qr, kr
		}
		p.tap(name("q_rope"), q)
		p.tap(name("k_rope"), k)
	}
	// The KV-cache rows are the positions, read on the device (set_rows): no host offset. A
	// fused decode step's key and value rows are adjacent in qkv (k rotated in place above):
	// one append of both into the combined cache.
	if kv != nil {
		p.do(be.SetRows(cache.kvRows, kv, p.kvRows))
	} else {
		p.do(be.SetRows(cache.kRows, k, p.cacheRows))
		p.do(be.SetRows(cache.vRows, v, p.cacheRows))
	}
	ac := backend.AttentionConfig{NumHeads: nH, NumKVHeads: nKV, HeadDim: D, Causal: true, Scale: c.AttnScale(), Window: window, Softcap: c.AttnSoftcap}
	var heads backend.Buffer
	if st := p.served; st != nil {
		// Every chunk's new tokens against its sequence's pages, in one launch.
		heads = p.alloc(T, nH, D)
		p.do(be.AttentionPrefillPaged(heads, p.view(q, T, nH, D), cache.k, cache.v, st.table, st.qStarts, st.kvLens, ac))
	} else if p.decode {
		heads = p.alloc(T, nH, D)
		p.do(be.AttentionDecode(heads, p.view(q, T, nH, D), cache.k, cache.v, p.lens, ac))
	} else {
		heads = p.alloc(1, T, nH, D)
		p.do(be.AttentionPrefill(heads, p.view(q, 1, T, nH, D), p.view(k, 1, T, nKV, D), p.view(v, 1, T, nKV, D), ac))
	}
	attn := p.view(heads, T, nH*D)
	p.tap(name("attn"), attn)
	out = p.alloc(T, c.Hidden)
	p.linear(out, attn, a.Wo, a.Qo, a.Bo)
	p.tap(name("attn_out"), out)
	return out, x
}

// MLP is the feed-forward block: SwiGLU (activation silu, Gate set) or GELU in its tanh form
// (activation gelu_new, no Gate) on Up.
type MLP struct {
	Gate, Up, UpB, Down, DownB backend.Buffer
	gateUp                     *fused // Gate and Up as one buffer (SwiGLU families)
	// QGate, QUp, QDown are the projections a quantized checkpoint stores in its format (their
	// fields above then nil); nil for a 16-bit projection.
	QGate, QUp, QDown *QLinear
	gateUpQ           *fusedFP8 // QGate and QUp as one FP8 projection; nil when they cannot be
	gateUpW4          *fusedW4  // QGate and QUp as one tiled 4-bit projection; nil when they cannot be
	// Router [E, H], ExpertsGateUp [E, 2F, H] and ExpertsDown [E, H, F] make the block a sparse
	// mixture of experts (Config.Experts > 0: Mixtral); nil for a dense MLP.
	Router, ExpertsGateUp, ExpertsDown backend.Buffer
	// Shared is a sparse block's shared expert (Qwen2-MoE), a dense MLP run on every token, and
	// SharedGate [1, H] the Linear whose sigmoid scales its output; nil without one.
	Shared     *MLP
	SharedGate backend.Buffer
	// Width is a dense MLP's intermediate width where it is not Config.Intermediate (the shared
	// expert's shared_expert_intermediate_size); 0: Config.Intermediate.
	Width int
}

// width is the dense MLP's intermediate width.
func (f *MLP) width(c *Config) int {
	if f.Width > 0 {
		return f.Width
	}
	return c.Intermediate
}

// forwardMoE is the sparse mixture-of-experts block, as transformers' MixtralSparseMoeBlock:
// the router's logits (a Gemm by Router, in the storage type), its softmax top-k, renormalised
// with NormTopKProb (moe_router), the chosen experts' SwiGLU FFNs and their weighted sum (moe_ffn).
// With a shared expert (Qwen2MoeSparseMoeBlock) the experts' sum is moe_out; the shared expert
// runs as a dense MLP on the same norm (its ffn_gate, ffn_up, ffn_act and shared_out taps) and
// moe_shared_add adds it, scaled by sigmoid(x · SharedGate), in place of the sum: ffn_out.
func (f *MLP) forwardMoE(p *pass, in pending, name func(string) string) (out, x backend.Buffer) {
	c, be, T := &p.m.Cfg, p.be, p.T
	x, hn := p.settle(in)
	logits := p.alloc(T, c.Experts)
	p.do(be.Gemm(logits, hn, f.Router, nil))
	p.tap(name("router_logits"), logits)
	weights := p.allocT(tensor.F32, T, c.ExpertsPerToken)
	ids := p.allocT(tensor.I32, T, c.ExpertsPerToken)
	p.do(be.MoERouter(weights, ids, logits, c.ExpertsPerToken, c.NormTopKProb))
	if g := p.m.routes[p.prefix+name("router_logits")]; g != nil {
		p.do(p.followRoutes(g, logits, weights, ids))
	}
	out = p.alloc(T, c.Hidden)
	p.do(be.MoEFFN(out, hn, ids, weights, f.ExpertsGateUp, f.ExpertsDown))
	if f.Shared == nil {
		p.tap(name("ffn_out"), out)
		return out, x
	}
	p.tap(name("moe_out"), out)
	shared, _ := f.Shared.Forward(p, pending{x: x, normed: hn}, func(s string) string {
		if s == "ffn_out" {
			s = "shared_out"
		}
		return name(s)
	})
	p.do(be.MoESharedAdd(out, out, shared, hn, f.SharedGate))
	p.tap(name("ffn_out"), out)
	return out, x
}

// Forward returns ffn_out [T, H] for the input in (its residual add and norm run here, x the
// residual stream after the add).
func (f *MLP) Forward(p *pass, in pending, name func(string) string) (out, x backend.Buffer) {
	if f.Router != nil {
		return f.forwardMoE(p, in, name)
	}
	c, be, T := &p.m.Cfg, p.be, p.T
	F := f.width(c)
	act := p.alloc(T, F)
	// The kernel follows the configured activation (the hyper-parameter checked against the
	// reference's, hparams.go); the weights only have to fit it.
	switch {
	case c.Activation == "silu" && (f.Gate != nil || f.QGate != nil):
		var g, up backend.Buffer
		if p.singleStep() && f.UpB == nil && f.gateUp != nil && f.gateUp.intact(f.Gate, f.Up) {
			// One token: gate and up are consecutive columns of one GEMM's output row.
			gu := p.alloc(T, 2*F)
			x = p.normGemm(in, gu, f.gateUp.all, nil)
			parts := f.gateUp.outputs(p, gu)
			g, up = parts[0], parts[1]
		} else if f.UpB == nil && f.gateUpW4.usable(p, f.QGate, f.QUp) {
			// The same with tiled 4-bit projections, on the norm.
			gu := p.alloc(T, 2*F)
			var hn backend.Buffer
			x, hn = p.settle(in)
			f.gateUpW4.forward(p, gu, hn)
			parts := f.gateUpW4.outputs(p, gu)
			g, up = parts[0], parts[1]
		} else if p.singleStep() && f.gateUpQ.intact(f.QGate, f.QUp) {
			// The same with FP8 projections, on the norm quantised once.
			gu := p.alloc(T, 2*F)
			var xin *fp8Input
			x, xin = p.normQuant(in, f.gateUpQ.all.Group)
			f.gateUpQ.all.forwardFP8(p, gu, xin)
			parts := f.gateUpQ.rows.outputs(p, gu)
			g, up = parts[0], parts[1]
		} else if gr := fp8Group(f.QGate, f.QUp); gr > 0 {
			// FP8 projections: the norm quantised once for both
			var xin *fp8Input
			x, xin = p.normQuant(in, gr)
			g, up = p.alloc(T, F), p.alloc(T, F)
			f.QGate.forwardFP8(p, g, xin)
			f.QUp.forwardFP8(p, up, xin)
		} else {
			var hn backend.Buffer
			x, hn = p.settle(in)
			g, up = p.alloc(T, F), p.alloc(T, F)
			p.linear(g, hn, f.Gate, f.QGate, nil)
			p.linear(up, hn, f.Up, f.QUp, f.UpB)
		}
		p.tap(name("ffn_gate"), g)
		p.tap(name("ffn_up"), up)
		if gr := fp8Group(f.QDown); gr > 0 && p.fuseQuant() {
			// The activation quantised for the FP8 down projection in one op; the activation
			// tap, when requested, by the SwiGLU it equals.
			xin := &fp8Input{q: p.allocT(tensor.F8E4M3, T, F), s: p.allocT(tensor.F32, T, F/gr), group: gr}
			p.do(be.SwiGLUQuantFP8(xin.q, xin.s, g, up, nil, gr))
			if p.m.want[name("ffn_act")] {
				p.do(be.SwiGLU(act, g, up))
				p.tap(name("ffn_act"), act)
			}
			out = p.alloc(T, c.Hidden)
			f.QDown.forwardFP8(p, out, xin)
			p.tap(name("ffn_out"), out)
			return out, x
		}
		if p.fused() && f.QDown == nil {
			// The activation and the down projection in one op; the activation tap, when
			// requested, by the SwiGLU it equals.
			out = p.alloc(T, c.Hidden)
			p.do(be.SwiGLUGemm(out, g, up, f.Down, f.DownB))
			if p.m.want[name("ffn_act")] {
				p.do(be.SwiGLU(act, g, up))
				p.tap(name("ffn_act"), act)
			}
			p.tap(name("ffn_out"), out)
			return out, x
		}
		p.do(be.SwiGLU(act, g, up))
	case c.Activation == "gelu_pytorch_tanh" && f.Gate != nil:
		// GeGLU (Gemma 3): gate and up as SwiGLU's, then gelu_tanh(gate) * up in one op
		var g, up backend.Buffer
		if p.singleStep() && f.gateUp != nil && f.gateUp.intact(f.Gate, f.Up) {
			gu := p.alloc(T, 2*F)
			x = p.normGemm(in, gu, f.gateUp.all, nil)
			halves := f.gateUp.outputs(p, gu)
			g, up = halves[0], halves[1]
		} else {
			var hn backend.Buffer
			x, hn = p.settle(in)
			g, up = p.alloc(T, F), p.alloc(T, F)
			p.do(be.Gemm(g, hn, f.Gate, nil))
			p.do(be.Gemm(up, hn, f.Up, nil))
		}
		p.tap(name("ffn_gate"), g)
		p.tap(name("ffn_up"), up)
		p.do(be.GeGLU(act, g, up, true))
	case c.Activation == "gelu_new" && f.Gate == nil:
		var hn backend.Buffer
		x, hn = p.settle(in)
		if p.fused() {
			out = p.alloc(T, c.Hidden)
			p.do(be.GPTFFN(out, hn, f.Up, f.UpB, f.Down, f.DownB, true))
			f.tapGELU(p, hn, act, name)
			p.tap(name("ffn_out"), out)
			return out, x
		}
		up := p.alloc(T, F)
		p.do(be.Gemm(up, hn, f.Up, f.UpB))
		p.tap(name("ffn_up"), up)
		p.do(be.GELUTanh(act, up))
	default:
		p.do(fmt.Errorf("model: activation %q with gate projection %v is not implemented (silu or gelu_pytorch_tanh with one, gelu_new without)", c.Activation, f.Gate != nil))
	}
	p.tap(name("ffn_act"), act)
	out = p.alloc(T, c.Hidden)
	p.linear(out, act, f.Down, f.QDown, f.DownB)
	p.tap(name("ffn_out"), out)
	return out, x
}

// stackExperts copies a layer's experts, loaded one tensor each (weights.go's mixtralMoE), on
// the device into the layouts moe_ffn takes: gate_up [E, 2F, H] (each expert's gate rows, then
// its up rows) and down [E, H, F]; the per-expert buffers are freed (fuse). It returns the
// router and views of the two.
func stackExperts(be backend.Backend, mem backend.Memory, w map[string]backend.Buffer, c *Config, name func(string) string) ([3]backend.Buffer, error) {
	var gateUp, down []string
	for e := 0; e < c.Experts; e++ {
		ex := func(s string) string { return name(fmt.Sprintf("experts.%d.%s", e, s)) }
		gateUp = append(gateUp, ex("gate"), ex("up"))
		down = append(down, ex("down"))
	}
	var out [3]backend.Buffer
	out[0] = w[name("router")]
	for k, set := range []struct {
		into  string
		names []string
		shape []int
	}{
		{name("experts_gate_up"), gateUp, []int{c.Experts, 2 * c.Intermediate, c.Hidden}},
		{name("experts_down"), down, []int{c.Experts, c.Hidden, c.Intermediate}},
	} {
		if _, err := fuse(be, mem, w, set.into, set.names...); err != nil {
			return out, err
		}
		v, err := mem.View(w[set.into], set.shape...)
		if err != nil {
			return out, err
		}
		out[k+1] = v
	}
	return out, nil
}
