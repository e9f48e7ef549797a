package model

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// MaxBatch is the largest batch a Batch decodes; MaxInvariantBatch the largest it decodes with a
// backend's batch-invariant kernels on, their range (ts_set_batch_invariant: the gemv takes up
// to 16 rows; more go to cuBLAS, which chooses its algorithm by the row count).
const (
	MaxBatch          = 64
	MaxInvariantBatch = 16
)

// Batch is n sequences of different lengths decoded together (ragged): each is prefilled on its
// own into its slot of the batch's KV caches, then every Decode runs one token of every
// sequence in one pass of n rows, each row at its own position against its own cache slot.
//
// A batch has its own caches (one allocation per layer, [2, n, cache length, nKV, D]), logits
// and step inputs; it shares the model's weights and activation pool, so it must not outlive
// the model. Taps are requested on the model (RequestTaps) and come back from Model.Taps under
// s<i>.prefill.<tap> and s<i>.decode.<step>.<tap>, sequence i's own step count.
type Batch struct {
	m      *Model
	n      int
	maxLen int        // each sequence's cache length
	caches []*kvCache // by layer
	pos    []int      // tokens in each sequence's cache
	steps  []int      // decode steps since each sequence's prefill
	// stepIn holds a decode step's inputs, i32 [4, n]: the tokens, the cache lengths after them,
	// their positions and their rows in the caches (slot x maxLen + position). One host write
	// per step; the pass reads them on the device, so a captured step replays with the next.
	stepIn    backend.Buffer
	rowsIn    backend.Buffer // i32 [maxLen]: a prefill's cache rows, slot x maxLen + t
	positions backend.Buffer // i32 [maxLen]: 0..maxLen-1, a prefill's positions
	promptIn  backend.Buffer // i32 [maxLen]: a prefill's tokens
	logits    backend.Buffer // f32 [n, V]: each sequence's logits after its last pass
	graph     batchGraph
}

// NewBatch allocates a batch of n sequences (1..MaxBatch) on the model's backend, each with a
// cache of cacheLen tokens (0: the model's MaxLen). The decode kernels choose their work split
// by the cache length, so a long one is how a check reaches the splits of long contexts.
func (m *Model) NewBatch(n, cacheLen int) (*Batch, error) {
	if n < 1 || n > MaxBatch {
		return nil, fmt.Errorf("model: batch of %d sequences: must be in 1..%d", n, MaxBatch)
	}
	if cacheLen == 0 {
		cacheLen = m.MaxLen
	}
	if limit, why := m.Cfg.PositionLimit(); cacheLen < 1 || cacheLen > limit {
		return nil, fmt.Errorf("model: batch cache length %d: must be in 1..%d (%s)", cacheLen, limit, why)
	}
	c := &m.Cfg
	b := &Batch{m: m, n: n, maxLen: cacheLen, pos: make([]int, n), steps: make([]int, n)}
	for range m.Layers {
		cache, err := newCache(m.be, m.mem, c.StorageDType(), n, cacheLen, c.KVHeads, c.HeadDim)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.caches = append(b.caches, cache)
	}
	pos := make([]int32, cacheLen)
	for i := range pos {
		pos[i] = int32(i)
	}
	var err error
	if b.stepIn, err = m.be.Alloc(tensor.I32, 4*n); err == nil {
		if b.rowsIn, err = m.be.Alloc(tensor.I32, cacheLen); err == nil {
			b.promptIn, err = m.be.Alloc(tensor.I32, cacheLen)
		}
		if err == nil {
			if b.positions, err = m.be.Upload(tensor.FromI32([]int{cacheLen}, pos)); err == nil {
				b.logits, err = m.be.Alloc(tensor.F32, n, c.Vocab)
			}
		}
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close frees the batch's caches and buffers (the model's weights stay).
func (b *Batch) Close() {
	b.dropGraph()
	for _, c := range b.caches {
		c.free()
	}
	b.caches = nil
	for _, buf := range []backend.Buffer{b.stepIn, b.rowsIn, b.promptIn, b.positions, b.logits} {
		if buf != nil {
			buf.Free()
		}
	}
	b.stepIn, b.rowsIn, b.promptIn, b.positions, b.logits = nil, nil, nil, nil, nil
}

// Len is the number of sequences.
func (b *Batch) Len() int { return b.n }

// Pos is the number of tokens in sequence i's cache.
func (b *Batch) Pos(i int) int { return b.pos[i] }

// Prefill runs sequence i's prompt from an empty slot (its earlier tokens are forgotten) and
// leaves its last position's logits in row i of Logits.
func (b *Batch) Prefill(i int, ids []int32) error {
	m := b.m
	if i < 0 || i >= b.n {
		return fmt.Errorf("model: prefill of sequence %d in a batch of %d", i, b.n)
	}
	if err := m.admitIn(b.maxLen, 0, ids); err != nil {
		return fmt.Errorf("sequence %d: %w", i, err)
	}
	T := len(ids)
	rows := make([]int32, T)
	for t := range rows {
		rows[t] = int32(i*b.maxLen + t)
	}
	if err := b.write(b.promptIn, ids); err != nil {
		return err
	}
	if err := b.write(b.rowsIn, rows); err != nil {
		return err
	}
	b.pos[i], b.steps[i] = 0, 0
	err := func() (err error) {
		defer m.endPass()
		defer recoverPass(&err)
		p := &pass{m: m, be: m.be, mem: m.mem, prefix: fmt.Sprintf("s%d.prefill.", i), T: T, batch: b}
		p.ids = p.rows(b.promptIn, 0, T)
		p.posBuf = p.rows(b.positions, 0, T)
		p.cacheRows = p.rows(b.rowsIn, 0, T)
		p.out = p.rows(b.logits, i, 1)
		p.run()
		return nil
	}()
	if err != nil {
		return err
	}
	b.pos[i] = T
	return nil
}

// write copies ids into the first rows of the i32 buffer dst.
func (b *Batch) write(dst backend.Buffer, ids []int32) error {
	v, err := b.m.mem.Rows(dst, 0, len(ids))
	if err != nil {
		return err
	}
	defer v.Free()
	return b.m.mem.Write(v, tensor.FromI32([]int{len(ids)}, ids))
}

// Decode runs one token of every sequence (tokens[i] for sequence i, at its next position) in
// one pass and leaves each sequence's logits in its row of Logits. Every sequence must have
// been prefilled. With a backend that has graphs the step is captured once and replayed, as
// the model's own decode steps are (graph.go), unless taps are requested.
func (b *Batch) Decode(tokens []int32) error {
	m := b.m
	if len(tokens) != b.n {
		return fmt.Errorf("model: %d tokens for a batch of %d sequences", len(tokens), b.n)
	}
	in := make([]int32, 4*b.n)
	for i, tok := range tokens {
		if b.pos[i] == 0 {
			return fmt.Errorf("model: decode of sequence %d before its prefill", i)
		}
		if err := m.admitIn(b.maxLen, b.pos[i], []int32{tok}); err != nil {
			return fmt.Errorf("sequence %d: %w", i, err)
		}
		pos := int32(b.pos[i])
		in[i], in[b.n+i], in[2*b.n+i], in[3*b.n+i] = tok, pos+1, pos, int32(i*b.maxLen)+pos
	}
	if b.n > MaxInvariantBatch {
		if mode, err := invariantMode(m.be); err != nil {
			return err
		} else if mode {
			return fmt.Errorf("model: batch of %d sequences with the batch-invariant kernels on: they cover batches of 1..%d (the gemv's rows)", b.n, MaxInvariantBatch)
		}
	}
	if err := m.mem.Write(b.stepIn, tensor.FromI32([]int{4 * b.n}, in)); err != nil {
		return err
	}
	if err := b.decodeStep(); err != nil {
		return err
	}
	for i := range b.pos {
		b.pos[i]++
		b.steps[i]++
	}
	return nil
}

// decodePass issues one batched decode step on be from stepIn.
func (b *Batch) decodePass(be backend.Backend, mem backend.Memory) (err error) {
	defer recoverPass(&err)
	m, n := b.m, b.n
	p := &pass{m: m, be: be, mem: mem, T: n, decode: true, batch: b, out: b.logits, allLogits: true}
	if len(m.want) > 0 {
		p.rowSpans = make([]rowSpan, n)
		for i := range p.rowSpans {
			p.rowSpans[i] = rowSpan{prefix: fmt.Sprintf("s%d.decode.%d.", i, b.steps[i]), start: i, n: 1}
		}
	}
	p.ids = p.rows(b.stepIn, 0, n)
	p.lens = p.rows(b.stepIn, n, n)
	p.posBuf = p.rows(b.stepIn, 2*n, n)
	p.cacheRows = p.rows(b.stepIn, 3*n, n)
	p.run()
	return nil
}

// Logits downloads every sequence's last logits, f32 [n, V].
func (b *Batch) Logits() (*tensor.Tensor, error) { return b.m.be.Download(b.logits) }

// LogitsBuffer is the device buffer of Logits; the next pass overwrites it.
func (b *Batch) LogitsBuffer() backend.Buffer { return b.logits }

// batchGraph is a batch's decode step captured as a graph (graph.go's captured), with what it
// was captured with.
type batchGraph struct {
	step    captured
	key     captureKey
	warm    bool
	replays int
}

// GraphReplays is the number of the batch's decode steps replayed from its graph.
func (b *Batch) GraphReplays() int { return b.graph.replays }

// decodeStep runs a step from stepIn: replayed from the batch's graph when the model's
// configuration, weights and the backend's batch-invariant mode are those of its capture;
// captured after a step ran op by op with them; else op by op (and always with taps).
func (b *Batch) decodeStep() error {
	m, bg := b.m, &b.graph
	eager := func() error {
		defer m.endPass()
		return b.decodePass(m.be, m.mem)
	}
	if m.graphs == nil || !m.graphs.enabled || len(m.want) > 0 || m.inject != nil || m.routes != nil {
		return eager()
	}
	mode, err := invariantMode(m.be)
	if err != nil {
		return err
	}
	if bg.key.stale(m, mode) {
		b.dropGraph()
		bg.warm = false
	}
	if !bg.warm {
		if err := eager(); err != nil {
			return err
		}
		bg.warm = true
		return nil
	}
	if bg.step.g == nil {
		if err := m.captureInto(&bg.step, func(be backend.Backend, mem backend.Memory) error { return b.decodePass(be, mem) }); err != nil {
			bg.warm = false
			return fmt.Errorf("model: capturing a batched decode step: %w", err)
		}
	}
	if err := bg.step.g.Launch(); err != nil {
		return err
	}
	bg.replays++
	return nil
}

// dropGraph frees the batch's graph and gives its buffers back to the model's pool.
func (b *Batch) dropGraph() {
	if b.graph.step.g == nil {
		return
	}
	b.m.release(&b.graph.step)
	b.m.endPass()
}

// invariantMode is the backend's batch-invariant mode (false for a backend without the switch).
func invariantMode(be backend.Backend) (bool, error) {
	bi, ok := be.(backend.BatchInvariance)
	if !ok {
		return false, nil
	}
	return bi.BatchInvariant()
}
