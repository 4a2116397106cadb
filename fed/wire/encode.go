package wire

import (
	"hash"
	"unsafe"
)

// hashValues writes w's payload to h (a digest.New, which clears the AVX
// upper state before each 32 KiB block) straight from the values' memory
// and reports true, on a little-endian machine (where that memory is the
// payload's bytes); elsewhere it writes nothing and reports false.
func (w Weights) hashValues(h hash.Hash) bool {
	if !littleEndian {
		return false
	}
	for _, t := range w {
		h.Write(valueBytes(t.Values))
	}
	return true
}

// valueBytes returns the memory of v as bytes when this machine is
// little-endian (the payload's byte order: the bytes are then exactly
// the encoded values), else nil.
func valueBytes(v []float32) []byte {
	if !littleEndian || len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}
