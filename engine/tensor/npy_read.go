package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/sbinet/npyio/npy"
	"github.com/x448/float16"
)

// ReadNPY reads one .npy file; errors name the path.
func ReadNPY(path string) (*Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodeNPY(f, path)
}

// DecodeNPY decodes a .npy stream holding a little-endian f16, f32, i32, bf16 ('<u2') or byte
// ('|u1', FP8 bytes: U8) array in C order.
// The stream must end exactly where the payload does: trailing bytes mean the header's shape
// and the data disagree, which for a golden file is corruption, not slack. name prefixes every
// error. Memory use is bounded by the bytes actually present, never by what the header claims.
func DecodeNPY(r io.Reader, name string) (*Tensor, error) {
	t, err := decodeNPY(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

func decodeNPY(r io.Reader) (*Tensor, error) {
	preamble, hdr, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	dt, ok := npyDescr[hdr.descr]
	if !ok {
		return nil, fmt.Errorf("%w %s (want <f2, <f4, <i4, <u2 for bf16 or |u1 for fp8)", ErrUnsupportedDType, quoteDescr(hdr.descr))
	}
	if hdr.fortran {
		return nil, fmt.Errorf("%w (want C order: save np.ascontiguousarray(a))", ErrFortranOrder)
	}
	size, err := payloadBytes(dt, hdr.shape)
	if err != nil {
		return nil, err
	}
	payload, err := readPayload(r, size)
	if err != nil {
		return nil, err
	}
	rd, err := npyioReader(preamble, payload, hdr)
	if err != nil {
		return nil, err
	}
	t := &Tensor{DType: dt, Shape: hdr.shape}
	switch dt {
	case F16:
		// npyio has no float16, so the payload is decoded here, bit pattern for bit pattern.
		t.F16 = make([]float16.Float16, len(payload)/2)
		for i := range t.F16 {
			t.F16[i] = float16.Frombits(binary.LittleEndian.Uint16(payload[2*i:]))
		}
	case BF16:
		t.BF16 = make([]BFloat16, len(payload)/2)
		for i := range t.BF16 {
			t.BF16[i] = BFloat16(binary.LittleEndian.Uint16(payload[2*i:]))
		}
	case U8:
		t.F8 = payload
	case F32:
		err = readViaNPYIO(rd, hdr.shape, &t.F32)
	case I32:
		err = readViaNPYIO(rd, hdr.shape, &t.I32)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// readNPYHeader reads and strictly parses everything before the payload, returning those raw
// bytes too so npyio can later be handed a stream that starts at the magic.
func readNPYHeader(r io.Reader) ([]byte, npyHeader, error) {
	var hdr npyHeader
	pre := make([]byte, npyPrefixLen, npyPrefixLen+4)
	if _, err := io.ReadFull(r, pre); err != nil {
		return nil, hdr, fmt.Errorf("%w: file too short for the .npy magic (%v)", ErrBadHeader, err)
	}
	if string(pre[:len(npyMagic)]) != npyMagic {
		return nil, hdr, fmt.Errorf("%w: bad magic %q (not a .npy file)", ErrBadHeader, pre[:len(npyMagic)])
	}
	major, minor := pre[len(npyMagic)], pre[len(npyMagic)+1]
	var lenBytes int
	switch {
	case major == 1 && minor == 0:
		lenBytes = 2
	case major == 2 && minor == 0:
		lenBytes = 4
	default:
		// 3.0 only differs by a UTF-8 header, which no supported dtype needs and npyio
		// cannot read.
		return nil, hdr, fmt.Errorf("%w: unsupported format version %d.%d (want 1.0 or 2.0)", ErrBadHeader, major, minor)
	}
	pre = pre[:npyPrefixLen+lenBytes]
	if _, err := io.ReadFull(r, pre[npyPrefixLen:]); err != nil {
		return nil, hdr, fmt.Errorf("%w: file ends inside the header length (%v)", ErrBadHeader, err)
	}
	var hlen int64
	if lenBytes == 2 {
		hlen = int64(binary.LittleEndian.Uint16(pre[npyPrefixLen:]))
	} else {
		hlen = int64(binary.LittleEndian.Uint32(pre[npyPrefixLen:]))
	}
	if hlen > npyMaxHeader {
		return nil, hdr, fmt.Errorf("%w: header length %d exceeds %d bytes", ErrBadHeader, hlen, npyMaxHeader)
	}
	// Read through a LimitReader so a lying length allocates only what is really there.
	text, err := io.ReadAll(io.LimitReader(r, hlen))
	if err != nil {
		return nil, hdr, fmt.Errorf("%w: reading header: %v", ErrBadHeader, err)
	}
	if int64(len(text)) != hlen {
		return nil, hdr, fmt.Errorf("%w: header truncated (length field says %d bytes, file has %d)", ErrBadHeader, hlen, len(text))
	}
	hdr, err = parseNPYHeader(text)
	if err != nil {
		return nil, hdr, err
	}
	return append(pre, text...), hdr, nil
}

// readPayload reads exactly size bytes and checks nothing follows.
func readPayload(r io.Reader, size int64) ([]byte, error) {
	if left, ok := remaining(r); ok {
		// Sized inputs are checked before allocating, and allocated exactly once.
		if left < size {
			return nil, truncated(size, left)
		}
		if left > size {
			return nil, trailing(size, left-size)
		}
		buf := make([]byte, size)
		if n, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("%w: %v", truncated(size, int64(n)), err)
		}
		return buf, nil
	}
	// An unsized stream is read with one byte of lookahead; ReadAll grows with the data that
	// actually arrives, so a header claiming terabytes costs nothing on a short stream.
	buf, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, fmt.Errorf("reading payload: %w", err)
	}
	switch n := int64(len(buf)); {
	case n < size:
		return nil, truncated(size, n)
	case n > size:
		extra, _ := io.Copy(io.Discard, r)
		return nil, trailing(size, n-size+extra)
	}
	return buf, nil
}

func truncated(want, got int64) error {
	return fmt.Errorf("%w: header implies %d payload bytes, file has %d", ErrTruncated, want, got)
}

func trailing(want, extra int64) error {
	return fmt.Errorf("%w: %d bytes after the %d-byte payload (shape and data disagree)", ErrTrailingBytes, extra, want)
}

// remaining reports how many unread bytes r holds when that is knowable without reading.
func remaining(r io.Reader) (int64, bool) {
	switch v := r.(type) {
	case *bytes.Reader:
		return int64(v.Len()), true
	case *bytes.Buffer:
		return int64(v.Len()), true
	case *os.File:
		st, err := v.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return 0, false
		}
		pos, err := v.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, false
		}
		return st.Size() - pos, true
	}
	return 0, false
}

// npyioReader hands the already validated bytes to npyio. Its header parser was not written
// for hostile input (it slices by key positions and can index out of range), so it only ever
// sees headers parseNPYHeader accepted; the recover is a last line of defence that turns any
// panic left in it into an error, and its reading of the header is cross-checked against ours
// so that a silent misparse (it can, for instance, drop a dimension) cannot slip through.
func npyioReader(preamble, payload []byte, want npyHeader) (rd *npy.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			rd, err = nil, fmt.Errorf("%w: npyio panicked on the header: %v", ErrBadHeader, p)
		}
	}()
	rd, err = npy.NewReader(io.MultiReader(bytes.NewReader(preamble), bytes.NewReader(payload)))
	if err != nil {
		return nil, fmt.Errorf("%w: npyio: %v", ErrBadHeader, err)
	}
	got := rd.Header.Descr
	if got.Type != want.descr || got.Fortran != want.fortran || !SameShape(got.Shape, want.shape) {
		return nil, fmt.Errorf("%w: npyio reads it as descr=%q fortran_order=%v shape=%v, not %q %v %v "+
			"(keys must be laid out as numpy.save writes them)",
			ErrBadHeader, got.Type, got.Fortran, got.Shape, want.descr, want.fortran, want.shape)
	}
	return rd, nil
}

// readViaNPYIO reads the f32/i32 payload with npyio. By now the payload length is known to
// match the shape exactly, which matters: npyio ignores short reads and would zero-fill.
func readViaNPYIO[E float32 | int32](rd *npy.Reader, shape []int, dst *[]E) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("npyio panicked reading the payload: %v", p)
		}
	}()
	n := NumElements(shape)
	*dst = make([]E, n)
	if err := rd.Read(dst); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("npyio: %w", err)
	}
	if len(*dst) != n {
		return fmt.Errorf("npyio returned %d elements, want %d", len(*dst), n)
	}
	return nil
}

// quoteDescr shows a descr the way numpy would print it, unless it holds something that would
// garble the message.
func quoteDescr(s string) string {
	const maxShown = 40
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "..."
	}
	if slices.ContainsFunc([]byte(s), func(c byte) bool { return c < 0x20 || c > 0x7e || c == '\'' }) {
		return strconv.Quote(s)
	}
	return "'" + s + "'"
}
