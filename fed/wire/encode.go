package wire

import (
	"hash"
	"unsafe"

	"github.com/veil-privacy/veil/internal/vec"
)

// hashBlocks writes p to h passBlock bytes at a time, clearing the AVX
// registers' upper halves before each block (vec.ClearUpper): SHA-256's
// SHA-NI instructions run 10–35 times slower while they are dirty, which
// an asynchronous preemption of the goroutine can leave them at any
// point on an AVX-512 processor (measured: 15–42 ms instead of 1.2 ms to
// hash a 2.2 MB model started in that state). Clearing per block bounds
// the slowdown to the block a preemption lands in.
func hashBlocks(h hash.Hash, p []byte) {
	for len(p) > 0 {
		n := min(len(p), passBlock)
		vec.ClearUpper()
		h.Write(p[:n])
		p = p[n:]
	}
}

// hashValues writes w's payload to h straight from the values' memory
// and reports true, on a little-endian machine (where that memory is the
// payload's bytes); elsewhere it writes nothing and reports false.
func (w Weights) hashValues(h hash.Hash) bool {
	if !littleEndian {
		return false
	}
	for _, t := range w {
		hashBlocks(h, valueBytes(t.Values))
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
