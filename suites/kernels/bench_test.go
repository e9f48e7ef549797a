package kernels_test

import (
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gmeasure"

	"github.com/touchstone-llm/touchstone/engine/bench"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Kernel benchmarks as gmeasure experiments, attached to the report: device-event medians
// with L2 flushed before each launch, achieved GB/s and share of the measured copy bandwidth.
// `touchstone bench` runs the same cases with PyTorch's equivalents beside them.
var _ = Describe("kernel benchmarks", Serial, harness.Benchmark, func() {
	var runner *bench.Runner

	BeforeAll(func() {
		prof, ok := dev.(bench.Profiler)
		if !ok {
			Skip(fmt.Sprintf("the %s backend has no device timers", dev.Info().Backend))
		}
		var err error
		runner, err = bench.NewRunner(prof, bench.Options{Warmup: 10, Repeats: 50, Seed: 1})
		if errors.Is(err, bench.ErrGuards) {
			Skip(err.Error())
		}
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(runner.Close)
	})

	for _, c := range bench.Cases() {
		label := harness.Sampling // the sampler is not a golden kernel op
		if c.Op != bench.SampleOp {
			label = harness.Op(c.Op)
		}
		It(c.Name, label, func() {
			res, err := runner.Run(c)
			harness.SkipUnsupported(err)
			Expect(err).NotTo(HaveOccurred())
			exp := gmeasure.NewExperiment(c.Name)
			for _, ms := range res.Times {
				exp.RecordDuration("launch", time.Duration(ms*float64(time.Millisecond)), gmeasure.Precision(time.Microsecond))
			}
			if res.GBps > 0 {
				// Precision of a value is its number of decimal places (an int).
				exp.RecordValue("GB/s", res.GBps, gmeasure.Precision(0))
				exp.RecordValue("% of copy bandwidth", res.CopyPct, gmeasure.Precision(1))
			}
			if res.TFLOPs > 0 {
				exp.RecordValue("TFLOP/s", res.TFLOPs, gmeasure.Precision(1))
			}
			AddReportEntry(exp.Name, exp)
		})
	}
}, Ordered)
