package model

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// BatchParams are the params of a batch set (docs/golden-format.md, "Batch sets").
type BatchParams struct {
	ModelSet      string          `json:"model_set"`
	Family        string          `json:"family"`
	Checkpoint    []CheckpointRef `json:"checkpoint"`
	Batch         int             `json:"batch"`
	DecodeSteps   int             `json:"decode_steps"`
	MarginEpsilon float64         `json:"margin_epsilon"`
	PromptLens    []int           `json:"prompt_lens"`
}

// CheckpointRef is one checkpoint file of the model set a batch set was generated from.
type CheckpointRef struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
}

// BatchSequence is one sequence of a batch set: its prompt and the tokens its decode steps
// feed (the reference's greedy tokens: token j at step j), with the reference's top-2 margins.
type BatchSequence struct {
	Prompt  []int32
	Tokens  []int32
	Margins []float32
}

// ReadBatchSet checks a batch set against the model set it names (the same model, family and
// checkpoint bytes it was generated from) and reads its sequences.
func ReadBatchSet(set, modelSet *golden.Set) (*BatchParams, []BatchSequence, error) {
	var p BatchParams
	if err := set.DecodeParams(&p); err != nil {
		return nil, nil, err
	}
	if p.Batch < 1 || p.Batch > MaxBatch || len(p.PromptLens) != p.Batch || p.DecodeSteps < 1 {
		return nil, nil, fmt.Errorf("%s: batch %d with %d prompt lengths and %d decode steps: want 1..%d sequences, a length each, and steps",
			set.ID(), p.Batch, len(p.PromptLens), p.DecodeSteps, MaxBatch)
	}
	if modelSet.Manifest.Model != p.ModelSet {
		return nil, nil, fmt.Errorf("%s: runs model set %s, given %s", set.ID(), p.ModelSet, modelSet.Manifest.Model)
	}
	have := map[string]string{}
	for _, f := range modelSet.Files(golden.RoleCheckpoint) {
		have[f.File] = f.SHA256
	}
	if len(p.Checkpoint) == 0 || len(p.Checkpoint) != len(have) {
		return nil, nil, fmt.Errorf("%s: params.checkpoint lists %d files, model set %s has %d: regenerate the batch set (python3 tools/gen-golden batches)",
			set.ID(), len(p.Checkpoint), p.ModelSet, len(have))
	}
	for _, c := range p.Checkpoint {
		if have[c.File] != c.SHA256 {
			return nil, nil, fmt.Errorf("%s: generated from %s with sha256 %s, model set %s now has %q: the model set was regenerated since; regenerate the batch set (python3 tools/gen-golden batches)",
				set.ID(), c.File, c.SHA256, p.ModelSet, have[c.File])
		}
	}
	seqs := make([]BatchSequence, p.Batch)
	for i := range seqs {
		get := func(name string) (*tensor.Tensor, error) { return set.Tensor(fmt.Sprintf("s%d.%s", i, name)) }
		prompt, err := get("prompt_ids")
		if err != nil {
			return nil, nil, err
		}
		toks, err := get("greedy_tokens")
		if err != nil {
			return nil, nil, err
		}
		margins, err := get("greedy_top2_margin")
		if err != nil {
			return nil, nil, err
		}
		if len(prompt.I32) != p.PromptLens[i] || len(toks.I32) != p.DecodeSteps+1 || len(margins.F32) != p.DecodeSteps+1 {
			return nil, nil, fmt.Errorf("%s: sequence %d has %d prompt ids (params say %d), %d greedy tokens and %d margins (want %d each)",
				set.ID(), i, len(prompt.I32), p.PromptLens[i], len(toks.I32), len(margins.F32), p.DecodeSteps+1)
		}
		seqs[i] = BatchSequence{Prompt: prompt.I32, Tokens: toks.I32, Margins: margins.F32}
	}
	return &p, seqs, nil
}

// BatchTokenStep is one sequence's greedy choice at one point of a batched run (after its
// prefill, or after decode step Step-1) next to the reference's.
type BatchTokenStep struct {
	Seq, Step int
	Got, Want int32
	Margin    float64
	Accepted  bool // differs, at a reference margin below epsilon
}

// CompareBatchTaps prefills every sequence of a batch set into one Batch, runs its decode
// steps with every sequence in every step (teacher-forced on each sequence's reference
// tokens), and compares every tap of every sequence with its reference under the limits its
// calibration gives (s<i>.<tap> takes the tolerance of <tap>). It also returns each sequence's
// greedy choice at every point against the reference's; a differing choice above the margin
// epsilon is an error listing every one.
func CompareBatchTaps(m *Model, set *golden.Set, p *BatchParams, seqs []BatchSequence, tols *compare.Tolerances) ([]compare.TapResult, []BatchTokenStep, error) {
	bare, expected := batchTaps(set)
	b, err := m.NewBatch(p.Batch, 0)
	if err != nil {
		return nil, nil, err
	}
	defer b.Close()
	m.RequestTaps(bare)
	defer m.RequestTaps(nil)
	var steps []BatchTokenStep
	var wrong []string
	choose := func(step int) error {
		l, err := b.Logits()
		if err != nil {
			return err
		}
		V := l.Shape[1]
		for i, s := range seqs {
			st, bad := greedyChoice(i, step, l.Float32()[i*V:(i+1)*V], s, p.MarginEpsilon)
			if bad != "" {
				wrong = append(wrong, bad)
			}
			steps = append(steps, st)
		}
		return nil
	}
	for i, s := range seqs {
		if err := b.Prefill(i, s.Prompt); err != nil {
			return nil, nil, err
		}
	}
	if err := choose(0); err != nil {
		return nil, nil, err
	}
	toks := make([]int32, p.Batch)
	for step := 0; step < p.DecodeSteps; step++ {
		for i, s := range seqs {
			toks[i] = s.Tokens[step]
		}
		if err := b.Decode(toks); err != nil {
			return nil, nil, fmt.Errorf("batched decode step %d: %w", step, err)
		}
		if err := choose(step + 1); err != nil {
			return nil, nil, err
		}
	}
	got := m.Taps()
	rows, err := compareBatchSetTaps(set, tols, expected, func(name string) (*tensor.Tensor, error) {
		if g := got[name]; g != nil {
			return g, nil
		}
		return nil, fmt.Errorf("%s: the engine produced no tap %s", set.ID(), name)
	})
	if err != nil {
		return nil, nil, err
	}
	if len(wrong) > 0 {
		return rows, steps, fmt.Errorf("%s: greedy choices differ from the reference's: %s", set.ID(), strings.Join(wrong, "; "))
	}
	return rows, steps, nil
}

// batchTaps are a batch set's expected taps (every sequence's prefill and decode taps) and the
// bare names a run requests for them (sequence 0's prefill taps).
func batchTaps(set *golden.Set) (bare []string, expected []golden.File) {
	for _, f := range set.Files(golden.RoleExpected) {
		i, tap := golden.SplitSequence(f.Name)
		if t, ok := strings.CutPrefix(tap, "prefill."); ok && i == 0 {
			bare = append(bare, t)
		}
		if strings.HasPrefix(tap, "prefill.") || strings.HasPrefix(tap, "decode.") {
			expected = append(expected, f)
		}
	}
	return bare, expected
}

// compareBatchSetTaps compares every expected tap, the engine's from got, with its reference
// under the limits the set's calibration gives (one worker per CPU, results in tap order).
func compareBatchSetTaps(set *golden.Set, tols *compare.Tolerances, expected []golden.File, got func(name string) (*tensor.Tensor, error)) ([]compare.TapResult, error) {
	cal, err := set.Calibration()
	if err != nil {
		return nil, err
	}
	rows := make([]compare.TapResult, len(expected))
	errs := make([]error, len(expected))
	parallel(len(expected), func(i int) {
		g, err := got(expected[i].Name)
		if err != nil {
			errs[i] = err
			return
		}
		rows[i], errs[i] = compareTap(set, cal, tols, expected[i].Name, g, nil, false)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rows, nil
}

// greedyChoice is sequence i's greedy choice from its logits row at reference step `step`, and
// the line that reports it when it differs from the reference's at a margin of eps or more.
func greedyChoice(i, step int, logits []float32, s BatchSequence, eps float64) (BatchTokenStep, string) {
	row := tensor.FromF32([]int{len(logits)}, logits).Float64()
	st := BatchTokenStep{Seq: i, Step: step, Got: int32(compare.TopK(row, 1)[0]), Want: s.Tokens[step], Margin: float64(s.Margins[step])}
	if st.Got == st.Want {
		return st, ""
	}
	if st.Accepted = st.Margin < eps; st.Accepted {
		return st, ""
	}
	return st, fmt.Sprintf("sequence %d at step %d: engine %d, reference %d (top-2 margin %.4g >= epsilon %g)", i, step, st.Got, st.Want, st.Margin, eps)
}

// Divergence is where a sequence's computation in a batch first differs, in its bits, from the
// same sequence decoded alone: the batch size, the sequence, the first tap in forward order
// that differs, and how much.
type Divergence struct {
	Size, Seq int
	Tap       string
	Elements  int     // elements whose bits differ
	MaxAbs    float64 // the largest absolute difference
	// TokensDiffer reports whether the greedy tokens differ too (they are fed back, so the
	// sequence's later steps are not comparable after the first differing one).
	TokensDiffer bool
}

func (d *Divergence) String() string {
	tokens := "greedy tokens equal"
	if d.TokensDiffer {
		tokens = "greedy tokens differ"
	}
	return fmt.Sprintf("sequence %d in a batch of %d: first differing tap %s (%d elements differ in their bits, max |diff| %.3g; %s)",
		d.Seq, d.Size, d.Tap, d.Elements, d.MaxAbs, tokens)
}

// InvarianceRun is one greedy run of sequences: every tap of every sequence (prefill and each
// decode step) and the tokens each chose.
type InvarianceRun struct {
	Taps   map[string]*tensor.Tensor // s<i>.prefill.<tap>, s<i>.decode.<step>.<tap>
	Tokens [][]int32                 // [sequence][step]
	Logits [][]float32               // [step]: every sequence's logits, [n, V] flattened
}

// RunGreedyBatch prefills the prompts into one Batch with caches of cacheLen tokens (0: the
// model's MaxLen) and decodes steps greedy tokens, every sequence feeding its own choice, with
// the named taps requested in the decode steps (none: nil). A prefill is one sequence's own
// pass whatever the batch; its logits are in Logits[0].
func RunGreedyBatch(m *Model, prompts [][]int32, cacheLen, steps int, taps []string) (*InvarianceRun, error) {
	b, err := m.NewBatch(len(prompts), cacheLen)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	m.RequestTaps(nil)
	defer m.RequestTaps(nil)
	run := &InvarianceRun{Tokens: make([][]int32, len(prompts))}
	for i, ids := range prompts {
		if err := b.Prefill(i, ids); err != nil {
			return nil, err
		}
	}
	m.RequestTaps(taps)
	toks := make([]int32, len(prompts))
	for step := 0; ; step++ {
		l, err := b.Logits()
		if err != nil {
			return nil, err
		}
		V := l.Shape[1]
		run.Logits = append(run.Logits, l.Float32())
		for i := range prompts {
			toks[i] = int32(compare.TopK(tensor.FromF32([]int{V}, l.Float32()[i*V:(i+1)*V]).Float64(), 1)[0])
			run.Tokens[i] = append(run.Tokens[i], toks[i])
		}
		if step == steps {
			break
		}
		if err := b.Decode(toks); err != nil {
			return nil, fmt.Errorf("batched decode step %d: %w", step, err)
		}
	}
	run.Taps = m.Taps()
	return run, nil
}

// CheckBatchInvariance decodes each prompt alone (a batch of one) and then the first n prompts
// together for every n in sizes, greedily for steps steps with the named taps requested, in
// caches of cacheLen tokens (0: the model's MaxLen), and returns the first divergence of a
// sequence from its run alone (nil when every tap of every sequence is bit-identical in every
// batch), in forward order: the prefill's logits, then each decode step's taps in tap order.
func CheckBatchInvariance(m *Model, prompts [][]int32, cacheLen, steps int, sizes []int, taps []string) (*Divergence, error) {
	alone := make([]*InvarianceRun, len(prompts))
	for i, ids := range prompts {
		r, err := RunGreedyBatch(m, [][]int32{ids}, cacheLen, steps, taps)
		if err != nil {
			return nil, fmt.Errorf("sequence %d alone: %w", i, err)
		}
		alone[i] = r
	}
	order := []string{"prefill.logits"}
	for step := 0; step < steps; step++ {
		for _, t := range taps {
			order = append(order, fmt.Sprintf("decode.%d.%s", step, t))
		}
	}
	for _, n := range sizes {
		if n < 1 || n > len(prompts) {
			return nil, fmt.Errorf("model: batch size %d for %d prompts", n, len(prompts))
		}
		r, err := RunGreedyBatch(m, prompts[:n], cacheLen, steps, taps)
		if err != nil {
			return nil, fmt.Errorf("batch of %d: %w", n, err)
		}
		for _, name := range order {
			for i := 0; i < n; i++ {
				want := alone[i].Taps["s0."+name]
				got := r.Taps[fmt.Sprintf("s%d.%s", i, name)]
				if name == "prefill.logits" {
					V := len(alone[i].Logits[0])
					want = tensor.FromF32([]int{1, V}, alone[i].Logits[0])
					got = tensor.FromF32([]int{1, V}, r.Logits[0][i*V:(i+1)*V])
				}
				if want == nil || got == nil {
					return nil, fmt.Errorf("batch of %d: no tap %s for sequence %d", n, name, i)
				}
				if diff, maxAbs := bitDiff(got.F32, want.F32); diff > 0 {
					d := &Divergence{Size: n, Seq: i, Tap: name, Elements: diff, MaxAbs: maxAbs}
					for j, t := range r.Tokens[i] {
						d.TokensDiffer = d.TokensDiffer || t != alone[i].Tokens[0][j]
					}
					return d, nil
				}
			}
		}
		for i := 0; i < n; i++ {
			for j, t := range r.Tokens[i] {
				if t != alone[i].Tokens[0][j] {
					return nil, fmt.Errorf("batch of %d: sequence %d chose token %d at step %d, %d alone, with every tap equal", n, i, t, j, alone[i].Tokens[0][j])
				}
			}
		}
	}
	return nil, nil
}

// bitDiff counts the elements of got and want whose bits differ and the largest |difference|.
func bitDiff(got, want []float32) (int, float64) {
	n, worst := 0, 0.0
	for i := range want {
		if i >= len(got) || math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			n++
			if i < len(got) {
				worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
			}
		}
	}
	if len(got) != len(want) {
		n += max(len(got)-len(want), 0)
	}
	return n, worst
}

// InvarianceCacheLen is the cache length of a batch-invariance run (at most the model's
// position limit): long enough that attention_decode splits each sequence's keys, by a count
// that depends on the batch size unless the batch-invariant kernels are on.
const InvarianceCacheLen = 4096

// InvarianceInputs are the prompts and the cache length a batch-invariance check of a set's
// prompts runs with (steps decode steps after them): InvarianceCacheLen or the model's
// position limit, whichever is smaller, and the prompts made long (LongPrompts) to fill it.
func InvarianceInputs(m *Model, prompts [][]int32, steps int) ([][]int32, int) {
	limit, _ := m.Cfg.PositionLimit()
	cacheLen := min(limit, InvarianceCacheLen)
	return LongPrompts(prompts, m.Cfg.Vocab, cacheLen-steps-1), cacheLen
}

// LongPrompts extends each prompt with filler tokens (a fixed LCG over the vocabulary) to a
// ragged length of its own, at least a few hundred tokens and at most limit: the decode
// kernels split a sequence's keys into chunks of a few hundred, and a split that a batch changes
// shows only in a sequence that spans several chunks.
func LongPrompts(prompts [][]int32, vocab, limit int) [][]int32 {
	out := make([][]int32, len(prompts))
	for i, p := range prompts {
		n := min(max(len(p), 320+41*i), limit-len(prompts)+1+i)
		ids := append([]int32(nil), p[:min(len(p), n)]...)
		s := uint64(i + 1)
		for len(ids) < n {
			s = s*6364136223846793005 + 1442695040888963407
			ids = append(ids, int32((s>>33)%uint64(vocab)))
		}
		out[i] = ids
	}
	return out
}
