// Package sample is the Go implementation of docs/sampling.md: Philox4x32-10 keyed by
// (seed, step, row), greedy / top-k / temperature / top-p, and the draw, with the margins
// that say how close each decision came to a floating-point boundary. The cpu backend uses
// it; the suites hold the CUDA kernel and the Python reference to the same tokens.
package sample

import "math/bits"

// Philox4x32-10 constants (Salmon et al., SC11; Random123).
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// Philox4x32x10 is the ten-round Philox4x32 bijection of counter under key, with the key
// bumped before rounds 2 to 10 (the Random123 schedule).
func Philox4x32x10(counter [4]uint32, key [2]uint32) [4]uint32 {
	c, k := counter, key
	for round := 0; round < 10; round++ {
		if round > 0 {
			k[0] += philoxW0
			k[1] += philoxW1
		}
		hi0, lo0 := bits.Mul32(philoxM0, c[0])
		hi1, lo1 := bits.Mul32(philoxM1, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0}
	}
	return c
}

// Words is the Philox output for a sampling draw: key seed, counter (step, row).
func Words(seed, step uint64, row uint32) [4]uint32 {
	return Philox4x32x10([4]uint32{uint32(step), uint32(step >> 32), row, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})
}

// Uniform is the draw's fp64 in [0, 1): 53 bits from the first two words, exact.
func Uniform(seed, step uint64, row uint32) float64 {
	return UniformOf(Words(seed, step, row))
}

// UniformOf converts Philox words to the spec's uniform: ((x0>>5)·2^26 + (x1>>6))·2^-53.
func UniformOf(w [4]uint32) float64 {
	return float64(uint64(w[0]>>5)<<26|uint64(w[1]>>6)) * 0x1p-53
}
