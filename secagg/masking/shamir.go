package masking

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Shamir's secret sharing over the prime field GF(p), p = 2^61 − 1 (a
// Mersenne prime: reduction is two shifts and an add). A 32-byte secret is
// cut into secretChunks chunks of at most 7 bytes (56 bits < 61 bits), and
// each chunk is shared with its own random polynomial of degree t − 1, so a
// share is secretChunks field elements. Reconstruction checks that every
// recovered chunk fits in its byte width, which a forged share violates
// with probability about 1 − 2^−5 per chunk; the protocol never relies on
// that check alone (see Server.Sum).

// fieldP is the Mersenne prime 2^61 − 1.
const fieldP = 1<<61 - 1

const (
	secretSize   = 32
	chunkBytes   = 7
	secretChunks = (secretSize + chunkBytes - 1) / chunkBytes // 5
)

// fieldShare is one holder's share of a 32-byte secret: the evaluations of
// the chunks' polynomials at the holder's point x (x = ID + 1, never 0).
type fieldShare [secretChunks]uint64

func fadd(a, b uint64) uint64 {
	s := a + b // < 2^62: no overflow
	if s >= fieldP {
		s -= fieldP
	}
	return s
}

func fsub(a, b uint64) uint64 {
	if a >= b {
		return a - b
	}
	return a + fieldP - b
}

func fmul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b) // a, b < 2^61: product < 2^122
	// product = hi·2^64 + lo = (hi·2^3 + lo>>61)·2^61 + (lo & p) ≡ high + low.
	s := (lo & fieldP) + (lo>>61 | hi<<3)
	for s >= fieldP {
		s -= fieldP
	}
	return s
}

func fpow(a, e uint64) uint64 {
	r := uint64(1)
	for e > 0 {
		if e&1 == 1 {
			r = fmul(r, a)
		}
		a = fmul(a, a)
		e >>= 1
	}
	return r
}

// finv returns a^−1 (a ≠ 0) by Fermat's little theorem.
func finv(a uint64) uint64 { return fpow(a, fieldP-2) }

// randField draws a uniform element of GF(p) from r by rejection (61-bit
// candidates; acceptance 1 − 2^−61).
func randField(r io.Reader) (uint64, error) {
	var b [8]byte
	for range 64 {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("reading randomness: %w", err)
		}
		v := binary.LittleEndian.Uint64(b[:]) & fieldP
		if v < fieldP {
			return v, nil
		}
	}
	return 0, errors.New("randomness source returned 64 out-of-range words in a row")
}

// chunks splits a 32-byte secret into field elements of ≤ 7 bytes each.
func chunks(secret *[secretSize]byte) [secretChunks]uint64 {
	var c [secretChunks]uint64
	for i := range secretChunks {
		var w [8]byte
		copy(w[:], secret[i*chunkBytes:min((i+1)*chunkBytes, secretSize)])
		c[i] = binary.LittleEndian.Uint64(w[:])
	}
	return c
}

// unchunks reassembles a secret, refusing chunks wider than their bytes.
func unchunks(c [secretChunks]uint64) ([secretSize]byte, error) {
	var s [secretSize]byte
	for i := range secretChunks {
		width := min((i+1)*chunkBytes, secretSize) - i*chunkBytes
		if c[i]>>(8*width) != 0 {
			return s, errors.New("the shares are inconsistent: a reconstructed chunk overflows its width")
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], c[i])
		copy(s[i*chunkBytes:], w[:width])
	}
	return s, nil
}

// point returns the evaluation point of client id (id + 1: never 0, and
// distinct for distinct ids since ids < 2^32 < p).
func point(id uint32) uint64 { return uint64(id) + 1 }

// shareSecret splits secret among the holders (client ids) with threshold
// t: any t shares reconstruct it, any t − 1 are independent of it.
func shareSecret(secret *[secretSize]byte, holders []uint32, t int, r io.Reader) (map[uint32]fieldShare, error) {
	if t < 1 || t > len(holders) {
		return nil, fmt.Errorf("threshold %d must be in [1, %d holders]", t, len(holders))
	}
	sec := chunks(secret)
	out := make(map[uint32]fieldShare, len(holders))
	coef := make([]uint64, t)
	var shares = make([]fieldShare, len(holders))
	for c := range secretChunks {
		coef[0] = sec[c]
		for i := 1; i < t; i++ {
			v, err := randField(r)
			if err != nil {
				return nil, err
			}
			coef[i] = v
		}
		for h, id := range holders {
			x := point(id)
			// Horner: coef[t−1]·x^(t−1) + … + coef[0].
			y := uint64(0)
			for i := t - 1; i >= 0; i-- {
				y = fadd(fmul(y, x), coef[i])
			}
			shares[h][c] = y
		}
	}
	clear(coef)
	for h, id := range holders {
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("holder %d listed twice", id)
		}
		out[id] = shares[h]
	}
	return out, nil
}

// lagrangeAt returns the Lagrange coefficients λ_j such that
// f(x0) = Σ λ_j f(x_j) for every polynomial f of degree < len(xs).
func lagrangeAt(xs []uint64, x0 uint64) ([]uint64, error) {
	lam := make([]uint64, len(xs))
	for j, xj := range xs {
		num, den := uint64(1), uint64(1)
		for m, xm := range xs {
			if m == j {
				continue
			}
			if xm == xj {
				return nil, fmt.Errorf("two shares at the same point %d", xj)
			}
			num = fmul(num, fsub(x0, xm))
			den = fmul(den, fsub(xj, xm))
		}
		lam[j] = fmul(num, finv(den))
	}
	return lam, nil
}

// interpolate evaluates, at x0, the polynomial through the points
// (xs[j], ys[j][c]) for each chunk c.
func interpolate(xs []uint64, ys []fieldShare, x0 uint64) (fieldShare, error) {
	var out fieldShare
	lam, err := lagrangeAt(xs, x0)
	if err != nil {
		return out, err
	}
	for c := range secretChunks {
		var s uint64
		for j := range xs {
			s = fadd(s, fmul(lam[j], ys[j][c]))
		}
		out[c] = s
	}
	return out, nil
}

// reconstruct recovers a secret from at least t shares (holder id → share).
// With more than t shares it checks that all of them lie on the polynomial
// through the first t (sorted by id), so an inconsistent share is detected
// rather than silently producing a wrong secret.
func reconstruct(shares map[uint32]fieldShare, ids []uint32, t int) ([secretSize]byte, error) {
	var zero [secretSize]byte
	if len(ids) < t {
		return zero, fmt.Errorf("%d shares, fewer than the threshold %d", len(ids), t)
	}
	xs := make([]uint64, t)
	ys := make([]fieldShare, t)
	for j := range t {
		xs[j] = point(ids[j])
		ys[j] = shares[ids[j]]
	}
	for _, id := range ids[t:] {
		want, err := interpolate(xs, ys, point(id))
		if err != nil {
			return zero, err
		}
		if want != shares[id] {
			return zero, fmt.Errorf("the share held by client %d is inconsistent with the others", id)
		}
	}
	sec, err := interpolate(xs, ys, 0)
	if err != nil {
		return zero, err
	}
	return unchunks(sec)
}
