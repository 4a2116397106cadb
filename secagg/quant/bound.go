package quant

import (
	"errors"
	"fmt"
	"math"
)

// WrapBound states when the sum of encodings cannot wrap.
//
// Claim: with probability at least 1 − WrapProb over the rotation signs
// and the noise, every coordinate S_j of the integer sum of n clients'
// encodings satisfies |S_j| ≤ Bound(n, σ), where, with D' the padded
// length, B the Hadamard block size, c = C/γ and L = ln(4D'/WrapProb),
//
//	Bound(n, σ) = n·c·√(2L/B) + n + σ·√(2nL).
//
// Proof sketch. S = U(Σᵢ xᵢ)/γ + Σᵢ rᵢ + Σᵢ zᵢ with xᵢ the clipped inputs,
// rᵢ the rounding errors and zᵢ the noise. (1) The signs are shared, so
// the signal term is U applied to v = Σᵢ xᵢ/γ, ‖v‖₂ ≤ nc; its coordinate j
// is Σ_k ±s_k v_k/√B over its block, a Rademacher sum with Σ
// coefficients² ≤ (nc)²/B, so by Hoeffding P(|·| ≥ a) ≤ 2exp(−a²B/(2n²c²)). (2) Each rounding
// error lies in (−1, 1), so |Σᵢ rᵢ,j| < n, always. (3) N_Z(0, σ²) is
// σ-subgaussian (Canonne, Kamath & Steinke 2020, Cor. 9), so Σᵢ zᵢ,j is
// √n·σ-subgaussian: P(|·| ≥ a) ≤ 2exp(−a²/(2nσ²)). A union bound over
// D' coordinates, WrapProb/2 for (1) and for (3), gives the claim. The
// centred lift of a value modulo 2^b is exact on [−2^(b−1), 2^(b−1) − 1],
// so no coordinate wraps when Bound ≤ Limit = 2^(b−1) − 1.
type WrapBound struct {
	// Bound is Bound(Clients, Noise) in lattice units.
	Bound float64
	// Limit is 2^(b−1) − 1.
	Limit float64
	// MaxClients is the largest n with Bound(n, Noise) ≤ Limit (0: none).
	MaxClients int
	// MaxNoise is the largest integer σ with Bound(Clients, σ) ≤ Limit
	// (0: not even σ = 1 fits).
	MaxNoise uint64
	// WrapProb is the probability the bound may fail.
	WrapProb float64
}

// validate checks cfg's fields (not the wrap bound).
func (cfg Config) validate() error {
	switch {
	case cfg.Dim < 1 || cfg.Dim > 1<<26:
		return fmt.Errorf("quant: the dimension must be in [1, 2^26], got %d", cfg.Dim)
	case !(cfg.ClipNorm > 0) || math.IsInf(cfg.ClipNorm, 0):
		return fmt.Errorf("quant: the clip norm must be positive and finite, got %g", cfg.ClipNorm)
	case !(cfg.Gamma > 0) || math.IsInf(cfg.Gamma, 0):
		return fmt.Errorf("quant: the lattice step γ must be positive and finite, got %g", cfg.Gamma)
	case !(cfg.Beta >= 0 && cfg.Beta < 1):
		return fmt.Errorf("quant: the conditional rounding β must be in [0, 1), got %g", cfg.Beta)
	case cfg.Block != 0 && (cfg.Block < 2 || cfg.Block > 1<<26 || cfg.Block&(cfg.Block-1) != 0):
		return fmt.Errorf("quant: the Hadamard block size must be 0 or a power of two in [2, 2^26], got %d", cfg.Block)
	case cfg.Bits < 2 || cfg.Bits > 32:
		return fmt.Errorf("quant: the modulus bits must be in [2, 32], got %d", cfg.Bits)
	case cfg.Noise > 1<<31:
		return fmt.Errorf("quant: the noise parameter must be at most 2^31, got %d", cfg.Noise)
	case cfg.Clients < 1:
		return fmt.Errorf("quant: the number of clients must be at least 1, got %d", cfg.Clients)
	case !(cfg.WrapProb > 0 && cfg.WrapProb < 1):
		return fmt.Errorf("quant: the wrap probability must be in (0, 1), got %g", cfg.WrapProb)
	}
	return nil
}

// boundAt evaluates Bound(n, σ) for padded length D and block size B.
func boundAt(c float64, D, B int, n int, sigma float64, wrapProb float64) float64 {
	L := math.Log(4 * float64(D) / wrapProb)
	fn := float64(n)
	return fn*c*math.Sqrt(2*L/float64(B)) + fn + sigma*math.Sqrt(2*fn*L)
}

// Bound computes the wrap bound of cfg (see WrapBound). It does not
// refuse; New does.
func Bound(cfg Config) (WrapBound, error) {
	if err := cfg.validate(); err != nil {
		return WrapBound{}, err
	}
	D, B := layout(cfg)
	c := cfg.ClipNorm / cfg.Gamma
	limit := math.Ldexp(1, cfg.Bits-1) - 1
	w := WrapBound{
		Bound:    boundAt(c, D, B, cfg.Clients, float64(cfg.Noise), cfg.WrapProb),
		Limit:    limit,
		WrapProb: cfg.WrapProb,
	}
	// Bound is increasing in n and σ: binary searches.
	lo, hi := 0, 1<<32
	for lo < hi {
		m := lo + (hi-lo+1)/2
		if boundAt(c, D, B, m, float64(cfg.Noise), cfg.WrapProb) <= limit {
			lo = m
		} else {
			hi = m - 1
		}
	}
	w.MaxClients = lo
	var slo, shi uint64 = 0, 1 << 31
	for slo < shi {
		m := slo + (shi-slo+1)/2
		if boundAt(c, D, B, cfg.Clients, float64(m), cfg.WrapProb) <= limit {
			slo = m
		} else {
			shi = m - 1
		}
	}
	w.MaxNoise = slo
	if w.MaxClients == 0 {
		return w, errors.New("quant: not even one client's encoding fits modulo 2^b at these settings: raise γ or b")
	}
	return w, nil
}
