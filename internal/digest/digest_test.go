package digest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"hash"
	"io"
	"testing"
	"testing/iotest"
)

// lengths are the sizes around the clearing block's and SHA-256's block
// boundaries.
var lengths = []int{0, 1, 63, 64, 65, BlockSize - 1, BlockSize, BlockSize + 1, 2*BlockSize + 7, 1 << 20, 1<<20 + 13}

func data(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>9)
	}
	return p
}

// TestDigestsAreSHA256s: Sum256, New (whole, and in pieces that straddle
// the blocks), Reader and HMAC over New give crypto/sha256's values.
func TestDigestsAreSHA256s(t *testing.T) {
	for _, n := range lengths {
		p := data(n)
		want := sha256.Sum256(p)
		key := []byte("a key of some length")
		mac := hmac.New(sha256.New, key)
		mac.Write(p)
		wantMAC := mac.Sum(nil)

		if got := Sum256(p); got != want {
			t.Errorf("Sum256 of %d bytes = %x, want %x", n, got, want)
		}
		h := New()
		h.Write(p)
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Errorf("New, one Write of %d bytes = %x, want %x", n, got, want)
		}
		h.Reset()
		for q := p; len(q) > 0; {
			k := min(len(q), BlockSize/3+5)
			h.Write(q[:k])
			q = q[k:]
		}
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Errorf("New, Writes of %d bytes in pieces = %x, want %x", n, got, want)
		}
		got, read, err := Reader(iotest.HalfReader(bytes.NewReader(p)))
		if err != nil || read != int64(n) || got != want {
			t.Errorf("Reader of %d bytes = %x, %d, %v; want %x, %d, nil", n, got, read, err, want, n)
		}
		m := hmac.New(New, key)
		m.Write(p)
		if got := m.Sum(nil); !bytes.Equal(got, wantMAC) {
			t.Errorf("HMAC over New of %d bytes = %x, want %x", n, got, wantMAC)
		}
	}
}

// TestReaderStopsAtAnError: a read error is returned, not a digest of
// what came before it.
func TestReaderStopsAtAnError(t *testing.T) {
	_, n, err := Reader(io.MultiReader(bytes.NewReader(data(100)), iotest.ErrReader(io.ErrUnexpectedEOF)))
	if err != io.ErrUnexpectedEOF || n != 100 {
		t.Fatalf("Reader = %d, %v; want 100, %v", n, err, io.ErrUnexpectedEOF)
	}
}

// TestStateAndCloneAsSHA256s: a state saved mid-stream (as crypto/hmac
// saves its padded keys') and a clone continue to SHA-256's digest.
func TestStateAndCloneAsSHA256s(t *testing.T) {
	p := data(3*BlockSize + 5)
	want := sha256.Sum256(p)
	h := New()
	h.Write(p[:BlockSize+9])
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.(hash.Cloner).Clone()
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("something else"))
	r := New()
	if err := r.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]hash.Hash{"restored": r, "clone": c.(hash.Hash)} {
		g.Write(p[BlockSize+9:])
		if got := g.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Errorf("%s hash = %x, want %x", name, got, want)
		}
	}
}
