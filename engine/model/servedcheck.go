package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// ServedPlan is a continuous-batching schedule of a batch set's sequences over a paged cache:
// which chunk of which sequence runs in which step, and which sequences start from another's
// cached prefix pages.
type ServedPlan struct {
	BlockSize int
	Steps     [][]Chunk
	// Shares[i] = {src, n}: sequence i starts with the first n tokens of src's cache (n > 0),
	// taken when i arrives.
	Shares  map[int][2]int
	arrival map[int]int // sequence -> the step before which its share is taken
	streams [][]int32
}

// servedStream is a batch sequence's whole token stream: its prompt, then the tokens its
// decode steps feed (position P+j holds Tokens[j]).
func servedStream(s BatchSequence, steps int) []int32 {
	return append(append([]int32(nil), s.Prompt...), s.Tokens[:steps]...)
}

// PlanServed schedules the sequences from seed: each arrives at a step of its own, its prompt
// split into one to three chunks (chunked prefill), then one decode token a step, every
// arrived sequence's next chunk in every step (prefills and decodes of different sequences
// together). A sequence whose prompt begins with an earlier sequence's tokens starts from that
// sequence's cached pages (the whole pages of the common prefix, short of its last prompt
// token), and arrives after they are written.
func PlanServed(seqs []BatchSequence, decodeSteps, blockSize int, seed uint64) *ServedPlan {
	r := rand.New(rand.NewPCG(seed, 0x5e7ed))
	n := len(seqs)
	pl := &ServedPlan{BlockSize: blockSize, Shares: map[int][2]int{}, arrival: map[int]int{}}
	for _, s := range seqs {
		pl.streams = append(pl.streams, servedStream(s, decodeSteps))
	}
	// Sharing sources first: the longest common prefix with any sequence before it in the
	// order of arrival, a whole number of pages below the sequence's last prompt token.
	shared := make([]int, n)
	src := make([]int, n)
	order := r.Perm(n)
	for oi, i := range order {
		src[i] = -1
		for _, j := range order[:oi] {
			l := commonPrefix(seqs[i].Prompt, seqs[j].Prompt)
			l = min(l, len(seqs[i].Prompt)-1) / blockSize * blockSize
			if l > shared[i] {
				shared[i], src[i] = l, j
			}
		}
	}
	// Each sequence's chunks (after its shared prefix), then the step it may start: after its
	// source's chunks that write the shared pages.
	chunks := make([][]Chunk, n)
	for i := range seqs {
		P, at := len(seqs[i].Prompt), shared[i]
		cuts := []int{at}
		if k := r.IntN(3); k > 0 && P-at > 1 {
			for _, c := range r.Perm(P - at - 1)[:min(k, P-at-1)] {
				cuts = append(cuts, at+1+c)
			}
		}
		cuts = append(cuts, P)
		sort.Ints(cuts)
		for c := 0; c+1 < len(cuts); c++ {
			if cuts[c] < cuts[c+1] {
				chunks[i] = append(chunks[i], Chunk{Seq: i, Tokens: pl.streams[i][cuts[c]:cuts[c+1]]})
			}
		}
		for p := P; p < len(pl.streams[i]); p++ {
			chunks[i] = append(chunks[i], Chunk{Seq: i, Tokens: pl.streams[i][p : p+1]})
		}
	}
	start := make([]int, n)
	next := 0
	for _, i := range order {
		start[i] = next + r.IntN(2)
		if j := src[i]; j >= 0 {
			// j's chunks up to its covering the shared pages, all before i starts
			done, pos := start[j], 0
			for _, ch := range chunks[j] {
				if pos >= shared[i] {
					break
				}
				pos += len(ch.Tokens)
				done++
			}
			start[i] = max(start[i], done)
			pl.Shares[i] = [2]int{j, shared[i]}
		}
		next = start[i]
	}
	var steps [][]Chunk
	for i := range seqs {
		for k, ch := range chunks[i] {
			for len(steps) <= start[i]+k {
				steps = append(steps, nil)
			}
			steps[start[i]+k] = append(steps[start[i]+k], ch)
		}
	}
	// Steps nobody runs in (a gap before a late arrival) are dropped.
	renum := make([]int, len(steps))
	for k, st := range steps {
		renum[k] = len(pl.Steps)
		if len(st) > 0 {
			pl.Steps = append(pl.Steps, st)
		}
	}
	for i := range seqs {
		pl.arrival[i] = renum[start[i]]
	}
	return pl
}

// ServedSeed is the seed of a batch set's served plan at a page size: the set's own seed
// mixed with the page size, so every set and page size gets a schedule of its own, the same in
// the suite and in touchstone check.
func ServedSeed(set *golden.Set, blockSize int) uint64 {
	return set.Manifest.Seed*31 + uint64(blockSize)
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// String is the plan in a line: its steps' chunk sizes by sequence and its shares.
func (pl *ServedPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d steps, pages of %d", len(pl.Steps), pl.BlockSize)
	mixed := 0
	for _, st := range pl.Steps {
		pre, dec := false, false
		for _, ch := range st {
			pre, dec = pre || len(ch.Tokens) > 1, dec || len(ch.Tokens) == 1
		}
		if pre && dec {
			mixed++
		}
	}
	fmt.Fprintf(&b, ", %d with prefill chunks and decode tokens together", mixed)
	if len(pl.Shares) > 0 {
		var sh []string
		for i, s := range pl.Shares {
			sh = append(sh, fmt.Sprintf("s%d from s%d (%d tokens)", i, s[0], s[1]))
		}
		sort.Strings(sh)
		fmt.Fprintf(&b, "; shared prefixes: %s", strings.Join(sh, ", "))
	}
	return b.String()
}

// ServedRun is the outcome of a plan: every sequence's rows by position, per tap.
type ServedRun struct {
	plan *ServedPlan
	taps map[string]*tensor.Tensor // s<i>.at<p>.<tap>
	// at[i] lists sequence i's chunks' first positions and lengths, in order
	at [][][2]int
}

// RunServed runs plan on m with the named taps (logits is always among them).
func RunServed(m *Model, pl *ServedPlan, taps []string) (*ServedRun, error) {
	maxLen, tokens, pages := 0, 0, 0
	for _, s := range pl.streams {
		maxLen = max(maxLen, len(s))
		tokens += len(s)
		pages += (len(s) + pl.BlockSize - 1) / pl.BlockSize
	}
	s, err := m.NewServed(ServedOptions{BlockSize: pl.BlockSize, Pages: pages + 3, Seqs: len(pl.streams), MaxLen: maxLen, MaxTokens: tokens, Seed: uint64(len(pl.Steps))})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	want := taps
	if !slices.Contains(taps, "logits") { // the greedy choices read it
		want = append([]string{"logits"}, taps...)
	}
	m.RequestTaps(want)
	defer m.RequestTaps(nil)
	run := &ServedRun{plan: pl, at: make([][][2]int, len(pl.streams))}
	for k, st := range pl.Steps {
		for i, a := range pl.arrival {
			if sh, ok := pl.Shares[i]; ok && a == k {
				if err := s.Share(i, sh[0], sh[1]); err != nil {
					return nil, fmt.Errorf("step %d: %w", k, err)
				}
			}
		}
		for _, ch := range st {
			run.at[ch.Seq] = append(run.at[ch.Seq], [2]int{s.Len(ch.Seq), len(ch.Tokens)})
		}
		if err := s.Step(st); err != nil {
			return nil, fmt.Errorf("served step %d: %w", k, err)
		}
	}
	run.taps = m.Taps()
	return run, nil
}

// row is sequence i's row of tap at position pos: from the chunk that computed it, or for a
// shared position from the sequence whose pages it shares.
func (r *ServedRun) row(i, pos int, tap string) ([]float32, []int, error) {
	if sh, ok := r.plan.Shares[i]; ok && pos < sh[1] {
		return r.row(sh[0], pos, tap)
	}
	for _, c := range r.at[i] {
		if pos >= c[0] && pos < c[0]+c[1] {
			t := r.taps[fmt.Sprintf("s%d.at%d.%s", i, c[0], tap)]
			if t == nil {
				return nil, nil, fmt.Errorf("served run: no tap %s for sequence %d's chunk at %d", tap, i, c[0])
			}
			n := tensor.NumElements(t.Shape) / t.Shape[0]
			off := pos - c[0]
			return t.F32[off*n : (off+1)*n], t.Shape[1:], nil
		}
	}
	return nil, nil, fmt.Errorf("served run: sequence %d never ran position %d", i, pos)
}

// rows assembles sequence i's positions [from, to) of tap as one tensor.
func (r *ServedRun) rows(i, from, to int, tap string) (*tensor.Tensor, error) {
	var f []float32
	var shape []int
	for pos := from; pos < to; pos++ {
		row, sh, err := r.row(i, pos, tap)
		if err != nil {
			return nil, err
		}
		f, shape = append(f, row...), sh
	}
	return tensor.FromF32(append([]int{to - from}, shape...), f), nil
}

// goldenRows maps a batch set's tap name (s<i>.prefill.<tap>, s<i>.decode.<j>.<tap>) to the
// sequence of seqs, the positions and the bare tap it covers.
func goldenRows(name string, seqs []BatchSequence) (seq, from, to int, tap string, ok bool) {
	seq, rest := golden.SplitSequence(name)
	if seq < 0 || seq >= len(seqs) {
		return 0, 0, 0, "", false
	}
	prompt := len(seqs[seq].Prompt)
	if t, found := strings.CutPrefix(rest, "prefill."); found {
		return seq, 0, prompt, t, true
	}
	if t, found := strings.CutPrefix(rest, "decode."); found {
		if k := strings.IndexByte(t, '.'); k > 0 {
			if j, err := strconv.Atoi(t[:k]); err == nil && j >= 0 {
				return seq, prompt + j, prompt + j + 1, t[k+1:], true
			}
		}
	}
	return 0, 0, 0, "", false
}

// CompareServedTaps runs a batch set's sequences through plan on a paged cache and compares
// every tap of every sequence with its reference (each position's row from whichever step
// computed it) under the calibrated limits of the batch set's tap, and each greedy choice.
func CompareServedTaps(m *Model, set *golden.Set, p *BatchParams, seqs []BatchSequence, pl *ServedPlan, tols *compare.Tolerances) ([]compare.TapResult, []BatchTokenStep, error) {
	bare, expected := batchTaps(set)
	run, err := RunServed(m, pl, bare)
	if err != nil {
		return nil, nil, err
	}
	rows, err := compareBatchSetTaps(set, tols, expected, func(name string) (*tensor.Tensor, error) {
		i, from, to, tap, ok := goldenRows(name, seqs)
		if !ok {
			return nil, fmt.Errorf("%s: tap %s names no sequence's rows", set.ID(), name)
		}
		g, err := run.rows(i, from, to, tap)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", set.ID(), err)
		}
		return g, nil
	})
	if err != nil {
		return nil, nil, err
	}
	var steps []BatchTokenStep
	var wrong []string
	for i, s := range seqs {
		for j := 0; j <= p.DecodeSteps; j++ {
			row, _, err := run.row(i, len(s.Prompt)-1+j, "logits")
			if err != nil {
				return nil, nil, err
			}
			st, bad := greedyChoice(i, j, row, s, p.MarginEpsilon)
			if bad != "" {
				wrong = append(wrong, bad)
			}
			steps = append(steps, st)
		}
	}
	if len(wrong) > 0 {
		return rows, steps, fmt.Errorf("%s: served greedy choices differ from the reference's: %s", set.ID(), strings.Join(wrong, "; "))
	}
	return rows, steps, nil
}

// ServedDivergence is where a sequence's rows in a served run first differ, in their bits,
// from the same sequence served alone: the tap, the position and how much.
type ServedDivergence struct {
	Seq, Pos  int
	Tap       string
	Elements  int
	MaxAbs    float64
	SharedSrc int // the sequence whose pages held the position, -1 when its own
}

func (d *ServedDivergence) String() string {
	whose := "its own pages"
	if d.SharedSrc >= 0 {
		whose = fmt.Sprintf("pages shared from sequence %d", d.SharedSrc)
	}
	return fmt.Sprintf("sequence %d at position %d (%s): first differing tap %s (%d elements differ in their bits, max |diff| %.3g)",
		d.Seq, d.Pos, whose, d.Tap, d.Elements, d.MaxAbs)
}

// CheckServedInvariance runs plan, then each sequence alone (its own chunks, one step each,
// no sharing), and returns the first row of a sequence whose bits depend on the company it was
// served in (nil when every tap of every position is bit-identical), in order of sequence,
// position and then taps in forward order (taps as the set lists them, then the logits).
func CheckServedInvariance(m *Model, pl *ServedPlan, taps []string) (*ServedDivergence, error) {
	mixed, err := RunServed(m, pl, taps)
	if err != nil {
		return nil, err
	}
	all := append(append([]string(nil), taps...), "logits") // forward order
	for i, stream := range pl.streams {
		alone := &ServedPlan{BlockSize: pl.BlockSize, Shares: map[int][2]int{}, arrival: map[int]int{}, streams: [][]int32{stream}}
		pos := 0
		for _, c := range mixed.at[i] {
			if c[0] > pos { // a shared prefix: computed here as one chunk of its own
				alone.Steps = append(alone.Steps, []Chunk{{Seq: 0, Tokens: stream[pos:c[0]]}})
			}
			alone.Steps = append(alone.Steps, []Chunk{{Seq: 0, Tokens: stream[c[0] : c[0]+c[1]]}})
			pos = c[0] + c[1]
		}
		solo, err := RunServed(m, alone, taps)
		if err != nil {
			return nil, fmt.Errorf("sequence %d alone: %w", i, err)
		}
		for p := range stream {
			for _, tap := range all {
				got, _, err := mixed.row(i, p, tap)
				if err != nil {
					return nil, err
				}
				want, _, err := solo.row(0, p, tap)
				if err != nil {
					return nil, err
				}
				if diff, maxAbs := bitDiff(got, want); diff > 0 {
					src := -1
					if sh, ok := pl.Shares[i]; ok && p < sh[1] {
						src = sh[0]
					}
					return &ServedDivergence{Seq: i, Pos: p, Tap: tap, Elements: diff, MaxAbs: maxAbs, SharedSrc: src}, nil
				}
			}
		}
	}
	return nil, nil
}
