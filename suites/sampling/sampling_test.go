package sampling_test

import (
	"fmt"
	"math"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/sample"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

var samplingSets, discoverErr = harness.SamplingSets()

// vocabularies of the three families: every one must have a set.
var vocabularies = []int{151936, 32064, 50257}

// loaded is a sampling set with its logits on the device under test.
type loaded struct {
	set    *golden.Set
	params *sample.GoldenParams
	logits backend.Buffer
	rows   int
}

func load(s *golden.Set) *loaded {
	t, err := s.Tensor("logits")
	Expect(err).NotTo(HaveOccurred())
	Expect(t.DType).To(Equal(tensor.F32), "logits dtype")
	Expect(t.Shape).To(HaveLen(2), "logits [rows, vocab]")
	p, err := sample.ParseGolden(s.Manifest.Params, t.Shape[0], t.Shape[1])
	Expect(err).NotTo(HaveOccurred(), "%s", s.ID())
	buf, err := dev.Upload(t)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(buf.Free)
	return &loaded{set: s, params: p, logits: buf, rows: t.Shape[0]}
}

func config(c *sample.GoldenCase) backend.SampleConfig {
	return backend.SampleConfig{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, Seed: c.Seed, Step: c.Step}
}

// draw samples every row of l's logits with cfg and returns the tokens.
func (l *loaded) draw(cfg backend.SampleConfig) []int32 {
	tokens, err := dev.Alloc(tensor.I32, l.rows)
	Expect(err).NotTo(HaveOccurred())
	defer tokens.Free()
	Expect(dev.Sample(tokens, l.logits, cfg)).To(Succeed())
	t, err := dev.Download(tokens)
	Expect(err).NotTo(HaveOccurred())
	return t.I32
}

// philox runs the backend's raw stream.
func philox(seed, step uint64, row uint32, n int) [][4]uint32 {
	out, err := dev.Alloc(tensor.I32, n, 4)
	Expect(err).NotTo(HaveOccurred())
	defer out.Free()
	Expect(dev.Philox(out, seed, step, row)).To(Succeed())
	t, err := dev.Download(out)
	Expect(err).NotTo(HaveOccurred())
	words := make([][4]uint32, n)
	for i := range words {
		for j := range 4 {
			words[i][j] = uint32(t.I32[4*i+j])
		}
	}
	return words
}

func setEntries() []TableEntry {
	var entries []TableEntry
	for _, s := range samplingSets {
		entries = append(entries, Entry(s.ID(), s))
	}
	return entries
}

var _ = Describe("sampling golden sets", harness.Sampling, func() {
	It("are discoverable and cover the three vocabularies with at least 200 cases", func() {
		Expect(discoverErr).NotTo(HaveOccurred())
		var vocabs []int
		cases := 0
		for _, s := range samplingSets {
			l := load(s)
			vocabs = append(vocabs, l.params.Vocab)
			cases += len(l.params.Cases)
		}
		Expect(vocabs).To(ContainElements(vocabularies))
		Expect(cases).To(BeNumerically(">=", 200))
	})
})

var _ = Describe("seeded sampling matches the reference", harness.Sampling, func() {
	DescribeTable("every case's token, its Philox words and uniform", func(s *golden.Set) {
		l := load(s)
		eps := l.params.Epsilon
		var failures []string
		exact, nearTies := 0, 0
		for i := range l.params.Cases {
			c := &l.params.Cases[i]
			got := l.draw(config(c))[c.Row]
			if c.Temperature > 0 { // greedy draws nothing: the reference records no words
				words := philox(c.Seed, c.Step, uint32(c.Row), 1)[0]
				if words != [4]uint32(c.Philox) {
					failures = append(failures, fmt.Sprintf("%s: philox(seed %d, step %d, row %d) = %08x, reference %08x", c.Name, c.Seed, c.Step, c.Row, words, c.Philox))
				}
				if u := sample.UniformOf(words); u != c.U {
					failures = append(failures, fmt.Sprintf("%s: uniform %v, reference %v", c.Name, u, c.U))
				}
			}
			margin := "none"
			if c.Margin != nil {
				margin = fmt.Sprintf("%.3g", *c.Margin)
			}
			switch {
			case c.Exact(eps):
				exact++
				if int(got) != c.Token {
					failures = append(failures, fmt.Sprintf("%s (T=%v top_k=%d top_p=%v seed=%d step=%d row=%d): token %d, reference %d (margin %s > epsilon %g)",
						c.Name, c.Temperature, c.TopK, c.TopP, c.Seed, c.Step, c.Row, got, c.Token, margin, eps))
				}
			default:
				nearTies++
				if !containsInt(c.Alternatives, int(got)) {
					failures = append(failures, fmt.Sprintf("%s: near tie (margin %s): token %d is neither of %v", c.Name, margin, got, c.Alternatives))
				}
			}
		}
		AddReportEntry("cases", fmt.Sprintf("%d exact, %d near ties (token one of the two neighbours)", exact, nearTies))
		Expect(failures).To(BeEmpty(), "%s:\n%s", s.ID(), strings.Join(failures, "\n"))
	}, setEntries())

	DescribeTable("the raw Philox streams bit for bit", func(s *golden.Set) {
		l := load(s)
		Expect(l.params.Streams).NotTo(BeEmpty())
		for _, st := range l.params.Streams {
			got := philox(st.Seed, st.Step, st.Row, st.N)
			for i, w := range st.Words {
				Expect(got[i]).To(Equal([4]uint32(w)), "seed %d, counter (%d + %d, %d)", st.Seed, st.Step, i, st.Row)
			}
		}
	}, setEntries())
})

func containsInt(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}

var _ = Describe("sampling is deterministic", harness.Sampling, func() {
	DescribeTable("20 runs of one request give the same tokens", func(s *golden.Set) {
		l := load(s)
		for _, c := range l.params.Cases {
			if c.Temperature == 0 || c.TopK == 1 {
				continue // only a real draw exercises the sort, scan and search
			}
			first := l.draw(config(&c))
			for run := 1; run < 20; run++ {
				Expect(l.draw(config(&c))).To(Equal(first), "run %d of %s", run, c.Name)
			}
			return
		}
		Fail("no sampled case in " + s.ID())
	}, setEntries())
})

var _ = Describe("invalid sampling requests", harness.Sampling, func() {
	ninf, nan := float32(math.Inf(-1)), float32(math.NaN())
	ok := backend.SampleConfig{Temperature: 1, TopP: 1}

	DescribeTable("a bad config is refused before anything runs, naming op, argument and value",
		func(cfg backend.SampleConfig, arg, value string) {
			logits, err := dev.Upload(tensor.FromF32([]int{1, 4}, []float32{1, 2, 3, 4}))
			Expect(err).NotTo(HaveOccurred())
			defer logits.Free()
			tokens, err := dev.Upload(tensor.FromI32([]int{1}, []int32{-7}))
			Expect(err).NotTo(HaveOccurred())
			defer tokens.Free()
			err = dev.Sample(tokens, logits, cfg)
			Expect(err).To(MatchError(backend.ErrInvalidArgument))
			Expect(err.Error()).To(And(ContainSubstring("sample"), ContainSubstring(arg), ContainSubstring(value)))
			t, derr := dev.Download(tokens)
			Expect(derr).NotTo(HaveOccurred())
			Expect(t.I32).To(Equal([]int32{-7}), "output untouched")
		},
		Entry("temperature < 0", backend.SampleConfig{Temperature: -0.5, TopP: 1}, "temperature", "-0.5"),
		Entry("temperature NaN", backend.SampleConfig{Temperature: nan, TopP: 1}, "temperature", "NaN"),
		Entry("temperature +inf", backend.SampleConfig{Temperature: float32(math.Inf(1)), TopP: 1}, "temperature", "+Inf"),
		Entry("top_k < 0", backend.SampleConfig{Temperature: 1, TopK: -1, TopP: 1}, "top_k", "-1"),
		Entry("top_p 0", backend.SampleConfig{Temperature: 1, TopP: 0}, "top_p", "0"),
		Entry("top_p > 1", backend.SampleConfig{Temperature: 1, TopP: 1.5}, "top_p", "1.5"),
		Entry("top_p NaN", backend.SampleConfig{Temperature: 1, TopP: nan}, "top_p", "NaN"),
	)

	It("refuses an empty vocabulary", func() {
		logits, err := dev.Alloc(tensor.F32, 1, 0)
		Expect(err).NotTo(HaveOccurred())
		defer logits.Free()
		tokens, err := dev.Alloc(tensor.I32, 1)
		Expect(err).NotTo(HaveOccurred())
		defer tokens.Free()
		err = dev.Sample(tokens, logits, ok)
		Expect(err).To(MatchError(backend.ErrInvalidArgument))
		Expect(err.Error()).To(And(ContainSubstring("sample"), ContainSubstring("logits"), ContainSubstring("[1,0]")))
	})

	DescribeTable("bad logits are an error naming the row and index (on the GPU, at the next download)",
		func(values []float32, cfg backend.SampleConfig, where string) {
			logits, err := dev.Upload(tensor.FromF32([]int{2, 4}, append([]float32{0, 1, 2, 3}, values...)))
			Expect(err).NotTo(HaveOccurred())
			defer logits.Free()
			tokens, err := dev.Alloc(tensor.I32, 2)
			Expect(err).NotTo(HaveOccurred())
			defer tokens.Free()
			err = dev.Sample(tokens, logits, cfg)
			if err == nil {
				_, err = dev.Download(tokens) // asynchronous device check
			}
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(And(ContainSubstring("sample"), ContainSubstring(where)))
			// The backend stays usable: the fault was reported once, not latched.
			good, err := dev.Upload(tensor.FromF32([]int{2, 4}, []float32{0, 1, 2, 3, 3, 2, 1, 0}))
			Expect(err).NotTo(HaveOccurred())
			defer good.Free()
			Expect(dev.Sample(tokens, good, backend.SampleConfig{TopP: 1})).To(Succeed())
			t, err := dev.Download(tokens)
			Expect(err).NotTo(HaveOccurred())
			Expect(t.I32).To(Equal([]int32{3, 0}))
		},
		Entry("NaN", []float32{0, nan, 1, 2}, ok, "logits[1][1]"),
		Entry("+inf", []float32{float32(math.Inf(1)), 0, 1, 2}, ok, "logits[1][0]"),
		Entry("a row all -inf", []float32{ninf, ninf, ninf, ninf}, ok, "logits[1]"),
		Entry("NaN when greedy", []float32{0, 1, nan, 2}, backend.SampleConfig{TopP: 1}, "logits[1][2]"),
	)
})
