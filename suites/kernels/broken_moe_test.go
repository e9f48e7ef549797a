package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// The mixture-of-experts bugs that give plausible text: a router that forgets (or adds) the
// renormalisation or breaks ties the other way, an expert block that swaps the gate and up
// halves, drops the routing weights or sends a token's rows to its neighbour's experts.
var _ = Describe("tolerance tightness (mixture of experts)", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken kernel",
		func(op string, dt tensor.DType, broken backend.Backend, mustCatch string) {
			expectRejected(op, dt, broken, mustCatch)
		},
		Entry("moe_router: no renormalisation where it is asked (Mixtral)", "moe_router", tensor.F16, routerRenorm{cpu.New(), false}, "mixtral"),
		Entry("moe_router: renormalised where it is not asked (Qwen2-MoE's norm_topk_prob false)", "moe_router", tensor.F16, routerRenorm{cpu.New(), true}, "e60"),
		Entry("moe_router: equal logits ranked by the higher expert index", "moe_router", tensor.F16, routerTiesHigh{cpu.New()}, "tie"),
		Entry("moe_router: equal logits ranked by the higher expert index, in bf16", "moe_router", tensor.BF16, routerTiesHigh{cpu.New()}, "tie"),
		Entry("moe_ffn: the gate and up halves of gate_up swapped", "moe_ffn", tensor.F16, moeHalvesSwapped{cpu.New()}, "mixtral"),
		Entry("moe_ffn: the routing weights ignored (every expert weighted 1)", "moe_ffn", tensor.F16, moeUnweighted{cpu.New()}, "mixtral"),
		Entry("moe_ffn: a token's rows gathered from the next token (the permutation off by one)", "moe_ffn", tensor.F16, moeNextToken{cpu.New()}, "qwen3"),
		Entry("moe_ffn: the gate and up halves swapped, in bf16", "moe_ffn", tensor.BF16, moeHalvesSwapped{cpu.New()}, "bf16-"),
	)
})

// routerRenorm ignores the renormalize argument: always true renormalises every row, false
// none.
type routerRenorm struct {
	*cpu.Backend
	always bool
}

func (k routerRenorm) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	return k.Backend.MoERouter(weights, ids, logits, topK, k.always)
}

// routerTiesHigh reverses each row's experts before routing, so equal logits rank the higher
// original index first, then maps the ids back.
type routerTiesHigh struct{ *cpu.Backend }

func (k routerTiesHigh) MoERouter(weights, ids, logits backend.Buffer, topK int, renormalize bool) error {
	e := logits.Shape()[1]
	rev, err := mutated(k, logits, func(t *tensor.Tensor) { reverseRows(t, e) })
	if err != nil {
		return err
	}
	defer rev.Free()
	if err := k.Backend.MoERouter(weights, ids, rev, topK, renormalize); err != nil {
		return err
	}
	got, err := k.Download(ids)
	if err != nil {
		return err
	}
	for i, v := range got.I32 {
		got.I32[i] = int32(e-1) - v
	}
	return k.Write(ids, got)
}

// reverseRows reverses every row of n elements of a 16-bit tensor in place.
func reverseRows(t *tensor.Tensor, n int) {
	for r := 0; r < t.Len()/n; r++ {
		for i, j := r*n, r*n+n-1; i < j; i, j = i+1, j-1 {
			if t.DType == tensor.BF16 {
				t.BF16[i], t.BF16[j] = t.BF16[j], t.BF16[i]
			} else {
				t.F16[i], t.F16[j] = t.F16[j], t.F16[i]
			}
		}
	}
}

// moeHalvesSwapped reads rows F..2F-1 of each expert's gate_up as the gate.
type moeHalvesSwapped struct{ *cpu.Backend }

func (k moeHalvesSwapped) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	f2, h := gateUp.Shape()[1], gateUp.Shape()[2]
	half := f2 / 2 * h
	sw, err := mutated(k, gateUp, func(t *tensor.Tensor) {
		for e := 0; e < t.Shape[0]; e++ {
			base := e * f2 * h
			for i := 0; i < half; i++ {
				a, b := base+i, base+half+i
				if t.DType == tensor.BF16 {
					t.BF16[a], t.BF16[b] = t.BF16[b], t.BF16[a]
				} else {
					t.F16[a], t.F16[b] = t.F16[b], t.F16[a]
				}
			}
		}
	})
	if err != nil {
		return err
	}
	defer sw.Free()
	return k.Backend.MoEFFN(out, x, ids, weights, sw, down)
}

// moeUnweighted adds each chosen expert's output with weight 1.
type moeUnweighted struct{ *cpu.Backend }

func (k moeUnweighted) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	ones, err := mutated(k, weights, func(t *tensor.Tensor) {
		for i := range t.F32 {
			t.F32[i] = 1
		}
	})
	if err != nil {
		return err
	}
	defer ones.Free()
	return k.Backend.MoEFFN(out, x, ids, ones, gateUp, down)
}

// moeNextToken routes token t with token t+1's experts and weights (the last keeps its own): a
// permutation whose inverse map is one row off.
type moeNextToken struct{ *cpu.Backend }

func (k moeNextToken) MoEFFN(out, x, ids, weights, gateUp, down backend.Buffer) error {
	n := ids.Shape()[1]
	shift := func(t *tensor.Tensor) {
		rows := t.Len() / n
		for r := 0; r+1 < rows; r++ {
			for j := 0; j < n; j++ {
				if t.DType == tensor.I32 {
					t.I32[r*n+j] = t.I32[(r+1)*n+j]
				} else {
					t.F32[r*n+j] = t.F32[(r+1)*n+j]
				}
			}
		}
	}
	si, err := mutated(k, ids, shift)
	if err != nil {
		return err
	}
	defer si.Free()
	sw, err := mutated(k, weights, shift)
	if err != nil {
		return err
	}
	defer sw.Free()
	return k.Backend.MoEFFN(out, x, si, sw, gateUp, down)
}
