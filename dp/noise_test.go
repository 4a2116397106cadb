package dp

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func seeded(b byte) *Source {
	var s [32]byte
	s[0] = b
	return NewSeededSource(s)
}

// ksStat returns the Kolmogorov–Smirnov statistic of samples against cdf.
func ksStat(x []float64, cdf func(float64) float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	n := float64(len(x))
	var d float64
	for i, v := range x {
		f := cdf(v)
		d = math.Max(d, math.Max(f-float64(i)/n, float64(i+1)/n-f))
	}
	return d
}

func TestNoiseDistributionsKS(t *testing.T) {
	const n = 100000
	crit := 1.63 / math.Sqrt(n) // 1% critical value
	tests := []struct {
		name   string
		draw   func(s *Source) float64
		cdf    func(float64) float64
		wrong  func(float64) float64 // a nearby wrong distribution that must be rejected
		scaleN string
	}{
		{"gaussian", func(s *Source) float64 { return s.Gaussian(1.7) },
			func(x float64) float64 { return normCDF(x / 1.7) },
			func(x float64) float64 { return normCDF(x / 1.6) }, "σ=1.7"},
		{"laplace", func(s *Source) float64 { return s.Laplace(0.8) },
			func(x float64) float64 { return laplaceCDF(x, 0.8) },
			func(x float64) float64 { return laplaceCDF(x, 0.75) }, "b=0.8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := seeded(1)
			x := make([]float64, n)
			for i := range x {
				x[i] = tc.draw(s)
			}
			if d := ksStat(x, tc.cdf); d > crit {
				t.Errorf("%s %s: KS statistic %.4f above critical %.4f", tc.name, tc.scaleN, d, crit)
			}
			if d := ksStat(x, tc.wrong); d <= crit {
				t.Errorf("%s: KS test cannot tell a 6%% wrong scale apart (D=%.4f)", tc.name, d)
			}
		})
	}
}

func TestVectorNoiseMomentsAndTails(t *testing.T) {
	const n = 1 << 20
	tests := []struct {
		name     string
		add      func(s *Source, v []float32)
		variance float64
		tail     float64 // P(|X| > 3)
	}{
		{"gaussian32", func(s *Source, v []float32) { s.AddGaussian32(v, 1) }, 1, 2 * normSF(3)},
		{"laplace32", func(s *Source, v []float32) { s.AddLaplace32(v, 1) }, 2, math.Exp(-3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := make([]float32, n)
			tc.add(seeded(2), v)
			var m, m2 float64
			var tail int
			for _, x := range v {
				m += float64(x)
				m2 += float64(x) * float64(x)
				if math.Abs(float64(x)) > 3 {
					tail++
				}
			}
			m /= n
			m2 = m2/n - m*m
			if se := math.Sqrt(tc.variance / n); math.Abs(m) > 5*se {
				t.Errorf("mean %.5f, more than 5 standard errors from 0", m)
			}
			if math.Abs(m2/tc.variance-1) > 0.01 {
				t.Errorf("variance %.5f, want %.5f ± 1%%", m2, tc.variance)
			}
			p := float64(tail) / n
			if se := math.Sqrt(tc.tail * (1 - tc.tail) / n); math.Abs(p-tc.tail) > 5*se {
				t.Errorf("P(|X|>3) = %.5f, want %.5f", p, tc.tail)
			}
		})
	}
}

func TestAddGaussian64MatchesScalarStream(t *testing.T) {
	v := make([]float64, 100)
	seeded(3).AddGaussian64(v, 2.5)
	s := seeded(3)
	for i, x := range v {
		if want := s.Gaussian(2.5); x != want {
			t.Fatalf("coordinate %d: %g, want %g", i, x, want)
		}
	}
}

func TestNewSourceIsRandom(t *testing.T) {
	a, err := NewSource()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSource()
	if err != nil {
		t.Fatal(err)
	}
	a1, b1 := a.Float64(), b.Float64()
	a2, b2 := a.Float64(), b.Float64()
	if a1 == b1 && a2 == b2 {
		t.Error("two crypto/rand-seeded sources produced the same stream")
	}
}

func TestNewGaussianNoise(t *testing.T) {
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := NewGaussianNoise(bad); err == nil {
			t.Errorf("NewGaussianNoise(%g) accepted", bad)
		}
	}
	g, err := NewGaussianNoise(0.5)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, 1<<16)
	g.Add32(v)
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if sd := math.Sqrt(ss / float64(len(v))); math.Abs(sd-0.5) > 0.01 {
		t.Errorf("standard deviation %.4f, want 0.5", sd)
	}
}

func BenchmarkGaussianNoise32(b *testing.B) {
	v := make([]float32, 1<<20)
	s := seeded(4)
	b.SetBytes(int64(len(v)) * 4)
	for b.Loop() {
		s.AddGaussian32(v, 1)
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}

func BenchmarkLaplaceNoise32(b *testing.B) {
	v := make([]float32, 1<<20)
	s := seeded(4)
	for b.Loop() {
		s.AddLaplace32(v, 1)
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}

// BenchmarkGaussianNoise32PCGBaseline is the same loop on a non-cryptographic
// PCG stream, the baseline for the cost of ChaCha8.
func BenchmarkGaussianNoise32PCGBaseline(b *testing.B) {
	v := make([]float32, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		for i := range v {
			v[i] = float32(float64(v[i]) + r.NormFloat64())
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}
