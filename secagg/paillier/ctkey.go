package paillier

import (
	"errors"
	"math/big"
	"math/bits"

	"filippo.io/bigmod"
)

// ctKey holds the private key in the form constant-time decryption uses:
// every operation that involves p, q or a value derived from them is done
// with filippo.io/bigmod (the constant-time arithmetic behind crypto/rsa),
// whose running time depends only on the sizes of its operands, never on
// their values. math/big appears only for public values (the ciphertext on
// the way in, the plaintext on the way out).
//
// Decryption follows Paillier's CRT form with g = n + 1. For the prime p:
//
//	x   = (c mod p²)^(p−1) mod p²      (x ≡ 1 mod p for every unit c)
//	k   = (x − 1)/p                    (an exact division, k < p)
//	m_p = k · h_p mod p,  h_p = −q⁻¹ mod p
//
// because (1+n)^(m(p−1)) ≡ 1 + m(p−1)n (mod p²) and r^(n(p−1)) ≡ 1
// (mod p²), so k ≡ m(p−1)q ≡ −mq (mod p). Likewise for q, then
// m = m_q + q·((m_p − m_q)·q⁻¹ mod p). The exact division by the secret p
// multiplies by p⁻¹ modulo 2^t (t ≥ the bits of p), which equals the
// quotient because the division leaves no remainder (Jebelean's exact
// division); p⁻¹ mod 2^t and q⁻¹ mod p are computed at set-up by Newton
// iteration and by Fermat's little theorem, both in constant time.
type ctKey struct {
	nMod   *bigmod.Modulus // n (public)
	nSqMod *bigmod.Modulus // n² (public)
	p, q   crtHalf
	qInvP  *bigmod.Nat // q⁻¹ mod p
	qN     *bigmod.Nat // q as an element of Z_n
}

// crtHalf holds the constants of one prime.
type crtHalf struct {
	mod   *bigmod.Modulus // the prime
	sq    *bigmod.Modulus // its square
	exp   []byte          // prime − 1, big-endian, as many bytes as the prime
	h     *bigmod.Nat     // −(other prime)⁻¹ mod prime
	twoT  *bigmod.Modulus // 2^t with t = 64·(limbs of the prime) (or 32·…)
	inv2T *bigmod.Nat     // prime⁻¹ mod 2^t
	oneSq *bigmod.Nat     // 1 as an element of Z_{prime²}
}

// newCTKey derives the constant-time decryption constants from two
// distinct odd primes and their product.
func newCTKey(p, q, n *big.Int) (*ctKey, error) {
	k := &ctKey{}
	var err error
	if k.nMod, err = bigmod.NewModulus(n.Bytes()); err != nil {
		return nil, err
	}
	if k.nSqMod, err = bigmod.NewModulus(new(big.Int).Mul(n, n).Bytes()); err != nil {
		return nil, err
	}
	if err := k.p.init(p); err != nil {
		return nil, err
	}
	if err := k.q.init(q); err != nil {
		return nil, err
	}
	// Inverses modulo the primes by Fermat: a⁻¹ = a^(prime−2).
	k.qInvP, err = invModPrime(q, &k.p)
	if err != nil {
		return nil, err
	}
	pInvQ, err := invModPrime(p, &k.q)
	if err != nil {
		return nil, err
	}
	k.p.h = bigmod.NewNat().ExpandFor(k.p.mod).Sub(k.qInvP, k.p.mod) // 0 − q⁻¹
	k.q.h = bigmod.NewNat().ExpandFor(k.q.mod).Sub(pInvQ, k.q.mod)   // 0 − p⁻¹
	clear(pInvQ.Bits())
	if k.qN, err = bigmod.NewNat().SetBytes(q.Bytes(), k.nMod); err != nil {
		return nil, err
	}
	return k, nil
}

// init sets the constants of one prime.
func (h *crtHalf) init(p *big.Int) error {
	var err error
	pb := p.Bytes()
	if h.mod, err = bigmod.NewModulus(pb); err != nil {
		return err
	}
	if h.sq, err = bigmod.NewModulusProduct(pb, pb); err != nil {
		return err
	}
	h.exp = make([]byte, h.mod.Size())
	new(big.Int).Sub(p, bigOne).FillBytes(h.exp)
	// 2^t with t a whole number of limbs at least as long as p.
	limbs := len(bigmod.NewNat().ExpandFor(h.mod).Bits())
	tBytes := limbs * bits.UintSize / 8
	pow := make([]byte, tBytes+1)
	pow[0] = 1
	if h.twoT, err = bigmod.NewModulus(pow); err != nil {
		return err
	}
	pT, err := bigmod.NewNat().SetBytes(pb, h.twoT)
	if err != nil {
		return err
	}
	// Newton's iteration y ← y(2 − p·y) doubles the correct low bits of
	// p⁻¹ mod 2^t at each step, starting from y = 1 (right modulo 2 for an
	// odd p); the number of steps depends only on t.
	y := bigmod.NewNat().ExpandFor(h.twoT)
	y.Bits()[0] = 1
	for correct := 1; correct < 8*tBytes; correct *= 2 {
		u := bigmod.NewNat().ExpandFor(h.twoT)
		u.Bits()[0] = 2
		py := natCopy(pT, h.twoT).Mul(y, h.twoT)
		u.Sub(py, h.twoT) // 2 − p·y
		y.Mul(u, h.twoT)
		clear(u.Bits())
		clear(py.Bits())
	}
	check := natCopy(pT, h.twoT).Mul(y, h.twoT)
	ok := check.IsOne() == 1
	clear(check.Bits())
	clear(pT.Bits())
	if !ok {
		return errors.New("paillier: internal error: 2-adic inverse of a prime")
	}
	h.inv2T = y
	h.oneSq = bigmod.NewNat().ExpandFor(h.sq)
	h.oneSq.Bits()[0] = 1
	return nil
}

// invModPrime returns a⁻¹ mod the prime of h as a^(prime−2), in constant
// time. a must have at most as many bits as the prime and not be a
// multiple of it.
func invModPrime(a *big.Int, h *crtHalf) (*bigmod.Nat, error) {
	// a < 2^bits(prime) ≤ 2·prime: one conditional subtraction reduces it.
	x, err := bigmod.NewNat().SetOverflowingBytes(a.Bytes(), h.mod)
	if err != nil {
		return nil, errors.New("paillier: factors of different sizes")
	}
	// exponent prime − 2 = (prime − 1) − 1: the low byte of prime − 1 is
	// even, so subtracting one never borrows.
	e := append([]byte(nil), h.exp...)
	e[len(e)-1]--
	inv := bigmod.NewNat().Exp(x, e, h.mod)
	clear(e)
	// inv·a ≡ 1 confirms that a was invertible.
	check := natCopy(inv, h.mod).Mul(x, h.mod)
	ok := check.IsOne() == 1
	clear(check.Bits())
	clear(x.Bits())
	if !ok {
		return nil, errors.New("paillier: factor not invertible modulo the other")
	}
	return inv, nil
}

// natCopy returns a copy of x, which has the size of m.
func natCopy(x *bigmod.Nat, m *bigmod.Modulus) *bigmod.Nat {
	y := bigmod.NewNat().ExpandFor(m)
	copy(y.Bits(), x.Bits())
	return y
}

// part returns m mod the prime of h for c in Z_{n²}.
func (h *crtHalf) part(c *bigmod.Nat) *bigmod.Nat {
	x := bigmod.NewNat().Mod(c, h.sq)
	x.Exp(x, h.exp, h.sq)
	x.Sub(h.oneSq, h.sq) // x − 1 = p·k
	k := bigmod.NewNat().Mod(x, h.twoT)
	k.Mul(h.inv2T, h.twoT) // k = (x − 1)/p exactly
	mp := bigmod.NewNat().Mod(k, h.mod)
	mp.Mul(h.h, h.mod)
	clear(x.Bits())
	clear(k.Bits())
	return mp
}

// decrypt decrypts c, a validated ciphertext in [1, n²) coprime to n. With
// concurrent set, the two CRT halves run on two goroutines.
func (k *ctKey) decrypt(c *big.Int, concurrent bool) *big.Int {
	cb := make([]byte, k.nSqMod.Size())
	c.FillBytes(cb)
	cn, err := bigmod.NewNat().SetBytes(cb, k.nSqMod)
	if err != nil {
		panic("paillier: internal error: validated ciphertext outside [0, n²)")
	}
	var mp, mq *bigmod.Nat
	if concurrent {
		done := make(chan *bigmod.Nat, 1)
		go func() { done <- k.q.part(cn) }()
		mp = k.p.part(cn)
		mq = <-done
	} else {
		mp = k.p.part(cn)
		mq = k.q.part(cn)
	}
	// m = m_q + q·((m_p − m_q)·q⁻¹ mod p), which is below n.
	t := bigmod.NewNat().Mod(mq, k.p.mod)
	mp.Sub(t, k.p.mod)
	mp.Mul(k.qInvP, k.p.mod)
	m := bigmod.NewNat().Mod(mp, k.nMod)
	m.Mul(k.qN, k.nMod)
	mqN := bigmod.NewNat().Mod(mq, k.nMod)
	m.Add(mqN, k.nMod)
	out := new(big.Int).SetBytes(m.Bytes(k.nMod))
	for _, x := range []*bigmod.Nat{mp, mq, t, m, mqN} {
		clear(x.Bits())
	}
	return out
}

// zero overwrites the secret Nats. The moduli keep internal copies of p,
// q, p², q² that bigmod does not let callers clear; dropping the references
// lets the garbage collector reclaim them.
func (k *ctKey) zero() {
	for _, x := range []*bigmod.Nat{k.qInvP, k.qN, k.p.h, k.q.h, k.p.inv2T, k.q.inv2T} {
		if x != nil {
			clear(x.Bits())
		}
	}
	clear(k.p.exp)
	clear(k.q.exp)
	*k = ctKey{}
}
