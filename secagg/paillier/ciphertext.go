package paillier

import (
	"errors"
	"fmt"
	"math/big"
)

// ErrOverflow is returned when a decrypted plaintext lies in the band
// between n/3 and n − n/3 that no valid signed value maps to: a sum or
// product overflowed the plaintext space.
var ErrOverflow = errors.New("paillier: plaintext overflow")

// ErrInvalidCiphertext is returned for a ciphertext outside [1, n²) or not
// coprime to n.
var ErrInvalidCiphertext = errors.New("paillier: invalid ciphertext")

// Ciphertext is a Paillier ciphertext. It is immutable once created.
type Ciphertext struct {
	c *big.Int
}

// Value returns a copy of the ciphertext as an integer in [1, n²).
func (ct *Ciphertext) Value() *big.Int { return new(big.Int).Set(ct.c) }

// Equal reports whether two ciphertexts are the same integer.
func (ct *Ciphertext) Equal(o *Ciphertext) bool {
	return ct != nil && o != nil && ct.c.Cmp(o.c) == 0
}

// Validate checks that c is a ciphertext of this key: an integer in [1, n²)
// coprime to n.
func (pk *PublicKey) Validate(c *Ciphertext) error {
	if c == nil || c.c == nil {
		return fmt.Errorf("%w: nil", ErrInvalidCiphertext)
	}
	if c.c.Sign() <= 0 || c.c.Cmp(pk.nSquared) >= 0 {
		return fmt.Errorf("%w: outside [1, n²)", ErrInvalidCiphertext)
	}
	if new(big.Int).GCD(nil, nil, c.c, pk.n).Cmp(bigOne) != 0 {
		return fmt.Errorf("%w: not coprime to n", ErrInvalidCiphertext)
	}
	return nil
}

// CheckRange checks that c is present and lies in [1, n²), without the
// coprimality test of Validate. It is cheap (a comparison), so protocol
// code can run it on untrusted input before authenticating it, and it
// accepts a nil or zero-value Ciphertext without panicking.
func (pk *PublicKey) CheckRange(c *Ciphertext) error {
	if c == nil || c.c == nil {
		return fmt.Errorf("%w: nil", ErrInvalidCiphertext)
	}
	if c.c.Sign() <= 0 || c.c.Cmp(pk.nSquared) >= 0 {
		return fmt.Errorf("%w: outside [1, n²)", ErrInvalidCiphertext)
	}
	return nil
}

// NewCiphertext wraps an integer as a ciphertext after validating it.
func (pk *PublicKey) NewCiphertext(c *big.Int) (*Ciphertext, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil", ErrInvalidCiphertext)
	}
	ct := &Ciphertext{c: new(big.Int).Set(c)}
	if err := pk.Validate(ct); err != nil {
		return nil, err
	}
	return ct, nil
}

// ValidateAll checks every ciphertext of a vector. The range test is done
// per element; coprimality is tested once on the product modulo n (a prime
// factor of n divides the product iff it divides some element), then per
// element only if that batch test fails, to name the culprit.
func (pk *PublicKey) ValidateAll(cs []*Ciphertext) error {
	for i, c := range cs {
		if c == nil || c.c == nil || c.c.Sign() <= 0 || c.c.Cmp(pk.nSquared) >= 0 {
			return fmt.Errorf("element %d: %w: outside [1, n²)", i, ErrInvalidCiphertext)
		}
	}
	prod := big.NewInt(1)
	t := new(big.Int)
	for _, c := range cs {
		t.Mod(c.c, pk.n)
		prod.Mul(prod, t)
		prod.Mod(prod, pk.n)
	}
	if new(big.Int).GCD(nil, nil, prod, pk.n).Cmp(bigOne) == 0 {
		return nil
	}
	for i, c := range cs {
		if err := pk.Validate(c); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return fmt.Errorf("%w: batch coprimality check failed", ErrInvalidCiphertext)
}

// Add returns a ciphertext of the sum of the plaintexts of a and b.
func (pk *PublicKey) Add(a, b *Ciphertext) *Ciphertext {
	r := new(big.Int).Mul(a.c, b.c)
	return &Ciphertext{c: r.Mod(r, pk.nSquared)}
}

// AddPlain returns a ciphertext of plain(a) + m (m taken modulo n). The
// result is not re-randomized: it is linkable to a by anyone who knows m.
func (pk *PublicKey) AddPlain(a *Ciphertext, m *big.Int) *Ciphertext {
	// (1 + m·n)·a mod n² = a + n·(m·a mod n) mod n².
	r := pk.mulGm(a.c, new(big.Int).Mod(a.c, pk.n), m)
	return &Ciphertext{c: r}
}

// mulGm returns (1 + m·n)·x mod n² given x and x mod n.
func (pk *PublicKey) mulGm(x, xModN, m *big.Int) *big.Int {
	t := new(big.Int).Mod(m, pk.n)
	t.Mul(t, xModN)
	t.Mod(t, pk.n)
	t.Mul(t, pk.n)
	t.Add(t, x)
	if t.Cmp(pk.nSquared) >= 0 {
		t.Sub(t, pk.nSquared)
	}
	return t
}

// MulScalar returns a ciphertext of k·plain(a) (k taken modulo n, so a
// negative k multiplies by a negative number in the signed encoding).
func (pk *PublicKey) MulScalar(a *Ciphertext, k *big.Int) *Ciphertext {
	e := new(big.Int).Mod(k, pk.n)
	return &Ciphertext{c: new(big.Int).Exp(a.c, e, pk.nSquared)}
}

// Neg returns a ciphertext of −plain(a), the inverse of a modulo n².
func (pk *PublicKey) Neg(a *Ciphertext) (*Ciphertext, error) {
	r := new(big.Int).ModInverse(a.c, pk.nSquared)
	if r == nil {
		return nil, fmt.Errorf("%w: not invertible modulo n²", ErrInvalidCiphertext)
	}
	return &Ciphertext{c: r}, nil
}

// AddVector adds two ciphertext vectors element-wise using all cores.
func (pk *PublicKey) AddVector(a, b []*Ciphertext) ([]*Ciphertext, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("paillier: adding vectors of lengths %d and %d", len(a), len(b))
	}
	out := make([]*Ciphertext, len(a))
	_ = parallelFor(len(a), func(i int) error { out[i] = pk.Add(a[i], b[i]); return nil })
	return out, nil
}

// MulScalarVector multiplies each ciphertext by the matching scalar using all cores.
func (pk *PublicKey) MulScalarVector(a []*Ciphertext, k []*big.Int) ([]*Ciphertext, error) {
	if len(a) != len(k) {
		return nil, fmt.Errorf("paillier: %d ciphertexts but %d scalars", len(a), len(k))
	}
	out := make([]*Ciphertext, len(a))
	_ = parallelFor(len(a), func(i int) error { out[i] = pk.MulScalar(a[i], k[i]); return nil })
	return out, nil
}

// toSigned maps m in [0, n) to a signed integer, reporting overflow.
func (pk *PublicKey) toSigned(m *big.Int) (*big.Int, error) {
	if m.Cmp(pk.maxInt) <= 0 {
		return new(big.Int).Set(m), nil
	}
	neg := new(big.Int).Sub(m, pk.n)
	if new(big.Int).Neg(neg).Cmp(pk.maxInt) <= 0 {
		return neg, nil
	}
	return nil, fmt.Errorf("%w: value lies between n/3 and n − n/3", ErrOverflow)
}

// fromSigned maps a signed integer with |v| ≤ n/3 into [0, n).
func (pk *PublicKey) fromSigned(v *big.Int) (*big.Int, error) {
	if new(big.Int).Abs(v).Cmp(pk.maxInt) > 0 {
		return nil, fmt.Errorf("%w: |value| exceeds n/3", ErrOverflow)
	}
	if v.Sign() < 0 {
		return new(big.Int).Add(v, pk.n), nil
	}
	return new(big.Int).Set(v), nil
}
