package tensor

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// WriteNPY writes t to path as numpy.save would. A failed write removes the partial file so
// that no truncated .npy is left behind to be mistaken for a real one.
func WriteNPY(path string, t *Tensor) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<16)
	if err := EncodeNPY(w, t); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return nil
}

// EncodeNPY writes t in .npy format 1.0, C order, with the exact header bytes and padding
// numpy.save produces, so a file re-saved from Go hashes the same as the Python original.
// The tensor is checked for consistency first because its fields are public and an
// inconsistent one would otherwise produce a file that lies about its contents.
func EncodeNPY(w io.Writer, t *Tensor) error {
	if err := t.validate(); err != nil {
		return err
	}
	hdr, err := formatNPYHeader(t.DType, t.Shape)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	// Elements are serialised in chunks so that memory stays flat for large tensors.
	const chunk = 1 << 14
	buf := make([]byte, 0, chunk*4)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	n := t.Len()
	for i := 0; i < n; i++ {
		switch t.DType {
		case F16:
			buf = binary.LittleEndian.AppendUint16(buf, t.F16[i].Bits())
		case BF16:
			buf = binary.LittleEndian.AppendUint16(buf, t.BF16[i].Bits())
		case F32:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(t.F32[i]))
		case I32:
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t.I32[i]))
		case F8E4M3, F8E5M2, U8:
			buf = append(buf, t.F8[i])
		}
		if len(buf) >= chunk*4-4 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (t *Tensor) validate() error {
	if t == nil {
		return errors.New("nil tensor")
	}
	if t.DType.Size() == 0 {
		return fmt.Errorf("tensor has dtype %v", t.DType)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor shape %s has a negative dimension", ShapeString(t.Shape))
		}
	}
	if _, err := payloadBytes(t.DType, t.Shape); err != nil {
		return err
	}
	if got, want := t.Len(), NumElements(t.Shape); got != want {
		return fmt.Errorf("tensor %v holds %d elements, its shape needs %d", t, got, want)
	}
	if len(t.F16)+len(t.BF16)+len(t.F32)+len(t.I32)+len(t.F8) != t.Len() {
		return fmt.Errorf("tensor %v holds data in a slice other than its dtype's", t)
	}
	return nil
}
