package tensor

import "github.com/x448/float16"

// RoundF16 rounds x to the nearest fp16 value (ties to even, overflow to ±Inf) and widens it
// back. This is what CUDA's __float2half does, so host-side references can reproduce the
// rounding a kernel applies when it stores fp16.
func RoundF16(x float32) float32 {
	return float16.Fromfloat32(x).Float32()
}
