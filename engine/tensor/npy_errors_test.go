package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// rawNPY builds a .npy file with an arbitrary header dict, for shapes of input numpy would
// never write itself.
func rawNPY(major byte, dict string, payload []byte) []byte {
	hdr := dict + "\n"
	b := []byte(npyMagic)
	b = append(b, major, 0)
	if major == 2 {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(hdr)))
	} else {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(hdr)))
	}
	b = append(b, hdr...)
	return append(b, payload...)
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unsized hides the concrete reader type so DecodeNPY cannot learn the input size up front.
type unsized struct{ r io.Reader }

func (u unsized) Read(p []byte) (int, error) { return u.r.Read(p) }

func TestDecodeErrors(t *testing.T) {
	valid := encode(t, FromF32([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}))
	validHdr := valid[:len(valid)-24]
	const f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
	for _, tc := range []struct {
		name  string
		data  []byte
		class error
		text  string
	}{
		{"f8", fixture(t, "bad_f8.npy"), ErrUnsupportedDType, "x.npy: unsupported dtype '<f8' (want <f2, <f4, <i4, <u2 for bf16 or |u1 for fp8)"},
		{"big-endian f2", fixture(t, "bad_big_endian.npy"), ErrUnsupportedDType, "'>f2'"},
		{"bool", fixture(t, "bad_bool.npy"), ErrUnsupportedDType, "'|b1'"},
		{"i8", rawNPY(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", make([]byte, 8)), ErrUnsupportedDType, "'<i8'"},
		{"structured", rawNPY(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", make([]byte, 4)), ErrUnsupportedDType, "descr"},
		{"fortran", fixture(t, "bad_fortran.npy"), ErrFortranOrder, "C order"},
		{"truncated by one byte", valid[:len(valid)-1], ErrTruncated, "24 payload bytes, file has 23"},
		{"header only", validHdr, ErrTruncated, "file has 0"},
		{"trailing byte", append(bytes.Clone(valid), 0), ErrTrailingBytes, "1 bytes after the 24-byte payload"},
		{"shape smaller than data", rawNPY(1, f4, make([]byte, 12)), ErrTrailingBytes, "shape and data disagree"},
		{"huge shape, tiny file", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 1000000), }", make([]byte, 16)), ErrTruncated, "400000000000 payload bytes, file has 16"},
		{"absurd shape", rawNPY(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1073741824, 1073741824, 1073741824), }", nil), ErrBadShape, "absurdly large"},
		{"dim overflows int64", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", nil), ErrBadShape, "out of range"},
		{"negative dim", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", nil), ErrBadShape, "negative"},
		{"too many dims", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ("+strings.Repeat("1, ", 65)+"), }", make([]byte, 4)), ErrBadShape, "more than 64"},
		{"empty file", nil, ErrBadHeader, "too short"},
		{"bad magic", append([]byte("\x93NUMPZ"), valid[6:]...), ErrBadHeader, "bad magic"},
		{"not npy", []byte("PK\x03\x04 this is a zip file, not an array"), ErrBadHeader, "bad magic"},
		{"version 3", append(append([]byte(npyMagic), 3, 0), valid[8:]...), ErrBadHeader, "version 3.0"},
		{"version 1.1", append(append([]byte(npyMagic), 1, 1), valid[8:]...), ErrBadHeader, "version 1.1"},
		{"cut in length", valid[:9], ErrBadHeader, "header length"},
		{"cut in header", valid[:40], ErrBadHeader, "header truncated"},
		{"v2 header length absurd", append(append([]byte(npyMagic), 2, 0), 0xff, 0xff, 0xff, 0x7f, '{'), ErrBadHeader, "exceeds"},
		{"no newline", rawNPY(1, f4, nil)[:len(rawNPY(1, f4, nil))-1], ErrBadHeader, "header truncated"},
		{"newline missing at end", append(append([]byte(npyMagic), 1, 0, 2, 0), '{', '}'), ErrBadHeader, "newline"},
		{"control byte", rawNPY(1, "{'descr': '<f4',\x00'fortran_order': False, 'shape': (2,), }", make([]byte, 8)), ErrBadHeader, "non-printable"},
		{"missing shape", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, }", nil), ErrBadHeader, `missing key "shape"`},
		{"extra key", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", nil), ErrBadHeader, `unexpected key "x"`},
		{"duplicate key", rawNPY(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", nil), ErrBadHeader, "duplicate"},
		{"shape not a tuple", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", make([]byte, 8)), ErrBadHeader, "not a tuple"},
		{"shape a list", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", make([]byte, 8)), ErrBadHeader, "not a tuple"},
		{"fortran not bool", rawNPY(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", make([]byte, 8)), ErrBadHeader, "True or False"},
		{"junk after dict", rawNPY(1, f4+" x", make([]byte, 8)), ErrBadHeader, "after '}'"},
		{"unterminated string", rawNPY(1, "{'descr: '<f4', }", nil), ErrBadHeader, ""},
		// Valid Python, but npyio slices by key position and panics on it: the recover must
		// turn that into an error.
		{"keys reordered", rawNPY(1, "{'shape': (2,), 'fortran_order': False, 'descr': '<f4', }", make([]byte, 8)), ErrBadHeader, "npyio"},
		// Also valid Python, but npyio would silently drop the dimension; the cross-check must
		// catch the disagreement.
		{"no trailing comma", rawNPY(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", make([]byte, 8)), ErrBadHeader, "npyio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for kind, r := range map[string]io.Reader{"sized": bytes.NewReader(tc.data), "stream": unsized{bytes.NewReader(tc.data)}} {
				got, err := DecodeNPY(r, "x.npy")
				if err == nil {
					t.Fatalf("%s: decoded %v, want an error", kind, got)
				}
				if got != nil {
					t.Errorf("%s: returned a tensor alongside error %v", kind, err)
				}
				if !errors.Is(err, tc.class) {
					t.Errorf("%s: error %q is not %q", kind, err, tc.class)
				}
				if msg := err.Error(); !strings.HasPrefix(msg, "x.npy: ") || !strings.Contains(msg, tc.text) {
					t.Errorf("%s: error %q does not name the file and say %q", kind, msg, tc.text)
				}
			}
		})
	}
}

// TestDecodeBoundsAllocation guards against a header that claims far more data than exists
// making the decoder allocate for the claim.
func TestDecodeBoundsAllocation(t *testing.T) {
	data := rawNPY(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (500000000000,), }", make([]byte, 20))
	for kind, mk := range map[string]func() io.Reader{
		"sized":  func() io.Reader { return bytes.NewReader(data) },
		"stream": func() io.Reader { return unsized{bytes.NewReader(data)} },
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := DecodeNPY(mk(), "big.npy")
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: err = %v, want ErrTruncated", kind, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: decoding allocated %d bytes for a %d-byte file", kind, n, len(data))
		}
	}
}

func TestReadNPYErrorNamesPath(t *testing.T) {
	path := filepath.Join("testdata", "bad_f8.npy")
	_, err := ReadNPY(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("ReadNPY error %v does not start with the path", err)
	}
}

// TestDecodeAcceptsVersion2 covers numpy's format 2.0 (a 32-bit header length), which numpy
// writes for very large headers.
func TestDecodeAcceptsVersion2(t *testing.T) {
	data := rawNPY(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	got, err := DecodeNPY(bytes.NewReader(data), "v2.npy")
	if err != nil || !sameBits(got, FromI32([]int{2}, []int32{1, -1})) {
		t.Errorf("DecodeNPY(v2) = %v, %v", got, err)
	}
}
