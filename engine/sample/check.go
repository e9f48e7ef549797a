package sample

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// SetReport is a sampling golden set run on a backend.
type SetReport struct {
	Cases    int      // cases drawn
	Exact    int      // cases whose token must equal the reference's
	NearTies int      // deliberate near ties: the token must be one of the two alternatives
	Words    int      // Philox outputs compared bit for bit (cases and streams)
	Failures []string // one line per mismatch, naming the case and its config
}

// CheckSet draws every case of a sampling set on be, the whole [rows, vocab] batch per case
// with its config, and compares row Row's token with the reference (exactly where the
// margin exceeds the set's epsilon, else one of the two alternatives), each drawing case's
// Philox words, and the set's raw streams bit for bit. A backend error, an unsupported one
// (backend.ErrUnsupported) included, is returned wrapped with the set and case, for the
// caller to give the unsupported verdict or fail.
func CheckSet(be backend.Backend, set *golden.Set) (*SetReport, error) {
	rs, err := loadRows(set)
	if err != nil {
		return nil, err
	}
	logits, p, rows := rs.logits, rs.params, rs.logits.Shape[0]
	dev, err := be.Upload(logits)
	if err != nil {
		return nil, err
	}
	defer dev.Free()
	tokens, err := be.Alloc(tensor.I32, rows)
	if err != nil {
		return nil, err
	}
	defer tokens.Free()
	r := &SetReport{}
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	for i := range p.Cases {
		c := &p.Cases[i]
		cfg := backend.SampleConfig{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, Seed: c.Seed, Step: c.Step}
		if err := be.Sample(tokens, dev, cfg); err != nil {
			return nil, fmt.Errorf("%s %s: %w", set.ID(), c.Name, err)
		}
		t, err := be.Download(tokens)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", set.ID(), c.Name, err)
		}
		got := int(t.I32[c.Row])
		r.Cases++
		if c.Exact(p.Epsilon) {
			r.Exact++
			if got != c.Token {
				fail("%s (T=%v top_k=%d top_p=%v seed=%d step=%d row=%d): token %d, reference %d (margin %s > epsilon %g)",
					c.Name, c.Temperature, c.TopK, c.TopP, c.Seed, c.Step, c.Row, got, c.Token, marginString(c.Margin), p.Epsilon)
			}
		} else {
			r.NearTies++
			if got != c.Alternatives[0] && got != c.Alternatives[1] {
				fail("%s: near tie (margin %s): token %d is neither of %v", c.Name, marginString(c.Margin), got, c.Alternatives)
			}
		}
		if c.Temperature > 0 { // greedy draws nothing: the reference records no words
			w, err := philox(be, c.Seed, c.Step, uint32(c.Row), 1)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", set.ID(), c.Name, err)
			}
			r.Words++
			if w[0] != [4]uint32(c.Philox) {
				fail("%s: philox(seed %d, step %d, row %d) = %08x, reference %08x", c.Name, c.Seed, c.Step, c.Row, w[0], c.Philox)
			}
		}
	}
	for _, st := range p.Streams {
		w, err := philox(be, st.Seed, st.Step, st.Row, st.N)
		if err != nil {
			return nil, fmt.Errorf("%s stream seed %d: %w", set.ID(), st.Seed, err)
		}
		for i := range w {
			r.Words++
			if w[i] != [4]uint32(st.Words[i]) {
				fail("stream seed %d, counter (%d + %d, %d): %08x, reference %08x", st.Seed, st.Step, i, st.Row, w[i], st.Words[i])
			}
		}
	}
	return r, nil
}

func marginString(m *float64) string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("%.3g", *m)
}

// philox runs the backend's raw stream of n outputs.
func philox(be backend.Backend, seed, step uint64, row uint32, n int) ([][4]uint32, error) {
	out, err := be.Alloc(tensor.I32, n, 4)
	if err != nil {
		return nil, err
	}
	defer out.Free()
	if err := be.Philox(out, seed, step, row); err != nil {
		return nil, err
	}
	t, err := be.Download(out)
	if err != nil {
		return nil, err
	}
	words := make([][4]uint32, n)
	for i := range words {
		for j := range 4 {
			words[i][j] = uint32(t.I32[4*i+j])
		}
	}
	return words, nil
}
