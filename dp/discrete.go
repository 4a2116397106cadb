package dp

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"sync"
)

// Exact samplers of Canonne, Kamath & Steinke (2020), "The Discrete
// Gaussian for Differential Privacy", Algorithms 1–3, driven only by
// uniform 64-bit integers from the Source's ChaCha8 stream. No
// floating-point number enters a sampling decision: every Bernoulli trial
// compares a uniform integer with an exact rational, so the output
// distribution is exactly the discrete Laplace or discrete Gaussian.
//
// Integer widths: the discrete Gaussian's parameter σ is an integer
// ≤ maxGaussianScale = 2^31, so its acceptance test exp(−(|y|−σ)²/(2σ²))
// has a 64-bit denominator 2σ² and a 128-bit numerator (math/bits
// products). A proposal too large for 64 bits (probability below
// exp(−2^30)) takes an exact math/big path instead of being truncated.

const (
	// maxGaussianScale bounds the integer discrete-Gaussian parameter so
	// that 2σ² fits in 64 bits.
	maxGaussianScale = 1 << 31
	// maxLaplaceScale bounds the integer discrete-Laplace scale.
	maxLaplaceScale = 1 << 52
	// maxMagnitude is where snapped values and noise samples saturate
	// (post-processing: the exact sample is drawn first, then clamped); the
	// sum of two such values cannot overflow int64.
	maxMagnitude = 1<<62 - 1
)

// uniform returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject method (exact: the rejected low words make every
// outcome equally likely).
func (s *Source) uniform(n uint64) uint64 {
	hi, lo := bits.Mul64(s.c.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(s.c.Uint64(), n)
		}
	}
	return hi
}

// bit returns a fair random bit (0 or 1) from a buffered 64-bit word.
func (s *Source) bit() uint64 {
	if s.ncoins == 0 {
		s.coins = s.c.Uint64()
		s.ncoins = 64
	}
	b := s.coins & 1
	s.coins >>= 1
	s.ncoins--
	return b
}

// coin returns a fair random bit as a bool.
func (s *Source) coin() bool { return s.bit() == 1 }

// bernoulliFrac returns true with probability num/den for 0 ≤ num ≤ den,
// 0 < den ≤ 2^63. It compares a uniform real U = 0.b₁b₂… (fair bits drawn
// one at a time) with the binary expansion of p = num/den computed by long
// division, and stops at the first differing digit: U < p exactly when
// there U has a 0 and p a 1. Each digit decides with probability 1/2, so
// a trial costs two random bits on average instead of a 64-bit word.
func (s *Source) bernoulliFrac(num, den uint64) bool {
	if num >= den {
		return true
	}
	r := num
	for r != 0 {
		r <<= 1 // r < den ≤ 2^63: no overflow
		var d uint64
		if r >= den {
			d = 1
			r -= den
		}
		if b := s.bit(); b != d {
			return d == 1
		}
	}
	// p's expansion has ended and U agrees with it so far: U ≥ p (U = p
	// has probability 0).
	return false
}

// bernoulliExpFrac returns true with probability exp(−num/den) for
// 0 ≤ num ≤ den ≤ 2^63, den > 0. It splits x = num/den as j/256 + r with
// j = ⌊256·x⌋ and 0 ≤ r < 1/256: exp(−x) = exp(−j/256)·exp(−r), two
// independent trials. The first compares a uniform word with the exact
// binary digits of exp(−j/256) (expTable); the second is CKS Algorithm 1,
// whose first Bernoulli(r) fails at once with probability above 255/256.
func (s *Source) bernoulliExpFrac(num, den uint64) bool {
	if num >= den {
		return s.bernoulliExpNeg1()
	}
	hi, lo := num>>(64-expTableBits), num<<expTableBits
	j, rem := bits.Div64(hi, lo, den) // hi < den since num < den
	if !s.bernoulliExpTable(j) {
		return false
	}
	return s.bernoulliExpSmall(rem, den)
}

// bernoulliExpSmall returns true with probability exp(−r) for
// r = rem/(den·2^expTableBits) < 2^−expTableBits (CKS Algorithm 1: count K
// while Bernoulli(r/K) succeeds, true if K is odd). Bernoulli(r/K) is the
// conjunction of independent exact trials: expTableBits fair bits all 0,
// Bernoulli(rem/den) and Bernoulli(1/K).
func (s *Source) bernoulliExpSmall(rem, den uint64) bool {
	k := uint64(1)
	for {
		if s.bits(expTableBits) != 0 {
			break
		}
		if !s.bernoulliFrac(rem, den) {
			break
		}
		if k > 1 && !s.bernoulliFrac(1, k) {
			break
		}
		k++
	}
	return k&1 == 1
}

// compareWord compares the next 64 bits of a uniform real U with the
// 64-bit digit word d, a byte at a time (most significant first): ok is
// false only if all 64 bits are equal (probability 2^−64), and then lt is
// meaningless and the caller compares further digits. A decision costs 8
// random bits with probability 255/256, instead of a whole word.
func (s *Source) compareWord(d uint64) (lt, ok bool) {
	for shift := 56; shift >= 0; shift -= 8 {
		b, db := s.bits(8), (d>>uint(shift))&0xff
		if b != db {
			return b < db, true
		}
	}
	return false, false
}

// bits returns n < 64 fair random bits.
func (s *Source) bits(n uint) uint64 {
	if s.ncoins < n {
		s.coins = s.c.Uint64()
		s.ncoins = 64
	}
	b := s.coins & (1<<n - 1)
	s.coins >>= n
	s.ncoins -= n
	return b
}

// expTableBits sets the table of exp(−j/2^expTableBits).
const expTableBits = 8

// expTable holds ⌊2^64·exp(−j/256)⌋ for j = 0…255 (j = 0: 2^64 − 1, and
// the comparison below treats it as certain), computed exactly once.
var expTable = sync.OnceValue(func() *[1 << expTableBits]uint64 {
	var t [1 << expTableBits]uint64
	for j := range t {
		t[j] = expNegDigits(int64(j), 1<<expTableBits, 1)[0]
	}
	return &t
})

// bernoulliExpTable returns true with probability exp(−j/256): a uniform
// real is compared with exp(−j/256) one 64-bit word of digits at a time;
// beyond the first word (probability 2^−64) the digits are computed
// exactly.
func (s *Source) bernoulliExpTable(j uint64) bool {
	if j == 0 {
		return true
	}
	if lt, ok := s.compareWord(s.exp[j]); ok {
		return lt
	}
	for n := 2; ; n *= 2 {
		digits := expNegDigits(int64(j), 1<<expTableBits, n)
		for i := 1; i < n; i++ {
			if w := s.c.Uint64(); w != digits[i] {
				return w < digits[i]
			}
		}
	}
}

// invE64 is ⌊2^64/e⌋, the first 64 binary digits of 1/e, computed exactly
// at start-up (expNegDigits).
var invE64 = expNegDigits(1, 1, 1)[0]

// bernoulliExpNeg1 returns true with probability 1/e: a uniform real U is
// compared with 1/e, 64 binary digits at a time. The first word decides
// unless it equals ⌊2^64/e⌋ (probability 2^−64); then further digits of
// 1/e are computed exactly and compared with further words.
func (s *Source) bernoulliExpNeg1() bool {
	if lt, ok := s.compareWord(invE64); ok {
		return lt
	}
	for n := 2; ; n *= 2 {
		digits := expNegDigits(1, 1, n)
		for i := 1; i < n; i++ {
			if w := s.c.Uint64(); w != digits[i] {
				return w < digits[i]
			}
		}
	}
}

// expNegDigits returns the first 64·n binary digits of exp(−num/den) for
// 0 ≤ num ≤ den (den > 0) as n words, most significant first, computed
// exactly with rationals: the partial sums of Σ (−x)^k/k! bracket exp(−x)
// (alternating terms of decreasing size for x ≤ 1), and terms are added
// until two consecutive partial sums have the same first 64·n digits.
// exp(−x) for rational x ≠ 0 is irrational, so they eventually do; for
// x = 0 the digits are all ones (the value 1 is never below a uniform
// real, which the callers treat separately).
func expNegDigits(num, den int64, n int) []uint64 {
	words := make([]uint64, n)
	if num == 0 {
		for i := range words {
			words[i] = ^uint64(0)
		}
		return words
	}
	scale := new(big.Int).Lsh(big.NewInt(1), uint(64*n))
	floorScaled := func(r *big.Rat) *big.Int {
		v := new(big.Int).Mul(r.Num(), scale)
		return v.Quo(v, r.Denom()) // r > 0: truncation is the floor
	}
	x := big.NewRat(num, den)
	sum := new(big.Rat)
	term := big.NewRat(1, 1) // (−x)^k/k!
	var prev *big.Int
	for k := int64(0); ; k++ {
		if k > 0 {
			term.Mul(term, x)
			term.Quo(term, new(big.Rat).SetInt64(-k))
		}
		sum.Add(sum, term)
		if k == 0 {
			continue // S_0 = 1 does not bracket from below yet
		}
		cur := floorScaled(sum)
		if prev != nil && cur.Cmp(prev) == 0 {
			buf := cur.FillBytes(make([]byte, 8*n)) // big-endian
			for i := range words {
				words[i] = binary.BigEndian.Uint64(buf[8*i:])
			}
			return words
		}
		prev = cur
	}
}

// bernoulliExp128 returns true with probability exp(−N/den) for the
// 128-bit N = hi·2^64 + lo and den > 0 (CKS Algorithm 1, γ > 1: one
// Bernoulli(1/e) per unit of γ, stopping at the first failure, then the
// fractional part).
func (s *Source) bernoulliExp128(hi, lo, den uint64) bool {
	for hi > 0 || lo >= den {
		if !s.bernoulliExpNeg1() {
			return false
		}
		var borrow uint64
		lo, borrow = bits.Sub64(lo, den, 0)
		hi -= borrow
	}
	return s.bernoulliExpFrac(lo, den)
}

// uniformBig returns a uniform integer in [0, n) for n > 0 by rejection
// from the smallest enclosing power of two.
func (s *Source) uniformBig(n *big.Int) *big.Int {
	nb := n.BitLen()
	words := (nb + 63) / 64
	buf := make([]big.Word, words)
	for {
		for i := range buf {
			buf[i] = big.Word(s.c.Uint64())
		}
		if extra := words*64 - nb; extra > 0 {
			buf[words-1] &= big.Word(^uint64(0) >> extra)
		}
		x := new(big.Int).SetBits(buf)
		if x.Cmp(n) < 0 {
			return x
		}
		buf = make([]big.Word, words)
	}
}

// bernoulliExpBig returns true with probability exp(−num/den) for
// arbitrary non-negative integers (den > 0): CKS Algorithm 1 in math/big.
// Only reached for proposals beyond 64 bits.
func (s *Source) bernoulliExpBig(num, den *big.Int) bool {
	n := new(big.Int).Set(num)
	for n.Cmp(den) >= 0 {
		if !s.bernoulliExpNeg1() {
			return false
		}
		n.Sub(n, den)
	}
	k := uint64(1)
	for {
		if k > 1 && !s.bernoulliFrac(1, k) {
			break
		}
		if n.Sign() == 0 || s.uniformBig(den).Cmp(n) >= 0 {
			break
		}
		k++
	}
	return k&1 == 1
}

// geometricExpNeg1 returns the number of successes of Bernoulli(1/e)
// before the first failure: P(V = v) = (1 − 1/e)·e^{−v}.
func (s *Source) geometricExpNeg1() uint64 {
	var v uint64
	for s.bernoulliExpNeg1() {
		v++
	}
	return v
}

// laplaceMagnitude draws the magnitude of CKS Algorithm 2 with integer
// scale t ≥ 1: X = U + t·V with U uniform in [0, t) accepted with
// probability exp(−U/t) and V geometric, so P(X = x) ∝ exp(−x/t). The
// result is the 128-bit value hi·2^64 + lo.
func (s *Source) laplaceMagnitude(t uint64) (hi, lo uint64) {
	var u uint64
	for {
		u = s.uniform(t)
		if s.bernoulliExpFrac(u, t) {
			break
		}
	}
	v := s.geometricExpNeg1()
	hi, lo = bits.Mul64(t, v)
	var carry uint64
	lo, carry = bits.Add64(lo, u, 0)
	return hi + carry, lo
}

// saturate returns ±(hi·2^64 + lo) clamped to ±maxMagnitude.
func saturate(hi, lo uint64, neg bool) int64 {
	m := int64(maxMagnitude)
	if hi == 0 && lo < maxMagnitude {
		m = int64(lo)
	}
	if neg {
		return -m
	}
	return m
}

// discreteLaplace returns one sample of the discrete Laplace distribution
// with integer scale t ≥ 1, P(x) ∝ exp(−|x|/t) on the integers (CKS
// Algorithm 2 with s = 1), clamped to ±(2^62 − 1) after sampling.
func (s *Source) discreteLaplace(t uint64) int64 {
	for {
		hi, lo := s.laplaceMagnitude(t)
		neg := s.coin()
		if neg && hi == 0 && lo == 0 {
			continue // −0 would count zero twice
		}
		return saturate(hi, lo, neg)
	}
}

// discreteGaussian returns one sample of the discrete Gaussian N_Z(0, σ²)
// with integer parameter 1 ≤ σ ≤ 2^31, P(x) ∝ exp(−x²/(2σ²)) (CKS
// Algorithm 3 with t = σ: a discrete Laplace proposal of scale σ accepted
// with probability exp(−(|y| − σ)²/(2σ²))), clamped to ±(2^62 − 1) after sampling.
func (s *Source) discreteGaussian(sigma uint64) int64 {
	den := 2 * sigma * sigma // ≤ 2^63
	for {
		hi, lo := s.laplaceMagnitude(sigma)
		neg := s.coin()
		if neg && hi == 0 && lo == 0 {
			continue
		}
		if hi == 0 && lo < 1<<63 {
			d := lo - sigma
			if lo < sigma {
				d = sigma - lo
			}
			nh, nl := bits.Mul64(d, d)
			if !s.bernoulliExp128(nh, nl, den) {
				continue
			}
		} else {
			// A proposal beyond 2^63 (probability below exp(−2^32)):
			// the same exact test in math/big.
			y := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
			y.Or(y, new(big.Int).SetUint64(lo))
			y.Sub(y, new(big.Int).SetUint64(sigma))
			y.Mul(y, y)
			if !s.bernoulliExpBig(y, new(big.Int).SetUint64(den)) {
				continue
			}
		}
		return saturate(hi, lo, neg)
	}
}

// gridBits sets the default fineness of the output grid: the grid step γ
// is the largest power of two with γ ≤ 2^−20·scale/√d (Gaussian) or
// 2^−20·scale/d (Laplace), so snapping grows the sensitivity by at most
// 2^−20 ≈ 9.5e−7 of the noise scale.
const gridBits = 20

// Grid describes how a vector of d real values is released exactly: each
// value is rounded to the nearest multiple of Gamma (a power of two) and
// Gamma·Z is added, with Z discrete Laplace of scale Scale or discrete
// Gaussian of parameter Scale. The output is a multiple of Gamma, so its
// floating-point representation carries nothing but the integer result.
//
// Accounting. Rounding moves each coordinate by at most Gamma/2, so
// neighbouring inputs whose real L2 (L1) distance is Δ round to integer
// vectors at L2 distance at most Δ/Gamma + √d (L1: Δ/Gamma + d). The
// discrete Gaussian with integer sensitivity Δ_Z has exactly the Rényi DP
// α·Δ_Z²/(2σ²) of the continuous one (Canonne, Kamath & Steinke 2020,
// Theorem 4 and its multivariate form), and the discrete Laplace of scale
// t is Δ_Z/t-DP; GaussianMultiplier and LaplaceEpsilon return the
// resulting figures.
type Grid struct {
	// Gamma is the grid step, a power of two.
	Gamma float64
	// Scale is the integer noise parameter: σ/Gamma or b/Gamma rounded up.
	Scale uint64
	// Dim is the number of coordinates d.
	Dim int
}

// pow2Floor returns the largest power of two ≤ x (x > 0, finite).
func pow2Floor(x float64) float64 {
	_, e := math.Frexp(x) // x = f·2^e, f ∈ [0.5, 1)
	return math.Ldexp(1, e-1)
}

func checkDim(dim int) error {
	if dim < 1 {
		return fmt.Errorf("dp: the number of coordinates must be at least 1, got %d", dim)
	}
	return nil
}

// gaussianGrid picks the grid for discrete Gaussian noise of standard
// deviation sigma on dim coordinates, fine relative to ref (the noise
// scale, or the sensitivity when it is known): γ = 2^⌊log2(ref/(2^20·√d))⌋,
// coarsened by powers of two while σ/γ would exceed 2^31.
func gaussianGrid(sigma, ref float64, dim int) (Grid, error) {
	if err := checkPositive("noise standard deviation", sigma); err != nil {
		return Grid{}, err
	}
	if err := checkDim(dim); err != nil {
		return Grid{}, err
	}
	g := pow2Floor(ref / (math.Ldexp(1, gridBits) * math.Sqrt(float64(dim))))
	for sigma/g > maxGaussianScale {
		g *= 2
	}
	if g == 0 || math.IsInf(g, 0) {
		return Grid{}, fmt.Errorf("dp: noise standard deviation %g is out of range", sigma)
	}
	return Grid{Gamma: g, Scale: max(1, uint64(math.Ceil(sigma/g))), Dim: dim}, nil
}

// GaussianGrid returns the grid on which AddGaussian32/64 release dim
// coordinates with noise standard deviation sigma.
func GaussianGrid(sigma float64, dim int) (Grid, error) { return gaussianGrid(sigma, sigma, dim) }

// LaplaceGrid returns the grid on which AddLaplace32/64 release dim
// coordinates with Laplace scale b: γ = 2^⌊log2(b/(2^20·d))⌋, the integer
// scale ⌈b/γ⌉.
func LaplaceGrid(b float64, dim int) (Grid, error) {
	if err := checkPositive("Laplace scale", b); err != nil {
		return Grid{}, err
	}
	if err := checkDim(dim); err != nil {
		return Grid{}, err
	}
	g := pow2Floor(b / (math.Ldexp(1, gridBits) * float64(dim)))
	for b/g > maxLaplaceScale {
		g *= 2
	}
	if g == 0 || math.IsInf(g, 0) {
		return Grid{}, fmt.Errorf("dp: Laplace scale %g is out of range", b)
	}
	return Grid{Gamma: g, Scale: max(1, uint64(math.Ceil(b/g))), Dim: dim}, nil
}

// GaussianMultiplier returns the noise multiplier (noise parameter over
// L2 sensitivity) that the discretised Gaussian release on this grid
// satisfies for real L2 sensitivity Δ: Scale/(Δ/Gamma + √Dim), slightly
// below σ/Δ because rounding can grow the sensitivity.
func (g Grid) GaussianMultiplier(l2Sensitivity float64) (float64, error) {
	if err := checkPositive("sensitivity", l2Sensitivity); err != nil {
		return 0, err
	}
	dz := l2Sensitivity/g.Gamma + math.Sqrt(float64(g.Dim))
	return roundDown(float64(g.Scale) / dz), nil
}

// LaplaceEpsilon returns the ε of the discretised Laplace release on this
// grid for real L1 sensitivity Δ: (Δ/Gamma + Dim)/Scale.
func (g Grid) LaplaceEpsilon(l1Sensitivity float64) (float64, error) {
	if err := checkPositive("sensitivity", l1Sensitivity); err != nil {
		return 0, err
	}
	return roundUp((l1Sensitivity/g.Gamma + float64(g.Dim)) / float64(g.Scale)), nil
}

// roundDown and roundUp move a computed figure a few ulps towards the
// safe side, so float rounding never flatters a privacy guarantee.
func roundDown(x float64) float64 { return x * (1 - 4e-16) }
func roundUp(x float64) float64   { return x * (1 + 4e-16) }

// snap returns x/γ rounded to the nearest integer, saturated at ±(2^62 − 1)
// (a contraction, so it never grows the sensitivity). NaN maps to 0.
func snap(x, gamma float64) int64 {
	r := math.Round(x / gamma)
	switch {
	case r != r:
		return 0
	case r >= maxMagnitude:
		return maxMagnitude
	case r <= -maxMagnitude:
		return -maxMagnitude
	}
	return int64(r)
}

// release returns γ·(k + z) for a snapped k and an integer noise sample z
// (both within ±2^62, so the sum cannot overflow). Converting the integer
// to float64 is post-processing of the exact integer result.
func release(k, z int64, gamma float64) float64 { return float64(k+z) * gamma }
