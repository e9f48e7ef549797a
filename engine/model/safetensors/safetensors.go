// Package safetensors reads Hugging Face .safetensors checkpoints, single-file or sharded,
// validating the header before trusting a byte of it: a checkpoint is outside data, and a
// malformed one must be a clear error naming the file and the tensor, never a panic or a
// silently wrong weight.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name
// to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section
// that follows the header) plus an optional "__metadata__" map of strings.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// maxHeader bounds the JSON header: real checkpoints with thousands of tensors stay far
// below it, and a corrupt length must not make us allocate gigabytes.
const maxHeader = 100 << 20

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("malformed safetensors")

// dtypeSizes are the element sizes of the dtypes the format defines.
var dtypeSizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// Info describes one tensor of a file.
type Info struct {
	Name  string
	DType string // safetensors dtype: "F16", "BF16", "F32", ...
	Shape []int
	Begin int64 // offsets into the data section
	End   int64
}

// Header is a validated safetensors header.
type Header struct {
	Tensors  map[string]Info
	Metadata map[string]string
}

type rawInfo struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func formatErr(name, f string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", name, ErrFormat, fmt.Sprintf(f, args...))
}

// ParseHeader validates a header's JSON against a data section of dataLen bytes. name is
// used in errors.
func ParseHeader(js []byte, dataLen int64, name string) (*Header, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&raw); err != nil {
		return nil, formatErr(name, "header is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, formatErr(name, "trailing data after the header object")
	}
	if err := noDuplicateKeys(js); err != nil {
		return nil, formatErr(name, "%v", err)
	}
	h := &Header{Tensors: map[string]Info{}}
	for key, msg := range raw {
		if key == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, formatErr(name, "__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var ri rawInfo
		d := json.NewDecoder(bytes.NewReader(msg))
		d.DisallowUnknownFields()
		if err := d.Decode(&ri); err != nil {
			return nil, formatErr(name, "tensor %q: %v", key, err)
		}
		info, err := validate(key, ri, dataLen)
		if err != nil {
			return nil, formatErr(name, "%v", err)
		}
		h.Tensors[key] = info
	}
	if err := checkOverlaps(h); err != nil {
		return nil, formatErr(name, "%v", err)
	}
	return h, nil
}

func validate(key string, ri rawInfo, dataLen int64) (Info, error) {
	size, ok := dtypeSizes[ri.DType]
	if !ok {
		return Info{}, fmt.Errorf("tensor %q: unknown dtype %q", key, ri.DType)
	}
	if len(ri.DataOffsets) != 2 {
		return Info{}, fmt.Errorf("tensor %q: data_offsets must be [begin, end], got %v", key, ri.DataOffsets)
	}
	begin, end := ri.DataOffsets[0], ri.DataOffsets[1]
	if begin < 0 || end < begin || end > dataLen {
		return Info{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d-byte data section", key, begin, end, dataLen)
	}
	n := int64(1)
	shape := make([]int, len(ri.Shape))
	for i, d := range ri.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/size/d) {
			return Info{}, fmt.Errorf("tensor %q: invalid shape %v", key, ri.Shape)
		}
		n *= d
		shape[i] = int(d)
	}
	if n*size != end-begin {
		return Info{}, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes, data_offsets span %d", key, ri.Shape, ri.DType, n*size, end-begin)
	}
	return Info{Name: key, DType: ri.DType, Shape: shape, Begin: begin, End: end}, nil
}

// checkOverlaps refuses tensors whose byte ranges overlap: two weights sharing bytes is
// either corruption or an attack, never a valid checkpoint.
func checkOverlaps(h *Header) error {
	infos := make([]Info, 0, len(h.Tensors))
	for _, in := range h.Tensors {
		if in.End > in.Begin {
			infos = append(infos, in)
		}
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Begin < infos[j].Begin })
	for i := 1; i < len(infos); i++ {
		if infos[i].Begin < infos[i-1].End {
			return fmt.Errorf("tensors %q and %q overlap in the data section", infos[i-1].Name, infos[i].Name)
		}
	}
	return nil
}

// noDuplicateKeys walks the top-level object: encoding/json keeps the last of duplicate
// keys, which would let a file carry two definitions of one weight.
func noDuplicateKeys(js []byte) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	if _, err := dec.Token(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("duplicate key %q in the header", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// File is an open single-file checkpoint.
type File struct {
	Path      string
	Header    *Header
	f         *os.File
	dataStart int64
}

// Open reads and validates the header of a .safetensors file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		f.Close()
		return nil, formatErr(path, "shorter than the 8-byte header length")
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > st.Size()-8 {
		f.Close()
		return nil, formatErr(path, "header length %d does not fit the %d-byte file (limit %d)", n, st.Size(), maxHeader)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(f, js); err != nil {
		f.Close()
		return nil, formatErr(path, "truncated header: %v", err)
	}
	dataStart := 8 + int64(n)
	h, err := ParseHeader(js, st.Size()-dataStart, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{Path: path, Header: h, f: f, dataStart: dataStart}, nil
}

// Close releases the file.
func (f *File) Close() error { return f.f.Close() }

// Names lists the tensors, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Header.Tensors))
	for n := range f.Header.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Tensor reads one tensor as a host tensor: F16 stays fp16 bit for bit; F32, I32 and F8_E4M3
// (raw bytes) as themselves; BF16 widens exactly to F32. Other dtypes are an error naming the
// tensor.
//
// The bytes are read straight into the tensor's storage (one copy out of the page cache, no
// staging buffer): checkpoints are gigabytes, and a second copy plus an element-by-element
// decode used to be most of a model's load time.
func (f *File) Tensor(name string) (*tensor.Tensor, error) {
	in, ok := f.Header.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	var t *tensor.Tensor
	switch in.DType {
	case "F16":
		t = tensor.New(tensor.F16, in.Shape...)
	case "BF16", "F32":
		t = tensor.New(tensor.F32, in.Shape...)
	case "I32":
		t = tensor.New(tensor.I32, in.Shape...)
	case "F8_E4M3":
		t = tensor.New(tensor.F8E4M3, in.Shape...)
	default:
		return nil, fmt.Errorf("%s: tensor %q: dtype %s is not supported (want F16, BF16, F32, I32 or F8_E4M3)", f.Path, in.Name, in.DType)
	}
	var raw []byte
	switch t.DType {
	case tensor.F16:
		raw = asBytes(t.F16)
	case tensor.F32:
		raw = asBytes(t.F32)
	case tensor.I32:
		raw = asBytes(t.I32)
	case tensor.F8E4M3:
		raw = t.F8
	}
	if in.DType == "BF16" {
		// The 2-byte elements go to the back half of the float32 storage and widen in place,
		// front to back: element i is written to bytes [4i, 4i+4), which end at or before the
		// unread element i+1 at 2n+2i+2, and element i itself is read before it is written.
		raw = raw[len(raw)/2:]
	}
	if err := f.read(raw, in); err != nil {
		return nil, err
	}
	switch in.DType {
	case "BF16":
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case "F16":
		toHostOrder16(asUint16s(t.F16))
	case "F32":
		toHostOrder32(asUint32s(t.F32))
	case "I32":
		toHostOrder32(asUint32s(t.I32))
	}
	return t, nil
}

// Uint16s reads an F16 or BF16 tensor as its elements' bit patterns, in host byte order and
// unconverted, for a caller that converts them itself: the model loader rounds BF16 to fp16
// in place in this slice, with no float32 tensor in between. Other dtypes are an error, as
// they are for Tensor.
func (f *File) Uint16s(name string) ([]uint16, Info, error) {
	in, ok := f.Header.Tensors[name]
	if !ok {
		return nil, Info{}, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	if in.DType != "F16" && in.DType != "BF16" {
		return nil, Info{}, fmt.Errorf("%s: tensor %q: dtype %s is not a 2-byte float (want F16 or BF16)", f.Path, in.Name, in.DType)
	}
	v := make([]uint16, (in.End-in.Begin)/2)
	if err := f.read(asBytes(v), in); err != nil {
		return nil, Info{}, err
	}
	toHostOrder16(v)
	return v, in, nil
}

// read fills dst, which the caller sized to the tensor's End-Begin bytes, from the file.
// ReadAt (pread) keeps no file offset, so tensors may be read from several goroutines at once.
func (f *File) read(dst []byte, in Info) error {
	if int64(len(dst)) != in.End-in.Begin {
		return fmt.Errorf("%s: tensor %q: %d-byte buffer for a %d-byte tensor", f.Path, in.Name, len(dst), in.End-in.Begin)
	}
	if _, err := f.f.ReadAt(dst, f.dataStart+in.Begin); err != nil {
		return fmt.Errorf("%s: tensor %q: %w", f.Path, in.Name, err)
	}
	return nil
}
