package dp

import (
	crand "crypto/rand"
	"fmt"
	"math"
	"math/rand/v2"
)

// Source is a stream of privacy noise: a ChaCha8 generator seeded with 32
// bytes from crypto/rand. It draws about a hundred million Gaussian
// coordinates per second on one core. A Source is not safe for concurrent
// use; give each goroutine its own.
//
// Known limitation: samples are ordinary floating-point values; Veil does
// not implement the snapping mechanism against floating-point attacks
// (Mironov 2012).
type Source struct {
	r *rand.Rand
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
	return &Source{r: rand.New(rand.NewChaCha8(seed))}
}

// Float64 returns a uniform value in [0, 1).
func (s *Source) Float64() float64 { return s.r.Float64() }

// IntN returns a uniform integer in [0, n); n must be positive.
func (s *Source) IntN(n int) int { return s.r.IntN(n) }

// Perm returns a uniformly random permutation of 0..n-1.
func (s *Source) Perm(n int) []int { return s.r.Perm(n) }

// Gaussian returns one sample of N(0, sigma²).
func (s *Source) Gaussian(sigma float64) float64 { return sigma * s.r.NormFloat64() }

// Laplace returns one sample of Lap(b): density exp(-|x|/b)/(2b).
func (s *Source) Laplace(b float64) float64 { return b * s.stdLaplace() }

// stdLaplace draws Lap(1) as a random sign times an Exp(1) variate
// (ziggurat), which is exactly the Laplace distribution.
func (s *Source) stdLaplace() float64 {
	x := s.r.ExpFloat64()
	if s.r.Uint32()&1 == 1 {
		return -x
	}
	return x
}

// AddGaussian64 adds independent N(0, sigma²) noise to every element of v.
func (s *Source) AddGaussian64(v []float64, sigma float64) {
	for i := range v {
		v[i] += sigma * s.r.NormFloat64()
	}
}

// AddGaussian32 adds independent N(0, sigma²) noise to every element of v.
// Noise is drawn in float64 and rounded once.
func (s *Source) AddGaussian32(v []float32, sigma float64) {
	for i := range v {
		v[i] = float32(float64(v[i]) + sigma*s.r.NormFloat64())
	}
}

// AddLaplace64 adds independent Lap(b) noise to every element of v.
func (s *Source) AddLaplace64(v []float64, b float64) {
	for i := range v {
		v[i] += b * s.stdLaplace()
	}
}

// AddLaplace32 adds independent Lap(b) noise to every element of v.
func (s *Source) AddLaplace32(v []float32, b float64) {
	for i := range v {
		v[i] = float32(float64(v[i]) + b*s.stdLaplace())
	}
}

// GaussianNoise adds N(0, σ²) noise of a fixed σ to vectors, drawing from
// its own CSPRNG-seeded Source. Not safe for concurrent use.
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

// Add32 adds noise to every element of v in place.
func (g *GaussianNoise) Add32(v []float32) { g.src.AddGaussian32(v, g.sigma) }

// Add64 adds noise to every element of v in place.
func (g *GaussianNoise) Add64(v []float64) { g.src.AddGaussian64(v, g.sigma) }

// laplaceCDF is the CDF of Lap(b) (used by tests and the PATE analysis).
func laplaceCDF(x, b float64) float64 {
	if x < 0 {
		return 0.5 * math.Exp(x/b)
	}
	return 1 - 0.5*math.Exp(-x/b)
}
