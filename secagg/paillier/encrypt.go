package paillier

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"runtime"
	"sync"
)

// RandomnessKind selects how the randomness r^n of an encryption is made.
type RandomnessKind int

const (
	// RandomnessFull is textbook Paillier: r^n mod n² for r uniform in Z*_n.
	RandomnessFull RandomnessKind = iota + 1
	// RandomnessShortExponent is the Damgård–Jurik–Nielsen variant:
	// h^a mod n² with h = (−x²)^n mod n² fixed per Encrypter and a a uniform
	// ExponentBits-bit exponent, computed with a fixed-base table. See the
	// package documentation for the security trade-off.
	RandomnessShortExponent
)

// String names the variant.
func (k RandomnessKind) String() string {
	switch k {
	case RandomnessFull:
		return "full"
	case RandomnessShortExponent:
		return "short-exponent"
	}
	return fmt.Sprintf("RandomnessKind(%d)", int(k))
}

// ParseRandomnessKind parses "full" or "short-exponent" (alias "djn").
func ParseRandomnessKind(s string) (RandomnessKind, error) {
	switch s {
	case "full", "":
		return RandomnessFull, nil
	case "short-exponent", "djn":
		return RandomnessShortExponent, nil
	}
	return 0, fmt.Errorf("paillier: unknown randomness variant %q (want full or short-exponent)", s)
}

// MinExponentBits is the shortest exponent accepted for the short-exponent
// variant (2κ for κ = 128-bit security).
const MinExponentBits = 256

// EncrypterOptions configures an Encrypter. The zero value selects textbook
// Paillier with crypto/rand and a pool of 4096 precomputed randomness values.
type EncrypterOptions struct {
	// Randomness selects the variant; zero means RandomnessFull.
	Randomness RandomnessKind
	// ExponentBits is the exponent length of RandomnessShortExponent;
	// zero means half the modulus size (DJN's suggestion). At least
	// MinExponentBits.
	ExponentBits int
	// WindowBits is the window of the fixed-base table (1..8); zero means 6.
	WindowBits int
	// PoolSize is the capacity of the precomputed-randomness pool; zero
	// means 4096.
	PoolSize int
	// Random is the source of randomness; nil means crypto/rand.
	Random io.Reader
}

// Encrypter encrypts under one public key. It keeps a pool of precomputed
// randomness so that the online cost of Encrypt is one modular
// multiplication while the pool lasts. It is safe for concurrent use.
type Encrypter struct {
	pk      *PublicKey
	kind    RandomnessKind
	expBits int
	table   *fixedBase

	randMu sync.Mutex
	random io.Reader

	pool      chan randomness
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// randomness is a precomputed r^n mod n² with its residue modulo n.
type randomness struct {
	rn, rnModN *big.Int
}

// NewEncrypter validates the options and returns an encrypter. For the
// short-exponent variant it builds the fixed-base table (a few megabytes).
func NewEncrypter(pk *PublicKey, opts EncrypterOptions) (*Encrypter, error) {
	if pk == nil {
		return nil, errors.New("paillier: nil public key")
	}
	e := &Encrypter{pk: pk, kind: opts.Randomness, random: opts.Random}
	if e.kind == 0 {
		e.kind = RandomnessFull
	}
	if e.random == nil {
		e.random = rand.Reader
	}
	size := opts.PoolSize
	if size == 0 {
		size = 4096
	}
	if size < 0 {
		return nil, fmt.Errorf("paillier: negative pool size %d", size)
	}
	switch e.kind {
	case RandomnessFull:
		if opts.ExponentBits != 0 || opts.WindowBits != 0 {
			return nil, errors.New("paillier: ExponentBits and WindowBits apply only to RandomnessShortExponent")
		}
	case RandomnessShortExponent:
		e.expBits = opts.ExponentBits
		if e.expBits == 0 {
			e.expBits = (pk.bits + 1) / 2
		}
		if e.expBits < MinExponentBits || e.expBits > 2*pk.bits {
			return nil, fmt.Errorf("paillier: exponent of %d bits outside [%d, %d]", e.expBits, MinExponentBits, 2*pk.bits)
		}
		w := opts.WindowBits
		if w == 0 {
			w = 6
		}
		if w < 1 || w > 8 {
			return nil, fmt.Errorf("paillier: window of %d bits outside [1, 8]", w)
		}
		x, err := e.randomUnit()
		if err != nil {
			return nil, err
		}
		// h = (−x² mod n)^n mod n²
		h := new(big.Int).Mul(x, x)
		h.Mod(h, pk.n)
		h.Sub(pk.n, h)
		h.Exp(h, pk.n, pk.nSquared)
		e.table = newFixedBase(h, pk.nSquared, e.expBits, uint(w))
	default:
		return nil, fmt.Errorf("paillier: unknown randomness variant %d", int(e.kind))
	}
	e.pool = make(chan randomness, size)
	e.stop = make(chan struct{})
	return e, nil
}

// PublicKey returns the key the encrypter encrypts under.
func (e *Encrypter) PublicKey() *PublicKey { return e.pk }

// Kind returns the randomness variant.
func (e *Encrypter) Kind() RandomnessKind { return e.kind }

// randomUnit draws r uniform in Z*_n.
func (e *Encrypter) randomUnit() (*big.Int, error) {
	for {
		e.randMu.Lock()
		r, err := rand.Int(e.random, e.pk.n)
		e.randMu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("paillier: reading randomness: %w", err)
		}
		if r.Sign() > 0 && new(big.Int).GCD(nil, nil, r, e.pk.n).Cmp(bigOne) == 0 {
			return r, nil
		}
	}
}

// newRandomness computes one fresh randomness value (the expensive step).
func (e *Encrypter) newRandomness() (randomness, error) {
	var rn *big.Int
	switch e.kind {
	case RandomnessShortExponent:
		buf := make([]byte, (e.expBits+7)/8)
		e.randMu.Lock()
		_, err := io.ReadFull(e.random, buf)
		e.randMu.Unlock()
		if err != nil {
			return randomness{}, fmt.Errorf("paillier: reading randomness: %w", err)
		}
		if extra := len(buf)*8 - e.expBits; extra > 0 {
			buf[0] &= byte(0xff >> extra)
		}
		rn = e.table.exp(new(big.Int).SetBytes(buf))
	default:
		r, err := e.randomUnit()
		if err != nil {
			return randomness{}, err
		}
		rn = r.Exp(r, e.pk.n, e.pk.nSquared)
	}
	return randomness{rn: rn, rnModN: new(big.Int).Mod(rn, e.pk.n)}, nil
}

// Precompute fills the pool with up to k fresh randomness values (bounded
// by the pool's free space) using every core, and returns when done.
func (e *Encrypter) Precompute(k int) error {
	if free := cap(e.pool) - len(e.pool); k > free {
		k = free
	}
	if k <= 0 {
		return nil
	}
	return parallelFor(k, func(int) error {
		r, err := e.newRandomness()
		if err != nil {
			return err
		}
		select {
		case e.pool <- r:
		default:
		}
		return nil
	})
}

// StartBackground starts workers (every core if workers ≤ 0) that keep the
// pool full until Close is called.
func (e *Encrypter) StartBackground(workers int) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	for w := 0; w < workers; w++ {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for {
				select {
				case <-e.stop:
					return
				default:
				}
				r, err := e.newRandomness()
				if err != nil {
					return // Encrypt falls back to computing inline and reports the error there.
				}
				select {
				case e.pool <- r:
				case <-e.stop:
					return
				}
			}
		}()
	}
}

// Close stops background workers and waits for them.
func (e *Encrypter) Close() {
	e.closeOnce.Do(func() { close(e.stop) })
	e.wg.Wait()
}

// Pooled returns the number of precomputed randomness values available.
func (e *Encrypter) Pooled() int { return len(e.pool) }

// take returns a pooled randomness value, computing one inline if the pool is empty.
func (e *Encrypter) take() (randomness, error) {
	select {
	case r := <-e.pool:
		return r, nil
	default:
		return e.newRandomness()
	}
}

// Encrypt encrypts m, which must lie in [0, n).
func (e *Encrypter) Encrypt(m *big.Int) (*Ciphertext, error) {
	if m == nil || m.Sign() < 0 || m.Cmp(e.pk.n) >= 0 {
		return nil, errors.New("paillier: plaintext outside [0, n)")
	}
	r, err := e.take()
	if err != nil {
		return nil, err
	}
	// (1 + m·n)·r^n mod n²: one multiplication modulo n plus a shift.
	return &Ciphertext{c: e.pk.mulGm(r.rn, r.rnModN, m)}, nil
}

// EncryptSigned encrypts a signed integer with |v| ≤ n/3.
func (e *Encrypter) EncryptSigned(v *big.Int) (*Ciphertext, error) {
	m, err := e.pk.fromSigned(v)
	if err != nil {
		return nil, err
	}
	return e.Encrypt(m)
}

// EncryptVector encrypts every plaintext using all cores.
func (e *Encrypter) EncryptVector(ms []*big.Int) ([]*Ciphertext, error) {
	return e.EncryptVectorProgress(ms, nil)
}

// EncryptVectorProgress is EncryptVector calling progress (if not nil) after
// each encryption; see Progress.
func (e *Encrypter) EncryptVectorProgress(ms []*big.Int, progress Progress) ([]*Ciphertext, error) {
	out := make([]*Ciphertext, len(ms))
	count := progress.counter(len(ms))
	err := parallelFor(len(ms), func(i int) error {
		c, err := e.Encrypt(ms[i])
		if err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = c
		count()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fixedBase holds h^(j·2^(w·i)) for windowed fixed-base exponentiation.
// It changes no distribution: h^a is the same value however it is computed.
type fixedBase struct {
	w     uint
	mod   *big.Int
	table [][]*big.Int
}

func newFixedBase(h, mod *big.Int, expBits int, w uint) *fixedBase {
	windows := (expBits + int(w) - 1) / int(w)
	fb := &fixedBase{w: w, mod: mod, table: make([][]*big.Int, windows)}
	bases := make([]*big.Int, windows)
	b := new(big.Int).Set(h)
	for i := 0; i < windows; i++ {
		bases[i] = new(big.Int).Set(b)
		for s := uint(0); s < w; s++ {
			b.Mul(b, b)
			b.Mod(b, mod)
		}
	}
	_ = parallelFor(windows, func(i int) error {
		row := make([]*big.Int, 1<<w)
		row[0] = big.NewInt(1)
		for j := 1; j < len(row); j++ {
			x := new(big.Int).Mul(row[j-1], bases[i])
			row[j] = x.Mod(x, mod)
		}
		fb.table[i] = row
		return nil
	})
	return fb
}

// exp returns h^a mod n² for 0 ≤ a < 2^(w·windows).
func (fb *fixedBase) exp(a *big.Int) *big.Int {
	r := big.NewInt(1)
	for i := range fb.table {
		d := 0
		for s := int(fb.w) - 1; s >= 0; s-- {
			d = d<<1 | int(a.Bit(i*int(fb.w)+s))
		}
		if d != 0 {
			r.Mul(r, fb.table[i][d])
			r.Mod(r, fb.mod)
		}
	}
	return r
}
