package model

import (
	"fmt"
	"math/rand/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// ServedOptions size a Served: a pool of Pages pages of BlockSize positions per layer (vLLM's
// [num_blocks, block_size, kv_heads, head_dim]), up to Seqs sequences of at most MaxLen tokens
// each, and steps of at most MaxTokens new tokens in all. Seed shuffles the free pages, so a
// sequence's pages are scattered over the pool as a long-running server's are.
type ServedOptions struct {
	BlockSize, Pages int
	Seqs, MaxLen     int
	MaxTokens        int
	Seed             uint64
}

// Served runs a model the way a continuous-batching server does: a paged KV cache shared by
// every sequence, and steps that each carry some sequences' prompt chunks and other sequences'
// single decode tokens in one pass (attention_prefill_paged over the block tables; a chunk after
// earlier ones is chunked prefill, one token is a decode inside the launch). Sequences may share
// the full pages of a common prefix (prefix caching). Taps come back from Model.Taps under
// s<i>.at<p>.<tap>: sequence i's chunk that starts at position p, one row per token.
type Served struct {
	m      *Model
	o      ServedOptions
	width  int        // block-table entries a sequence: ceil(MaxLen / BlockSize)
	pools  []*kvCache // by layer: [Pages, BlockSize, nKV, D] (kvCache with Pages slots of BlockSize)
	free   []int32    // free pages, popped from the end
	refs   []int      // sequences holding each page
	seqs   []servedSeq
	in     backend.Buffer // i32: one step's inputs, packed (servedStep)
	logits backend.Buffer // f32 [MaxTokens, V]: every new token's logits after the last step
	lastT  int
}

type servedSeq struct {
	pages []int32
	n     int // tokens in its cache
}

// Chunk is one sequence's new tokens in a step.
type Chunk struct {
	Seq    int
	Tokens []int32
}

// servedStep is what a served pass's attention reads besides the pass's own inputs: the pools,
// and the step's block table, query starts and lengths (views of Served.in).
type servedStep struct {
	s                      *Served
	table, qStarts, kvLens backend.Buffer
}

// NewServed allocates a paged pool for every layer and the step buffers.
func (m *Model) NewServed(o ServedOptions) (*Served, error) {
	c := &m.Cfg
	if o.BlockSize < 1 || o.BlockSize > 256 || o.BlockSize&(o.BlockSize-1) != 0 {
		return nil, fmt.Errorf("model: served block size %d: want a power of two in 1..256", o.BlockSize)
	}
	if limit, why := c.PositionLimit(); o.MaxLen < 1 || o.MaxLen > limit {
		return nil, fmt.Errorf("model: served max length %d: must be in 1..%d (%s)", o.MaxLen, limit, why)
	}
	if o.Seqs < 1 || o.Pages < 1 || o.MaxTokens < 1 {
		return nil, fmt.Errorf("model: served pool of %d pages for %d sequences and %d tokens a step: each must be positive", o.Pages, o.Seqs, o.MaxTokens)
	}
	s := &Served{m: m, o: o, width: (o.MaxLen + o.BlockSize - 1) / o.BlockSize, refs: make([]int, o.Pages), seqs: make([]servedSeq, o.Seqs)}
	for range m.Layers {
		pool, err := newCache(m.be, m.mem, c.StorageDType(), o.Pages, o.BlockSize, c.KVHeads, c.HeadDim)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.pools = append(s.pools, pool)
	}
	s.free = make([]int32, o.Pages)
	for i := range s.free {
		s.free[i] = int32(i)
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	r.Shuffle(len(s.free), func(i, j int) { s.free[i], s.free[j] = s.free[j], s.free[i] })
	var err error
	if s.in, err = m.be.Alloc(tensor.I32, s.inLen(o.MaxTokens, o.Seqs)); err == nil {
		s.logits, err = m.be.Alloc(tensor.F32, o.MaxTokens, c.Vocab)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// inLen is the i32 count of a step's packed inputs: ids, positions and slots of T tokens, then
// q_starts (B+1), kv_lens (B) and the block table (B x width) of B chunks.
func (s *Served) inLen(T, B int) int { return 3*T + 2*B + 1 + B*s.width }

// Close frees the pools and buffers (the model's weights stay).
func (s *Served) Close() {
	for _, c := range s.pools {
		c.free()
	}
	s.pools = nil
	for _, b := range []backend.Buffer{s.in, s.logits} {
		if b != nil {
			b.Free()
		}
	}
	s.in, s.logits = nil, nil
}

// Len is the number of tokens in sequence i's cache.
func (s *Served) Len(i int) int { return s.seqs[i].n }

// Pages is sequence i's block table (its pages in position order).
func (s *Served) Pages(i int) []int32 { return append([]int32(nil), s.seqs[i].pages...) }

// Release forgets sequence i: its pages go back to the pool once no sequence holds them.
func (s *Served) Release(i int) {
	for _, pg := range s.seqs[i].pages {
		if s.refs[pg]--; s.refs[pg] == 0 {
			s.free = append(s.free, pg)
		}
	}
	s.seqs[i] = servedSeq{}
}

// Share starts the empty sequence dst with the first n tokens of src's cache, by reference: n
// must be a whole number of pages (a partly filled page would be written by both), and dst's
// tokens must be src's (the caller's promise, as a server's prefix cache makes it by hashing
// the tokens of full pages).
func (s *Served) Share(dst, src, n int) error {
	if err := s.checkSeq(dst); err != nil {
		return err
	}
	if err := s.checkSeq(src); err != nil {
		return err
	}
	bs := s.o.BlockSize
	switch {
	case dst == src || s.seqs[dst].n != 0:
		return fmt.Errorf("model: served share into sequence %d: it must be another, empty sequence (it holds %d tokens)", dst, s.seqs[dst].n)
	case n < bs || n%bs != 0 || n > s.seqs[src].n:
		return fmt.Errorf("model: served share of %d tokens of sequence %d (%d cached): want a positive multiple of the block size %d, at most its length", n, src, s.seqs[src].n, bs)
	}
	pages := s.seqs[src].pages[:n/bs]
	for _, pg := range pages {
		s.refs[pg]++
	}
	s.seqs[dst] = servedSeq{pages: append([]int32(nil), pages...), n: n}
	return nil
}

func (s *Served) checkSeq(i int) error {
	if i < 0 || i >= len(s.seqs) {
		return fmt.Errorf("model: served sequence %d: want 0..%d", i, len(s.seqs)-1)
	}
	return nil
}

// Step runs one pass over the chunks' tokens (each chunk a different sequence, appended after
// its cached tokens) and leaves every new token's logits in Logits, in chunk order. Pages are
// taken from the pool as the chunks need them.
func (s *Served) Step(chunks []Chunk) error {
	m, c, bs := s.m, &s.m.Cfg, s.o.BlockSize
	B, T := len(chunks), 0
	if B == 0 || B > len(s.seqs) {
		return fmt.Errorf("model: served step of %d chunks: want 1..%d", B, len(s.seqs))
	}
	seen := map[int]bool{}
	for _, ch := range chunks {
		if err := s.checkSeq(ch.Seq); err != nil {
			return err
		}
		if seen[ch.Seq] {
			return fmt.Errorf("model: served step: sequence %d has two chunks", ch.Seq)
		}
		seen[ch.Seq] = true
		pos := s.seqs[ch.Seq].n
		if err := m.admitIn(s.o.MaxLen, pos, ch.Tokens); err != nil {
			return fmt.Errorf("sequence %d: %w", ch.Seq, err)
		}
		if r := c.RopeScaling; r != nil && r.Long != nil && len(ch.Tokens) > 1 && pos+len(ch.Tokens) > r.LongFrom {
			return fmt.Errorf("model: served sequence %d: a chunk of %d tokens reaching position %d past LongRoPE's original context %d: transformers switches every token of such a prefill to the long factors, which a paged step of several sequences cannot express; refused",
				ch.Seq, len(ch.Tokens), pos+len(ch.Tokens)-1, r.LongFrom)
		}
		T += len(ch.Tokens)
	}
	if T > s.o.MaxTokens {
		return fmt.Errorf("model: served step of %d tokens: at most %d (ServedOptions.MaxTokens)", T, s.o.MaxTokens)
	}
	need := 0
	for _, ch := range chunks {
		sq := &s.seqs[ch.Seq]
		need += (sq.n+len(ch.Tokens)+bs-1)/bs - len(sq.pages)
	}
	if need > len(s.free) {
		return fmt.Errorf("model: served step needs %d new pages, the pool has %d free of %d", need, len(s.free), s.o.Pages)
	}
	ids, positions, slots := make([]int32, 0, T), make([]int32, 0, T), make([]int32, 0, T)
	qStarts, kvLens := make([]int32, 0, B+1), make([]int32, 0, B)
	table := make([]int32, B*s.width)
	for i := range table {
		table[i] = -1
	}
	spans := make([]rowSpan, 0, B)
	for b, ch := range chunks {
		sq := &s.seqs[ch.Seq]
		for len(sq.pages)*bs < sq.n+len(ch.Tokens) {
			pg := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			s.refs[pg] = 1
			sq.pages = append(sq.pages, pg)
		}
		qStarts = append(qStarts, int32(len(ids)))
		spans = append(spans, rowSpan{prefix: fmt.Sprintf("s%d.at%d.", ch.Seq, sq.n), start: len(ids), n: len(ch.Tokens)})
		for t, tok := range ch.Tokens {
			p := sq.n + t
			ids = append(ids, tok)
			positions = append(positions, int32(p))
			slots = append(slots, sq.pages[p/bs]*int32(bs)+int32(p%bs))
		}
		kvLens = append(kvLens, int32(sq.n+len(ch.Tokens)))
		copy(table[b*s.width:], sq.pages)
	}
	qStarts = append(qStarts, int32(T))
	packed := append(append(append(append(append(ids, positions...), slots...), qStarts...), kvLens...), table...)
	in, err := m.mem.Rows(s.in, 0, len(packed))
	if err != nil {
		return err
	}
	err = m.mem.Write(in, tensor.FromI32([]int{len(packed)}, packed))
	in.Free()
	if err != nil {
		return err
	}
	if err := s.pass(T, B, spans); err != nil {
		return err
	}
	for _, ch := range chunks {
		s.seqs[ch.Seq].n += len(ch.Tokens)
	}
	s.lastT = T
	return nil
}

// pass issues a step's forward from the packed inputs.
func (s *Served) pass(T, B int, spans []rowSpan) (err error) {
	m := s.m
	defer m.endPass()
	defer recoverPass(&err)
	p := &pass{m: m, be: m.be, mem: m.mem, T: T, allLogits: true}
	at := func(start, n int) backend.Buffer { return p.rows(s.in, start, n) }
	p.ids, p.posBuf, p.cacheRows = at(0, T), at(T, T), at(2*T, T)
	p.served = &servedStep{s: s, qStarts: at(3*T, B+1), kvLens: at(3*T+B+1, B), table: p.view(at(3*T+2*B+1, B*s.width), B, s.width)}
	p.out = p.rows(s.logits, 0, T)
	if len(m.want) > 0 {
		p.rowSpans = spans
	}
	p.run()
	return nil
}

// Logits downloads the last step's logits, f32 [T, V]: one row per new token, in chunk order.
func (s *Served) Logits() (*tensor.Tensor, error) {
	if s.lastT == 0 {
		return nil, fmt.Errorf("model: served logits before any step")
	}
	v, err := s.m.mem.Rows(s.logits, 0, s.lastT)
	if err != nil {
		return nil, err
	}
	defer v.Free()
	return s.m.be.Download(v)
}
