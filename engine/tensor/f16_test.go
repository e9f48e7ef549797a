package tensor

import (
	"math"
	"testing"
)

// TestRoundF16MatchesNumpy checks RoundF16 against numpy's float32->float16 cast, which rounds
// to nearest even like __float2half, over random values, exact ties and overflow edges.
func TestRoundF16MatchesNumpy(t *testing.T) {
	in, err := ReadNPY("testdata/round_f16_in.npy")
	if err != nil {
		t.Fatal(err)
	}
	out, err := ReadNPY("testdata/round_f16_out.npy")
	if err != nil {
		t.Fatal(err)
	}
	if in.DType != F32 || out.DType != F16 || in.Len() != out.Len() {
		t.Fatalf("fixtures are %v and %v", in, out)
	}
	for i, x := range in.F32 {
		got := RoundF16(x)
		want := out.F16[i].Float32()
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("RoundF16(%g [%#08x]) = %g, numpy gives %g", x, math.Float32bits(x), got, want)
		}
	}
}

func TestRoundF16Cases(t *testing.T) {
	for _, tc := range []struct{ in, want float32 }{
		{1, 1},
		{1 + 1.0/2048, 1},             // tie between 1 and 1+2^-10 goes to the even mantissa
		{1 + 3.0/2048, 1 + 2.0/1024},  // tie rounds up to even
		{65504, 65504},                // largest finite fp16
		{65519.99, 65504},             // just below the overflow threshold
		{65520, float32(math.Inf(1))}, // the threshold itself rounds to +Inf
		{-1e6, float32(math.Inf(-1))}, // overflow keeps its sign
		{0x1p-24, 0x1p-24},            // smallest subnormal
		{0x1p-25, 0},                  // half of it ties to zero
		{0x1.8p-25, 0x1p-24},          // above the tie rounds up
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
	} {
		if got := RoundF16(tc.in); got != tc.want {
			t.Errorf("RoundF16(%g) = %g, want %g", tc.in, got, tc.want)
		}
	}
	if got := RoundF16(float32(math.Copysign(0, -1))); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("RoundF16(-0) = %g, want -0", got)
	}
	if got := RoundF16(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("RoundF16(NaN) = %g", got)
	}
}
