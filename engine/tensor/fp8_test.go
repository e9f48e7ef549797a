package tensor

import (
	"math"
	"os"
	"testing"

	"github.com/x448/float16"
)

// Every fp16 value (as float32) converts to the bytes torch gives under the spec
// (testdata/fp8_from_f16.npy, gen_fp8_table.py): each subnormal, each tie, the saturation and
// NaN of both FP8 formats, for every exponent fp16 reaches.
func TestFP8ConversionIsTorchsOnEveryF16Value(t *testing.T) {
	f, err := os.Open("testdata/fp8_from_f16.npy")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := DecodeNPY(f, "fp8_from_f16.npy")
	if err != nil {
		t.Fatal(err)
	}
	if table.DType != U8 || !SameShape(table.Shape, []int{2, 65536}) {
		t.Fatalf("table: %v %v", table.DType, table.Shape)
	}
	bad := 0
	for i := 0; i < 65536; i++ {
		v := float16.Frombits(uint16(i)).Float32()
		for k, conv := range []func(float32) uint8{E4M3FromFloat32, E5M2FromFloat32} {
			if got, want := conv(v), table.F8[k*65536+i]; got != want && bad < 10 {
				bad++
				t.Errorf("%s(%v = fp16 %#04x) = %#02x, torch %#02x", []string{"e4m3", "e5m2"}[k], v, i, got, want)
			}
		}
	}
}

// Decoding is exact and inverts encoding on every finite byte; the NaN codes decode to NaN.
func TestFP8DecodeRoundTrips(t *testing.T) {
	for b := 0; b < 256; b++ {
		for _, dt := range []DType{F8E4M3, F8E5M2} {
			v := FP8ToFloat32(dt, uint8(b))
			if v != v {
				if dt == F8E4M3 && b&0x7F != 0x7F || dt == F8E5M2 && (b&0x7C != 0x7C || b&3 == 0) {
					t.Errorf("%v %#02x decodes to NaN", dt, b)
				}
				continue
			}
			if math.IsInf(float64(v), 0) {
				continue // e5m2's infinities saturate to ±57344 by the spec
			}
			if back := FP8FromFloat32(dt, v); back != uint8(b) {
				t.Errorf("%v %#02x = %v encodes back to %#02x", dt, b, v, back)
			}
		}
	}
	for b, want := range map[uint8]float32{0x7E: 448, 0xFE: -448, 0x01: 1.0 / 512, 0x08: 1.0 / 64, 0x38: 1, 0x80: float32(math.Copysign(0, -1))} {
		if got := E4M3ToFloat32(b); got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
			t.Errorf("e4m3 %#02x = %v, want %v", b, got, want)
		}
	}
	if got := E5M2ToFloat32(0x7B); got != E5M2Max {
		t.Errorf("e5m2 0x7b = %v, want 57344", got)
	}
	if got := E5M2ToFloat32(0xFC); !math.IsInf(float64(got), -1) {
		t.Errorf("e5m2 0xfc = %v, want -inf", got)
	}
}

// The float32 values fp16 cannot hold: saturation past the largest finite value, the exact
// tie at the top (464 rounds to 448, even), ties and near-ties below 2^-14, NaN's sign dropped.
// The bytes are torch's (clamp(-448, 448).to(float8_e4m3fn), NaN as 0x7F), as printed by it.
func TestE4M3Float32Boundaries(t *testing.T) {
	nextUp := func(v float32) float32 { return math.Nextafter32(v, float32(math.Inf(1))) }
	for _, c := range []struct {
		v    float32
		want uint8
	}{
		{470, 0x7E}, {464, 0x7E}, {3.4e38, 0x7E}, {float32(math.Inf(-1)), 0xFE},
		{1.0 / 1024, 0x00}, {nextUp(1.0 / 1024), 0x01}, {3.0 / 1024, 0x02}, // ties to even among subnormals
		{float32(math.Copysign(0, -1)), 0x80}, {-1e-30, 0x80},
		{float32(-math.NaN()), 0x7F},
		{1 + 1.0/16, 0x38}, {nextUp(1 + 1.0/16), 0x39}, // the tie above 1 goes to even (1.0)
	} {
		if got := E4M3FromFloat32(c.v); got != c.want {
			t.Errorf("e4m3(%v) = %#02x, want %#02x", c.v, got, c.want)
		}
	}
}

// nearestFP8 is the spec by brute force: the finite code nearest to v (saturated), ties to the
// code with an even mantissa, NaN as 0x7F; an independent check of fp8FromFloat32's arithmetic.
func nearestFP8(dt DType, v float32) uint8 {
	if v != v {
		return 0x7F
	}
	best, bestErr := -1, math.Inf(1)
	for b := 0; b < 256; b++ {
		f := float64(FP8ToFloat32(dt, uint8(b)))
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Signbit(f) != math.Signbit(float64(v)) {
			continue
		}
		max := float64(E4M3Max)
		if dt == F8E5M2 {
			max = E5M2Max
		}
		target := math.Max(-max, math.Min(max, float64(v)))
		err := math.Abs(f - target)
		if err < bestErr || (err == bestErr && b&1 == 0) {
			best, bestErr = b, err
		}
	}
	return uint8(best)
}

// Random float32 values (every exponent, sign and mantissa) convert to the nearest code.
func FuzzFP8MatchesNearestCode(f *testing.F) {
	for _, v := range []float32{0, 1, 448, 464, 470, 1e-3, 1.0 / 1024, 57344, 61440, 1e30, -2.5} {
		f.Add(math.Float32bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		v := math.Float32frombits(bits)
		for _, dt := range []DType{F8E4M3, F8E5M2} {
			if got, want := FP8FromFloat32(dt, v), nearestFP8(dt, v); got != want {
				t.Fatalf("%v(%v = %#08x) = %#02x, the nearest code is %#02x", dt, v, bits, got, want)
			}
		}
	})
}
