package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// BF16Suffix ends the name of a case's bf16 twin.
const BF16Suffix = " bf16"

// BF16Twin returns c with every fp16 input stored in bf16 instead (gemm's fp16 output too):
// the same shapes, the same bytes, the same kernel structure, so its time should match c's
// (issue target: within 3%). ok is false for a case with no fp16 input (fp32 softmax, the
// sampler), which has no twin.
func BF16Twin(c Case) (twin Case, ok bool) {
	twin = c
	twin.Inputs = slices.Clone(c.Inputs)
	for i, in := range twin.Inputs {
		if in.DType == tensor.F16 {
			twin.Inputs[i].DType, ok = tensor.BF16, true
		}
	}
	if !ok {
		return Case{}, false
	}
	twin.Name = c.Name + BF16Suffix
	twin.Params = strings.Replace(c.Params, `"out_dtype": "f16"`, `"out_dtype": "bf16"`, 1)
	return twin, true
}

// WithDType selects the cases of one storage dtype: "f16" (cases as they are), "bf16" (their
// twins), or "both" (each case followed by its twin, where it has one).
func WithDType(cases []Case, dtype string) ([]Case, error) {
	var out []Case
	for _, c := range cases {
		twin, ok := BF16Twin(c)
		switch dtype {
		case "f16":
			out = append(out, c)
		case "bf16":
			if ok {
				out = append(out, twin)
			}
		case "both":
			out = append(out, c)
			if ok {
				out = append(out, twin)
			}
		default:
			return nil, fmt.Errorf("bench: -dtype %q: want f16, bf16 or both", dtype)
		}
	}
	return out, nil
}
