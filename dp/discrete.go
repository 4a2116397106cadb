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
// 2^−20 ≈ 9.5e−7 of the noise scale, unless the integer noise parameter
// would pass maxGaussianScale or maxLaplaceScale and γ is coarsened (then
// by up to 2^−30·(noise/reference)·√d, see Grid.GaussianMultiplier).
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
// satisfies for real L2 sensitivity Δ: Scale/(Δ/Gamma + √Dim), below σ/Δ
// because rounding can grow the sensitivity. The relative loss is
// γ√d/(Δ + γ√d) at most: below 2^−20 on an uncoarsened grid whose
// reference is at most Δ, but it grows with σ√d once the grid is
// coarsened (below σ√d·2^−30 for σ the multiplier): 0.28% at σ = 5000
// on d = 557,824 coordinates.
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

// snap returns x/γ rounded to the nearest integer (ties to even, a single
// instruction on amd64; any rounding within 1/2 gives the accounting of
// Grid), saturated at ±(2^62 − 1) (a contraction, so it never grows the
// sensitivity). NaN maps to 0.
func snap(x, gamma float64) int64 { return snapScaled(x / gamma) }

// snapScaled is snap of the scaled value y = x/γ.
func snapScaled(y float64) int64 {
	r := math.RoundToEven(y)
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

// # The table sampler
//
// discreteGaussian (CKS Algorithm 3) spends several exact Bernoulli trials
// per sample, which is most of DP-SGD's cost at the huge integer parameters
// its fine grid asks for (σ_Z ≈ 2^28–2^31). A gaussTable samples the same
// distribution exactly, for one fixed parameter, with about two 64-bit
// words and a handful of integer multiplications per sample:
//
//  1. Proposal. The magnitudes [0, L) are cut into blocks of B consecutive
//     integers (B a power of two, at most σ/32; B = 1 for small σ), and
//     [L, ∞) is one more entry, the tail. Block b proposes each of its
//     points with the same integer weight W_b ≥ c·f(bB), where
//     f(x) = exp(−x²/(2σ²)) and c is one exact rational for the whole
//     table; the tail entry gets the rest of 2^63. An entry is drawn by
//     Walker's alias method, built in exact integer arithmetic (each entry
//     has probability weight/2^63 exactly); a point of the block and a
//     sign come from fair bits.
//  2. Acceptance. A proposed point m of block b is accepted with
//     probability p = c·f(m)/W_b ≤ 1, so every signed integer ends up with
//     probability ∝ f: the output is exactly N_Z(0, σ²). The trial compares
//     a uniform real U with p, drawing U's bits only as far as needed:
//     16 bits against the block's squeeze (a lower bound of p over the
//     whole block, which accepts about 97% of proposals at large σ), then
//     against a coarse bracket of p from a table of exp(−j/256), then all
//     63 bits against a tight bracket (a fifth-order Taylor bound, under
//     2^−45 wide), all in 64-bit fixed-point integer arithmetic with every
//     product rounded in the safe direction. Only when U falls inside the
//     tight bracket are more bits of U drawn and p bracketed again, as
//     tightly as needed, in math/big (never an approximation: the loop ends
//     when U is on one side of the bracket).
//  3. The tail (probability about exp(−32), plus the 2^−24 of slack given
//     to it) proposes L + G with G geometric of ratio exp(−1/t),
//     t = ⌈σ²/L⌉ (discrete Laplace magnitude, CKS Algorithm 2), which
//     dominates f on [L, ∞); its acceptance is again an exact product of
//     Bernoulli trials.
//
// Building a table takes a few milliseconds (weights bracketed in math/big),
// so Sources keep the last table they built and vector releases and DPSGD
// use it; single draws with another parameter use discreteGaussian.
// A proposal is accepted with probability (Σ_Z f/2)/(B·Σ_b f(bB)), about
// 99% when B ≈ σ/32..σ/64 (the left Riemann sum of the half-Gaussian with
// step B exceeds its integral by about B/2); for small σ, where B = 1,
// the rejected −0 lowers it (71% at σ = 1).

const (
	// tableMaxBlocks bounds the blocks of a gaussTable (one alias entry
	// each; with the tail, at most 512 entries).
	tableMaxBlocks = 511
	// tableSlackBits: the blocks' weights fill at most 1 − 2^−24 of 2^63,
	// leaving room for the integer rounding of every W_b and the tail.
	tableSlackBits = 24
	// one63 is 1 in the 63-bit fixed point of the acceptance test.
	one63 = uint64(1) << 63
)

// gaussTable is an exact sampler of the discrete Gaussian with
// 2σ² = n2/d (see "The table sampler" above). It is immutable once built
// and may be shared by Sources in different goroutines.
type gaussTable struct {
	n2, d  uint64 // 2σ² = n2/d
	wbits  uint   // B = 2^wbits
	blocks uint64 // block count nb; L = nb·B
	kappa  uint   // 2^kappa alias bins
	cut    []uint64
	alias  []uint16
	weight []uint64 // W_b, the integer weight of each point of block b
	// rlo[b] ≤ ρ_b·2^63 ≤ rhi[b] for ρ_b = c·f(bB)/W_b.
	rlo, rhi []uint64
	// sq[b]·2^−63 is at most the acceptance probability of every point of
	// block b (a squeeze: most proposals are accepted on it alone).
	sq []uint64
	// c·f(x) = cNum·f(x)·2^g/cDen exactly.
	cNum, cDen *big.Int
	g          uint
	// The tail: entry weight, geometric scale t, and tlo ≤ ρ_T·2^63 ≤ thi
	// for ρ_T = c·f(L)/(tailW·(1 − exp(−1/t))).
	tailW, tailT uint64
	tlo, thi     uint64
	// exp is expTable63.
	exp *[2][258]uint64
	// inv = ⌊(2^127 − 1)/(n2·2^shift)⌋ with n2·2^shift ∈ [2^63, 2^64).
	inv   uint64
	shift uint
	// slow sends every acceptance test to the math/big path (tests only).
	slow bool
}

// newGaussTable builds the table for 2σ² = n2/d (1 ≤ n2 ≤ 2^63,
// 1 ≤ d ≤ 2^32). blocks > 0 fixes the number of blocks (tests use few, to
// exercise the tail); 0 chooses L ≥ 12σ up to tableMaxBlocks blocks (for
// large σ, L ≥ 8σ). The blocks' weights fill 1 − 2^−slack of the proposal
// (tableSlackBits; tests use less, so that the tail's acceptance factor
// is far from 1). It panics on parameters out of range: callers pass
// validated integers.
func newGaussTable(n2, d uint64, blocks int, slack uint) *gaussTable {
	if n2 == 0 || n2 > one63 || d == 0 || d > 1<<32 || blocks < 0 || blocks > tableMaxBlocks || slack < 1 || slack > tableSlackBits {
		panic(fmt.Sprintf("dp: discrete Gaussian table for 2σ² = %d/%d with %d blocks is out of range", n2, d, blocks))
	}
	t := &gaussTable{n2: n2, d: d, exp: expTable63(), shift: uint(bits.LeadingZeros64(n2))}
	t.inv, _ = bits.Div64(1<<63-1, ^uint64(0), n2<<t.shift)
	bn2, bd := new(big.Int).SetUint64(n2), new(big.Int).SetUint64(d)
	// B: the largest power of two with 2048·d·B² ≤ n2 (B ≤ σ/32), or 1.
	for w := uint(1); w < 40; w++ {
		b2 := new(big.Int).Lsh(bd, 11+2*w)
		if b2.Cmp(bn2) > 0 {
			break
		}
		t.wbits = w
	}
	bw := uint64(1) << t.wbits
	if blocks > 0 {
		t.blocks = uint64(blocks)
	} else {
		// L ≥ √(72·n2/d) = 12σ, within tableMaxBlocks.
		r := new(big.Int).Mul(bn2, big.NewInt(72))
		r.Quo(r, bd)
		r.Sqrt(r)
		nb := new(big.Int).Rsh(r, t.wbits).Uint64() + 1
		t.blocks = min(nb, tableMaxBlocks)
	}
	nb := t.blocks
	if t.wbits+uint(bits.Len64(nb)) > 35 {
		panic("dp: discrete Gaussian table: a proposal needs more than 64 bits")
	}
	L := nb << t.wbits
	bL := new(big.Int).SetUint64(L)
	// The fast path computes o·(2bB + o)·d < n2 in 64 bits (o < B).
	if bw > 1 {
		m := new(big.Int).SetUint64(bw - 1)
		m.Mul(m, new(big.Int).SetUint64(2*(L-bw)+bw-1))
		m.Mul(m, bd)
		if m.Cmp(bn2) >= 0 {
			panic("dp: discrete Gaussian table: block too wide")
		}
	}
	// The tail proposal's scale t = ⌈n2/(2·L·d)⌉ makes exp(−g/t) dominate
	// f(L+g)/f(L) = exp(−(2Lg + g²)·d/n2).
	tt := ceilDiv(bn2, new(big.Int).Lsh(new(big.Int).Mul(bL, bd), 1))
	t.tailT = tt.Uint64()

	// Weights at G bits: F_b = f(bB) = a^(b²) with a = exp(−B²d/n2),
	// by f((b+1)B) = f(bB)·a^(2b+1); every product rounded outwards.
	qmax := new(big.Int).Mul(new(big.Int).Mul(bL, bL), bd)
	qmax.Quo(qmax, bn2)
	G := uint(192) + 2*uint(qmax.Uint64())
	t.g = G
	aNum := new(big.Int).Lsh(bd, 2*t.wbits)
	alo, ahi := expNegBounds(aNum, bn2, G)
	a2lo, a2hi := mulFloor(alo, alo, G), mulCeil(ahi, ahi, G)
	flo := make([]*big.Int, nb+1)
	fhi := make([]*big.Int, nb+1)
	flo[0], fhi[0] = new(big.Int).Lsh(big.NewInt(1), G), new(big.Int).Lsh(big.NewInt(1), G)
	plo, phi := alo, ahi // a^(2b+1)
	for b := uint64(0); b < nb; b++ {
		flo[b+1], fhi[b+1] = mulFloor(flo[b], plo, G), mulCeil(fhi[b], phi, G)
		plo, phi = mulFloor(plo, a2lo, G), mulCeil(phi, a2hi, G)
	}
	// Tail mass bound: f(L)/(1 − exp(−1/t)) ≥ Σ_{g ≥ 0} f(L + g).
	_, ehi := expNegBounds(big.NewInt(1), tt, G)
	omLo := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), G), ehi)
	if omLo.Sign() <= 0 {
		panic("dp: discrete Gaussian table: tail scale too large")
	}
	tailHi := ceilDiv(new(big.Int).Lsh(fhi[nb], G), omLo)
	// T = Σ B·F_b + tail; c = 2^63·(1 − 2^−slack)/T (times 2^G).
	T := new(big.Int).Set(tailHi)
	for b := range nb {
		T.Add(T, new(big.Int).Lsh(fhi[b], t.wbits))
	}
	t.cNum = new(big.Int).Lsh(new(big.Int).SetUint64(1<<slack-1), 63-slack)
	t.cDen = T
	t.weight = make([]uint64, nb)
	t.rlo = make([]uint64, nb)
	t.rhi = make([]uint64, nb)
	var body uint64
	for b := range nb {
		cf := new(big.Int).Mul(t.cNum, fhi[b])
		w := ceilDiv(cf, t.cDen) // W_b = ⌈c·F_b⌉
		if !w.IsUint64() || w.Sign() == 0 {
			panic("dp: discrete Gaussian table: weight out of range")
		}
		t.weight[b] = w.Uint64()
		body += t.weight[b] << t.wbits
		// ρ_b = cNum·F_b/(cDen·W_b), at 63 bits.
		den := new(big.Int).Mul(t.cDen, w)
		lo := new(big.Int).Mul(t.cNum, flo[b])
		lo.Lsh(lo, 63).Quo(lo, den)
		hi := ceilDiv(new(big.Int).Lsh(cf, 63), den)
		t.rlo[b], t.rhi[b] = lo.Uint64(), hi.Uint64()
	}
	if body >= one63 {
		panic("dp: discrete Gaussian table: weights overflow")
	}
	t.tailW = one63 - body
	// The tail's weight must cover c times its mass bound.
	lhs := new(big.Int).Mul(new(big.Int).SetUint64(t.tailW), t.cDen)
	if lhs.Cmp(new(big.Int).Mul(t.cNum, tailHi)) < 0 {
		panic("dp: discrete Gaussian table: tail weight too small")
	}
	lo, hi := t.tailRho(63)
	t.tlo, t.thi = lo.Uint64(), hi.Uint64()
	// p decreases along a block: its last point bounds it from below.
	t.sq = make([]uint64, nb)
	for b := range nb {
		t.sq[b], _ = t.coarse(b, bw-1)
	}

	// Walker's alias method in integers: 2^kappa bins of capacity
	// 2^(63−kappa); entry e < nb is block e, entry nb the tail.
	t.kappa = uint(bits.Len64(nb))
	bins := uint64(1) << t.kappa
	capacity := one63 >> t.kappa
	w := make([]uint64, bins)
	for b := range nb {
		w[b] = t.weight[b] << t.wbits
	}
	w[nb] = t.tailW
	t.cut = make([]uint64, bins)
	t.alias = make([]uint16, bins)
	var small, large []uint64
	for e, x := range w {
		if x < capacity {
			small = append(small, uint64(e))
		} else {
			large = append(large, uint64(e))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small, large = small[:len(small)-1], large[:len(large)-1]
		t.cut[s], t.alias[s] = w[s], uint16(l)
		w[l] -= capacity - w[s]
		if w[l] < capacity {
			small = append(small, l)
		} else {
			large = append(large, l)
		}
	}
	for _, e := range append(small, large...) {
		if w[e] != capacity { // the integer weights sum to exactly 2^63
			panic("dp: discrete Gaussian table: alias construction lost weight")
		}
		t.cut[e], t.alias[e] = capacity, uint16(e)
	}
	return t
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// mulFloor and mulCeil return ⌊a·b/2^g⌋ and ⌈a·b/2^g⌉ (a, b ≥ 0).
func mulFloor(a, b *big.Int, g uint) *big.Int {
	p := new(big.Int).Mul(a, b)
	return p.Rsh(p, g)
}

func mulCeil(a, b *big.Int, g uint) *big.Int {
	p := new(big.Int).Mul(a, b)
	p.Add(p, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), g), big.NewInt(1)))
	return p.Rsh(p, g)
}

// expNegBounds returns integers lo ≤ exp(−num/den)·2^prec ≤ hi for
// num ≥ 0, den > 0, computed exactly in integers: exp(−1)^q·exp(−r/den)
// for num = q·den + r, each factor a truncated Taylor series at more bits
// with its truncation and rounding error bounded (see expSeries), powers
// and products rounded outwards. The bracket is a few units of 2^−prec
// wide.
func expNegBounds(num, den *big.Int, prec uint) (lo, hi *big.Int) {
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if q.Cmp(big.NewInt(int64(prec))) >= 0 {
		// exp(−num/den) ≤ e^−prec < 2^−prec.
		return big.NewInt(0), big.NewInt(1)
	}
	n := q.Uint64()
	G := prec + 2*uint(n) + 64
	one := new(big.Int).Lsh(big.NewInt(1), G)
	e1lo, e1hi := expSeries(den, den, G)
	plo, phi := new(big.Int).Set(one), new(big.Int).Set(one)
	for bl, bh := e1lo, e1hi; n > 0; n >>= 1 {
		if n&1 == 1 {
			plo, phi = mulFloor(plo, bl, G), mulCeil(phi, bh, G)
		}
		if n > 1 {
			bl, bh = mulFloor(bl, bl, G), mulCeil(bh, bh, G)
		}
	}
	flo, fhi := expSeries(r, den, G)
	lo = mulFloor(plo, flo, G)
	lo.Rsh(lo, G-prec)
	hi = mulCeil(phi, fhi, G)
	hi = ceilDiv(hi, new(big.Int).Lsh(big.NewInt(1), G-prec))
	return lo, hi
}

// expSeries returns lo ≤ exp(−r/den)·2^g ≤ hi for 0 ≤ r ≤ den: the Taylor
// series with terms t_k = ⌊t_{k−1}·r/(den·k)⌋ until a term is 0. Each
// floored term is below the exact one by at most k units (induction:
// e_k ≤ e_{k−1}·x/k + 1), so the partial sum is within K(K+1)/2 units of
// the exact partial sum, and the remainder of the alternating series with
// decreasing terms is below the first omitted exact term, itself at most
// K units; K² + K + 1 units bound both.
func expSeries(r, den *big.Int, g uint) (lo, hi *big.Int) {
	one := new(big.Int).Lsh(big.NewInt(1), g)
	if r.Sign() == 0 {
		return one, new(big.Int).Set(one)
	}
	sum := new(big.Int).Set(one)
	term := new(big.Int).Set(one)
	dk := new(big.Int)
	var k int64
	for term.Sign() > 0 {
		k++
		term.Mul(term, r)
		term.Quo(term, dk.Mul(den, big.NewInt(k)))
		if k&1 == 1 {
			sum.Sub(sum, term)
		} else {
			sum.Add(sum, term)
		}
	}
	e := big.NewInt(k*k + k + 1)
	lo = new(big.Int).Sub(sum, e)
	if lo.Sign() < 0 {
		lo.SetInt64(0)
	}
	hi = new(big.Int).Add(sum, e)
	if hi.Cmp(one) > 0 {
		hi.Set(one)
	}
	return lo, hi
}

// tailRho returns lo ≤ ρ_T·2^prec ≤ hi for the tail's constant acceptance
// ρ_T = c·f(L)/(tailW·(1 − exp(−1/t))).
func (t *gaussTable) tailRho(prec uint) (lo, hi *big.Int) {
	L := new(big.Int).SetUint64(t.blocks << t.wbits)
	bn2, bd, bt := new(big.Int).SetUint64(t.n2), new(big.Int).SetUint64(t.d), new(big.Int).SetUint64(t.tailT)
	num := new(big.Int).Mul(new(big.Int).Mul(L, L), bd)
	q := new(big.Int).Quo(num, bn2)
	H := prec + 2*uint(min(q.Uint64(), 1<<16)) + uint(bt.BitLen()) + 16
	flo, fhi := expNegBounds(num, bn2, H)
	elo, ehi := expNegBounds(big.NewInt(1), bt, H)
	oneH := new(big.Int).Lsh(big.NewInt(1), H)
	omLo, omHi := new(big.Int).Sub(oneH, ehi), new(big.Int).Sub(oneH, elo)
	// ρ_T·2^prec = cNum·2^g·F·2^prec/(cDen·tailW·(1 − e)), F and (1 − e) at H bits.
	w := new(big.Int).SetUint64(t.tailW)
	scale := t.g + prec
	n := new(big.Int).Lsh(new(big.Int).Mul(t.cNum, flo), scale)
	lo = n.Quo(n, new(big.Int).Mul(new(big.Int).Mul(t.cDen, w), omHi))
	n = new(big.Int).Lsh(new(big.Int).Mul(t.cNum, fhi), scale)
	hi = ceilDiv(n, new(big.Int).Mul(new(big.Int).Mul(t.cDen, w), omLo))
	return lo, hi
}

// acceptBounds returns lo ≤ p·2^prec ≤ hi for the acceptance probability
// p = c·f(m)/W_b of point m in block b.
func (t *gaussTable) acceptBounds(b, m uint64, prec uint) (lo, hi *big.Int) {
	bm := new(big.Int).SetUint64(m)
	num := new(big.Int).Mul(new(big.Int).Mul(bm, bm), new(big.Int).SetUint64(t.d))
	bn2 := new(big.Int).SetUint64(t.n2)
	q := new(big.Int).Quo(num, bn2)
	H := prec + 2*uint(min(q.Uint64(), 1<<16)) + 16
	flo, fhi := expNegBounds(num, bn2, H)
	den := new(big.Int).Mul(t.cDen, new(big.Int).SetUint64(t.weight[b]))
	den.Lsh(den, H)
	lo = new(big.Int).Lsh(new(big.Int).Mul(t.cNum, flo), t.g+prec)
	lo.Quo(lo, den)
	hi = ceilDiv(new(big.Int).Lsh(new(big.Int).Mul(t.cNum, fhi), t.g+prec), den)
	return lo, hi
}

// lazyBelow decides exactly whether a uniform real U in [0, 1), whose
// first 63 bits are u, lies below p, given brackets of p at any precision:
// it draws further words of U as the precision doubles and stops when U's
// prefix lies wholly below lo or at or above hi. It ends with probability
// one unless p has a finite binary expansion equal to U's (probability 0).
func (s *Source) lazyBelow(u uint64, bounds func(prec uint) (lo, hi *big.Int)) bool {
	U := new(big.Int).SetUint64(u)
	have := uint(63)
	one := big.NewInt(1)
	for prec := uint(128); ; prec *= 2 {
		for have < prec {
			U.Lsh(U, 64).Or(U, new(big.Int).SetUint64(s.c.Uint64()))
			have += 64
		}
		lo, hi := bounds(prec)
		up := new(big.Int).Rsh(U, have-prec)
		if new(big.Int).Add(up, one).Cmp(lo) <= 0 {
			return true
		}
		if up.Cmp(hi) >= 0 {
			return false
		}
	}
}

// expTable63 holds bounds lo ≤ exp(−j/256)·2^63 ≤ hi = lo or lo + 1, for
// j = 0…257, computed exactly once.
var expTable63 = sync.OnceValue(func() *[2][258]uint64 {
	var tab [2][258]uint64
	for j := range 258 {
		lo, hi := expNegBounds(big.NewInt(int64(j)), big.NewInt(256), 128)
		tab[0][j] = new(big.Int).Rsh(lo, 65).Uint64()
		tab[1][j] = ceilDiv(hi, new(big.Int).Lsh(big.NewInt(1), 65)).Uint64()
	}
	return &tab
})

// mulFloor63 and mulCeil63 multiply 63-bit fixed-point numbers
// (⌊a·b/2^63⌋, ⌈a·b/2^63⌉) for a, b < 2^64 with a·b < 2^127.
func mulFloor63(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi<<1 | lo>>63
}

func mulCeil63(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	r := hi<<1 | lo>>63
	if lo&(one63-1) != 0 {
		r++
	}
	return r
}

// expNeg63 returns lo ≤ exp(−x)·2^63 ≤ hi for every real x in
// [tq, tq + 1]·2^−63, tq < 2^63: x = j/256 + r with a table bound of
// exp(−j/256) and the alternating Taylor bounds S₅(r) ≤ exp(−r) ≤ S₄(r)
// (0 ≤ r ≤ 2^−8, so the bracket is about r⁵/120 < 2^−46 wide), every
// operation rounded in the safe direction.
func expNeg63(tab *[2][258]uint64, tq uint64) (lo, hi uint64) {
	j := tq >> 55
	r := tq & (1<<55 - 1) // lower end of r; the upper is r + 1
	// Lower bound at r + 1: positive terms floored, negative ones ceiled.
	ru := r + 1
	r2f, r2c := mulFloor63(ru, ru), mulCeil63(ru, ru)
	r3c := mulCeil63(r2c, ru)
	r4f, r4c := mulFloor63(r2f, r2f), mulCeil63(r2c, r2c)
	r5c := mulCeil63(r4c, ru)
	s5 := one63 - ru + r2f/2 - (r3c+5)/6 + r4f/24 - (r5c+119)/120
	// Upper bound at r.
	r2f, r2c = mulFloor63(r, r), mulCeil63(r, r)
	r3f := mulFloor63(r2f, r)
	r4c = mulCeil63(r2c, r2c)
	s4 := one63 - r + (r2c+1)/2 - r3f/6 + (r4c+23)/24
	return mulFloor63(tab[0][j], s5), mulCeil63(tab[1][j], s4)
}

// tableGaussian returns one exact sample of the table's discrete Gaussian,
// clamped to ±(2^62 − 1) after sampling (the tail only). A proposal
// usually costs one 64-bit word, cut into the alias bin (kappa bits), the
// sign, a 12-bit prefix of the alias threshold's uniform, the offset in
// the block (wbits) and a 16-bit prefix of the acceptance test's uniform
// U; a uniform's further bits are drawn only when its prefix cannot decide
// (about 2^−12 of alias draws and 1% of acceptance tests).
func (s *Source) tableGaussian(t *gaussTable) int64 {
	kappa, wbits := t.kappa, t.wbits
	restBits := 51 - kappa // the alias uniform's bits after its prefix
	for {
		w := s.c.Uint64()
		i := w >> (64 - kappa)
		sign := (w >> (63 - kappa)) & 1 // 1: negative
		// The alias: entry i if the threshold's uniform is below cut[i],
		// else alias[i]; written without a branch on the random outcome
		// (the compiler uses conditional moves), ties on the prefix aside.
		p, c := (w>>restBits)&(1<<12-1), t.cut[i]
		var other uint64
		if p > c>>restBits {
			other = 1
		}
		if p == c>>restBits && s.bits(restBits) >= c&(1<<restBits-1) {
			other = 1
		}
		e := i ^ (i^uint64(t.alias[i]))&-other
		if e >= t.blocks {
			if hi, lo, ok := s.tableTail(t); ok {
				return saturate(hi, lo, sign == 1)
			}
			continue
		}
		o := (w >> 16) & (1<<wbits - 1)
		if e|o == 0 && sign == 1 {
			continue // −0 would count zero twice
		}
		xb := e << wbits
		m := xb + o
		// Accept with p = c·f(m)/W_e: a 16-bit prefix of U against the
		// block's squeeze, then against a coarse bracket of p.
		u := (w & (1<<16 - 1)) << 47 // U ∈ [u, u + 2^47)·2^−63
		if u+1<<47 <= t.sq[e] && !t.slow {
			return signed(m, sign)
		}
		plo, phi := t.coarse(e, o)
		if t.slow {
			plo, phi = 0, one63+1
		}
		if u+1<<47 <= plo {
			return signed(m, sign)
		}
		if u >= phi {
			continue
		}
		// Undecided: the tight bracket and all 63 bits of U, then math/big
		// while still tied.
		if !t.slow {
			plo, phi = t.tight(e, o)
		}
		u |= s.bits(47)
		if u < plo || (u < phi && s.lazyBelow(u, func(prec uint) (*big.Int, *big.Int) { return t.acceptBounds(e, m, prec) })) {
			return signed(m, sign)
		}
	}
}

// coarse returns lo ≤ p·2^63 ≤ hi for the acceptance probability
// p = c·f(m)/W_e = ρ_e·exp(−x) of point m = e·B + o, x = (m² − (eB)²)·d/n2,
// from the exp table alone: x·2^63 lies in [tq, tq + 3) for tq from a
// multiplication by the normalised reciprocal of n2 (no division), and
// exp(−x) between the table's values at the ends of the 1/256-cells
// holding those ends. The bracket is about 1/256 wide.
func (t *gaussTable) coarse(e, o uint64) (lo, hi uint64) {
	lo, hi = t.rlo[e], t.rhi[e]
	if o == 0 {
		return lo, hi
	}
	xb := e << t.wbits
	dn := o * (2*xb + o) * t.d // m² − xb², times d: below n2
	tq, _ := bits.Mul64(dn<<t.shift, t.inv)
	return mulFloor63(t.exp[0][(tq+3)>>55+1], lo), mulCeil63(t.exp[1][tq>>55], hi)
}

// tight returns the bracket of coarse's p from the exact quotient and the
// Taylor bounds of expNeg63: under 2^−45 wide.
func (t *gaussTable) tight(e, o uint64) (lo, hi uint64) {
	lo, hi = t.rlo[e], t.rhi[e]
	if o == 0 {
		return lo, hi
	}
	xb := e << t.wbits
	dn := o * (2*xb + o) * t.d
	tq, _ := bits.Div64(dn>>1, dn<<63, t.n2)
	elo, ehi := expNeg63(t.exp, tq)
	return mulFloor63(elo, lo), mulCeil63(ehi, hi)
}

// signed returns m for sign 0 and −m for sign 1, without a branch on the
// random sign.
func signed(m, sign uint64) int64 {
	n := -int64(sign)
	return (int64(m) ^ n) - n
}

// tableTail proposes a magnitude L + G from the tail entry and accepts it
// with probability ρ_T·exp(−g·((2L + g)·d·t − n2)/(n2·t)) (both factors
// exact Bernoulli trials), returning it as hi·2^64 + lo.
func (s *Source) tableTail(t *gaussTable) (hi, lo uint64, ok bool) {
	u := s.c.Uint64() >> 1
	tlo, thi := t.tlo, t.thi
	if t.slow {
		tlo, thi = 0, one63+1
	}
	if u >= thi || (u >= tlo && !s.lazyBelow(u, t.tailRho)) {
		return 0, 0, false
	}
	gh, gl := s.laplaceMagnitude(t.tailT)
	g := new(big.Int).Lsh(new(big.Int).SetUint64(gh), 64)
	g.Or(g, new(big.Int).SetUint64(gl))
	L := new(big.Int).SetUint64(t.blocks << t.wbits)
	bn2, bt := new(big.Int).SetUint64(t.n2), new(big.Int).SetUint64(t.tailT)
	num := new(big.Int).Add(new(big.Int).Lsh(L, 1), g)
	num.Mul(num, new(big.Int).SetUint64(t.d)).Mul(num, bt).Sub(num, bn2).Mul(num, g)
	if !s.bernoulliExpBig(num, new(big.Int).Mul(bn2, bt)) {
		return 0, 0, false
	}
	m := g.Add(g, L)
	if m.BitLen() > 128 {
		return ^uint64(0), 0, true // saturates
	}
	lo = new(big.Int).And(m, new(big.Int).SetUint64(^uint64(0))).Uint64()
	return new(big.Int).Rsh(m, 64).Uint64(), lo, true
}
