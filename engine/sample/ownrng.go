package sample

import (
	"errors"
	"fmt"
	"slices"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// OwnRNG reports whether be draws tokens from its own random numbers (backend.OwnRNGSampler),
// so that only CheckSupport and CheckDistribution, not CheckSet, can judge it.
func OwnRNG(be backend.Backend) bool {
	o, ok := be.(backend.OwnRNGSampler)
	return ok && o.SamplesWithOwnRNG()
}

// rows is a sampling set's logits, each row's order computed once.
type rows struct {
	logits *tensor.Tensor
	vocab  int
	orders [][]int
	params *GoldenParams
}

func loadRows(set *golden.Set) (*rows, error) {
	logits, err := set.Tensor("logits")
	if err != nil {
		return nil, err
	}
	if logits.DType != tensor.F32 || len(logits.Shape) != 2 {
		return nil, fmt.Errorf("%s: logits %s%s: want f32 [rows, vocab]", set.ID(), logits.DType, tensor.ShapeString(logits.Shape))
	}
	p, err := ParseGolden(set.Manifest.Params, logits.Shape[0], logits.Shape[1])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.ID(), err)
	}
	return &rows{logits: logits, vocab: logits.Shape[1], orders: make([][]int, logits.Shape[0]), params: p}, nil
}

func (r *rows) row(i int) []float32 { return r.logits.F32[i*r.vocab : (i+1)*r.vocab] }

func (r *rows) support(i int, cfg backend.SampleConfig) (*Support, error) {
	if r.orders[i] == nil {
		r.orders[i] = Order(r.row(i))
	}
	return supportOrdered(r.row(i), r.orders[i], cfg)
}

// SupportReport is a sampling set's cases drawn by a sampler with its own random numbers.
type SupportReport struct {
	Cases       int      // cases drawn
	Rows        int      // tokens checked: every row of every case's batch
	Unsupported []string // cases the sampler refused, each with its reason
	Failures    []string
}

// CheckSupport draws every case of a sampling set as CheckSet does, the whole batch with the
// case's config, and checks every row's token against the row's Support: a token no correct
// sampler may draw under that config (outside the top-k, past the nucleus, not the greedy
// maximum) fails. A case the sampler refuses (backend.ErrUnsupported) is listed, not failed;
// when it refuses every case the error is returned.
func CheckSupport(be backend.Backend, set *golden.Set) (*SupportReport, error) {
	r, err := loadRows(set)
	if err != nil {
		return nil, err
	}
	n := r.logits.Shape[0]
	dev, err := be.Upload(r.logits)
	if err != nil {
		return nil, err
	}
	defer dev.Free()
	tokens, err := be.Alloc(tensor.I32, n)
	if err != nil {
		return nil, err
	}
	defer tokens.Free()
	rep := &SupportReport{}
	var refused error
	for _, c := range r.params.Cases {
		cfg := backend.SampleConfig{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, Seed: c.Seed, Step: c.Step}
		err := be.Sample(tokens, dev, cfg)
		if errors.Is(err, backend.ErrUnsupported) {
			rep.Unsupported = append(rep.Unsupported, fmt.Sprintf("%s: %v", c.Name, err))
			refused = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", set.ID(), c.Name, err)
		}
		t, err := be.Download(tokens)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", set.ID(), c.Name, err)
		}
		rep.Cases++
		for row := range n {
			s, err := r.support(row, cfg)
			if err != nil {
				return nil, fmt.Errorf("%s %s row %d: %w", set.ID(), c.Name, row, err)
			}
			rep.Rows++
			if got := int(t.I32[row]); got < 0 || got >= r.vocab || !s.Allowed[got] {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s row %d (T=%v top_k=%d top_p=%v seed=%d step=%d): token %d, which no correct sampler draws (%s)",
					c.Name, row, c.Temperature, c.TopK, c.TopP, c.Seed, c.Step, got, s.describe(r.row(row), got)))
			}
		}
	}
	if rep.Cases == 0 && refused != nil {
		return nil, fmt.Errorf("%s: the sampler refused every case: %w", set.ID(), refused)
	}
	return rep, nil
}

// describe says where token t stands against the support, for a failure message.
func (s *Support) describe(logits []float32, t int) string {
	if t < 0 || t >= len(logits) {
		return fmt.Sprintf("outside the vocabulary of %d", len(logits))
	}
	allowed := 0
	for _, a := range s.Allowed {
		if a {
			allowed++
		}
	}
	return fmt.Sprintf("logit %v; the reference keeps %d tokens down to logit %v, %d allowed with ties and the top-p slack",
		logits[t], len(s.Tokens), logits[s.Tokens[len(s.Tokens)-1]], allowed)
}

// DrawReplicas is how many copies of a row one call of CheckDistribution samples: each copy
// is a row of the batch, with its own random numbers.
const DrawReplicas = 64

// FitResult is one row drawn many times under one config.
type FitResult struct {
	Config string
	Row    int
	Kept   int
	Fit
}

// DistributionReport is a sampling set's rows drawn many times by a sampler with its own
// random numbers.
type DistributionReport struct {
	Fits        []FitResult
	Unsupported []string
	Failures    []string
}

// CheckDistribution draws each of the set's sampled configs (temperature > 0, top_k other than
// 1, deduplicated) perRow times on every row whose support is settled and not nearly one token,
// and tests the draws with Fit. One call samples DrawReplicas copies of each such row; the
// calls differ in their step (the case's step, then the next ones), with the case's seed. A
// token outside the support fails at once; a fit with P < FitAlpha fails.
func CheckDistribution(be backend.Backend, set *golden.Set, perRow int) (*DistributionReport, error) {
	r, err := loadRows(set)
	if err != nil {
		return nil, err
	}
	rep := &DistributionReport{}
	type key struct {
		t float32
		k int
		p float32
	}
	var refused error
	seen := map[key]bool{}
	tested := map[rowDistribution]bool{}
	for _, c := range r.params.Cases {
		k := key{c.Temperature, c.TopK, c.TopP}
		if c.Temperature == 0 || c.TopK == 1 || seen[k] {
			continue
		}
		seen[k] = true
		cfg := backend.SampleConfig{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, Seed: c.Seed, Step: c.Step}
		name := fmt.Sprintf("T=%v top_k=%d top_p=%v (from %s)", c.Temperature, c.TopK, c.TopP, c.Name)
		err := r.drawConfig(be, cfg, name, perRow, tested, rep)
		if errors.Is(err, backend.ErrUnsupported) {
			rep.Unsupported = append(rep.Unsupported, fmt.Sprintf("%s: %v", name, err))
			refused = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", set.ID(), name, err)
		}
	}
	if len(rep.Fits) == 0 && refused != nil {
		return nil, fmt.Errorf("%s: the sampler refused every config: %w", set.ID(), refused)
	}
	return rep, nil
}

// rowDistribution identifies a row's distribution under a config: a temperature and a kept
// prefix of the row's order give the same probabilities whichever top-k and top-p cut there.
type rowDistribution struct {
	row         int
	temperature float32
	kept        int
}

func (r *rows) drawConfig(be backend.Backend, cfg backend.SampleConfig, name string, perRow int, done map[rowDistribution]bool, rep *DistributionReport) error {
	var tested []int
	var supports []*Support
	for row := range r.logits.Shape[0] {
		s, err := r.support(row, cfg)
		if err != nil {
			return err
		}
		d := rowDistribution{row, cfg.Temperature, len(s.Tokens)}
		// A row whose head holds all but a few expected draws tests nothing; one already
		// tested under another config with the same cut, nothing new.
		if s.Settled && len(s.Tokens) > 1 && float64(perRow)*(1-s.Probs[0]) >= 2*MinExpected && !done[d] {
			done[d] = true
			tested = append(tested, row)
			supports = append(supports, s)
		}
	}
	if len(tested) == 0 {
		return nil
	}
	batch := tensor.New(tensor.F32, len(tested)*DrawReplicas, r.vocab)
	for i, row := range tested {
		for j := range DrawReplicas {
			copy(batch.F32[(i*DrawReplicas+j)*r.vocab:], r.row(row))
		}
	}
	dev, err := be.Upload(batch)
	if err != nil {
		return err
	}
	defer dev.Free()
	tokens, err := be.Alloc(tensor.I32, len(tested)*DrawReplicas)
	if err != nil {
		return err
	}
	defer tokens.Free()
	draws := make([][]int, len(tested))
	for call := 0; call*DrawReplicas < perRow; call++ {
		c := cfg
		c.Step += uint64(call)
		if err := be.Sample(tokens, dev, c); err != nil {
			return err
		}
		t, err := be.Download(tokens)
		if err != nil {
			return err
		}
		for i := range tested {
			for j := range DrawReplicas {
				draws[i] = append(draws[i], int(t.I32[i*DrawReplicas+j]))
			}
		}
	}
	for i, row := range tested {
		s := supports[i]
		var outside []int
		for _, t := range draws[i] {
			if t < 0 || t >= r.vocab || !s.Allowed[t] {
				outside = append(outside, t)
			}
		}
		if len(outside) > 0 {
			slices.Sort(outside)
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s row %d: %d of %d draws outside the support, first token %d (%s)",
				name, row, len(outside), len(draws[i]), outside[0], s.describe(r.row(row), outside[0])))
			continue
		}
		f, err := s.Fit(draws[i])
		if err != nil {
			return err
		}
		rep.Fits = append(rep.Fits, FitResult{Config: name, Row: row, Kept: len(s.Tokens), Fit: f})
		if f.P < FitAlpha {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s row %d (kept %d): chi-square %.1f over %d bins, p = %.3g < %g; worst %s",
				name, row, len(s.Tokens), f.ChiSquare, f.Bins, f.P, FitAlpha, f.Worst))
		}
	}
	return nil
}
