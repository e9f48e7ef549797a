package sample

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// GoldenCase is one case of a sampling golden set (docs/golden-format.md, "Sampling sets"):
// a config drawn on the set's logits as a batch, whose row Row must give Token.
type GoldenCase struct {
	Name         string   `json:"name"`
	Row          int      `json:"row"`
	Temperature  float32  `json:"temperature"`
	TopK         int      `json:"top_k"`
	TopP         float32  `json:"top_p"`
	Seed         uint64   `json:"seed"`
	Step         uint64   `json:"step"`
	Token        int      `json:"token"`
	U            float64  `json:"u"`      // null (read as 0) for greedy cases, which draw nothing
	Philox       []uint32 `json:"philox"` // null for greedy cases
	Candidates   int      `json:"candidates"`
	Kept         int      `json:"kept"`
	Margin       *float64 `json:"margin"` // nil: no floating-point decision (greedy, nucleus of one)
	NearTie      bool     `json:"near_tie"`
	Alternatives []int    `json:"alternatives"`
}

// GoldenStream is a raw Philox stream: Words[i] is the output for counter (Step + i, Row).
type GoldenStream struct {
	Seed  uint64     `json:"seed"`
	Step  uint64     `json:"step"`
	Row   uint32     `json:"row"`
	N     int        `json:"n"`
	Words [][]uint32 `json:"words"`
}

// GoldenParams are a sampling set's params.
type GoldenParams struct {
	Vocab   int            `json:"vocab"`
	Epsilon float64        `json:"epsilon"`
	Cases   []GoldenCase   `json:"cases"`
	Streams []GoldenStream `json:"streams"`
}

// Exact reports whether the case's token must match exactly: it is not a deliberate near-tie
// and its margin (if any) exceeds epsilon.
func (c *GoldenCase) Exact(epsilon float64) bool {
	return !c.NearTie && (c.Margin == nil || *c.Margin > epsilon)
}

var (
	caseKeys   = []string{"name", "row", "temperature", "top_k", "top_p", "seed", "step", "token", "u", "philox", "candidates", "kept", "margin", "near_tie", "alternatives"}
	streamKeys = []string{"seed", "step", "row", "n", "words"}
	paramKeys  = []string{"vocab", "epsilon", "cases", "streams"}
)

// ParseGolden decodes and validates a sampling set's params against its logits [rows, vocab]:
// strict keys at every level (unknown or missing ones are errors), values in range, and
// each case's recorded Philox words and uniform consistent with each other.
func ParseGolden(params []byte, rows, vocab int) (*GoldenParams, error) {
	if err := requireKeys(params, paramKeys, "params"); err != nil {
		return nil, err
	}
	var raw struct {
		Cases   []json.RawMessage `json:"cases"`
		Streams []json.RawMessage `json:"streams"`
	}
	if err := json.Unmarshal(params, &raw); err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	for i, c := range raw.Cases {
		if err := requireKeys(c, caseKeys, fmt.Sprintf("cases[%d]", i)); err != nil {
			return nil, err
		}
	}
	for i, s := range raw.Streams {
		if err := requireKeys(s, streamKeys, fmt.Sprintf("streams[%d]", i)); err != nil {
			return nil, err
		}
	}
	var p GoldenParams
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	if err := p.validate(rows, vocab); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *GoldenParams) validate(rows, vocab int) error {
	switch {
	case p.Vocab != vocab:
		return fmt.Errorf("params.vocab %d, but the logits have %d columns", p.Vocab, vocab)
	case !(p.Epsilon > 0 && p.Epsilon < 1):
		return fmt.Errorf("params.epsilon %v: want a value in (0, 1)", p.Epsilon)
	case len(p.Cases) == 0:
		return fmt.Errorf("params.cases: empty")
	}
	names := map[string]bool{}
	for i, c := range p.Cases {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("cases[%d] (%q): %s", i, c.Name, fmt.Sprintf(format, args...))
		}
		t, tp := float64(c.Temperature), float64(c.TopP)
		switch {
		case c.Name == "" || names[c.Name]:
			return bad("name missing or repeated")
		case c.Row < 0 || c.Row >= rows:
			return bad("row %d outside the %d logits rows", c.Row, rows)
		case !(t >= 0) || math.IsInf(t, 0) || c.TopK < 0 || !(tp > 0 && tp <= 1):
			return bad("config out of range: temperature %v, top_k %d, top_p %v", c.Temperature, c.TopK, c.TopP)
		case c.Token < 0 || c.Token >= vocab:
			return bad("token %d outside the vocabulary", c.Token)
		case c.Temperature > 0 && len(c.Philox) != 4, c.Temperature == 0 && c.Philox != nil:
			return bad("philox: %d words, want 4 for a draw and null for greedy", len(c.Philox))
		case c.Temperature > 0 && UniformOf([4]uint32(c.Philox)) != c.U:
			return bad("u %v is not the uniform of its philox words (%v)", c.U, UniformOf([4]uint32(c.Philox)))
		case c.Margin != nil && !(*c.Margin >= 0):
			return bad("margin %v: want >= 0 or null", *c.Margin)
		case c.NearTie && (len(c.Alternatives) != 2 || !slices.Contains(c.Alternatives, c.Token)):
			return bad("a near tie needs the two alternatives, the token among them: %v", c.Alternatives)
		}
		for _, a := range c.Alternatives {
			if a < 0 || a >= vocab {
				return bad("alternative %d outside the vocabulary", a)
			}
		}
		names[c.Name] = true
	}
	for i, s := range p.Streams {
		if s.N < 1 || len(s.Words) != s.N {
			return fmt.Errorf("streams[%d]: n %d with %d words", i, s.N, len(s.Words))
		}
		for j, w := range s.Words {
			if len(w) != 4 {
				return fmt.Errorf("streams[%d].words[%d]: %d words, want 4", i, j, len(w))
			}
		}
	}
	return nil
}

// requireKeys fails unless data is a JSON object holding every key of keys.
func requireKeys(data []byte, keys []string, where string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if obj == nil {
		return fmt.Errorf("%s: want a JSON object", where)
	}
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return fmt.Errorf("%s: missing key %q", where, k)
		}
	}
	return nil
}

// OpName is sampling's name where ops are named: the bench's sample cases and the external
// protocol's sample op.
const OpName = "sample"

// Params are a sampling request as JSON, with the keys of the golden cases: the bench's sample
// cases (no step: each launch takes the next) and the external protocol's sample op.
type Params struct {
	Temperature float32 `json:"temperature"`
	TopK        int     `json:"top_k"`
	TopP        float32 `json:"top_p"`
	Seed        uint64  `json:"seed"`
	Step        uint64  `json:"step"`
}

// ParamsOf is cfg as Params.
func ParamsOf(cfg backend.SampleConfig) Params {
	return Params{cfg.Temperature, cfg.TopK, cfg.TopP, cfg.Seed, cfg.Step}
}

// Config is p as a backend.SampleConfig.
func (p Params) Config() backend.SampleConfig {
	return backend.SampleConfig{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, Seed: p.Seed, Step: p.Step}
}
