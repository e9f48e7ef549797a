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

// Tightness of Qwen2-MoE's gated shared expert (moe_shared_add: out = routed + sigmoid(x · gate)
// ⊙ shared): each variant is a bug as a kernel writes it, computed on the host in fp64 and stored
// in the storage dtype (sharedAddHost), and every committed case of each dtype must reject it,
// but where the bug cannot show: the previous token's gate with one token, and a truncating bf16
// store on the 8-value case (too few values for nmse, which carries it: golden/tolerances.yaml
// says why). The same host path without a bug must pass every case, and so must transformers'
// eager order (the logit, the sigmoid, the product and the sum each rounded to the storage type)
// and the product alone rounded before the add: that is the reference engine's own rounding, and
// the tolerance admits it by design.
var _ = Describe("tolerance tightness, Qwen2-MoE's gated shared expert", harness.Tightness, harness.Op("moe_shared_add"), func() {
	bugs := []sharedAddBug{sharedGateOne, sharedGateTanh, sharedGateRaw, sharedGatePrevToken, sharedDotNoLast,
		sharedDotNoLast8, sharedDotNoFirst8, sharedGateOnRouted, sharedDropped, sharedTruncBF16}
	for _, bug := range bugs {
		for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
			if bug == sharedTruncBF16 && dt != tensor.BF16 {
				continue
			}
			It(fmt.Sprintf("rejects %s on every %s case", bug, dt), func() {
				sets := sharedAddSets(dt)
				Expect(len(sets)).To(BeNumerically(">=", minCommittedCases), "committed %s moe_shared_add cases", dt)
				var margins, passed []string
				for _, s := range sets {
					verdicts, err := conformance.Check(sharedAddHost{cpu.New(), bug}, s, tols)
					Expect(err).NotTo(HaveOccurred(), "the broken variant must run, and be rejected by comparison")
					worst := 0.0
					for _, v := range verdicts {
						if !v.Pass() {
							worst = math.Max(worst, v.Result.MaxBudget())
						}
					}
					if worst > 0 {
						margins = append(margins, fmt.Sprintf("%s (%.3gx its budget)", s.Manifest.Case, worst))
					} else if bug.canShow(s) {
						passed = append(passed, s.Manifest.Case)
					}
				}
				AddReportEntry("rejected by", strings.Join(margins, ", "))
				Expect(passed).To(BeEmpty(), "%s passes these %s cases", bug, dt)
				Expect(margins).NotTo(BeEmpty(), "%s is rejected by no %s case", bug, dt)
			})
		}
	}
	for _, ok := range []sharedAddBug{sharedExact, sharedTorchOrder, sharedProductRounded} {
		It(fmt.Sprintf("accepts %s on every case", ok), func() {
			for _, s := range setsOf("moe_shared_add", "committed") {
				verdicts, err := conformance.Check(sharedAddHost{cpu.New(), ok}, s, tols)
				Expect(err).NotTo(HaveOccurred())
				for _, v := range verdicts {
					Expect(v.Pass()).To(BeTrue(), "%s, %s output %s:\n%s", ok, s.Manifest.Case, v.Output, v.Result.Table())
				}
			}
		})
	}
})

// sharedAddSets are the committed moe_shared_add cases stored in dt.
func sharedAddSets(dt tensor.DType) []*golden.Set {
	var out []*golden.Set
	for _, s := range setsOf("moe_shared_add", "committed") {
		if conformance.Storage(s) == dt {
			out = append(out, s)
		}
	}
	return out
}

// sharedAddBug says how a kernel adds the gated shared expert; the first three are correct.
type sharedAddBug int

const (
	sharedExact          sharedAddBug = iota // fp64, one rounding: the host path's own check
	sharedTorchOrder                         // transformers' eager order: logit, sigmoid, product, sum each rounded
	sharedProductRounded                     // the product rounded to the storage type before the add
	sharedGateOne                            // s = 1: the gate not applied
	sharedGateTanh                           // tanh(z) for sigmoid(z)
	sharedGateRaw                            // the raw logit z for sigmoid(z)
	sharedGatePrevToken                      // token t takes token t-1's gate (token 0 its own)
	sharedDotNoLast                          // the dot without its last element (a scalar tail dropped)
	sharedDotNoLast8                         // the dot without its last 8 elements (the last vector)
	sharedDotNoFirst8                        // the dot without its first 8 elements (the first vector)
	sharedGateOnRouted                       // s · routed + shared
	sharedDropped                            // out = routed: the shared term dropped
	sharedTruncBF16                          // a bf16 store that truncates the fp32 value
)

func (b sharedAddBug) String() string {
	return [...]string{"no bug", "transformers' eager order (each step rounded)", "the product rounded before the add",
		"the gate not applied (s = 1)", "tanh for the sigmoid", "the raw logit for the sigmoid",
		"the previous token's gate", "the dot without its last element", "the dot without its last 8",
		"the dot without its first 8", "the gate on routed", "the shared term dropped",
		"a truncating bf16 store"}[b]
}

// canShow says whether the bug can change the output of set s: the previous token's gate needs
// two tokens, a truncation more than 8 values for nmse's mean to see its bias.
func (b sharedAddBug) canShow(s *golden.Set) bool {
	for _, f := range s.Files("input") {
		if f.Name != "x" {
			continue
		}
		switch b {
		case sharedGatePrevToken:
			return f.Shape[0] > 1
		case sharedTruncBF16:
			return tensor.NumElements(f.Shape) > 8
		}
	}
	return true
}

// sharedAddHost adds the gated shared expert on the host in fp64 as its bug says, stores out in
// the storage dtype and writes it through backend.Memory (in place when out is routed).
type sharedAddHost struct {
	*cpu.Backend
	bug sharedAddBug
}

func (k sharedAddHost) MoESharedAdd(out, routed, shared, x, gate backend.Buffer) error {
	if err := backend.CheckMoESharedAdd(out, routed, shared, x, gate); err != nil {
		return err
	}
	var host [4]*tensor.Tensor
	for i, b := range []backend.Buffer{routed, shared, x, gate} {
		t, err := k.Download(b)
		if err != nil {
			return err
		}
		host[i] = t
	}
	rv, sv, xv, gv := host[0].Float32(), host[1].Float32(), host[2].Float32(), host[3].Float32()
	dt, rows, h := host[2].DType, host[2].Shape[0], host[2].Shape[1]
	round := func(v float64) float64 { return float64(tensor.Round(dt, float32(v))) }
	z := make([]float64, rows)
	for t := range z {
		for c := 0; c < h; c++ {
			if k.bug == sharedDotNoLast && c == h-1 || k.bug == sharedDotNoLast8 && c >= h-8 || k.bug == sharedDotNoFirst8 && c < 8 {
				continue
			}
			z[t] += float64(xv[t*h+c]) * float64(gv[c])
		}
		if k.bug == sharedTorchOrder {
			z[t] = round(float64(float32(z[t]))) // F.linear's fp32 accumulation, stored
		}
	}
	res := tensor.New(dt, rows, h)
	for t := 0; t < rows; t++ {
		zt := z[t]
		if k.bug == sharedGatePrevToken && t > 0 {
			zt = z[t-1]
		}
		s := 1 / (1 + math.Exp(-zt))
		switch k.bug {
		case sharedGateOne:
			s = 1
		case sharedGateTanh:
			s = math.Tanh(zt)
		case sharedGateRaw:
			s = zt
		case sharedTorchOrder:
			s = round(s)
		}
		for c := 0; c < h; c++ {
			i := t*h + c
			r, sh := float64(rv[i]), float64(sv[i])
			v := r + s*sh
			switch k.bug {
			case sharedTorchOrder, sharedProductRounded:
				v = r + round(s*sh)
			case sharedGateOnRouted:
				v = s*r + sh
			case sharedDropped:
				v = r
			}
			switch {
			case k.bug == sharedTruncBF16 && dt == tensor.BF16:
				res.BF16[i] = tensor.BFloat16(math.Float32bits(float32(v)) >> 16)
			case dt == tensor.BF16:
				res.BF16[i] = tensor.BF16FromFloat32(float32(v))
			default:
				res.F16[i] = float16.Fromfloat32(float32(v))
			}
		}
	}
	return k.Write(out, res)
}
