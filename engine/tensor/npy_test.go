package tensor

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/x448/float16"
)

// sameBits compares tensors bit for bit, so NaN payloads and signed zeros count.
func sameBits(a, b *Tensor) bool {
	if a.DType != b.DType || !SameShape(a.Shape, b.Shape) || a.Len() != b.Len() {
		return false
	}
	switch a.DType {
	case F16:
		return slices.Equal(a.F16, b.F16)
	case F32:
		return slices.EqualFunc(a.F32, b.F32, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
	case I32:
		return slices.Equal(a.I32, b.I32)
	case BF16:
		return slices.Equal(a.BF16, b.BF16)
	case F8E4M3, F8E5M2, U8:
		return slices.Equal(a.F8, b.F8)
	}
	return false
}

func encode(t testing.TB, x *Tensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeNPY(&b, x); err != nil {
		t.Fatalf("EncodeNPY(%v): %v", x, err)
	}
	return b.Bytes()
}

func f16Bits(bits ...uint16) []float16.Float16 {
	out := make([]float16.Float16, len(bits))
	for i, b := range bits {
		out[i] = float16.Frombits(b)
	}
	return out
}

// TestNumpyFixtures reads files numpy.save wrote, checks their contents and that EncodeNPY
// reproduces them byte for byte (so Go-written sets hash like Python-written ones).
func TestNumpyFixtures(t *testing.T) {
	special := f16Bits(
		0x7E00, 0x7C01, 0xFE00, 0x7D55, 0x7C00, 0xFC00,
		0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x83FF,
		0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3555,
		0x1234, 0x4321, 0xC000, 0x5A5A, 0x0200, 0x8200,
	)
	f32 := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
		1.1754944e-38, float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7FC12345), 0.1, 1e10, -7}
	for _, tc := range []struct {
		file string
		want *Tensor
	}{
		{"f16_special_3d.npy", FromF16([]int{2, 3, 4}, special)},
		{"f32_2d.npy", FromF32([]int{3, 5}, f32)},
		{"i32_1d.npy", FromI32([]int{7}, []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 42, -42})},
		{"f32_0d.npy", FromF32(nil, []float32{1.5})},
		{"f16_empty.npy", FromF16([]int{0, 3}, nil)},
		{"i32_4d.npy", FromI32([]int{2, 1, 3, 2}, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})},
		{"round_f16_out.npy", nil},
		{"round_f16_in.npy", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadNPY(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !sameBits(got, tc.want) {
				t.Errorf("decoded %v %v, want %v %v", got, got.Float64(), tc.want, tc.want.Float64())
			}
			if enc := encode(t, got); !bytes.Equal(enc, raw) {
				t.Errorf("EncodeNPY differs from numpy.save:\n go:    %q\n numpy: %q", enc[:min(len(enc), 128)], raw[:min(len(raw), 128)])
			}
		})
	}
}

func roundTripCases() []*Tensor {
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	return []*Tensor{
		FromF16(nil, f16Bits(0x7C01)),
		FromF32(nil, []float32{-0.5}),
		FromI32(nil, []int32{-3}),
		FromF16([]int{1 << 16}, f16Bits(all...)), // every fp16 bit pattern: NaNs, infs, subnormals
		FromF16([]int{2, 3, 2}, f16Bits(0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x0000, 0x8000, 0x7BFF, 0x0400, 0x3C00)),
		FromF32([]int{2, 2, 2}, []float32{1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
			math.Float32frombits(0x7FA00001), math.Float32frombits(1), math.Float32frombits(0x80000000), 3.25}),
		FromI32([]int{3, 1, 2}, []int32{math.MinInt32, -1, 0, 1, math.MaxInt32, 7}),
		New(F32, 0),
		New(I32, 4, 0, 2),
		New(F16, 5),
		New(F32, 1, 1, 1, 1, 1, 1, 1, 1),
		New(I32, 1234567890123, 0), // a long first dim shrinks numpy's growth padding
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for i, want := range roundTripCases() {
		t.Run(want.String(), func(t *testing.T) {
			path := filepath.Join(dir, want.DType.String()+"_"+string(rune('a'+i))+".npy")
			if err := WriteNPY(path, want); err != nil {
				t.Fatal(err)
			}
			got, err := ReadNPY(path)
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(got, want) {
				t.Fatalf("ReadNPY(WriteNPY(%v)) = %v, bits differ", want, got)
			}
			raw := encode(t, want)
			if len(raw)%npyAlign != (want.Len()*want.DType.Size())%npyAlign {
				t.Errorf("header is not padded to %d bytes", npyAlign)
			}
			// Readers that report no size and return short reads take the streaming path.
			for name, r := range map[string]io.Reader{
				"one-byte": iotest.OneByteReader(bytes.NewReader(raw)),
				"half":     iotest.HalfReader(bytes.NewReader(raw)),
				"data-err": iotest.DataErrReader(bytes.NewReader(raw)),
			} {
				got, err := DecodeNPY(r, name)
				if err != nil || !sameBits(got, want) {
					t.Errorf("%s reader: got %v, %v", name, got, err)
				}
			}
		})
	}
}

func TestEncodeRejectsInconsistentTensors(t *testing.T) {
	for _, x := range []*Tensor{
		nil,
		{DType: Invalid, Shape: []int{1}},
		{DType: F32, Shape: []int{2}, F32: []float32{1}},
		{DType: F32, Shape: []int{1}, F32: []float32{1}, I32: []int32{1}},
		{DType: I32, Shape: []int{-1}},
		{DType: F16, Shape: []int{1 << 30, 1 << 30}},
	} {
		if err := EncodeNPY(io.Discard, x); err == nil {
			t.Errorf("EncodeNPY(%#v) succeeded", x)
		}
	}
	path := filepath.Join(t.TempDir(), "bad.npy")
	if err := WriteNPY(path, &Tensor{DType: F32, Shape: []int{3}}); err == nil {
		t.Error("WriteNPY of an inconsistent tensor succeeded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Error("WriteNPY left a partial file behind")
	}
}

func TestReadNPYMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.npy")
	_, err := ReadNPY(path)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
		t.Errorf("ReadNPY(missing) = %v, want an error naming %s", err, path)
	}
}
