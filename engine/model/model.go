package model

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Viewer is an optional backend capability: the same memory under another shape of equal
// size, without a copy. Backends without it pay a host round trip per reshape.
type Viewer interface {
	View(b backend.Buffer, shape ...int) (backend.Buffer, error)
}

// RowWriter is an optional backend capability: copy all of src into dst starting at flat
// element offset off (the KV cache append). Backends without it keep a host mirror of the
// cache and upload it before each decode attention.
type RowWriter interface {
	WriteRows(dst backend.Buffer, off int, src backend.Buffer) error
}

// Model is a loaded checkpoint on a backend, with its KV cache.
type Model struct {
	// Cfg is read at every pass, so a test may change it after Load (a broken variant).
	Cfg    Config
	be     backend.Backend
	w      map[string]backend.Buffer
	Layers []*Layer
	MaxLen int

	pos  int             // tokens in the cache
	step int             // decode steps run since the last prefill
	want map[string]bool // requested taps (bare names: "embed", "layers.0.q", "logits")
	taps map[string]*tensor.Tensor
	tmp  []backend.Buffer // this pass's activations, freed when it ends
}

// Load reads dir/config.json and the safetensors checkpoint in dir and uploads the weights.
// maxLen is the KV cache length (prompt plus every decoded token).
func Load(be backend.Backend, dir string, maxLen int) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if maxLen < 1 || maxLen > cfg.MaxPositions {
		return nil, fmt.Errorf("model: cache length %d: must be in 1..%d (max_position_embeddings)", maxLen, cfg.MaxPositions)
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
	m := &Model{Cfg: *cfg, be: be, w: w, MaxLen: maxLen}
	if cfg.TiedHead {
		m.w["head"] = m.w["embed"]
	} else if m.w["head"] == nil {
		m.Close()
		return nil, fmt.Errorf("model: checkpoint has no tensor lm_head.weight and tie_word_embeddings is false")
	}
	for l := 0; l < cfg.Layers; l++ {
		g := func(s string) backend.Buffer { return m.w[fmt.Sprintf("layers.%d.%s", l, s)] }
		m.Layers = append(m.Layers, &Layer{
			Index:    l,
			AttnNorm: Norm{W: g("attn_norm"), B: g("attn_norm_b")},
			FFNNorm:  Norm{W: g("ffn_norm"), B: g("ffn_norm_b")},
			Attn: &Attention{Wq: g("wq"), Bq: g("bq"), Wk: g("wk"), Bk: g("bk"), Wv: g("wv"), Bv: g("bv"),
				Wo: g("wo"), Bo: g("bo")},
			MLP: &MLP{Gate: g("wgate"), Up: g("wup"), UpB: g("bup"), Down: g("wdown"), DownB: g("bdown")},
		})
	}
	if err := m.Reset(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close frees the weights and the cache.
func (m *Model) Close() {
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
	m.freeTmp()
}

// Reset empties the KV cache.
func (m *Model) Reset() error {
	for _, l := range m.Layers {
		l.Attn.cache.free()
		c, err := newCache(m.be, m.MaxLen, m.Cfg.KVHeads, m.Cfg.HeadDim)
		if err != nil {
			return err
		}
		l.Attn.cache = c
	}
	m.pos, m.step = 0, 0
	return nil
}

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

// Prefill runs the prompt from an empty cache and returns the logits [T, V] (f32).
func (m *Model) Prefill(ids []int32) (*tensor.Tensor, error) {
	if err := m.Reset(); err != nil {
		return nil, err
	}
	return m.forward(ids, "prefill.")
}

// Decode runs one token at the next position and returns its logits [1, V] (f32).
func (m *Model) Decode(token int32) (*tensor.Tensor, error) {
	if m.pos == 0 {
		return nil, fmt.Errorf("model: decode before prefill")
	}
	logits, err := m.forward([]int32{token}, fmt.Sprintf("decode.%d.", m.step))
	if err == nil {
		m.step++
	}
	return logits, err
}

// pass is the state of one forward: its tokens, positions and tap prefix.
type pass struct {
	m      *Model
	prefix string
	T      int
	pos0   int
	posBuf backend.Buffer
}

func (m *Model) forward(ids []int32, prefix string) (logits *tensor.Tensor, err error) {
	c := &m.Cfg
	T := len(ids)
	if T == 0 {
		return nil, fmt.Errorf("model: no tokens")
	}
	if m.pos+T > m.MaxLen {
		return nil, fmt.Errorf("model: %d tokens after %d exceed the cache length %d", T, m.pos, m.MaxLen)
	}
	if c.SlidingWindow > 0 && m.pos+T > c.SlidingWindow {
		return nil, fmt.Errorf("model: sequence of %d tokens exceeds sliding_window = %d: windowed attention is not implemented", m.pos+T, c.SlidingWindow)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= c.Vocab {
			return nil, fmt.Errorf("model: token id %d outside the vocabulary 0..%d", id, c.Vocab-1)
		}
	}
	defer m.freeTmp()
	defer recoverPass(&err)
	p := &pass{m: m, prefix: prefix, T: T, pos0: m.pos}
	positions := make([]int32, T)
	for k := range positions {
		positions[k] = int32(m.pos + k)
	}
	if p.posBuf, err = m.upload(tensor.FromI32([]int{T}, positions)); err != nil {
		return nil, err
	}
	idBuf, err := m.upload(tensor.FromI32([]int{T}, ids))
	if err != nil {
		return nil, err
	}
	x := p.alloc(T, c.Hidden)
	p.do(m.be.Embedding(x, idBuf, m.w["embed"]))
	if pe := m.w["pos_embed"]; pe != nil {
		x2 := p.alloc(T, c.Hidden)
		p.do(m.be.PosEmbedding(x2, x, pe, p.posBuf))
		x = x2
	}
	p.tap("embed", x)
	for _, l := range m.Layers {
		x = l.Forward(p, x)
	}
	fn := p.alloc(T, c.Hidden)
	Norm{W: m.w["final_norm"], B: m.w["final_norm_b"]}.Forward(p, fn, x)
	p.tap("final_norm", fn)
	out, err := m.alloc(tensor.F32, T, c.Vocab)
	if err != nil {
		return nil, err
	}
	p.do(m.be.Gemm(out, fn, m.w["head"], nil))
	if perr := p.err(); perr != nil {
		return nil, perr
	}
	logits, err = m.be.Download(out)
	if err != nil {
		return nil, err
	}
	if m.want["logits"] {
		m.store(prefix+"logits", logits)
	}
	m.pos += T
	return logits, nil
}

// Layer is one transformer block: pre-norm attention and pre-norm MLP with residuals.
type Layer struct {
	Index             int
	AttnNorm, FFNNorm Norm
	Attn              *Attention
	MLP               *MLP
}

// Forward returns the residual stream after the layer.
func (l *Layer) Forward(p *pass, x backend.Buffer) backend.Buffer {
	c, be, name := &p.m.Cfg, p.m.be, func(s string) string { return fmt.Sprintf("layers.%d.%s", l.Index, s) }
	hn := p.alloc(p.T, c.Hidden)
	l.AttnNorm.Forward(p, hn, x)
	p.tap(name("attn_norm"), hn)
	a := l.Attn.Forward(p, hn, name)
	r := p.alloc(p.T, c.Hidden)
	p.do(be.ResidualAdd(r, x, a))
	p.tap(name("resid_attn"), r)
	fn := p.alloc(p.T, c.Hidden)
	l.FFNNorm.Forward(p, fn, r)
	p.tap(name("ffn_norm"), fn)
	f := l.MLP.Forward(p, fn, name)
	out := p.alloc(p.T, c.Hidden)
	p.do(be.ResidualAdd(out, r, f))
	p.tap(name("resid_ffn"), out)
	return out
}

// Norm is RMSNorm (no bias) or LayerNorm (with bias).
type Norm struct{ W, B backend.Buffer }

// Forward normalises x into out.
func (n Norm) Forward(p *pass, out, x backend.Buffer) {
	if n.B != nil {
		p.do(p.m.be.LayerNorm(out, x, n.W, n.B, p.m.Cfg.NormEps))
	} else {
		p.do(p.m.be.RMSNorm(out, x, n.W, p.m.Cfg.NormEps))
	}
}

// Attention is the self-attention block; biases are nil where the family has none.
type Attention struct {
	Wq, Bq, Wk, Bk, Wv, Bv, Wo, Bo backend.Buffer
	cache                          *kvCache
}

// Forward returns attn_out [T, H] for the normalised input hn [T, H], appending this pass's
// keys and values to the cache.
func (a *Attention) Forward(p *pass, hn backend.Buffer, name func(string) string) backend.Buffer {
	c, be, T := &p.m.Cfg, p.m.be, p.T
	nH, nKV, D := c.Heads, c.KVHeads, c.HeadDim
	qb, kb, vb := p.alloc(T, nH*D), p.alloc(T, nKV*D), p.alloc(T, nKV*D)
	p.do(be.Gemm(qb, hn, a.Wq, a.Bq))
	p.do(be.Gemm(kb, hn, a.Wk, a.Bk))
	p.do(be.Gemm(vb, hn, a.Wv, a.Bv))
	q, k, v := p.view(qb, T, nH, D), p.view(kb, T, nKV, D), p.view(vb, T, nKV, D)
	p.tap(name("q"), q)
	p.tap(name("k"), k)
	p.tap(name("v"), v)
	if c.RopeTheta != 0 {
		rc := backend.RoPEConfig{HeadDim: D, RopeDim: D, FreqBase: c.RopeTheta}
		qr, kr := p.alloc(T, nH, D), p.alloc(T, nKV, D)
		p.do(be.RoPE(qr, q, p.posBuf, rc))
		p.do(be.RoPE(kr, k, p.posBuf, rc))
		q, k = qr, kr
		p.tap(name("q_rope"), q)
		p.tap(name("k_rope"), k)
	}
	if p.err() == nil {
		p.do(a.cache.write(p.m, p.pos0, k, v))
	}
	ac := backend.AttentionConfig{NumHeads: nH, NumKVHeads: nKV, HeadDim: D, Causal: true, Scale: float32(1 / math.Sqrt(float64(D)))}
	var out backend.Buffer
	if p.pos0 == 0 {
		out = p.alloc(1, T, nH, D)
		p.do(be.AttentionPrefill(out, p.view(q, 1, T, nH, D), p.view(k, 1, T, nKV, D), p.view(v, 1, T, nKV, D), ac))
	} else {
		if T != 1 {
			p.fail(fmt.Errorf("model: %d tokens after a non-empty cache: chunked prefill is not implemented", T))
			return hn
		}
		lens, err := p.m.upload(tensor.FromI32([]int{1}, []int32{int32(p.pos0 + 1)}))
		p.do(err)
		kc, vc, err := a.cache.device(p.m)
		p.do(err)
		out = p.alloc(1, nH, D)
		if p.err() == nil {
			p.do(be.AttentionDecode(out, p.view(q, 1, nH, D), kc, vc, lens, ac))
		}
	}
	attn := p.view(out, T, nH*D)
	p.tap(name("attn"), attn)
	o := p.alloc(T, c.Hidden)
	p.do(be.Gemm(o, attn, a.Wo, a.Bo))
	p.tap(name("attn_out"), o)
	return o
}

// MLP is the feed-forward block: SwiGLU when Gate is set, else GELU (tanh) on Up.
type MLP struct{ Gate, Up, UpB, Down, DownB backend.Buffer }

// Forward returns ffn_out [T, H].
func (f *MLP) Forward(p *pass, x backend.Buffer, name func(string) string) backend.Buffer {
	c, be, T := &p.m.Cfg, p.m.be, p.T
	up, act := p.alloc(T, c.Intermediate), p.alloc(T, c.Intermediate)
	if f.Gate != nil {
		g := p.alloc(T, c.Intermediate)
		p.do(be.Gemm(g, x, f.Gate, nil))
		p.tap(name("ffn_gate"), g)
		p.do(be.Gemm(up, x, f.Up, f.UpB))
		p.tap(name("ffn_up"), up)
		p.do(be.SwiGLU(act, g, up))
	} else {
		p.do(be.Gemm(up, x, f.Up, f.UpB))
		p.tap(name("ffn_up"), up)
		p.do(be.GELUTanh(act, up))
	}
	p.tap(name("ffn_act"), act)
	out := p.alloc(T, c.Hidden)
	p.do(be.Gemm(out, act, f.Down, f.DownB))
	p.tap(name("ffn_out"), out)
	return out
}
