// Package digest is the project's SHA-256 for data of any size: the same
// digests as crypto/sha256, computed in blocks of at most BlockSize bytes,
// each after clearing the AVX registers' upper halves (vec.ClearUpper).
//
// On amd64, crypto/sha256 uses the SHA-NI instructions, which are
// legacy-SSE encoded: while the upper halves of the AVX registers are
// dirty they take microcode assists and run 100–300 times slower. Go code
// cannot know the state: an AVX kernel that returns without VZEROUPPER
// leaves it dirty, and so does Go 1.26's asynchronous preemption on an
// AVX-512 processor, which restores a preempted goroutine's registers
// without VZEROUPPER wherever it was stopped (measured on this project's
// machine: 256 KiB hashed right after took 63–148 ms instead of
// 0.14–1.3 ms; docs/results.md). Clearing the state before each block
// bounds the slowdown to the block a preemption lands in.
//
// Use New (also as the constructor given to crypto/hmac.New or
// crypto/hkdf), Sum256 or Reader wherever more than a few kilobytes are
// hashed; sha256.Sum256 of a key or an id is fine as it is. Where there is
// no AVX (or no amd64) clearing does nothing and the digests are
// crypto/sha256's, computed by it.
//
// SHA-512 needs none of this: on amd64 Go computes it with AVX2
// (VEX-encoded) instructions, which do not stall on a dirty upper state
// (BenchmarkSHA512AfterDirtyUpper).
package digest

import (
	"crypto/sha256"
	"encoding"
	"hash"
	"io"

	"github.com/veil-privacy/veil/internal/vec"
)

// BlockSize is the most bytes hashed between two clearings of the AVX
// upper state: at full speed (about 2 GB/s with SHA-NI) a block takes
// some 16 µs, so a preemption landing in one costs at most that block's
// slowdown, not the rest of the data's.
const BlockSize = 32 << 10

// Size is the length of a digest in bytes (sha256.Size).
const Size = sha256.Size

// sha is a SHA-256 hash.Hash whose Write and Sum clear the AVX upper
// state before each block.
type sha struct{ h hash.Hash }

// New returns a SHA-256 hash.Hash whose digests are crypto/sha256's; its
// Write hashes at most BlockSize bytes after each clearing of the AVX
// upper state. Like crypto/sha256's, it implements
// encoding.BinaryMarshaler and encoding.BinaryUnmarshaler (so that
// crypto/hmac can save its padded keys' state) and hash.Cloner.
func New() hash.Hash { return &sha{h: sha256.New()} }

// Write adds p to the hash, BlockSize bytes at a time; it never fails.
func (s *sha) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), BlockSize)
		vec.ClearUpper()
		s.h.Write(p[:k])
		p = p[k:]
	}
	return n, nil
}

// Sum appends the digest to b (the last, padded block after a clearing).
func (s *sha) Sum(b []byte) []byte {
	vec.ClearUpper()
	return s.h.Sum(b)
}

// Reset starts a new digest.
func (s *sha) Reset() { s.h.Reset() }

// Size returns Size.
func (s *sha) Size() int { return Size }

// BlockSize returns SHA-256's block size (64), as crypto/sha256's does;
// the clearing block is the package's BlockSize.
func (s *sha) BlockSize() int { return sha256.BlockSize }

// MarshalBinary returns the hash's state, as crypto/sha256's does.
func (s *sha) MarshalBinary() ([]byte, error) {
	return s.h.(encoding.BinaryMarshaler).MarshalBinary()
}

// AppendBinary appends the hash's state to b, as crypto/sha256's does.
func (s *sha) AppendBinary(b []byte) ([]byte, error) {
	return s.h.(encoding.BinaryAppender).AppendBinary(b)
}

// UnmarshalBinary restores a state MarshalBinary returned.
func (s *sha) UnmarshalBinary(b []byte) error {
	return s.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(b)
}

// Clone returns an independent copy of the hash and its state.
func (s *sha) Clone() (hash.Cloner, error) {
	c, err := s.h.(hash.Cloner).Clone()
	if err != nil {
		return nil, err
	}
	return &sha{h: c.(hash.Hash)}, nil
}

// Sum256 returns the SHA-256 of p (sha256.Sum256's value), hashed in
// blocks of BlockSize bytes each after a clearing of the AVX upper state.
func Sum256(p []byte) [Size]byte {
	if len(p) <= BlockSize {
		vec.ClearUpper()
		return sha256.Sum256(p)
	}
	var out [Size]byte
	s := sha{h: sha256.New()}
	s.Write(p)
	s.Sum(out[:0])
	return out
}

// Reader returns the SHA-256 of everything r yields until io.EOF, with
// the number of bytes read; it stops at the first other error and
// returns it.
func Reader(r io.Reader) ([Size]byte, int64, error) {
	var out [Size]byte
	s := New()
	n, err := io.CopyBuffer(s, r, make([]byte, BlockSize))
	if err != nil {
		return out, n, err
	}
	s.Sum(out[:0])
	return out, n, nil
}
