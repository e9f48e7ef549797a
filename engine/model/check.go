package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetParams are the params of a model golden set (docs/golden-format.md, "Model sets").
type SetParams struct {
	Family        string    `json:"family"`
	Source        string    `json:"source"`
	PromptIDs     []int32   `json:"prompt_ids"`
	DecodeSteps   int       `json:"decode_steps"`
	GreedyTokens  int       `json:"greedy_tokens"`
	MarginEpsilon float64   `json:"margin_epsilon"`
	Sample        SampleRun `json:"sample"`
	// DType is the storage dtype the set's calibration models and the engine runs it in:
	// "f16" or "bf16" (bf16 sets store a BF16 checkpoint).
	DType string `json:"dtype"`
	// HParams are the reference's hyper-parameters by name, as transformers parsed them
	// (compared with the loader's by CheckHParams). Required: DecodeParams refuses a set
	// without them, which LoadSet reports as one to regenerate.
	HParams map[string]json.RawMessage `json:"hparams"`
	// Peak is how a synthetic set's output rows were boosted so that every greedy and seeded
	// step is decisive (docs/golden-format.md, "Peaked output rows"); absent for a real
	// checkpoint. Informational: the margins the checks read are the set's own.
	Peak *Peak `json:"peak,omitempty"`
	// Quantization is a quantized set's format and how its reference was made (docs/golden-
	// format.md, "Quantized sets"); absent for a 16-bit set. LoadSet holds the checkpoint's
	// quantization_config to its format.
	Quantization *QuantParams `json:"quantization,omitempty"`
}

// QuantParams is params.quantization of a quantized model set.
type QuantParams struct {
	Format string `json:"format"` // QuantFormat's name: fp8-block, fp8-channel, awq, gptq
	// GroupSize is the 4-bit formats' group of inputs (null for FP8).
	GroupSize *int `json:"group_size"`
	// Reference names the forward the taps come from ("torch-dequantised": transformers' model
	// with each projection computing the format's arithmetic on its dequantised weight).
	Reference string `json:"reference"`
	// CrossCheck names what the format's tensors were checked against, on the same tensors:
	// the defining library's dequantisation (and quantiser) where it was importable.
	CrossCheck []string `json:"cross_check"`
}

// Peak is params.peak of a synthetic model set: the checkpoint tensor holding the output
// projection, the rows (token ids) changed from the seeded draw, the margins the construction
// aimed at and accepted (in units of margin_epsilon), its rounds, and the smallest margin of
// its last run.
type Peak struct {
	Tensor         string  `json:"tensor"`
	Rows           []int32 `json:"rows"`
	Target         float64 `json:"target"`
	Accept         float64 `json:"accept"`
	Rounds         int     `json:"rounds"`
	SmallestMargin float64 `json:"smallest_margin"`
}

// SampleRun is the seeded-sampling run of a model set: Tokens tokens drawn from the reference
// logits with this config, token j at step j (docs/sampling.md).
type SampleRun struct {
	Temperature float32 `json:"temperature"`
	TopK        int     `json:"top_k"`
	TopP        float32 `json:"top_p"`
	Seed        uint64  `json:"seed"`
	Tokens      int     `json:"tokens"`
}

// StorageDType parses DType, refusing anything but f16 and bf16 by name (a set without it
// predates bf16 and is refused with a request to regenerate it).
func (p *SetParams) StorageDType() (tensor.DType, error) {
	switch p.DType {
	case "f16":
		return tensor.F16, nil
	case "bf16":
		return tensor.BF16, nil
	case "":
		return tensor.Invalid, fmt.Errorf("params.dtype is missing: the set predates bf16 support; regenerate it with `python3 tools/gen-golden models`")
	}
	return tensor.Invalid, fmt.Errorf("params.dtype = %q: want \"f16\" or \"bf16\"", p.DType)
}

// Config is the sampler config of step j.
func (s SampleRun) Config(j int) backend.SampleConfig {
	return backend.SampleConfig{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, Seed: s.Seed, Step: uint64(j)}
}

// LoadSet loads a model set's checkpoint (checksums verified) with a cache long enough for
// its prompt and greedy tokens, and returns it with the set's params.
func LoadSet(be backend.Backend, set *golden.Set) (*Model, *SetParams, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(set.Manifest.Params, &probe) == nil && probe != nil && probe["hparams"] == nil {
		return nil, nil, errNoHParams(set)
	}
	var p SetParams
	if err := set.DecodeParams(&p); err != nil {
		return nil, nil, err
	}
	for _, f := range set.Files(golden.RoleCheckpoint) {
		if _, err := set.CheckpointPath(f.Name); err != nil {
			return nil, nil, err
		}
	}
	dt, err := p.StorageDType()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	m, err := LoadAs(be, set.Dir, len(p.PromptIDs)+p.GreedyTokens, dt)
	if err != nil {
		return nil, nil, err
	}
	if m.Cfg.Family != p.Family {
		m.Close()
		return nil, nil, fmt.Errorf("%s: params.family %q but config.json model_type %q (family %q)", set.ID(), p.Family, m.Cfg.ModelType, m.Cfg.Family)
	}
	if err := checkSetQuant(m, &p); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	return m, &p, nil
}

// checkSetQuant holds a set's params.quantization to the format its checkpoint loaded in, and
// to the linears that format runs: a set whose reference quantized differently from the
// checkpoint it carries is stale, never compared.
func checkSetQuant(m *Model, p *SetParams) error {
	want := QuantNone.String()
	if p.Quantization != nil {
		want = p.Quantization.Format
	}
	got := QuantNone
	if m.Cfg.Quant != nil {
		got = m.Cfg.Quant.Format
	}
	if got.String() != want {
		return fmt.Errorf("params.quantization format %q but the checkpoint's config.json loads as %q: regenerate the set", want, got)
	}
	if got != QuantNone && len(m.q) == 0 {
		return fmt.Errorf("the checkpoint's quantization_config is %s but it stores no linear in that format", got)
	}
	return nil
}

// CompareTaps runs the set's prefill and its stored decode steps (teacher-forced on the
// reference's greedy tokens) with every stored tap requested, and compares each tap with its
// reference under the tolerance tols derives from the set's calibration
// (compare.Tolerances.CalibratedTap): a set without calibration.json is an error asking to
// regenerate it, never judged by the floors alone. The rows come back in forward (manifest)
// order, ready for compare.LayerDiffTable.
func CompareTaps(m *Model, set *golden.Set, p *SetParams, tols *compare.Tolerances) ([]compare.TapResult, error) {
	return compareTaps(m, set, p, tols, false)
}

// compareTaps is CompareTaps, or with isolate CompareTapsIsolated.
func compareTaps(m *Model, set *golden.Set, p *SetParams, tols *compare.Tolerances, isolate bool) ([]compare.TapResult, error) {
	cal, err := set.Calibration()
	if err != nil {
		return nil, err
	}
	// The limits derive from the calibration's dtype: a model running in another would be
	// judged by the wrong floors (fp16's are 8x tighter than bf16's).
	if dt, err := cal.DType(); err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	} else if dt != m.Cfg.StorageDType() {
		return nil, fmt.Errorf("%s: the model runs in %s but the set's calibration is of a %s implementation (params.dtype %q)", set.ID(), m.Cfg.StorageDType(), dt, p.DType)
	}
	_, stop, err := m.FollowAmbiguousRoutes(set, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	var bare []string
	var expected []golden.File
	for _, f := range set.Files(golden.RoleExpected) {
		if strings.HasPrefix(f.Name, "prefill.") {
			bare = append(bare, strings.TrimPrefix(f.Name, "prefill."))
		}
		if strings.HasPrefix(f.Name, "prefill.") || strings.HasPrefix(f.Name, "decode.") {
			expected = append(expected, f)
		}
	}
	toks, err := set.Tensor("greedy_tokens")
	if err != nil {
		return nil, err
	}
	if len(toks.I32) < p.DecodeSteps {
		return nil, fmt.Errorf("%s: %d greedy tokens for %d decode steps", set.ID(), len(toks.I32), p.DecodeSteps)
	}
	// The reference's taps are read before the passes (on one worker per CPU) when they are
	// written over the engine's, and then reused for the comparison.
	var want map[string]*tensor.Tensor
	if isolate {
		if want, err = readTaps(set, expected); err != nil {
			return nil, err
		}
		m.inject = want
		defer func() { m.inject = nil }()
	}
	m.RequestTaps(bare)
	defer m.RequestTaps(nil)
	if _, err := m.Prefill(p.PromptIDs); err != nil {
		return nil, err
	}
	for s := 0; s < p.DecodeSteps; s++ {
		if _, err := m.Decode(toks.I32[s]); err != nil {
			return nil, fmt.Errorf("decode step %d: %w", s, err)
		}
	}
	got := m.Taps()
	for _, f := range expected {
		if _, ok := got[f.Name]; !ok {
			return nil, fmt.Errorf("%s: the engine produced no tap %s", set.ID(), f.Name)
		}
	}
	// Reading, checking and comparing a full-size set's ~2000 taps is most of the time of a
	// model spec, and each tap is independent: one worker per CPU, results in tap order.
	rows := make([]compare.TapResult, len(expected))
	errs := make([]error, len(expected))
	parallel(len(expected), func(i int) {
		name := expected[i].Name
		exact := isolate && cal.FP8Activations() && m.quantizedTap(name)
		rows[i], errs[i] = compareTap(set, cal, tols, name, got[name], want[name], exact)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rows, nil
}

// CompareUntappedLogits runs CompareTaps' passes with no tap requested, as generation runs
// them (the head on the last position alone, and whatever follows it: Gemma 2's final soft
// cap), and compares each decode step's logits with the reference's logits tap under the same
// limits, so that the path generation takes is checked by value, not only through the tokens it
// picks (a monotonic error, a missing cap, keeps the greedy tokens).
func CompareUntappedLogits(m *Model, set *golden.Set, p *SetParams, tols *compare.Tolerances) ([]compare.TapResult, error) {
	cal, err := set.Calibration()
	if err != nil {
		return nil, err
	}
	toks, err := set.Tensor("greedy_tokens")
	if err != nil {
		return nil, err
	}
	if len(toks.I32) < p.DecodeSteps {
		return nil, fmt.Errorf("%s: %d greedy tokens for %d decode steps", set.ID(), len(toks.I32), p.DecodeSteps)
	}
	_, stop, err := m.FollowAmbiguousRoutes(set, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	m.RequestTaps(nil)
	if _, err := m.Prefill(p.PromptIDs); err != nil {
		return nil, err
	}
	rows := make([]compare.TapResult, 0, p.DecodeSteps)
	for s := 0; s < p.DecodeSteps; s++ {
		got, err := m.Decode(toks.I32[s])
		if err != nil {
			return nil, fmt.Errorf("decode step %d: %w", s, err)
		}
		r, err := compareTap(set, cal, tols, fmt.Sprintf("decode.%d.logits", s), got, nil, false)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// readTaps reads the set's files on one worker per CPU, by name.
func readTaps(set *golden.Set, files []golden.File) (map[string]*tensor.Tensor, error) {
	ts := make([]*tensor.Tensor, len(files))
	errs := make([]error, len(files))
	parallel(len(files), func(i int) { ts[i], errs[i] = set.Tensor(files[i].Name) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[string]*tensor.Tensor, len(files))
	for i, f := range files {
		out[f.Name] = ts[i]
	}
	return out, nil
}

// parallel runs f(0..n-1) on one worker per CPU and waits for them.
func parallel(n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.NumCPU(), n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// compareTap judges one tap of the engine against the set's (want, read here when nil), by
// its calibrated limit. A batch set's tap "s<i>.<tap>" takes the limits of <tap>.
//
// atFloor judges the tap by its floor alone, not the calibration: an FP8 projection's output in
// an isolated replay. Given the reference's input, the activation's quantisation is bit-exact
// by its spec (docs/quantization.md), so what is left is the GEMM's fp32 accumulation and one
// rounding, which the floor allows; the calibrated limit would allow the e4m3 code flips that
// upstream rounding causes in a plain run, and with them a wrong scale.
func compareTap(set *golden.Set, cal *golden.Calibration, tols *compare.Tolerances, name string, g, want *tensor.Tensor, atFloor bool) (compare.TapResult, error) {
	var err error
	if want == nil {
		if want, err = set.Tensor(name); err != nil {
			return compare.TapResult{}, err
		}
	}
	_, kind := golden.SplitSequence(name)
	dt, err := cal.DType()
	if err != nil {
		return compare.TapResult{}, fmt.Errorf("%s: %w", set.ID(), err)
	}
	floor, err := tols.TapFloor(kind, dt)
	if err != nil {
		return compare.TapResult{}, err
	}
	ce, ok := cal.Taps[name]
	if !ok { // Set.Calibration checked it lists every tap
		return compare.TapResult{}, fmt.Errorf("%s: no calibration for tap %s", set.ID(), name)
	}
	if strings.HasSuffix(name, ".router_logits") {
		// a router's few logits a token: the worst decode step's calibration, not this step's
		// (golden.Calibration.DecodeWorst); a prefill's many rows stand for themselves
		if w, ok := cal.DecodeWorst(name); ok {
			ce = w
		}
	}
	if ce.KL != nil { // a logits tap: its sequence's worst step (golden.Calibration.SequenceKL)
		kl := cal.SequenceKL(name)
		ce.KL = &kl
	}
	tol, err := tols.CalibratedTap(kind, &ce, dt)
	if err != nil {
		return compare.TapResult{}, fmt.Errorf("%s: %w", set.ID(), err)
	}
	if atFloor {
		tol = floor
		tol.Why = floor.Why + "; an FP8 projection from the reference's input (isolated replay): its floor, not the calibration"
	}
	r, err := compare.Compare(g, want, tol)
	if err != nil {
		return compare.TapResult{}, fmt.Errorf("tap %s: %w", name, err)
	}
	return compare.TapResult{Name: name, Tol: tol, Floor: floor, Result: r}, nil
}

// GreedyStep is one generated token next to the reference's.
type GreedyStep struct {
	Step      int
	Got, Want int32
	Margin    float64 // the reference's top-2 margin at this step
	Accepted  bool    // a differing token that the margin rule accepts
	GotTop5   []int
	WantTop5  []int32
}

// Greedy generates n tokens greedily from the prompt, feeding its own tokens, and compares
// them with the set's greedy files token by token: a differing token passes only when the
// reference's top-2 margin there is below epsilon and each side's token is in the other's
// top 5; comparison stops at the first difference (accepted or not), since the sequences
// diverge after it. It returns the steps compared and an error describing a failure.
func Greedy(m *Model, set *golden.Set, p *SetParams) ([]GreedyStep, error) {
	want, err := set.Tensor("greedy_tokens")
	if err != nil {
		return nil, err
	}
	margin, err := set.Tensor("greedy_top2_margin")
	if err != nil {
		return nil, err
	}
	top5, err := set.Tensor("greedy_top5")
	if err != nil {
		return nil, err
	}
	_, stop, err := m.FollowAmbiguousRoutes(set, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	logits, err := m.Prefill(p.PromptIDs)
	if err != nil {
		return nil, err
	}
	var steps []GreedyStep
	for j := 0; j < p.GreedyTokens; j++ {
		v := logits.Shape[1]
		row := tensor.FromF32([]int{v}, logits.Float32()[(logits.Shape[0]-1)*v:]).Float64()
		gotTop := compare.TopK(row, 5)
		st := GreedyStep{Step: j, Got: int32(gotTop[0]), Want: want.I32[j], Margin: float64(margin.F32[j]),
			GotTop5: gotTop, WantTop5: top5.I32[j*5 : j*5+5]}
		steps = append(steps, st)
		if st.Got != st.Want {
			inRef, inOurs := false, false
			for _, t := range st.WantTop5 {
				inRef = inRef || t == st.Got
			}
			for _, t := range st.GotTop5 {
				inOurs = inOurs || int32(t) == st.Want
			}
			if st.Margin < p.MarginEpsilon && inRef && inOurs {
				steps[j].Accepted = true
				return steps, nil
			}
			return steps, fmt.Errorf("greedy token %d: engine chose %d (top5 %v), reference %d (top5 %v, top-2 margin %.4g, epsilon %g)",
				j, st.Got, st.GotTop5, st.Want, st.WantTop5, st.Margin, p.MarginEpsilon)
		}
		if j+1 < p.GreedyTokens {
			if logits, err = m.Decode(st.Got); err != nil {
				return steps, fmt.Errorf("decode step %d: %w", j, err)
			}
		}
	}
	return steps, nil
}

// SampledStep is one seeded token of the engine next to the reference's.
type SampledStep struct {
	Step      int
	Got, Want int32
	Margin    float64 // the reference's margin at this step, in logit units (+Inf: no decision)
	Accepted  bool    // a differing token at a margin below epsilon: comparison stopped
}

// GenerateSeeded draws p.Sample.Tokens tokens from the prompt with the device sampler and
// returns them with the logits each was drawn from (for bit-level determinism checks). With
// feed nil it feeds its own tokens; otherwise it feeds feed[j] after step j (teacher forcing).
func GenerateSeeded(m *Model, p *SetParams, feed []int32) ([]int32, [][]float32, error) {
	if err := m.PrefillOnDevice(p.PromptIDs); err != nil {
		return nil, nil, err
	}
	var tokens []int32
	var logits [][]float32
	for j := 0; j < p.Sample.Tokens; j++ {
		l, err := m.be.Download(m.logits)
		if err != nil {
			return nil, nil, err
		}
		logits = append(logits, l.F32)
		tok, err := m.Sample(p.Sample.Config(j))
		if err != nil {
			return nil, nil, fmt.Errorf("sample at step %d: %w", j, err)
		}
		tokens = append(tokens, tok)
		if feed != nil {
			tok = feed[j]
		}
		if j+1 < p.Sample.Tokens {
			if err := m.DecodeOnDevice(tok); err != nil {
				return nil, nil, fmt.Errorf("decode step %d: %w", j, err)
			}
		}
	}
	return tokens, logits, nil
}

// seededSteps reads the set's sample_tokens and sample_margin and pairs them with the
// engine's tokens got: a differing token is Accepted when the reference's margin there (logit
// units) is below margin_epsilon, else it is listed in the returned failures.
func seededSteps(set *golden.Set, p *SetParams, got []int32) ([]SampledStep, []string, error) {
	want, err := set.Tensor("sample_tokens")
	if err != nil {
		return nil, nil, err
	}
	margin, err := set.Tensor("sample_margin")
	if err != nil {
		return nil, nil, err
	}
	if len(want.I32) != p.Sample.Tokens || len(margin.F32) != p.Sample.Tokens || len(got) != p.Sample.Tokens {
		return nil, nil, fmt.Errorf("%s: sample_tokens has %d and sample_margin %d entries for %d tokens (engine drew %d)",
			set.ID(), len(want.I32), len(margin.F32), p.Sample.Tokens, len(got))
	}
	var steps []SampledStep
	var failures []string
	for j := range got {
		st := SampledStep{Step: j, Got: got[j], Want: want.I32[j], Margin: float64(margin.F32[j])}
		if st.Got != st.Want {
			if st.Margin < p.MarginEpsilon {
				st.Accepted = true
			} else {
				failures = append(failures, fmt.Sprintf("step %d: drew %d, reference %d (margin %.4g logits >= epsilon %g; config %+v)",
					j, st.Got, st.Want, st.Margin, p.MarginEpsilon, p.Sample.Config(j)))
			}
		}
		steps = append(steps, st)
	}
	return steps, failures, nil
}

// Seeded generates freely and compares with the set's sample_tokens token by token,
// stopping at the first difference (the sequences diverge after it), which passes only
// when the reference's margin there is below margin_epsilon. A difference at an early
// low-margin step ends the comparison there: SeededTeacherForced is the strict check.
func Seeded(m *Model, set *golden.Set, p *SetParams) ([]SampledStep, error) {
	_, stop, err := m.FollowAmbiguousRoutes(set, true)
	if err != nil {
		return nil, err
	}
	defer stop()
	got, _, err := GenerateSeeded(m, p, nil)
	if err != nil {
		return nil, err
	}
	steps, _, err := seededSteps(set, p, got)
	if err != nil {
		return nil, err
	}
	for j, st := range steps {
		if st.Got != st.Want {
			if !st.Accepted {
				return steps[:j+1], fmt.Errorf("seeded token %d: engine drew %d, reference %d (margin %.4g logits >= epsilon %g)",
					j, st.Got, st.Want, st.Margin, p.MarginEpsilon)
			}
			return steps[:j+1], nil
		}
	}
	return steps, nil
}

// SeededTeacherForced feeds the reference's tokens (teacher forcing), so every one of the
// sample_tokens steps is compared, not only those before a first difference.
func SeededTeacherForced(m *Model, set *golden.Set, p *SetParams) ([]SampledStep, error) {
	want, err := set.Tensor("sample_tokens")
	if err != nil {
		return nil, err
	}
	if len(want.I32) != p.Sample.Tokens {
		return nil, fmt.Errorf("%s: sample_tokens has %d entries for %d tokens", set.ID(), len(want.I32), p.Sample.Tokens)
	}
	_, stop, err := m.FollowAmbiguousRoutes(set, true)
	if err != nil {
		return nil, err
	}
	defer stop()
	got, _, err := GenerateSeeded(m, p, want.I32)
	if err != nil {
		return nil, err
	}
	steps, failures, err := seededSteps(set, p, got)
	if err != nil {
		return nil, err
	}
	if len(failures) > 0 {
		return steps, fmt.Errorf("%s: teacher-forced seeded sampling: %s", set.ID(), strings.Join(failures, "; "))
	}
	return steps, nil
}
