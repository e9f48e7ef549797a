package safetensors

import (
	"encoding/binary"
	"unsafe"
)

// The format is little-endian. Tensors are read straight into their typed storage, viewed
// as bytes, so on a little-endian host (every host this runs on in practice) the elements are
// right as read; a big-endian host swaps them in place afterwards.

// littleEndian reports the host byte order.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// asBytes views a slice of fixed-size elements (no pointers) as its bytes, sharing memory.
func asBytes[E any](s []E) []byte {
	var e E
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(e)))
}

// asUint16s views a slice of 2-byte elements (float16.Float16) as uint16s, sharing memory.
func asUint16s[E ~uint16](s []E) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// asUint32s views a slice of 4-byte elements (float32, int32) as uint32s, sharing memory.
func asUint32s[E float32 | int32](s []E) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// toHostOrder16 turns little-endian elements, as read from the file, into host order.
func toHostOrder16(v []uint16) {
	if littleEndian {
		return
	}
	b := asBytes(v)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
}

// toHostOrder32 is toHostOrder16 for 4-byte elements.
func toHostOrder32(v []uint32) {
	if littleEndian {
		return
	}
	b := asBytes(v)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
}
