package dp

import (
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
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

// chiSquare returns Pearson's statistic of counts against probabilities p
// (the last cell collects the rest) and its degrees of freedom.
func chiSquare(counts map[int64]int, n int, pmf func(int64) float64, lo, hi int64) (stat float64, df int) {
	var rest int = n
	var restP float64 = 1
	for x := lo; x <= hi; x++ {
		e := float64(n) * pmf(x)
		o := float64(counts[x])
		stat += (o - e) * (o - e) / e
		rest -= counts[x]
		restP -= pmf(x)
		df++
	}
	if e := float64(n) * restP; e > 5 {
		stat += (float64(rest) - e) * (float64(rest) - e) / e
		df++
	}
	return stat, df - 1
}

// chiSquareCritical approximates the 0.1% upper quantile of χ²(df)
// (Wilson–Hilferty).
func chiSquareCritical(df int) float64 {
	k := float64(df)
	z := 3.09
	c := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return k * c * c * c
}

func TestDiscreteSamplersExactPMF(t *testing.T) {
	const n = 200000
	tests := []struct {
		name   string
		draw   func(s *Source) int64
		logW   func(x int64) float64 // unnormalised log pmf
		lo, hi int64
	}{
		{"gaussian σ=3", func(s *Source) int64 { return s.discreteGaussian(3) },
			func(x int64) float64 { return -float64(x*x) / 18 }, -10, 10},
		{"gaussian σ=1", func(s *Source) int64 { return s.discreteGaussian(1) },
			func(x int64) float64 { return -float64(x*x) / 2 }, -4, 4},
		{"laplace t=2", func(s *Source) int64 { return s.discreteLaplace(2) },
			func(x int64) float64 { return -math.Abs(float64(x)) / 2 }, -12, 12},
		{"laplace t=1", func(s *Source) int64 { return s.discreteLaplace(1) },
			func(x int64) float64 { return -math.Abs(float64(x)) }, -7, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var z float64
			for x := int64(-200); x <= 200; x++ {
				z += math.Exp(tc.logW(x))
			}
			pmf := func(x int64) float64 { return math.Exp(tc.logW(x)) / z }
			s := seeded(11)
			counts := map[int64]int{}
			for range n {
				counts[tc.draw(s)]++
			}
			stat, df := chiSquare(counts, n, pmf, tc.lo, tc.hi)
			if crit := chiSquareCritical(df); stat > crit {
				t.Errorf("χ² = %.1f with %d degrees of freedom, above the 0.1%% critical value %.1f", stat, df, crit)
			}
			// The test has power: a 10%% wider distribution is rejected.
			wide := func(x int64) float64 { return pmf(x*10/11) * 10 / 11 }
			if stat, df := chiSquare(counts, n, wide, tc.lo, tc.hi); stat <= chiSquareCritical(df) && tc.hi > 8 {
				t.Errorf("χ² cannot tell a wider distribution apart (%.1f)", stat)
			}
		})
	}
}

func TestBernoulliExpExact(t *testing.T) {
	const n = 400000
	s := seeded(12)
	for _, g := range []struct{ num, den uint64 }{{0, 5}, {1, 3}, {2, 3}, {1, 1}, {7, 2}, {25, 4}, {1<<62 + 5, 1<<63 - 1}, {1, 1 << 63}, {999, 1000}} {
		var small, big128, bigInt int
		for range n {
			if g.num <= g.den {
				if s.bernoulliExpFrac(g.num, g.den) {
					small++
				}
			} else if s.bernoulliExp128(0, g.num, g.den) {
				small++
			}
			if s.bernoulliExp128(0, g.num, g.den) {
				big128++
			}
			if s.bernoulliExpBig(new(big.Int).SetUint64(g.num), new(big.Int).SetUint64(g.den)) {
				bigInt++
			}
		}
		p := math.Exp(-float64(g.num) / float64(g.den))
		se := math.Sqrt(p*(1-p)/n) + 1e-12
		for name, c := range map[string]int{"64-bit": small, "128-bit": big128, "math/big": bigInt} {
			if f := float64(c) / n; math.Abs(f-p) > 5*se {
				t.Errorf("Bernoulli(exp(−%d/%d)) %s: frequency %.5f, want %.5f", g.num, g.den, name, f, p)
			}
		}
	}
}

func TestUniformIsUniform(t *testing.T) {
	s := seeded(13)
	const n, k = 300000, 7
	var c [k]int
	var cb [k]int
	for range n {
		c[s.uniform(k)]++
		cb[s.uniformBig(big.NewInt(k)).Int64()]++
	}
	for _, counts := range [][k]int{c, cb} {
		var stat float64
		e := float64(n) / k
		for _, o := range counts {
			stat += (float64(o) - e) * (float64(o) - e) / e
		}
		if stat > chiSquareCritical(k-1) {
			t.Errorf("uniform(7) counts %v: χ² %.1f", counts, stat)
		}
	}
}

func TestReleasesAreOnTheGrid(t *testing.T) {
	s := seeded(14)
	v := []float64{0.1, -3.3333, 1e-9, 12345.678}
	w := []float32{0.1, -3.3333, 1e-9, 12345.678}
	g, err := GaussianGrid(0.5, len(v))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := LaplaceGrid(0.5, len(v))
	if err != nil {
		t.Fatal(err)
	}
	s.AddGaussian64(v, 0.5)
	s.AddLaplace32(w, 0.5)
	for i := range v {
		if k := v[i] / g.Gamma; k != math.Trunc(k) {
			t.Errorf("AddGaussian64 coordinate %d = %g is not a multiple of γ = %g", i, v[i], g.Gamma)
		}
		if k := float64(w[i]) / gl.Gamma; k != math.Trunc(k) {
			t.Errorf("AddLaplace32 coordinate %d = %g is not a multiple of γ = %g", i, w[i], gl.Gamma)
		}
	}
	for _, x := range []float64{s.NoisyGaussian(0.3, 2), s.NoisyLaplace(0.3, 2)} {
		if x/math.Ldexp(1, -60) != math.Trunc(x/math.Ldexp(1, -60)) {
			t.Errorf("release %g is not on a power-of-two grid", x)
		}
	}
	// The grid is as documented: a power of two with γ√d ≤ 2^−20·σ.
	if g.Gamma*math.Sqrt(4) > math.Ldexp(0.5, -20) || g.Gamma*math.Sqrt(4) <= math.Ldexp(0.5, -22) {
		t.Errorf("Gaussian grid γ = %g for σ = 0.5, d = 4", g.Gamma)
	}
	if m, _ := g.GaussianMultiplier(1); !(m < 0.5 && m > 0.5*(1-1e-6)) {
		t.Errorf("effective multiplier %g for σ = 0.5, Δ = 1", m)
	}
	if e, _ := gl.LaplaceEpsilon(1); !(e > 2 && e < 2+1e-6) {
		t.Errorf("discretised Laplace ε = %g for b = 0.5, Δ = 1", e)
	}
}

func TestSnapSaturatesAndMapsNaN(t *testing.T) {
	if k := snap(math.Inf(1), 1); k != maxMagnitude {
		t.Errorf("snap(+Inf) = %d", k)
	}
	if k := snap(-1e300, 1); k != -maxMagnitude {
		t.Errorf("snap(−1e300) = %d", k)
	}
	if k := snap(math.NaN(), 1); k != 0 {
		t.Errorf("snap(NaN) = %d", k)
	}
	if k := snap(2.5, 0.5); k != 5 {
		t.Errorf("snap(2.5, 0.5) = %d", k)
	}
}

func TestInvalidScalesPanic(t *testing.T) {
	for _, f := range []func(){
		func() { seeded(1).Gaussian(0) },
		func() { seeded(1).Laplace(math.NaN()) },
		func() { seeded(1).AddGaussian32([]float32{1}, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("invalid scale accepted")
				}
			}()
			f()
		}()
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

// The noise benchmarks: go test -bench Noise -run XXX ./dp. The float
// baseline is the floating-point ziggurat path Veil used before the exact
// samplers (same ChaCha8 stream), measured in the same run.

func BenchmarkNoiseFloatZigguratBaseline(b *testing.B) {
	v := make([]float32, 1<<18)
	r := rand.New(rand.NewChaCha8([32]byte{4}))
	for b.Loop() {
		for i := range v {
			v[i] = float32(float64(v[i]) + r.NormFloat64())
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}

func BenchmarkNoiseGaussian32(b *testing.B) {
	v := make([]float32, 1<<18)
	s := seeded(4)
	for b.Loop() {
		s.AddGaussian32(v, 1)
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}

func BenchmarkNoiseLaplace32(b *testing.B) {
	v := make([]float32, 1<<18)
	s := seeded(4)
	for b.Loop() {
		s.AddLaplace32(v, 1)
	}
	b.ReportMetric(float64(b.N)*float64(len(v))/b.Elapsed().Seconds(), "coords/s")
}

func TestExpDigits(t *testing.T) {
	// ⌊2^128/e⌋ from an independent 120-digit decimal computation.
	want := []uint64{0x5e2d58d8b3bcdf1a, 0xbadec7829054f90d}
	if got := expNegDigits(1, 1, 2); got[0] != want[0] || got[1] != want[1] {
		t.Errorf("digits of 1/e: %#x, want %#x", got, want)
	}
	if invE64 != want[0] {
		t.Errorf("invE64 = %#x", invE64)
	}
	// ⌊2^64·exp(−j/256)⌋, also from decimal arithmetic.
	for j, w := range map[uint64]uint64{1: 0xff007fd55ffdde38, 100: 0xad37e030a19e3f45, 255: 0x5e8bb557ef03c6b4} {
		if got := expTable()[j]; got != w {
			t.Errorf("exp(−%d/256) digits %#x, want %#x", j, got, w)
		}
	}
}

// BenchmarkNoiseInterleaved alternates three samplers on the same 2^16
// coordinates, so all see the same machine load: the floating-point
// baseline (ziggurat, not private), the exact CKS sampler
// (discreteGaussian, Veil's exact path before the table sampler) and
// AddGaussian32 (the table sampler). σ = 1 on 2^16 coordinates is the
// integer parameter 2^28, DP-SGD's range. It reports the three rates and
// the slowdown of each exact path against the float one, in wall time and
// (on Linux) in the CPU time of the benchmark's thread, which a loaded
// machine disturbs far less.
func BenchmarkNoiseInterleaved(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	v := make([]float32, 1<<16)
	r := rand.New(rand.NewChaCha8([32]byte{4}))
	s := seeded(4)
	g, err := GaussianGrid(1, len(v))
	if err != nil {
		b.Fatal(err)
	}
	s.AddGaussian32(v, 1) // builds the table outside the timing
	var wall, cpu [3]time.Duration
	for b.Loop() {
		for k := range 3 {
			t0, c0 := time.Now(), cputime.Thread()
			switch k {
			case 0:
				for i := range v {
					v[i] = float32(float64(v[i]) + r.NormFloat64())
				}
			case 1:
				for i, x := range v {
					v[i] = float32(release(snap(float64(x), g.Gamma), s.discreteGaussian(g.Scale), g.Gamma))
				}
			case 2:
				s.AddGaussian32(v, 1)
			}
			wall[k] += time.Since(t0)
			cpu[k] += cputime.Thread() - c0
		}
	}
	n := float64(b.N) * float64(len(v))
	b.ReportMetric(n/wall[0].Seconds(), "float-coords/s")
	b.ReportMetric(n/wall[1].Seconds(), "cks-coords/s")
	b.ReportMetric(n/wall[2].Seconds(), "exact-coords/s")
	b.ReportMetric(wall[1].Seconds()/wall[0].Seconds(), "cks-slowdown")
	b.ReportMetric(wall[2].Seconds()/wall[0].Seconds(), "slowdown")
	if cpu[0] > 0 {
		b.ReportMetric(cpu[1].Seconds()/cpu[0].Seconds(), "cks-cpu-slowdown")
		b.ReportMetric(cpu[2].Seconds()/cpu[0].Seconds(), "cpu-slowdown")
		b.ReportMetric(float64(cpu[2])/n, "exact-cpu-ns/coord")
	}
}

func TestReleaseOfSaturatedValuesDoesNotOverflow(t *testing.T) {
	if got := release(maxMagnitude, maxMagnitude, 1); !(got > 9e18) {
		t.Errorf("release of two saturated values = %g", got)
	}
	if got := release(-maxMagnitude, -maxMagnitude, 1); !(got < -9e18) {
		t.Errorf("release of two negative saturated values = %g", got)
	}
	v := []float64{math.Inf(1), -1e300}
	seeded(16).AddGaussian64(v, 1)
	if !(v[0] > 0 && v[1] < 0) {
		t.Errorf("saturated releases changed sign: %v", v)
	}
}

// TestSingleDrawsIgnoreOtherTables: a Source keeps the table sampler of
// its last vector release; single draws at another σ must not use it.
// After a 256-coordinate release at σ = 100, Gaussian(1) and
// NoisyGaussian(0, 1) must still have variance 1 (tested to ±5%, about
// six standard errors at 20000 draws).
func TestSingleDrawsIgnoreOtherTables(t *testing.T) {
	const n = 20000
	src := seeded(41)
	src.AddGaussian64(make([]float64, 256), 100)
	if src.gt == nil {
		t.Fatal("a 256-coordinate release did not build a table sampler")
	}
	for _, draw := range []struct {
		name string
		f    func() float64
	}{
		{"Gaussian", func() float64 { return src.Gaussian(1) }},
		{"NoisyGaussian", func() float64 { return src.NoisyGaussian(0, 1) }},
	} {
		var ss float64
		for range n {
			x := draw.f()
			ss += x * x
		}
		if v := ss / n; math.Abs(v-1) > 0.05 {
			t.Errorf("%s(σ = 1) after a release at σ = 100: variance %.3f, want 1", draw.name, v)
		}
	}
}
