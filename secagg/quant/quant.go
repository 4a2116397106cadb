// Package quant turns real-valued client updates into integer vectors
// modulo 2^b for masking secure aggregation with distributed discrete
// Gaussian noise, and decodes the aggregate, as in Kairouz, Liu & Steinke
// 2021 (arXiv 2102.06387, Algorithm 1):
//
//	clip to L2 norm C → random rotation U = H·D/√B (Walsh–Hadamard H of
//	block size B, random signs D shared by the round, zero-padded to D')
//	→ scale by 1/γ → conditional randomised rounding → + N_Z(0, σ²)^D'
//	per client → mod 2^b → [masking secure aggregation] → centred lift →
//	× γ → U⁻¹ → first d values.
//
// By default (Config.Block = 0) H is one Hadamard matrix of size
// B = D' = 2^⌈log₂ d⌉, as in the paper; that nearly doubles the length for
// some d (557,824 → 1,048,576). With Block = B, a power of two, H is
// block-diagonal with Hadamard blocks of size B and D' = B·⌈d/B⌉ (557,824
// → 573,440 with B = 2^14): still orthogonal, at the price of a wrap bound
// whose signal term grows by √(D'/B) (Bound states it).
//
// Contract:
//   - New refuses a Config for which the sum of Clients encodings could
//     wrap modulo 2^b with probability above WrapProb (see Bound for the
//     stated bound and its proof sketch), and states the largest number
//     of clients and the largest noise parameter that keep it.
//   - Encode's output has norm ‖ỹ‖₂ ≤ Sensitivity() before noise, always
//     (the rounding is resampled until it is: the DDG paper's conditional
//     rounding with parameter β); Mechanism gives the dp charge.
//   - Every draw comes from the io.Reader passed to Encode (crypto/rand
//     in production): 32 bytes seed the rounding stream and 32 the noise
//     Source (dp.NewSeededSource: exact discrete Gaussian).
//   - The rotation signs must be fresh per round and chosen independently
//     of the clients' data (e.g. from the round's random id); the wrap
//     bound's probability is over them and the noise.
//
// Assumed: honest clients run Encode as written (a dishonest client can
// make the sum wrap and spoil accuracy, but cannot weaken the privacy of
// the others: wrapping is post-processing of the noisy integer sum).
package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/veil-privacy/veil/dp"
)

// Config sets one round's quantisation. All clients of a round use the
// same Config and rotation seed.
type Config struct {
	// Dim is d, the length of the real vectors.
	Dim int
	// Block is B, the size of the Walsh–Hadamard blocks, a power of two
	// (0: one block of 2^⌈log₂ d⌉, the paper's choice).
	Block int
	// ClipNorm is C: vectors are scaled down to L2 norm at most C.
	ClipNorm float64
	// Gamma is γ, the lattice step: values are divided by γ before
	// rounding.
	Gamma float64
	// Beta is the conditional rounding parameter β ∈ (0, 1): rounding is
	// resampled until ‖ỹ‖₂² ≤ C²/γ² + D'/4 + √(2 ln(1/β))·(C/γ + √D'/2)
	// (the DDG paper's bound; each try fails with probability ≤ β).
	// Zero disables conditioning: the bound is then C/γ + √D'.
	Beta float64
	// Bits is b: the aggregate lives in Z_(2^b), 2 ≤ b ≤ 32.
	Bits int
	// Noise is σ, each client's discrete Gaussian parameter in lattice
	// units (0: no noise, for tests of the arithmetic only).
	Noise uint64
	// Clients is the largest number of encodings that will be summed.
	Clients int
	// WrapProb is the accepted probability that some coordinate of the
	// sum wraps, in (0, 1); e.g. 1e-9.
	WrapProb float64
}

// Quantizer encodes and decodes one round's vectors.
type Quantizer struct {
	cfg    Config
	padded int
	block  int
	signs  []float64
	bound  WrapBound
	norm2  float64 // bound on ‖ỹ‖₂² in lattice units
}

// maxResample bounds the conditional rounding loop; each try fails with
// probability at most β, so reaching it has probability ≤ β^maxResample.
const maxResample = 1000

// New checks cfg (including the wrap bound) and prepares the rotation
// from the round's shared seed.
func New(cfg Config, rotationSeed [32]byte) (*Quantizer, error) {
	b, err := Bound(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Clients > b.MaxClients {
		return nil, fmt.Errorf("quant: the sum of %d clients could wrap modulo 2^%d (bound %.4g > %.0f at wrap probability %g): at most %d clients at noise σ = %d, or noise σ ≤ %d for %d clients: refused",
			cfg.Clients, cfg.Bits, b.Bound, b.Limit, cfg.WrapProb, b.MaxClients, cfg.Noise, b.MaxNoise, cfg.Clients)
	}
	D, B := layout(cfg)
	q := &Quantizer{cfg: cfg, padded: D, block: B, bound: b}
	q.norm2 = roundedNorm2(cfg.ClipNorm/cfg.Gamma, q.padded, cfg.Beta)
	q.signs = make([]float64, q.padded)
	src := rand.NewChaCha8(rotationSeed)
	for i := range q.signs {
		if src.Uint64()&1 == 0 {
			q.signs[i] = 1
		} else {
			q.signs[i] = -1
		}
	}
	return q, nil
}

// Padded returns D', the length of encoded vectors (a multiple of the
// block size, ≥ d).
func (q *Quantizer) Padded() int { return q.padded }

// WrapBound returns the checked bound of New.
func (q *Quantizer) WrapBound() WrapBound { return q.bound }

// Sensitivity returns the L2 and L1 bounds, in lattice units, on one
// client's encoding before noise: what adding or removing one client
// changes in the integer sum.
func (q *Quantizer) Sensitivity() (l2, l1 float64) {
	l2 = math.Sqrt(q.norm2)
	return l2, math.Min(math.Sqrt(float64(q.padded))*l2, q.norm2)
}

// Mechanism returns the distributed discrete Gaussian release of a sum in
// which at least honest clients' encodings (and noise) are guaranteed to
// be (the secure aggregation's threshold), for dp's accountant.
func (q *Quantizer) Mechanism(honest int) (dp.DistributedDiscreteGaussian, error) {
	if q.cfg.Noise == 0 {
		return dp.DistributedDiscreteGaussian{}, errors.New("quant: the round adds no noise: no privacy to account")
	}
	l2, l1 := q.Sensitivity()
	m := dp.DistributedDiscreteGaussian{Sigma: float64(q.cfg.Noise), Clients: honest, L2: l2, L1: l1, Dim: q.padded}
	return m, m.Validate()
}

func padLen(d int) int { return 1 << bits.Len(uint(d-1)) }

// Padded returns D', the length of cfg's encodings (cfg's Dim padded to a
// multiple of the block size).
func (cfg Config) Padded() int {
	D, _ := layout(cfg)
	return D
}

// layout returns the padded length D' and the block size B of cfg.
func layout(cfg Config) (D, B int) {
	if cfg.Block == 0 {
		D = padLen(cfg.Dim)
		return D, D
	}
	B = cfg.Block
	return (cfg.Dim + B - 1) / B * B, B
}

// rotate applies the blockwise Walsh–Hadamard transform of block size b,
// normalised (each block multiplied by 1/√b): orthogonal and symmetric,
// so it is its own inverse.
func rotate(v []float64, b int) {
	inv := 1 / math.Sqrt(float64(b))
	for off := 0; off < len(v); off += b {
		w := v[off : off+b]
		fwht(w)
		for i := range w {
			w[i] *= inv
		}
	}
}

// roundedNorm2 is the DDG paper's bound on the squared norm of a
// conditionally rounded vector of norm ≤ c in dimension D.
func roundedNorm2(c float64, D int, beta float64) float64 {
	sd := math.Sqrt(float64(D))
	b1 := (c + sd) * (c + sd)
	if beta == 0 {
		return b1
	}
	b2 := c*c + float64(D)/4 + math.Sqrt(2*math.Log(1/beta))*(c+sd/2)
	return math.Min(b1, b2)
}

// fwht applies the unnormalised Walsh–Hadamard transform in place
// (len(v) a power of two); applying it twice multiplies by len(v).
func fwht(v []float64) {
	for h := 1; h < len(v); h *= 2 {
		for i := 0; i < len(v); i += 2 * h {
			a, b := v[i:i+h], v[i+h:i+2*h]
			for j := range a {
				x, y := a[j], b[j]
				a[j], b[j] = x+y, x-y
			}
		}
	}
}

// Encode clips, rotates, scales, rounds (conditionally), adds the client's
// noise and reduces modulo 2^b. The result has Padded() values in
// [0, 2^b), ready to be masked. Randomness comes from r only.
func (q *Quantizer) Encode(x []float32, r io.Reader) ([]uint32, error) {
	y, err := q.encodeInts(x, r)
	if err != nil {
		return nil, err
	}
	mask := uint64(1)<<q.cfg.Bits - 1
	out := make([]uint32, len(y))
	for i, z := range y {
		out[i] = uint32(uint64(z) & mask)
	}
	return out, nil
}

// encodeInts is Encode before the reduction modulo 2^b.
func (q *Quantizer) encodeInts(x []float32, r io.Reader) ([]int64, error) {
	if len(x) != q.cfg.Dim {
		return nil, fmt.Errorf("quant: vector of %d values, the round has %d", len(x), q.cfg.Dim)
	}
	var seeds [64]byte
	if _, err := io.ReadFull(r, seeds[:]); err != nil {
		return nil, fmt.Errorf("quant: reading randomness: %w", err)
	}
	rs, ns := [32]byte(seeds[:32]), [32]byte(seeds[32:])
	clear(seeds[:])
	v := make([]float64, q.padded)
	var n2 float64
	for i, f := range x {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return nil, fmt.Errorf("quant: value %d is not finite", i)
		}
		v[i] = float64(f)
		n2 += v[i] * v[i]
	}
	scale := 1 / q.cfg.Gamma
	if n := math.Sqrt(n2); n > q.cfg.ClipNorm {
		scale *= q.cfg.ClipNorm / n
	}
	for i := range v {
		v[i] *= q.signs[i]
	}
	rotate(v, q.block)
	for i := range v {
		v[i] *= scale
	}
	y, err := q.round(v, rand.NewChaCha8(rs))
	if err != nil {
		return nil, err
	}
	if q.cfg.Noise > 0 {
		noise := make([]int64, len(y))
		if err := dp.NewSeededSource(ns).DiscreteGaussianInts(noise, q.cfg.Noise); err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
		for i := range y {
			y[i] += noise[i]
		}
	}
	return y, nil
}

// round is conditional randomised rounding: each value goes to its floor
// or ceiling with probabilities that keep its mean, and the whole vector
// is redrawn until its squared norm is within the bound.
func (q *Quantizer) round(v []float64, src *rand.ChaCha8) ([]int64, error) {
	y := make([]int64, len(v))
	for range maxResample {
		var n2 float64
		for i, x := range v {
			f := math.Floor(x)
			z := int64(f)
			if float64(src.Uint64()>>11)*0x1p-53 < x-f {
				z++
			}
			y[i] = z
			n2 += float64(z) * float64(z)
		}
		if n2 <= q.norm2 {
			return y, nil
		}
	}
	return nil, fmt.Errorf("quant: conditional rounding failed %d times (probability ≤ β^%d): the randomness source is broken", maxResample, maxResample)
}

// Decode turns the unmasked sum (Padded() values modulo 2^32, of which
// the low b bits are used) back into the sum of the clients' clipped
// vectors, with noise, in the original coordinates.
func (q *Quantizer) Decode(sum []uint32) ([]float64, error) {
	if len(sum) != q.padded {
		return nil, fmt.Errorf("quant: aggregate of %d values, want %d", len(sum), q.padded)
	}
	b := uint(q.cfg.Bits)
	mask := uint64(1)<<b - 1
	half := uint64(1) << (b - 1)
	v := make([]float64, q.padded)
	for i, s := range sum {
		u := uint64(s) & mask
		z := int64(u)
		if u >= half {
			z -= int64(1) << b
		}
		v[i] = float64(z) * q.cfg.Gamma
	}
	rotate(v, q.block)
	for i := range v {
		v[i] *= q.signs[i]
	}
	return v[:q.cfg.Dim], nil
}

// RotationSeed derives the rotation seed from a round's 32-byte id, for
// callers that want one per round without sending another value.
func RotationSeed(roundID [32]byte) [32]byte {
	var s [32]byte
	c := rand.NewChaCha8(roundID)
	for i := 0; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(s[i:], c.Uint64())
	}
	return s
}
