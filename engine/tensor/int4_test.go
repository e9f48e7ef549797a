package tensor

import (
	"slices"
	"testing"
)

func readFixture(t *testing.T, name string) *Tensor {
	t.Helper()
	x, err := ReadNPY("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// The Go unpackers read the words the Python statement of the formats (tools/gen-golden's
// common/int4.py, testdata/gen_int4.py) packed, and pack the same words back; the GPTQ
// dequantisation with act-order groups matches the reference's float32 element for element.
func TestInt4PackingsMatchTheReference(t *testing.T) {
	const k, n = 16, 16
	q := readFixture(t, "int4_codes.npy").F8
	awq := readFixture(t, "int4_awq.npy").I32
	gptq := readFixture(t, "int4_gptq.npy").I32
	z := readFixture(t, "int4_zeros.npy").F8
	gz := readFixture(t, "int4_gptq_zeros.npy").I32
	s := readFixture(t, "int4_scales.npy").F32
	gidx := readFixture(t, "int4_gidx.npy").I32
	want := readFixture(t, "int4_dequant.npy").F32

	if got, err := UnpackAWQ(awq, k, n); err != nil || !slices.Equal(got, q) {
		t.Errorf("UnpackAWQ: %v %v", got, err)
	}
	if got, err := PackAWQ(q, k, n); err != nil || !slices.Equal(got, awq) {
		t.Errorf("PackAWQ: %v %v", got, err)
	}
	if got, err := UnpackGPTQWeight(gptq, k, n); err != nil || !slices.Equal(got, q) {
		t.Errorf("UnpackGPTQWeight: %v %v", got, err)
	}
	if got, err := PackGPTQWeight(q, k, n); err != nil || !slices.Equal(got, gptq) {
		t.Errorf("PackGPTQWeight: %v %v", got, err)
	}
	zeros, err := UnpackGPTQZeros(gz, 2, n)
	if err != nil || !slices.Equal(zeros, z) {
		t.Fatalf("UnpackGPTQZeros: %v %v", zeros, err)
	}
	w, err := DequantInt4(q, zeros, s, gidx, k, n)
	if err != nil || !slices.Equal(w, want) {
		t.Errorf("DequantInt4: %v %v", w, err)
	}
	// The AWQ order is not the plain one: reading a row's nibbles in order gets other columns
	// (the fixture would not tell the two apart otherwise).
	plain := make([]uint8, 16)
	for i, w := range awq[:2] {
		for j := 0; j < 8; j++ {
			plain[8*i+j] = nibble(w, j)
		}
	}
	if slices.Equal(plain, q[:16]) {
		t.Error("the AWQ fixture does not tell the interleaved order from the plain one")
	}
}

func TestInt4RefusesMalformedShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"awq cols 12", func() error { _, err := UnpackAWQ(make([]int32, 3), 2, 12); return err }()},
		{"awq words", func() error { _, err := UnpackAWQ(make([]int32, 3), 2, 16); return err }()},
		{"gptq rows 12", func() error { _, err := UnpackGPTQWeight(make([]int32, 4), 12, 4); return err }()},
		{"gptq zeros", func() error { _, err := UnpackGPTQZeros(make([]int32, 1), 1, 4); return err }()},
		{"awq code 16", func() error { _, err := PackAWQ(append(make([]uint8, 7), 16), 1, 8); return err }()},
		{"dequant group", func() error {
			_, err := DequantInt4(make([]uint8, 8), make([]uint8, 8), make([]float32, 8), make([]int32, 1), 1, 8)
			if err != nil {
				return err
			}
			_, err = DequantInt4(make([]uint8, 8), make([]uint8, 8), make([]float32, 8), []int32{1}, 1, 8)
			return err
		}()},
	} {
		if c.err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// Every word unpacks to codes that pack back to it, in both packings (both are bijections
// between 32 bits and eight 4-bit codes).
func FuzzInt4WordsRoundTrip(f *testing.F) {
	f.Add(int32(0x76543210), int32(-1), int32(0x12345678), int32(-0x80000000))
	f.Fuzz(func(t *testing.T, a, b, c, d int32) {
		words := []int32{a, b, c, d}
		q, err := UnpackAWQ(words, 2, 16)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := PackAWQ(q, 2, 16); err != nil || !slices.Equal(back, words) {
			t.Fatalf("awq %x -> %v -> %x (%v)", words, q, back, err)
		}
		q, err = UnpackGPTQWeight(words, 8, 4)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := PackGPTQWeight(q, 8, 4); err != nil || !slices.Equal(back, words) {
			t.Fatalf("gptq %x -> %v -> %x (%v)", words, q, back, err)
		}
	})
}
