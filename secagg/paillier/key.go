package paillier

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// Key sizes.
const (
	// DefaultBits is the default modulus size.
	DefaultBits = 2048
	// Bits3072 is the larger supported modulus size.
	Bits3072 = 3072
	// MinBits is the smallest modulus accepted unless a caller explicitly
	// sets AllowInsecureTestKeySize.
	MinBits = 2048
	// MinInsecureTestBits is the smallest modulus accepted with
	// AllowInsecureTestKeySize: small enough for fast tests, and insecure.
	MinInsecureTestBits = 256
	// maxBits bounds the modulus size accepted from keys and flags.
	maxBits = 8192
)

var (
	bigOne = big.NewInt(1)
)

// ErrKeyTooSmall is returned when a modulus shorter than MinBits is
// requested or decoded without AllowInsecureTestKeySize.
var ErrKeyTooSmall = errors.New("paillier: modulus too small")

// KeyOptions configures GenerateKey.
type KeyOptions struct {
	// Bits is the modulus size; zero means DefaultBits.
	Bits int
	// Random is the source of the primes; nil means crypto/rand.
	Random io.Reader
	// AllowInsecureTestKeySize accepts moduli from MinInsecureTestBits
	// instead of MinBits. Such keys can be factored: set it only in tests
	// and benchmarks that protect nothing. It is never implied by the
	// environment (not even inside a test binary), so a program's own
	// tests cannot lower the minimum of the code they test by accident.
	AllowInsecureTestKeySize bool
}

// DecodeOptions configures UnmarshalPublicKey and UnmarshalPrivateKey.
type DecodeOptions struct {
	// AllowInsecureTestKeySize accepts moduli from MinInsecureTestBits
	// instead of MinBits; see KeyOptions.
	AllowInsecureTestKeySize bool
}

// minBitsFor returns the smallest modulus accepted under the option.
func minBitsFor(allowInsecure bool) int {
	if allowInsecure {
		return MinInsecureTestBits
	}
	return MinBits
}

// PublicKey is a Paillier public key with g = n + 1.
type PublicKey struct {
	n        *big.Int
	nSquared *big.Int
	maxInt   *big.Int // largest magnitude the fixed-point encoding accepts: n/3
	bits     int
	byteLen  int // bytes of a ciphertext (bytes of n²)
}

// PrivateKey is a Paillier private key. Its zero value is not usable; create
// one with GenerateKey or UnmarshalPrivateKey. Decryption runs in constant
// time with respect to the secret factors (see ctKey).
type PrivateKey struct {
	PublicKey
	p, q   *big.Int // kept for MarshalBinary and Zero only; never used in arithmetic after set-up
	ct     *ctKey
	zeroed bool
}

// newPublicKey builds a public key from its modulus and validates it.
func newPublicKey(n *big.Int, allowInsecure bool) (*PublicKey, error) {
	if n == nil || n.Sign() <= 0 {
		return nil, errors.New("paillier: modulus must be positive")
	}
	bits := n.BitLen()
	if min := minBitsFor(allowInsecure); bits < min {
		return nil, fmt.Errorf("%w: %d bits, need at least %d", ErrKeyTooSmall, bits, min)
	}
	if bits > maxBits {
		return nil, fmt.Errorf("paillier: modulus of %d bits exceeds the %d-bit limit", bits, maxBits)
	}
	if n.Bit(0) == 0 {
		return nil, errors.New("paillier: modulus is even")
	}
	pk := &PublicKey{n: new(big.Int).Set(n), bits: bits}
	pk.nSquared = new(big.Int).Mul(n, n)
	pk.maxInt = new(big.Int).Div(n, big.NewInt(3))
	pk.byteLen = (pk.nSquared.BitLen() + 7) / 8
	return pk, nil
}

// GenerateKey generates a private key. Moduli under MinBits are refused
// unless opts.AllowInsecureTestKeySize is set.
//
// The primes come from crypto/rand.Prime, which uses math/big: its timing
// depends on the candidates it rejects. It runs once per key, on no input an
// adversary chooses; decryption, which does run on adversaries' input, is
// constant-time.
func GenerateKey(opts KeyOptions) (*PrivateKey, error) {
	random := opts.Random
	if random == nil {
		random = rand.Reader
	}
	bits := opts.Bits
	if bits == 0 {
		bits = DefaultBits
	}
	if min := minBitsFor(opts.AllowInsecureTestKeySize); bits < min {
		return nil, fmt.Errorf("%w: %d bits requested, need at least %d", ErrKeyTooSmall, bits, min)
	}
	if bits > maxBits || bits%2 != 0 {
		return nil, fmt.Errorf("paillier: unsupported modulus size %d bits (even, at most %d)", bits, maxBits)
	}
	for attempt := 0; attempt < 64; attempt++ {
		p, err := rand.Prime(random, bits/2)
		if err != nil {
			return nil, fmt.Errorf("paillier: generating prime: %w", err)
		}
		q, err := rand.Prime(random, bits/2)
		if err != nil {
			return nil, fmt.Errorf("paillier: generating prime: %w", err)
		}
		if p.Cmp(q) == 0 {
			continue
		}
		n := new(big.Int).Mul(p, q)
		if n.BitLen() != bits {
			continue
		}
		sk, err := newPrivateKey(p, q, opts.AllowInsecureTestKeySize)
		if err != nil {
			continue // gcd(n, φ(n)) ≠ 1: try again
		}
		return sk, nil
	}
	return nil, errors.New("paillier: key generation failed after 64 attempts")
}

// newPrivateKey checks the primes and derives the constant-time decryption
// constants. The primes must be prime (GenerateKey and UnmarshalPrivateKey
// ensure it).
func newPrivateKey(p, q *big.Int, allowInsecure bool) (*PrivateKey, error) {
	if p.Cmp(q) == 0 {
		return nil, errors.New("paillier: primes are equal")
	}
	if p.Bit(0) == 0 || q.Bit(0) == 0 {
		return nil, errors.New("paillier: even factor")
	}
	if p.BitLen() != q.BitLen() {
		return nil, errors.New("paillier: factors of different sizes")
	}
	n := new(big.Int).Mul(p, q)
	pk, err := newPublicKey(n, allowInsecure)
	if err != nil {
		return nil, err
	}
	// gcd(n, φ(n)) = 1 holds for primes of equal length unless one divides
	// the other's predecessor, which p ∤ q−1 and q ∤ p−1 rule out. These two
	// remainders are computed once per key with math/big.
	pm1 := new(big.Int).Sub(p, bigOne)
	qm1 := new(big.Int).Sub(q, bigOne)
	if new(big.Int).Mod(qm1, p).Sign() == 0 || new(big.Int).Mod(pm1, q).Sign() == 0 {
		return nil, errors.New("paillier: gcd(n, φ(n)) ≠ 1")
	}
	ct, err := newCTKey(p, q, n)
	if err != nil {
		return nil, err
	}
	return &PrivateKey{PublicKey: *pk, p: new(big.Int).Set(p), q: new(big.Int).Set(q), ct: ct}, nil
}

// Public returns the public half of the key.
func (sk *PrivateKey) Public() *PublicKey { return &sk.PublicKey }

// N returns a copy of the modulus n.
func (pk *PublicKey) N() *big.Int { return new(big.Int).Set(pk.n) }

// NSquared returns a copy of n².
func (pk *PublicKey) NSquared() *big.Int { return new(big.Int).Set(pk.nSquared) }

// Bits returns the bit length of the modulus.
func (pk *PublicKey) Bits() int { return pk.bits }

// CiphertextSize returns the size in bytes of a fixed-width ciphertext.
func (pk *PublicKey) CiphertextSize() int { return pk.byteLen }

// MaxPlaintext returns the largest magnitude a signed plaintext may have
// (n/3); values between n/3 and n − n/3 decode as overflow.
func (pk *PublicKey) MaxPlaintext() *big.Int { return new(big.Int).Set(pk.maxInt) }

// Equal reports whether two public keys have the same modulus.
func (pk *PublicKey) Equal(other *PublicKey) bool {
	return pk != nil && other != nil && pk.n.Cmp(other.n) == 0
}

// Fingerprint returns the SHA-256 of the public key's binary encoding; it
// identifies a key in messages without revealing anything secret.
func (pk *PublicKey) Fingerprint() [32]byte {
	b, _ := pk.MarshalBinary()
	return sha256.Sum256(b)
}

// String describes the key without its modulus digits.
func (pk *PublicKey) String() string {
	fp := pk.Fingerprint()
	return fmt.Sprintf("paillier.PublicKey{bits: %d, fingerprint: %x}", pk.bits, fp[:8])
}

var errZeroed = errors.New("paillier: private key has been zeroed")

// Decrypt decrypts c with the Chinese remainder theorem and returns the
// plaintext in [0, n). It fails on a ciphertext that is not valid for this
// key. The arithmetic on secrets runs in constant time.
func (sk *PrivateKey) Decrypt(c *Ciphertext) (*big.Int, error) {
	if sk.zeroed {
		return nil, errZeroed
	}
	if err := sk.PublicKey.Validate(c); err != nil {
		return nil, err
	}
	return sk.ct.decrypt(c.c, true), nil
}

// decrypt decrypts a validated ciphertext on the calling goroutine.
func (sk *PrivateKey) decrypt(c *big.Int) *big.Int { return sk.ct.decrypt(c, false) }

// DecryptSigned decrypts c and maps the plaintext to a signed integer:
// values up to n/3 are positive, values from n − n/3 are negative, and
// anything between is reported as ErrOverflow.
func (sk *PrivateKey) DecryptSigned(c *Ciphertext) (*big.Int, error) {
	m, err := sk.Decrypt(c)
	if err != nil {
		return nil, err
	}
	return sk.PublicKey.toSigned(m)
}

// DecryptVector decrypts every ciphertext using all cores.
func (sk *PrivateKey) DecryptVector(cs []*Ciphertext) ([]*big.Int, error) {
	return sk.DecryptVectorProgress(cs, nil)
}

// DecryptVectorProgress is DecryptVector calling progress (if not nil)
// after each decryption; see Progress.
func (sk *PrivateKey) DecryptVectorProgress(cs []*Ciphertext, progress Progress) ([]*big.Int, error) {
	if sk.zeroed {
		return nil, errZeroed
	}
	if err := sk.PublicKey.ValidateAll(cs); err != nil {
		return nil, err
	}
	out := make([]*big.Int, len(cs))
	count := progress.counter(len(cs))
	_ = parallelFor(len(cs), func(i int) error {
		out[i] = sk.decrypt(cs[i].c)
		count()
		return nil
	})
	return out, nil
}

// Zero overwrites the secret values held by the key and makes it unusable
// for decryption. Copies made by the garbage collector, by earlier
// arithmetic, or inside the bigmod moduli built from the factors are out of
// reach, so this reduces but does not eliminate the time secrets stay in
// memory.
func (sk *PrivateKey) Zero() {
	for _, x := range []*big.Int{sk.p, sk.q} {
		if x == nil {
			continue
		}
		clear(x.Bits())
		x.SetInt64(0)
	}
	if sk.ct != nil {
		sk.ct.zero()
		sk.ct = nil
	}
	sk.zeroed = true
}

// String redacts the secret factors.
func (sk *PrivateKey) String() string {
	return fmt.Sprintf("paillier.PrivateKey{bits: %d, secrets: [REDACTED]}", sk.bits)
}

// GoString redacts the secret factors.
func (sk *PrivateKey) GoString() string { return sk.String() }

// Format redacts the secret factors for every verb, including %v, %+v and %#v.
func (sk *PrivateKey) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, sk.String()) }
