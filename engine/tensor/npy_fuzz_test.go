package tensor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeNPY feeds arbitrary bytes to the decoder. It must never panic, must agree with
// itself whether or not it can see the input size, and anything it accepts must survive an
// encode/decode round trip unchanged.
func FuzzDecodeNPY(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.npy"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	valid := encode(f, FromF16([]int{2, 2}, f16Bits(0x7C01, 0x8001, 0xFC00, 0x3C00)))
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 1, 2))
	f.Add(rawNPY(1, "{'shape': (2,), 'fortran_order': False, 'descr': '<f4', }", make([]byte, 8)))
	f.Add(rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", make([]byte, 8)))
	f.Add(rawNPY(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999, 9), }", make([]byte, 8)))
	f.Add(rawNPY(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", make([]byte, 4)))
	f.Add([]byte("\x93NUMPY\x01\x00"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeNPY(bytes.NewReader(data), "fuzz.npy")
		streamed, serr := DecodeNPY(unsized{bytes.NewReader(data)}, "fuzz.npy")
		if (err == nil) != (serr == nil) {
			t.Fatalf("sized and streamed readers disagree: %v vs %v", err, serr)
		}
		if err != nil {
			if got != nil {
				t.Fatalf("tensor returned with error %v", err)
			}
			return
		}
		if !sameBits(got, streamed) {
			t.Fatalf("sized and streamed readers decoded different tensors")
		}
		if got.Len() != NumElements(got.Shape) {
			t.Fatalf("%v holds %d elements", got, got.Len())
		}
		var buf bytes.Buffer
		if err := EncodeNPY(&buf, got); err != nil {
			t.Fatalf("re-encoding an accepted tensor: %v", err)
		}
		again, err := DecodeNPY(&buf, "again.npy")
		if err != nil || !sameBits(got, again) {
			t.Fatalf("round trip of %v failed: %v", got, err)
		}
	})
}
