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
	err = dev.Sample(tokens, l.logits, cfg)
	harness.SkipUnsupported(err)
	Expect(err).NotTo(HaveOccurred())
	t, err := dev.Download(tokens)
	Expect(err).NotTo(HaveOccurred())
	return t.I32
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
	DescribeTable("every case's token, its Philox words, and the raw streams bit for bit", func(s *golden.Set) {
		if sample.OwnRNG(dev) {
			Skip("this sampler draws its own random numbers, not the spec's Philox stream: the specs of own_rng_test.go judge it")
		}
		rep, err := sample.CheckSet(dev, s)
		// A sampling request the backend does not implement is skipped with its reason, or
		// fails under TOUCHSTONE_UNSUPPORTED=fail, as a kernel case is.
		harness.SkipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("cases", fmt.Sprintf("%d cases: %d exact, %d near ties (token one of the two neighbours); %d Philox outputs compared",
			rep.Cases, rep.Exact, rep.NearTies, rep.Words))
		Expect(rep.Exact).To(BeNumerically(">", 0))
		Expect(rep.Failures).To(BeEmpty(), "%s:\n%s", s.ID(), strings.Join(rep.Failures, "\n"))
	}, setEntries())
})

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
	nan := float32(math.NaN())
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
		func(bl badLogits) {
			err := bl.sample()
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(And(ContainSubstring("sample"), ContainSubstring(bl.where)))
			// The backend stays usable: the fault was reported once, not latched.
			good, err := dev.Upload(tensor.FromF32([]int{2, 4}, []float32{0, 1, 2, 3, 3, 2, 1, 0}))
			Expect(err).NotTo(HaveOccurred())
			defer good.Free()
			tokens, err := dev.Alloc(tensor.I32, 2)
			Expect(err).NotTo(HaveOccurred())
			defer tokens.Free()
			// Top-1 rather than greedy: a sampler without a greedy kernel (FlashInfer's) draws it.
			Expect(dev.Sample(tokens, good, backend.SampleConfig{Temperature: 1, TopK: 1, TopP: 1})).To(Succeed())
			t, err := dev.Download(tokens)
			Expect(err).NotTo(HaveOccurred())
			Expect(t.I32).To(Equal([]int32{3, 0}))
		},
		badLogitEntries(),
	)
})

// badLogits is a second row of logits (after 0, 1, 2, 3) that sample must refuse; a GPU finds
// it on the device and reports it at the next download.
type badLogits struct {
	name   string
	values []float32
	cfg    backend.SampleConfig
	where  string
}

var badLogitCases = func() []badLogits {
	ninf, nan := float32(math.Inf(-1)), float32(math.NaN())
	ok := backend.SampleConfig{Temperature: 1, TopP: 1}
	return []badLogits{
		{"NaN", []float32{0, nan, 1, 2}, ok, "logits[1][1]"},
		{"+inf", []float32{float32(math.Inf(1)), 0, 1, 2}, ok, "logits[1][0]"},
		{"a row all -inf", []float32{ninf, ninf, ninf, ninf}, ok, "logits[1]"},
		{"NaN when greedy", []float32{0, 1, nan, 2}, backend.SampleConfig{TopP: 1}, "logits[1][2]"},
	}
}()

func badLogitEntries() []TableEntry {
	var entries []TableEntry
	for _, bl := range badLogitCases {
		entries = append(entries, Entry(bl.name, bl))
	}
	return entries
}

// sample draws from the bad logits and returns the error of the call or of the download after it.
func (bl badLogits) sample() error {
	logits, err := dev.Upload(tensor.FromF32([]int{2, 4}, append([]float32{0, 1, 2, 3}, bl.values...)))
	Expect(err).NotTo(HaveOccurred())
	defer logits.Free()
	tokens, err := dev.Alloc(tensor.I32, 2)
	Expect(err).NotTo(HaveOccurred())
	defer tokens.Free()
	err = dev.Sample(tokens, logits, bl.cfg)
	if err == nil {
		_, err = dev.Download(tokens) // asynchronous device check
	}
	return err
}
