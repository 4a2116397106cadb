package dp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// These tests play the adversary of Mironov (2012) against the released
// values: an attacker who knows the implementation sees y = M(v) and asks,
// for a candidate input v, whether y − v could have been produced by the
// noise sampler. If the answer is "yes" far more often for the true input
// than for a neighbour, the release leaks the input whatever the nominal ε.
// A test of this kind may accept the true input only as much more often
// as differential privacy allows: P[accept | v] ≤ e^ε·P[accept | v'] + δ.

// fixedSource is a math/rand/v2 Source that always returns one value. The
// attacker uses it to read the ziggurat tables out of math/rand/v2: with a
// chosen word u, ExpFloat64 and NormFloat64 return j·w[i] for j and i
// taken from the bits of u.
type fixedSource uint64

func (f fixedSource) Uint64() uint64 { return uint64(f) }

// zigguratLayers returns the layer widths w[i] of the exponential and
// normal ziggurat samplers of math/rand/v2, read by calling them with
// j = 1 in layer i (x = 1·w[i] is returned on the fast path). Layers whose
// fast path never fires are left 0.
func zigguratLayers() (we [256]float64, wn [128]float64) {
	for i := range we {
		x := rand.New(fixedSource(uint64(i)<<32 | 1)).ExpFloat64()
		if x < 1e-3 { // fast path: x = w[i], far below any slow-path value
			we[i] = x
		}
	}
	for i := range wn {
		x := rand.New(fixedSource(uint64(i)<<32 | 1)).NormFloat64()
		if x < 1e-3 {
			wn[i] = x
		}
	}
	return we, wn
}

// onLattice reports whether r is (to within the rounding of y − v) an
// integer multiple j·w of one of the widths with 1 ≤ |j| < 2^32.
func onLattice(r float64, widths []float64) bool {
	r = math.Abs(r)
	for _, w := range widths {
		if w == 0 {
			continue
		}
		c := r / w
		if c < 1 || c >= 1<<32 {
			continue
		}
		if math.Abs(c-math.Round(c)) < 2e-6 {
			return true
		}
	}
	return false
}

// onGrid reports whether r is an integer multiple of some power of two
// between scale·2^-40 and scale·2^-8: the output grid of a discrete sampler
// that adds γ·Z without snapping its input to the grid.
func onGrid(r, scale float64) bool {
	if r == 0 {
		return true
	}
	e := math.Ilogb(scale)
	for k := 8; k <= 40; k++ {
		g := math.Ldexp(1, e-k)
		if c := r / g; math.Abs(c) < 1<<53 && c == math.Trunc(c) {
			return true
		}
	}
	return false
}

func TestFloatingPointAttackFails(t *testing.T) {
	we, wn := zigguratLayers()
	if we[2] == 0 || wn[2] == 0 {
		t.Fatal("could not read the ziggurat tables (math/rand/v2 changed?)")
	}
	const trials = 3000
	type mech struct {
		name  string
		scale float64
		eps   float64 // the mechanism's nominal (ε, δ) for sensitivity 1
		delta float64
		run   func(s *Source, v float64) float64
	}
	gaussDelta, err := GaussianDelta(1, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	mechs := []mech{
		{"AddLaplace64 b=1", 1, 1, 0, func(s *Source, v float64) float64 {
			x := []float64{v}
			s.AddLaplace64(x, 1)
			return x[0]
		}},
		{"AddGaussian64 σ=1", 1, 3, gaussDelta, func(s *Source, v float64) float64 {
			x := []float64{v}
			s.AddGaussian64(x, 1)
			return x[0]
		}},
		{"NoisyLaplace b=1", 1, 1, 0, func(s *Source, v float64) float64 { return s.NoisyLaplace(v, 1) }},
		{"NoisyGaussian σ=1", 1, 3, gaussDelta, func(s *Source, v float64) float64 { return s.NoisyGaussian(v, 1) }},
		{"AddGaussian32 σ=1", 1, 3, gaussDelta, func(s *Source, v float64) float64 {
			x := []float32{float32(v)}
			s.AddGaussian32(x, 1)
			return float64(x[0])
		}},
		{"AddGaussian32 σ=1, 256 coordinates (table sampler)", 1, 3, gaussDelta, func(s *Source, v float64) float64 {
			x := make([]float32, tableMinLen)
			x[0] = float32(v)
			s.AddGaussian32(x, 1)
			return float64(x[0])
		}},
		{"DPSGD.NoiseSums C=1 σ=1", 1, 3, gaussDelta, func(s *Source, v float64) float64 {
			d, err := NewDPSGD(SGDConfig{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 1, ExpectedBatchSize: 1, Dimension: 1}, s)
			if err != nil {
				panic(err)
			}
			x := []float32{float32(v)}
			if err := d.NoiseSums(x); err != nil {
				panic(err)
			}
			return float64(x[0])
		}},
	}
	attacks := []struct {
		name   string
		accept func(y, v, scale float64) bool
	}{
		{"exponential ziggurat lattice", func(y, v, scale float64) bool { return onLattice((y-v)/scale, we[:]) }},
		{"normal ziggurat lattice", func(y, v, scale float64) bool { return onLattice((y-v)/scale, wn[:]) }},
		{"power-of-two grid", func(y, v, scale float64) bool { return onGrid(y-v, scale) }},
	}
	pick := rand.New(rand.NewPCG(1, 2)) // the inputs are public; their choice need not be secret
	for _, m := range mechs {
		src := seeded(42)
		for _, a := range attacks {
			var hitTrue, hitNeighbour int
			for range trials {
				v := float64(float32(0.25 + pick.Float64())) // an arbitrary input, exact in float32 too
				neighbour := v + 1                           // sensitivity 1
				y := m.run(src, v)
				if a.accept(y, v, m.scale) {
					hitTrue++
				}
				if a.accept(y, neighbour, m.scale) {
					hitNeighbour++
				}
			}
			pT, pN := float64(hitTrue)/trials, float64(hitNeighbour)/trials
			slack := 4*math.Sqrt(0.25/trials) + m.delta
			if pT > math.Exp(m.eps)*pN+slack || pN > math.Exp(m.eps)*pT+slack {
				t.Errorf("%s, %s attack: accepts the true input in %.1f%% of trials and its neighbour in %.1f%%, beyond (ε=%g, δ=%.2g)-DP",
					m.name, a.name, 100*pT, 100*pN, m.eps, m.delta)
			}
		}
	}
}
