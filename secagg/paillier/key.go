package paillier

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/big"
	"testing"
)

// Key sizes.
const (
	// DefaultBits is the default modulus size.
	DefaultBits = 2048
	// Bits3072 is the larger supported modulus size.
	Bits3072 = 3072
	// MinBits is the smallest modulus accepted outside test binaries.
	MinBits = 2048
	// minTestBits is the smallest modulus accepted inside test binaries.
	minTestBits = 256
	// maxBits bounds the modulus size accepted from keys and flags.
	maxBits = 8192
)

var (
	bigOne = big.NewInt(1)
)

// ErrKeyTooSmall is returned when a modulus shorter than MinBits is
// requested or decoded outside a test binary.
var ErrKeyTooSmall = errors.New("paillier: modulus too small")

// PublicKey is a Paillier public key with g = n + 1.
type PublicKey struct {
	n        *big.Int
	nSquared *big.Int
	maxInt   *big.Int // largest magnitude the fixed-point encoding accepts: n/3
	bits     int
	byteLen  int // bytes of a ciphertext (bytes of n²)
}

// PrivateKey is a Paillier private key. Its zero value is not usable; create
// one with GenerateKey or UnmarshalPrivateKey.
type PrivateKey struct {
	PublicKey
	p, q     *big.Int
	pSq, qSq *big.Int
	pm1, qm1 *big.Int // p-1, q-1
	hp, hq   *big.Int // (L_p(g^{p-1} mod p²))^{-1} mod p, likewise for q
	qInvModP *big.Int
	zeroed   bool
}

func minBits() int { return minBitsFor(testing.Testing()) }

// minBitsFor returns the smallest modulus accepted in or outside a test binary.
func minBitsFor(inTest bool) int {
	if inTest {
		return minTestBits
	}
	return MinBits
}

// newPublicKey builds a public key from its modulus and validates it.
func newPublicKey(n *big.Int) (*PublicKey, error) {
	if n == nil || n.Sign() <= 0 {
		return nil, errors.New("paillier: modulus must be positive")
	}
	bits := n.BitLen()
	if bits < minBits() {
		return nil, fmt.Errorf("%w: %d bits, need at least %d", ErrKeyTooSmall, bits, minBits())
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

// GenerateKey generates a private key with a modulus of the given number of
// bits (DefaultBits if bits is 0) from random, which should be crypto/rand's
// Reader (nil means crypto/rand). Moduli under MinBits are refused outside
// test binaries.
func GenerateKey(random io.Reader, bits int) (*PrivateKey, error) {
	if random == nil {
		random = rand.Reader
	}
	if bits == 0 {
		bits = DefaultBits
	}
	if bits < minBits() {
		return nil, fmt.Errorf("%w: %d bits requested, need at least %d", ErrKeyTooSmall, bits, minBits())
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
		sk, err := newPrivateKey(p, q)
		if err != nil {
			continue // gcd(n, φ(n)) ≠ 1: try again
		}
		return sk, nil
	}
	return nil, errors.New("paillier: key generation failed after 64 attempts")
}

// newPrivateKey derives the CRT decryption constants from the primes.
func newPrivateKey(p, q *big.Int) (*PrivateKey, error) {
	if p.Cmp(q) == 0 {
		return nil, errors.New("paillier: primes are equal")
	}
	n := new(big.Int).Mul(p, q)
	pk, err := newPublicKey(n)
	if err != nil {
		return nil, err
	}
	sk := &PrivateKey{PublicKey: *pk, p: new(big.Int).Set(p), q: new(big.Int).Set(q)}
	sk.pm1 = new(big.Int).Sub(p, bigOne)
	sk.qm1 = new(big.Int).Sub(q, bigOne)
	phi := new(big.Int).Mul(sk.pm1, sk.qm1)
	if new(big.Int).GCD(nil, nil, n, phi).Cmp(bigOne) != 0 {
		return nil, errors.New("paillier: gcd(n, φ(n)) ≠ 1")
	}
	sk.pSq = new(big.Int).Mul(p, p)
	sk.qSq = new(big.Int).Mul(q, q)
	g := new(big.Int).Add(n, bigOne)
	if sk.hp = hConst(g, p, sk.pm1, sk.pSq); sk.hp == nil {
		return nil, errors.New("paillier: invalid prime p")
	}
	if sk.hq = hConst(g, q, sk.qm1, sk.qSq); sk.hq == nil {
		return nil, errors.New("paillier: invalid prime q")
	}
	sk.qInvModP = new(big.Int).ModInverse(q, p)
	if sk.qInvModP == nil {
		return nil, errors.New("paillier: q not invertible modulo p")
	}
	return sk, nil
}

// hConst computes (L_p(g^{p-1} mod p²))^{-1} mod p, or nil if not invertible.
func hConst(g, p, pm1, pSq *big.Int) *big.Int {
	x := new(big.Int).Exp(new(big.Int).Mod(g, pSq), pm1, pSq)
	lx := lFunc(x, p)
	return lx.ModInverse(lx, p)
}

// lFunc is L(x) = (x-1)/d.
func lFunc(x, d *big.Int) *big.Int {
	r := new(big.Int).Sub(x, bigOne)
	return r.Div(r, d)
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

// Decrypt decrypts c with the Chinese remainder theorem and returns the
// plaintext in [0, n). It fails on a ciphertext that is not valid for this key.
func (sk *PrivateKey) Decrypt(c *Ciphertext) (*big.Int, error) {
	if sk.zeroed {
		return nil, errors.New("paillier: private key has been zeroed")
	}
	if err := sk.PublicKey.Validate(c); err != nil {
		return nil, err
	}
	// The two CRT halves run concurrently: one decryption takes the time
	// of one exponentiation modulo p² when a second core is free.
	mq := make(chan *big.Int, 1)
	go func() { mq <- sk.decryptPart(c.c, sk.q, sk.qSq, sk.qm1, sk.hq) }()
	mp := sk.decryptPart(c.c, sk.p, sk.pSq, sk.pm1, sk.hp)
	return sk.combine(mp, <-mq), nil
}

// decrypt decrypts a validated ciphertext on the calling goroutine.
func (sk *PrivateKey) decrypt(c *big.Int) *big.Int {
	mp := sk.decryptPart(c, sk.p, sk.pSq, sk.pm1, sk.hp)
	mq := sk.decryptPart(c, sk.q, sk.qSq, sk.qm1, sk.hq)
	return sk.combine(mp, mq)
}

// combine recombines the CRT halves.
func (sk *PrivateKey) combine(mp, mq *big.Int) *big.Int {
	// m = mq + q·((mp − mq)·q⁻¹ mod p)
	t := new(big.Int).Sub(mp, mq)
	t.Mul(t, sk.qInvModP)
	t.Mod(t, sk.p)
	t.Mul(t, sk.q)
	return t.Add(t, mq)
}

func (sk *PrivateKey) decryptPart(c, p, pSq, pm1, h *big.Int) *big.Int {
	x := new(big.Int).Mod(c, pSq)
	x.Exp(x, pm1, pSq)
	x = lFunc(x, p)
	x.Mul(x, h)
	return x.Mod(x, p)
}

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
	out := make([]*big.Int, len(cs))
	if sk.zeroed {
		return nil, errors.New("paillier: private key has been zeroed")
	}
	if err := sk.PublicKey.ValidateAll(cs); err != nil {
		return nil, err
	}
	_ = parallelFor(len(cs), func(i int) error {
		out[i] = sk.decrypt(cs[i].c)
		return nil
	})
	return out, nil
}

// Zero overwrites the secret values held by the key and makes it unusable
// for decryption. Copies made by the garbage collector or by earlier
// arithmetic are out of reach, so this reduces but does not eliminate the
// time secrets stay in memory.
func (sk *PrivateKey) Zero() {
	for _, x := range []*big.Int{sk.p, sk.q, sk.pSq, sk.qSq, sk.pm1, sk.qm1, sk.hp, sk.hq, sk.qInvModP} {
		if x == nil {
			continue
		}
		words := x.Bits()
		for i := range words {
			words[i] = 0
		}
		x.SetInt64(0)
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
