package dp

import (
	crand "crypto/rand"
	"fmt"
	"math"
	"math/rand/v2"
)

// Source is a stream of privacy noise: a ChaCha8 generator seeded with 32
// bytes from crypto/rand. Noise is exact by construction: discrete
// Laplace and discrete Gaussian integers sampled from uniform 64-bit
// words (Canonne, Kamath & Steinke 2020), placed on a power-of-two grid
// to which the released value is snapped first (see Grid). Nothing in a
// release depends on floating-point sampling, so the attack of Mironov
// (2012) on the low-order bits of floating-point noise has nothing to
// read. A Source is not safe for concurrent use; give each goroutine its
// own (Split).
type Source struct {
	c      *rand.ChaCha8
	r      *rand.Rand // over c: IntN, Perm
	coins  uint64     // buffered fair bits
	ncoins uint
	exp    *[1 << expTableBits]uint64 // digits of exp(−j/256), shared and read-only
	gt     *gaussTable                // the last discrete-Gaussian table built, shared and read-only
}

// NewSource returns a Source seeded from crypto/rand. Use it for all
// privacy noise.
func NewSource() (*Source, error) {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("dp: seeding noise source from crypto/rand: %w", err)
	}
	s := NewSeededSource(seed)
	clear(seed[:])
	return s, nil
}

// NewSeededSource returns a deterministic Source for tests and
// reproducible experiments. Noise from a known seed protects nothing: never
// use it for released values.
func NewSeededSource(seed [32]byte) *Source {
	c := rand.NewChaCha8(seed)
	return &Source{c: c, r: rand.New(c), exp: expTable()}
}

// Split returns a new Source keyed by 32 bytes of this one's stream, for
// another goroutine. The two streams are independent for any practical
// purpose (ChaCha8 keyed by its own output).
func (s *Source) Split() *Source {
	var seed [32]byte
	s.fill(seed[:])
	n := NewSeededSource(seed)
	n.gt = s.gt // immutable: the tables are shared
	clear(seed[:])
	return n
}

// fill fills b with words of the stream (little-endian).
func (s *Source) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := s.c.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// reseed makes s behave as NewSeededSource(seed), keeping its tables.
func (s *Source) reseed(seed [32]byte) {
	s.c.Seed(seed)
	s.coins, s.ncoins = 0, 0
}

// Float64 returns a uniform value in [0, 1). It is for simulations and
// tests only: no privacy noise is drawn from floating-point uniforms.
func (s *Source) Float64() float64 { return s.r.Float64() }

// IntN returns a uniform integer in [0, n); n must be positive.
func (s *Source) IntN(n int) int { return s.r.IntN(n) }

// Perm returns a uniformly random permutation of 0..n-1.
func (s *Source) Perm(n int) []int { return s.r.Perm(n) }

// mustGrid panics on an invalid noise scale: the methods without an error
// result are programming errors when given one, as math/rand's are.
func mustGrid(g Grid, err error) Grid {
	if err != nil {
		panic(err)
	}
	return g
}

// Gaussian returns one sample of noise of standard deviation sigma: γ·Z
// with Z discrete Gaussian on the grid GaussianGrid(sigma, 1). It is noise
// only, for comparisons that are not released (e.g. a noisy threshold
// test); to release a value use NoisyGaussian, which snaps the value to the
// grid first (adding exact noise to an unsnapped value still leaks it).
// It panics if sigma is not positive and finite.
func (s *Source) Gaussian(sigma float64) float64 {
	g := mustGrid(GaussianGrid(sigma, 1))
	return float64(s.gaussianOne(g.Scale)) * g.Gamma
}

// Laplace returns one sample of noise of scale b: γ·Z with Z discrete
// Laplace on the grid LaplaceGrid(b, 1), density ∝ exp(−|x|/b) on the
// grid. Noise only, like Gaussian; release values with NoisyLaplace. It
// panics if b is not positive and finite.
func (s *Source) Laplace(b float64) float64 {
	g := mustGrid(LaplaceGrid(b, 1))
	return float64(s.discreteLaplace(g.Scale)) * g.Gamma
}

// NoisyGaussian returns v snapped to the grid GaussianGrid(sigma, 1) plus
// discrete Gaussian noise of standard deviation sigma on that grid: the
// exact release of one value (see Grid for its accounting). It panics if
// sigma is not positive and finite.
func (s *Source) NoisyGaussian(v, sigma float64) float64 {
	g := mustGrid(GaussianGrid(sigma, 1))
	return release(snap(v, g.Gamma), s.gaussianOne(g.Scale), g.Gamma)
}

// NoisyLaplace returns v snapped to the grid LaplaceGrid(b, 1) plus
// discrete Laplace noise of scale b on that grid: the exact release of one
// value, (Δ/γ + 1)/⌈b/γ⌉-DP for sensitivity Δ, i.e. Δ/b plus at most
// 2^−20. It panics if b is not positive and finite.
func (s *Source) NoisyLaplace(v, b float64) float64 {
	g := mustGrid(LaplaceGrid(b, 1))
	return release(snap(v, g.Gamma), s.discreteLaplace(g.Scale), g.Gamma)
}

// AddGaussian64 releases v in place with Gaussian noise of standard
// deviation sigma per coordinate: every element is snapped to the grid
// GaussianGrid(sigma, len(v)) and discrete Gaussian noise is added on it.
// Account for it with that grid's GaussianMultiplier (at most a factor
// 1/(1 + 2^−20·sigma/Δ) below sigma/Δ while len(v) ≤ 2^20; longer vectors
// get a coarser grid, see Grid.GaussianMultiplier). It panics if sigma is not
// positive and finite.
func (s *Source) AddGaussian64(v []float64, sigma float64) {
	if len(v) == 0 {
		return
	}
	g := mustGrid(GaussianGrid(sigma, len(v)))
	if len(v) < tableMinLen {
		for i, x := range v {
			v[i] = release(snap(x, g.Gamma), s.gaussianOne(g.Scale), g.Gamma)
		}
		return
	}
	t := s.gaussTableFor(g.Scale)
	for i, x := range v {
		v[i] = release(snap(x, g.Gamma), s.tableGaussian(t), g.Gamma)
	}
}

// AddGaussian32 is AddGaussian64 for float32 values (the exact result is
// rounded to float32 once, which is post-processing).
func (s *Source) AddGaussian32(v []float32, sigma float64) {
	if len(v) == 0 {
		return
	}
	g := mustGrid(GaussianGrid(sigma, len(v)))
	if len(v) < tableMinLen {
		for i, x := range v {
			v[i] = float32(release(snap(float64(x), g.Gamma), s.gaussianOne(g.Scale), g.Gamma))
		}
		return
	}
	s.gaussian32(v, g, s.gaussTableFor(g.Scale))
}

// gaussian32 releases v on grid g with the table sampler t for g.Scale
// (shared by AddGaussian32 and DPSGD).
func (s *Source) gaussian32(v []float32, g Grid, t *gaussTable) {
	inv := 1 / g.Gamma // a power of two: x·inv = x/γ exactly
	if math.IsInf(inv, 0) {
		for i, x := range v {
			v[i] = float32(release(snap(float64(x), g.Gamma), s.tableGaussian(t), g.Gamma))
		}
		return
	}
	for i, x := range v {
		v[i] = float32(release(snapScaled(float64(x)*inv), s.tableGaussian(t), g.Gamma))
	}
}

// tableMinLen is the vector length from which releases build (or reuse) a
// table sampler: below it, a table's construction (milliseconds) would
// cost more than CKS's sampler saves.
const tableMinLen = 256

// gaussTableFor returns a table sampler for the integer parameter sigma
// (≤ 2^31), reusing the Source's last one when its parameter matches.
func (s *Source) gaussTableFor(sigma uint64) *gaussTable {
	n2 := 2 * sigma * sigma
	if t := s.gt; t != nil && t.n2 == n2 && t.d == 1 {
		return t
	}
	s.gt = newGaussTable(n2, 1, 0, tableSlackBits)
	return s.gt
}

// gaussianOne draws one discrete Gaussian integer of parameter sigma: from
// the Source's table when it was built for sigma, otherwise by CKS
// Algorithm 3 (the same distribution, exactly).
func (s *Source) gaussianOne(sigma uint64) int64 {
	if t := s.gt; t != nil && t.n2 == 2*sigma*sigma && t.d == 1 {
		return s.tableGaussian(t)
	}
	return s.discreteGaussian(sigma)
}

// AddLaplace64 releases v in place with Laplace noise of scale b per
// coordinate, snapped to the grid LaplaceGrid(b, len(v)) with discrete
// Laplace noise on it: ε = (Δ₁/γ + d)/⌈b/γ⌉ for L1 sensitivity Δ₁, at
// most Δ₁/b + 2^−20. It panics if b is not positive and finite.
func (s *Source) AddLaplace64(v []float64, b float64) {
	if len(v) == 0 {
		return
	}
	g := mustGrid(LaplaceGrid(b, len(v)))
	for i, x := range v {
		v[i] = release(snap(x, g.Gamma), s.discreteLaplace(g.Scale), g.Gamma)
	}
}

// AddLaplace32 is AddLaplace64 for float32 values.
func (s *Source) AddLaplace32(v []float32, b float64) {
	if len(v) == 0 {
		return
	}
	g := mustGrid(LaplaceGrid(b, len(v)))
	for i, x := range v {
		v[i] = float32(release(snap(float64(x), g.Gamma), s.discreteLaplace(g.Scale), g.Gamma))
	}
}

// GaussianNoise releases vectors with Gaussian noise of a fixed standard
// deviation, drawing from its own CSPRNG-seeded Source (exact discrete
// noise, as AddGaussian32). Not safe for concurrent use.
type GaussianNoise struct {
	sigma float64
	src   *Source
}

// NewGaussianNoise returns a Gaussian noise adder with standard deviation
// sigma (> 0, finite), seeded from crypto/rand.
func NewGaussianNoise(sigma float64) (*GaussianNoise, error) {
	if err := checkPositive("noise standard deviation", sigma); err != nil {
		return nil, err
	}
	src, err := NewSource()
	if err != nil {
		return nil, err
	}
	return &GaussianNoise{sigma: sigma, src: src}, nil
}

// Sigma returns the standard deviation of the noise.
func (g *GaussianNoise) Sigma() float64 { return g.sigma }

// Add32 releases v in place (AddGaussian32).
func (g *GaussianNoise) Add32(v []float32) { g.src.AddGaussian32(v, g.sigma) }

// Add64 releases v in place (AddGaussian64).
func (g *GaussianNoise) Add64(v []float64) { g.src.AddGaussian64(v, g.sigma) }

// laplaceCDF is the CDF of Lap(b) (used by tests and the PATE analysis).
func laplaceCDF(x, b float64) float64 {
	if x < 0 {
		return 0.5 * math.Exp(x/b)
	}
	return 1 - 0.5*math.Exp(-x/b)
}
