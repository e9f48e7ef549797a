package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// decodeElementwise is the decoder Tensor replaced, element by element from a byte slice:
// the reference the bulk reads must match bit for bit.
func decodeElementwise(raw []byte, dtype string, shape []int) *tensor.Tensor {
	le := binary.LittleEndian
	switch dtype {
	case "F16":
		t := tensor.New(tensor.F16, shape...)
		for i := range t.F16 {
			t.F16[i] = float16.Frombits(le.Uint16(raw[2*i:]))
		}
		return t
	case "BF16":
		t := tensor.New(tensor.F32, shape...)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(uint32(le.Uint16(raw[2*i:])) << 16)
		}
		return t
	case "F32":
		t := tensor.New(tensor.F32, shape...)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return t
	case "I32":
		t := tensor.New(tensor.I32, shape...)
		for i := range t.I32 {
			t.I32[i] = int32(le.Uint32(raw[4*i:]))
		}
		return t
	}
	panic(dtype)
}

// sameBits compares dtype, shape and element bits (NaN payloads included).
func sameBits(a, b *tensor.Tensor) bool {
	bits := func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
	return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) &&
		slices.Equal(a.F16, b.F16) && slices.EqualFunc(a.F32, b.F32, bits) && slices.Equal(a.I32, b.I32)
}

// Every dtype and shape, odd sizes, empty and 0-d tensors included, decodes to what the
// element-by-element decoder gives, from random bit patterns (NaNs, infinities, subnormals);
// Uint16s gives the raw bits of the 2-byte dtypes.
func TestBulkDecodeMatchesElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	shapes := [][]int{{}, {0}, {1}, {7}, {3, 5}, {2, 0, 3}, {33, 17}, {1000}}
	header := ti{}
	var data []byte
	type entry struct {
		name, dtype string
		shape       []int
		raw         []byte
	}
	var entries []entry
	for _, dt := range []string{"F16", "BF16", "F32", "I32"} {
		for k, shape := range shapes {
			n := int64(dtypeSizes[dt])
			for _, d := range shape {
				n *= int64(d)
			}
			raw := make([]byte, n)
			for i := range raw {
				raw[i] = byte(r.Uint32())
			}
			name := fmt.Sprintf("%s.%d", dt, k)
			header[name] = ti{"dtype": dt, "shape": shape, "data_offsets": []int{len(data), len(data) + len(raw)}}
			data = append(data, raw...)
			entries = append(entries, entry{name, dt, shape, raw})
		}
	}
	p := write(t, t.TempDir(), "x.safetensors", header, data)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, e := range entries {
		got, err := f.Tensor(e.name)
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if want := decodeElementwise(e.raw, e.dtype, e.shape); !sameBits(got, want) {
			t.Errorf("%s %s%v: bulk decode differs from the elementwise one", e.name, e.dtype, e.shape)
		}
		bits, info, err := f.Uint16s(e.name)
		if e.dtype == "F16" || e.dtype == "BF16" {
			if err != nil || info.Name != e.name || len(bits) != len(e.raw)/2 {
				t.Fatalf("%s: Uint16s = %d values, %+v, %v", e.name, len(bits), info, err)
			}
			for i, b := range bits {
				if want := binary.LittleEndian.Uint16(e.raw[2*i:]); b != want {
					t.Fatalf("%s: Uint16s[%d] = %#x, want %#x", e.name, i, b, want)
				}
			}
		} else if err == nil || !strings.Contains(err.Error(), e.name) || !strings.Contains(err.Error(), e.dtype) {
			t.Errorf("%s: Uint16s of %s: %v, want an error naming the tensor and dtype", e.name, e.dtype, err)
		}
	}
}

// A file cut short after Open (the header was valid when read) is an error naming the file and
// the tensor, from Tensor and Uint16s alike, never a panic or a zero-filled tensor.
func TestTruncatedAfterOpen(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "x.safetensors", ti{
		"a": ti{"dtype": "F16", "shape": []int{4}, "data_offsets": []int{0, 8}},
		"b": ti{"dtype": "BF16", "shape": []int{4}, "data_offsets": []int{8, 16}},
	}, make([]byte, 16))
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := os.Stat(p)
	if err := os.Truncate(p, st.Size()-3); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Tensor("b"); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("Tensor of a truncated tensor: %v", err)
	}
	if _, _, err := f.Uint16s("b"); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("Uint16s of a truncated tensor: %v", err)
	}
	if _, err := f.Tensor("a"); err != nil {
		t.Errorf("a is whole: %v", err)
	}
	if _, _, err := f.Uint16s("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Uint16s of a missing tensor: %v", err)
	}
}
