package kernels_test

import (
	"fmt"
	"math"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of Gemma 2's final logit soft cap (logit_softcap: out = cap · tanh(x / cap)): each
// variant is a soft-capping bug as a kernel writes it, computed on the host in fp64 and stored
// in the logits' dtype (logitCapHost), and every committed case of each dtype (fp32, fp16,
// bf16) must reject it, but the one-logit case, whose single logit may sit where a bug does not
// show. The same host path without a bug must pass every case.
var _ = Describe("tolerance tightness, Gemma 2's final logit soft cap", harness.Tightness, harness.Op("logit_softcap"), func() {
	for _, bug := range []logitCapBug{logitCapIgnored, logitCapClamp, logitCapNoDivide, logitCapNoProduct} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			It(fmt.Sprintf("rejects %s on every %s case", bug, dt), func() {
				sets := logitSoftcapSets(dt)
				Expect(sets).NotTo(BeEmpty(), "no committed %s logit_softcap cases", dt)
				var margins, passed []string
				for _, s := range sets {
					verdicts, err := conformance.Check(logitCapHost{cpu.New(), bug}, s, tols)
					Expect(err).NotTo(HaveOccurred(), "the broken variant must run, and be rejected by comparison")
					worst := 0.0
					for _, v := range verdicts {
						if !v.Pass() {
							worst = math.Max(worst, v.Result.MaxBudget())
						}
					}
					if worst > 0 {
						margins = append(margins, fmt.Sprintf("%s (%.3gx its budget)", s.Manifest.Case, worst))
					} else if !strings.HasPrefix(s.Manifest.Case, "one-logit") {
						passed = append(passed, s.Manifest.Case)
					}
				}
				AddReportEntry("rejected by", strings.Join(margins, ", "))
				Expect(passed).To(BeEmpty(), "%s passes these %s cases", bug, dt)
			})
		}
	}
	It("accepts the variants' host soft cap without a bug", func() {
		for _, s := range setsOf("logit_softcap", "committed") {
			verdicts, err := conformance.Check(logitCapHost{cpu.New(), logitCapExact}, s, tols)
			Expect(err).NotTo(HaveOccurred())
			for _, v := range verdicts {
				Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
			}
		}
	})
})

// logitSoftcapSets are the committed logit_softcap cases whose logits are of dtype dt.
func logitSoftcapSets(dt tensor.DType) []*golden.Set {
	var out []*golden.Set
	for _, s := range setsOf("logit_softcap", "committed") {
		if in := s.Files("input"); len(in) == 1 && in[0].DType == dt.String() {
			out = append(out, s)
		}
	}
	return out
}

// logitCapBug says how a broken kernel soft-caps a logit.
type logitCapBug int

const (
	logitCapExact     logitCapBug = iota // cap · tanh(x / cap): the host path's own check
	logitCapIgnored                      // x: the cap ignored (identity)
	logitCapClamp                        // clamp(x, -cap, cap) instead of tanh
	logitCapNoDivide                     // cap · tanh(x): the division dropped
	logitCapNoProduct                    // tanh(x / cap): the product by cap dropped
)

func (b logitCapBug) String() string {
	return [...]string{"no bug", "the cap ignored (identity)", "clamp(x, -cap, cap) instead of tanh",
		"cap · tanh(x) (the division dropped)", "tanh(x / cap) (the product by cap dropped)"}[b]
}

func (b logitCapBug) apply(x, c float64) float64 {
	switch b {
	case logitCapIgnored:
		return x
	case logitCapClamp:
		return math.Max(-c, math.Min(c, x))
	case logitCapNoDivide:
		return c * math.Tanh(x)
	case logitCapNoProduct:
		return math.Tanh(x / c)
	}
	return c * math.Tanh(x/c)
}

// logitCapHost soft-caps on the host in fp64 as its bug says, rounding once to the logits' dtype,
// and writes out through backend.Memory (in place when out is x).
type logitCapHost struct {
	*cpu.Backend
	bug logitCapBug
}

func (k logitCapHost) LogitSoftcap(out, x backend.Buffer, softcap float32) error {
	if err := backend.CheckLogitSoftcap(out, x, softcap); err != nil {
		return err
	}
	t, err := k.Download(x)
	if err != nil {
		return err
	}
	res := tensor.New(t.DType, t.Shape...)
	for i, v := range t.Float32() {
		r := float32(k.bug.apply(float64(v), float64(softcap)))
		switch t.DType {
		case tensor.F32:
			res.F32[i] = r
		case tensor.F16:
			res.F16[i] = float16.Fromfloat32(r)
		case tensor.BF16:
			res.BF16[i] = tensor.BF16FromFloat32(r)
		}
	}
	return k.Write(out, res)
}
