package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadsWhatPythonWrote reads testdata/tiny.safetensors, written by the safetensors
// Python package (torch 2.11), value for value.
func TestReadsWhatPythonWrote(t *testing.T) {
	f, err := Open("testdata/tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := strings.Join(f.Names(), ","); got != "a.weight,b.bias,c.bf16,d.ids" {
		t.Fatalf("names %s", got)
	}
	a, err := f.Tensor("a.weight")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, -2, 0.5, 65504, 0, 5.9604645e-08}
	for i, v := range a.Float32() {
		if v != want[i] {
			t.Errorf("a.weight[%d] = %v, want %v", i, v, want[i])
		}
	}
	if !math.Signbit(float64(a.Float32()[4])) {
		t.Error("-0 lost its sign")
	}
	b, _ := f.Tensor("b.bias")
	if b.F32[0] != 1.5 || b.F32[1] != -3.25 {
		t.Errorf("b.bias = %v", b.F32)
	}
	c, _ := f.Tensor("c.bf16")
	if c.F32[0] != 1 || c.F32[1] != -2.5 || c.F32[2] < 2.9e38 {
		t.Errorf("c.bf16 = %v", c.F32)
	}
	d, _ := f.Tensor("d.ids")
	if d.I32[1] != 7 || d.I32[2] != -1 {
		t.Errorf("d.ids = %v", d.I32)
	}
	if f.Header.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", f.Header.Metadata)
	}
}

// write builds a safetensors file from a header object and a data section.
func write(t *testing.T, dir, name string, header any, data []byte) string {
	t.Helper()
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	return writeRaw(t, dir, name, js, data)
}

func writeRaw(t *testing.T, dir, name string, js, data []byte) string {
	t.Helper()
	buf := make([]byte, 8, 8+len(js)+len(data))
	binary.LittleEndian.PutUint64(buf, uint64(len(js)))
	buf = append(append(buf, js...), data...)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type ti = map[string]any

func TestMalformedFilesAreNamedErrors(t *testing.T) {
	dir := t.TempDir()
	ok := ti{"dtype": "F16", "shape": []int{2}, "data_offsets": []int{0, 4}}
	cases := map[string]struct {
		header any
		raw    string
		data   []byte
		want   string
	}{
		"unknown dtype":        {header: ti{"w": ti{"dtype": "F17", "shape": []int{2}, "data_offsets": []int{0, 4}}}, data: make([]byte, 4), want: `unknown dtype "F17"`},
		"offsets past the end": {header: ti{"w": ti{"dtype": "F16", "shape": []int{2}, "data_offsets": []int{0, 4}}}, data: make([]byte, 3), want: "outside the 3-byte data section"},
		"size mismatch":        {header: ti{"w": ti{"dtype": "F32", "shape": []int{2}, "data_offsets": []int{0, 4}}}, data: make([]byte, 4), want: "needs 8 bytes"},
		"negative dim":         {header: ti{"w": ti{"dtype": "F16", "shape": []int{-2}, "data_offsets": []int{0, 4}}}, data: make([]byte, 4), want: "invalid shape"},
		"overlap":              {header: ti{"w": ok, "v": ti{"dtype": "F16", "shape": []int{1}, "data_offsets": []int{2, 4}}}, data: make([]byte, 4), want: "overlap"},
		"unknown field":        {header: ti{"w": ti{"dtype": "F16", "shape": []int{2}, "data_offsets": []int{0, 4}, "extra": 1}}, data: make([]byte, 4), want: "unknown field"},
		"bad offsets arity":    {header: ti{"w": ti{"dtype": "F16", "shape": []int{2}, "data_offsets": []int{0}}}, data: make([]byte, 4), want: "data_offsets must be"},
		"duplicate key":        {raw: `{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: "duplicate key"},
		"not json":             {raw: `{"w":`, data: nil, want: "not a JSON object"},
		"bad metadata":         {header: ti{"__metadata__": ti{"a": 1}}, data: nil, want: "__metadata__"},
	}
	for name, tc := range cases {
		var p string
		if tc.raw != "" {
			p = writeRaw(t, dir, "x.safetensors", []byte(tc.raw), tc.data)
		} else {
			p = write(t, dir, "x.safetensors", tc.header, tc.data)
		}
		_, err := Open(p)
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: got %v, want an ErrFormat naming the file and saying %q", name, err, tc.want)
		}
	}

	// A header length larger than the file.
	p := filepath.Join(dir, "long.safetensors")
	os.WriteFile(p, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'}, 0o644)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("huge header length: %v", err)
	}
	os.WriteFile(p, []byte{1, 2, 3}, 0o644)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "shorter than") {
		t.Errorf("3-byte file: %v", err)
	}
}

func TestUnsupportedDTypeIsAnErrorAtRead(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "x.safetensors", ti{"w": ti{"dtype": "F64", "shape": []int{1}, "data_offsets": []int{0, 8}}}, make([]byte, 8))
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Tensor("w"); err == nil || !strings.Contains(err.Error(), `"w"`) || !strings.Contains(err.Error(), "F64") {
		t.Errorf("F64 tensor: %v", err)
	}
	if _, err := f.Tensor("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing tensor: %v", err)
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "model-00001-of-00002.safetensors", ti{"a": ti{"dtype": "F16", "shape": []int{1}, "data_offsets": []int{0, 2}}}, []byte{0, 0x3c})
	write(t, dir, "model-00002-of-00002.safetensors", ti{"b": ti{"dtype": "F16", "shape": []int{1}, "data_offsets": []int{0, 2}}}, []byte{0, 0xc0})
	index := func(m map[string]string) {
		js, _ := json.Marshal(ti{"metadata": ti{"total_size": 4}, "weight_map": m})
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), js, 0o644)
	}
	index(map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Tensor("b")
	c.Close()
	if err != nil || b.Float32()[0] != -2 {
		t.Fatalf("b = %v, %v", b, err)
	}

	index(map[string]string{"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("index pointing at the wrong shard: %v", err)
	}
	index(map[string]string{"a": "../evil.safetensors"})
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), "same directory") {
		t.Errorf("shard outside the directory: %v", err)
	}
	if _, err := OpenDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("empty dir: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},"__metadata__":{"format":"pt"}}`), int64(12))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}}`), int64(6))
	f.Add([]byte(`{"w":{"dtype":"F16","shape":[9223372036854775807,2],"data_offsets":[0,4]}}`), int64(4))
	f.Add([]byte(`{}`), int64(0))
	f.Fuzz(func(t *testing.T, js []byte, dataLen int64) {
		if dataLen < 0 {
			return
		}
		h, err := ParseHeader(js, dataLen, "fuzz")
		if err != nil {
			return
		}
		for name, in := range h.Tensors {
			if in.Begin < 0 || in.End > dataLen || in.End < in.Begin {
				t.Fatalf("accepted %q with offsets [%d, %d] for %d bytes", name, in.Begin, in.End, dataLen)
			}
		}
	})
}

func FuzzOpen(f *testing.F) {
	seed, _ := os.ReadFile("testdata/tiny.safetensors")
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.safetensors")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := Open(p)
		if err != nil {
			return
		}
		defer sf.Close()
		for _, n := range sf.Names() {
			sf.Tensor(n) // must not panic, whatever it returns
		}
	})
}
