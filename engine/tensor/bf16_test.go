package tensor

import (
	"bytes"
	"math"
	"testing"
)

// bf16Reference rounds through float64 arithmetic, independently of the bit trick in
// BF16FromFloat32: the nearest of the two bfloat16 neighbours, ties to the even one.
func bf16Reference(f float32) BFloat16 {
	if f != f {
		return BFloat16(math.Float32bits(f)>>16 | 0x0040)
	}
	u := math.Float32bits(f)
	lo := BFloat16(u >> 16)              // truncated toward zero in magnitude
	hi := BFloat16((u>>16 + 1) & 0xffff) // next magnitude up (same sign)
	if u&0xffff == 0 {
		return lo
	}
	dl := math.Abs(float64(f) - float64(lo.Float32()))
	var dh float64
	if hi&0x7fff >= 0x7f80 { // next up is Inf: compare with the overflow threshold, 2^128 (1 - 2^-9)
		dh = math.Abs(math.Abs(float64(f)) - math.Ldexp(1, 128))
	} else {
		dh = math.Abs(float64(f) - float64(hi.Float32()))
	}
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		if hi&0x7fff >= 0x7f80 {
			return BFloat16(u>>16&0x8000 | 0x7f80)
		}
		return hi
	}
	if lo&1 == 0 {
		return lo
	}
	if hi&0x7fff >= 0x7f80 {
		return BFloat16(u>>16&0x8000 | 0x7f80)
	}
	return hi
}

// TestBF16FromFloat32 checks the rounding on every float32 whose low 16 bits are one of the
// interesting patterns (exact, below half, half, above half, the extremes) for every sign,
// exponent and kept mantissa: 2^16 bit-tops × 7 tails.
func TestBF16FromFloat32(t *testing.T) {
	tails := []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff}
	for top := uint32(0); top < 1<<16; top++ {
		for _, tail := range tails {
			f := math.Float32frombits(top<<16 | tail)
			got, want := BF16FromFloat32(f), bf16Reference(f)
			if got != want {
				t.Fatalf("BF16FromFloat32(%#08x = %g) = %#04x, want %#04x", top<<16|tail, f, got, want)
			}
		}
	}
}

func TestBF16Widening(t *testing.T) {
	for _, tc := range []struct {
		bits BFloat16
		want float32
	}{{0x3f80, 1}, {0xbf80, -1}, {0x4049, 3.140625}, {0x7f80, float32(math.Inf(1))}, {0x0001, math.Float32frombits(0x00010000)}} {
		if got := tc.bits.Float32(); got != tc.want {
			t.Errorf("BFloat16(%#04x).Float32() = %g, want %g", uint16(tc.bits), got, tc.want)
		}
		if back := BF16FromFloat32(tc.bits.Float32()); back != tc.bits {
			t.Errorf("round trip of %#04x gave %#04x", uint16(tc.bits), uint16(back))
		}
	}
	if got := RoundBF16(1 + 1.0/512); got != 1 { // halfway between 1 and 1+2^-7: ties to even (1)
		t.Errorf("RoundBF16(1 + 2^-9) = %g, want 1", got)
	}
	if got := Round(BF16, 1e6); got != 999424 {
		t.Errorf("Round(BF16, 1e6) = %g, want 999424", got)
	}
}

// TestNPYBF16RoundTrip: bf16 is written as '<u2' with its bits, and read back as bf16.
func TestNPYBF16RoundTrip(t *testing.T) {
	in := FromBF16([]int{2, 3}, []BFloat16{0x3f80, 0xbf80, 0x7f80, 0x0000, 0x8000, 0x4049})
	var buf bytes.Buffer
	if err := EncodeNPY(&buf, in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("'descr': '<u2'")) {
		t.Fatalf("header %q does not say '<u2'", buf.Bytes()[:64])
	}
	out, err := DecodeNPY(bytes.NewReader(buf.Bytes()), "x.npy")
	if err != nil {
		t.Fatal(err)
	}
	if out.DType != BF16 || !SameShape(out.Shape, in.Shape) {
		t.Fatalf("read back %v, want %v", out, in)
	}
	for i := range in.BF16 {
		if out.BF16[i] != in.BF16[i] {
			t.Fatalf("element %d: %#04x, want %#04x", i, out.BF16[i], in.BF16[i])
		}
	}
}
