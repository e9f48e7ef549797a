package conformance

import (
	"math/rand/v2"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// InputSpec describes one random input tensor, for the cross-backend check and benchmarks.
type InputSpec struct {
	Name  string
	DType tensor.DType
	Shape []int
	// Gen returns element i; nil draws N(0, 1). Never all zeros: timing and comparing
	// zeros proves nothing.
	Gen func(r *rand.Rand, i int) float64
}

// Spec is shorthand for an InputSpec literal.
func Spec(name string, dt tensor.DType, shape []int, gen func(*rand.Rand, int) float64) InputSpec {
	return InputSpec{Name: name, DType: dt, Shape: shape, Gen: gen}
}

// Normal draws N(mean, std²).
func Normal(std, mean float64) func(*rand.Rand, int) float64 {
	return func(r *rand.Rand, _ int) float64 { return mean + std*r.NormFloat64() }
}

// IntsBelow draws integers uniformly in [0, n).
func IntsBelow(n int) func(*rand.Rand, int) float64 { return IntsIn(0, n) }

// IntsIn draws integers uniformly in [lo, hi).
func IntsIn(lo, hi int) func(*rand.Rand, int) float64 {
	return func(r *rand.Rand, _ int) float64 { return float64(lo + r.IntN(hi-lo)) }
}

// OnePerBucket draws element i uniformly from [i·n/count, (i+1)·n/count): count distinct
// integers below n, increasing, for indices that must not repeat (set_rows' rows). It needs
// count <= n.
func OnePerBucket(n, count int) func(*rand.Rand, int) float64 {
	return func(r *rand.Rand, i int) float64 {
		lo, hi := i*n/count, (i+1)*n/count
		return float64(lo + r.IntN(hi-lo))
	}
}

// DistinctPerRow draws rows of k distinct integers below n (a token's experts): element i is
// the (i mod k)-th of a uniform random k-subset of [0, n) drawn afresh at every i % k == 0.
// Elements must be requested in order, as RandomInputs does. It needs k <= n.
func DistinctPerRow(n, k int) func(*rand.Rand, int) float64 {
	pool := make([]int, n)
	return func(r *rand.Rand, i int) float64 {
		j := i % k
		if j == 0 {
			for v := range pool {
				pool[v] = v
			}
		}
		// Fisher-Yates, one step a draw: pool[j] becomes a value not drawn for this row yet.
		s := j + r.IntN(n-j)
		pool[j], pool[s] = pool[s], pool[j]
		return float64(pool[j])
	}
}

// Const always returns v (cache lengths at capacity, say).
func Const(v float64) func(*rand.Rand, int) float64 {
	return func(*rand.Rand, int) float64 { return v }
}

// RandomInputs draws every spec from one seeded generator: the same seed gives the same
// tensors, so a failure can be replayed from the seed it prints.
func RandomInputs(seed uint64, specs []InputSpec) map[string]*tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 0x70c5))
	ts := make(map[string]*tensor.Tensor, len(specs))
	for _, in := range specs {
		t := tensor.New(in.DType, in.Shape...)
		for i := 0; i < t.Len(); i++ {
			v := r.NormFloat64()
			if in.Gen != nil {
				v = in.Gen(r, i)
			}
			switch in.DType {
			case tensor.F16:
				t.F16[i] = float16.Fromfloat32(float32(v))
			case tensor.BF16:
				t.BF16[i] = tensor.BF16FromFloat32(float32(v))
			case tensor.F32:
				t.F32[i] = float32(v)
			case tensor.I32:
				t.I32[i] = int32(v)
			case tensor.F8E4M3, tensor.F8E5M2:
				// the draw converted as docs/quantization.md says (saturating): normal draws
				// scaled by a generator into the format's range cover its exponents
				t.F8[i] = tensor.FP8FromFloat32(in.DType, float32(v))
			}
		}
		ts[in.Name] = t
	}
	return ts
}
