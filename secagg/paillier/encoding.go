package paillier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
)

// Encoding format: every standalone encoding starts with a version byte
// (EncodingVersion) and a tag byte naming what follows; integers are
// big-endian, prefixed by a uint32 length, with no leading zero byte.
const (
	// EncodingVersion is the current version of the binary encodings.
	EncodingVersion = 1

	tagPublic     = 'P'
	tagPrivate    = 'S'
	tagCiphertext = 'C'
)

// ErrEncoding is wrapped by every decoding error.
var ErrEncoding = errors.New("paillier: malformed encoding")

func appendInt(dst []byte, x *big.Int) []byte {
	b := x.Bytes()
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// readInt reads a length-prefixed canonical integer of at most maxLen bytes.
func readInt(b []byte, what string, maxLen int) (*big.Int, []byte, error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %s length truncated", ErrEncoding, what)
	}
	l := binary.BigEndian.Uint32(b)
	b = b[4:]
	if l == 0 || int64(l) > int64(maxLen) {
		return nil, nil, fmt.Errorf("%w: %s length %d outside [1, %d]", ErrEncoding, what, l, maxLen)
	}
	if int64(len(b)) < int64(l) {
		return nil, nil, fmt.Errorf("%w: %s truncated (%d of %d bytes)", ErrEncoding, what, len(b), l)
	}
	if b[0] == 0 {
		return nil, nil, fmt.Errorf("%w: %s has a leading zero byte", ErrEncoding, what)
	}
	return new(big.Int).SetBytes(b[:l]), b[l:], nil
}

func checkHeader(b []byte, tag byte, what string) ([]byte, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %s header truncated", ErrEncoding, what)
	}
	if b[0] != EncodingVersion {
		return nil, fmt.Errorf("%w: %s version %d, want %d", ErrEncoding, what, b[0], EncodingVersion)
	}
	if b[1] != tag {
		return nil, fmt.Errorf("%w: tag %q is not a %s", ErrEncoding, b[1], what)
	}
	return b[2:], nil
}

// MarshalBinary encodes the public key.
func (pk *PublicKey) MarshalBinary() ([]byte, error) {
	return appendInt([]byte{EncodingVersion, tagPublic}, pk.n), nil
}

// UnmarshalPublicKey decodes and validates a public key. Moduli under
// MinBits are refused unless opts.AllowInsecureTestKeySize is set.
func UnmarshalPublicKey(b []byte, opts DecodeOptions) (*PublicKey, error) {
	rest, err := checkHeader(b, tagPublic, "public key")
	if err != nil {
		return nil, err
	}
	n, rest, err := readInt(rest, "modulus", maxBits/8)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after public key", ErrEncoding, len(rest))
	}
	pk, err := newPublicKey(n, opts.AllowInsecureTestKeySize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEncoding, err)
	}
	return pk, nil
}

// MarshalBinary encodes the private key (its two primes). The result is
// secret: store it encrypted and never log it.
func (sk *PrivateKey) MarshalBinary() ([]byte, error) {
	if sk.zeroed {
		return nil, errors.New("paillier: private key has been zeroed")
	}
	b := appendInt([]byte{EncodingVersion, tagPrivate}, sk.p)
	return appendInt(b, sk.q), nil
}

// UnmarshalPrivateKey decodes a private key and checks that its factors are
// primes of equal size that form a valid key. Moduli under MinBits are
// refused unless opts.AllowInsecureTestKeySize is set. The primality tests
// use math/big (not constant-time); they run once per key loaded.
func UnmarshalPrivateKey(b []byte, opts DecodeOptions) (*PrivateKey, error) {
	rest, err := checkHeader(b, tagPrivate, "private key")
	if err != nil {
		return nil, err
	}
	p, rest, err := readInt(rest, "prime p", maxBits/16)
	if err != nil {
		return nil, err
	}
	q, rest, err := readInt(rest, "prime q", maxBits/16)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after private key", ErrEncoding, len(rest))
	}
	if p.BitLen() != q.BitLen() {
		return nil, fmt.Errorf("%w: primes of different sizes", ErrEncoding)
	}
	if min := minBitsFor(opts.AllowInsecureTestKeySize); p.BitLen()*2 < min {
		return nil, fmt.Errorf("%w: %w: factors of %d bits, need a modulus of at least %d", ErrEncoding, ErrKeyTooSmall, p.BitLen(), min)
	}
	if !p.ProbablyPrime(20) || !q.ProbablyPrime(20) {
		return nil, fmt.Errorf("%w: a factor is not prime", ErrEncoding)
	}
	sk, err := newPrivateKey(p, q, opts.AllowInsecureTestKeySize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEncoding, err)
	}
	return sk, nil
}

// MarshalBinary encodes a standalone ciphertext.
func (ct *Ciphertext) MarshalBinary() ([]byte, error) {
	if ct == nil || ct.c == nil {
		return nil, errors.New("paillier: nil ciphertext")
	}
	return appendInt([]byte{EncodingVersion, tagCiphertext}, ct.c), nil
}

// UnmarshalCiphertext decodes a standalone ciphertext and validates it
// against the key: it must lie in [1, n²) and be coprime to n.
func (pk *PublicKey) UnmarshalCiphertext(b []byte) (*Ciphertext, error) {
	rest, err := checkHeader(b, tagCiphertext, "ciphertext")
	if err != nil {
		return nil, err
	}
	c, rest, err := readInt(rest, "ciphertext", pk.byteLen)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after ciphertext", ErrEncoding, len(rest))
	}
	ct := &Ciphertext{c: c}
	if err := pk.Validate(ct); err != nil {
		return nil, err
	}
	return ct, nil
}

// AppendFixed appends the ciphertext as exactly CiphertextSize() big-endian
// bytes, the form used inside vectors and protocol messages.
func (pk *PublicKey) AppendFixed(dst []byte, ct *Ciphertext) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, pk.byteLen)...)
	ct.c.FillBytes(dst[start:])
	return dst
}

// ParseFixed reads a ciphertext of exactly CiphertextSize() bytes and checks
// that it lies in [1, n²). Coprimality is left to ValidateAll (batched) or
// Validate, so callers decoding vectors pay for it once.
func (pk *PublicKey) ParseFixed(b []byte) (*Ciphertext, error) {
	if len(b) != pk.byteLen {
		return nil, fmt.Errorf("%w: fixed ciphertext of %d bytes, want %d", ErrEncoding, len(b), pk.byteLen)
	}
	c := new(big.Int).SetBytes(b)
	if c.Sign() <= 0 || c.Cmp(pk.nSquared) >= 0 {
		return nil, fmt.Errorf("%w: outside [1, n²)", ErrInvalidCiphertext)
	}
	return &Ciphertext{c: c}, nil
}
