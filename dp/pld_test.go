package dp

import (
	"errors"
	"math"
	"math/cmplx"
	"strings"
	"testing"
)

func TestFFTAgainstNaiveDFT(t *testing.T) {
	n := 64
	x := make([]complex128, n)
	s := seeded(9)
	for i := range x {
		x[i] = complex(s.Gaussian(1), s.Gaussian(1))
	}
	want := make([]complex128, n)
	for k := range n {
		for j := range n {
			want[k] += x[j] * cmplx.Exp(complex(0, -2*math.Pi*float64(j*k)/float64(n)))
		}
	}
	got := append([]complex128(nil), x...)
	fft(got, false)
	for k := range n {
		if cmplx.Abs(got[k]-want[k]) > 1e-10 {
			t.Fatalf("bin %d: %v, want %v", k, got[k], want[k])
		}
	}
	fft(got, true)
	for k := range n {
		if cmplx.Abs(got[k]-x[k]) > 1e-12 {
			t.Fatalf("inverse bin %d: %v, want %v", k, got[k], x[k])
		}
	}
}

func TestPLDGaussianCompositionIsExact(t *testing.T) {
	// T Gaussian steps with noise multiplier σ compose to one Gaussian with
	// μ = √T/σ, whose δ(ε) is known exactly (Balle & Wang).
	for _, tc := range []struct {
		sigma float64
		T     int
		eps   float64
	}{{2, 10, 1}, {5, 100, 0.5}, {1, 1, 0.3}, {10, 300, 1}} {
		ev, _ := GaussianEvent(tc.sigma, tc.T)
		got, err := PLDDelta([]Event{ev}, tc.eps, PLDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := GaussianDelta(1, tc.sigma/math.Sqrt(float64(tc.T)), tc.eps)
		if got < want*(1-1e-9) || got > want*1.002+1e-12 {
			t.Errorf("%v: PLD δ = %.8g, exact %.8g", tc, got, want)
		}
	}
}

// subsampledHockey integrates δ(ε) of one subsampled-Gaussian step in the
// remove direction: ∫ max(0, P(x) − e^ε Q(x)) dx.
func subsampledHockey(q, sigma, eps float64) float64 {
	f := func(x float64) float64 {
		p := (1-q)*normPDF(x, 0, sigma) + q*normPDF(x, 1, sigma)
		return math.Max(0, p-math.Exp(eps)*normPDF(x, 0, sigma))
	}
	return simpson(f, -20*sigma, 1+20*sigma, 400000)
}

func TestPLDSingleStepDominatesExact(t *testing.T) {
	for _, tc := range []struct{ q, sigma, eps float64 }{{0.1, 1, 0.1}, {0.01, 0.8, 0.05}, {0.5, 2, 0.2}} {
		ev, _ := SubsampledGaussianEvent(tc.q, tc.sigma, 1)
		got, err := PLDDelta([]Event{ev}, tc.eps, PLDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := subsampledHockey(tc.q, tc.sigma, tc.eps)
		if got < want*(1-1e-6) || got > want*1.01+1e-9 {
			t.Errorf("%v: PLD δ = %.8g, integration %.8g", tc, got, want)
		}
	}
}

func TestPLDNeverAboveRDPAndSameOrdering(t *testing.T) {
	schedules := []struct {
		q, sigma float64
		steps    int
	}{
		{256.0 / 60000, 1.1, 14062},
		{0.01, 1, 1000},
		{0.01, 2, 1000},
		{0.05, 1.5, 200}, // RDP ε within 0.3% of MNIST; PLD orders them the other way
		{0.1, 4, 50},
		{1, 20, 30},
	}
	var rdps, plds []float64
	for _, s := range schedules {
		r, _, err := ScheduleEpsilon(s.q, s.sigma, s.steps, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		ev, _ := SubsampledGaussianEvent(s.q, s.sigma, s.steps)
		p, err := PLDEpsilon([]Event{ev}, 1e-5, PLDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p > r {
			t.Errorf("%v: PLD ε %.4f above RDP ε %.4f", s, p, r)
		}
		rdps, plds = append(rdps, r), append(plds, p)
	}
	// Schedules whose RDP ε differ by more than 5% must be ordered alike
	// (closer ones may swap: RDP is looser for some schedules than others).
	for i := range rdps {
		for j := range rdps {
			if rdps[j] > 1.05*rdps[i] && plds[j] <= plds[i] {
				t.Errorf("orderings differ: schedules %d and %d: RDP %.4f vs %.4f, PLD %.4f vs %.4f", i, j, rdps[i], rdps[j], plds[i], plds[j])
			}
		}
	}
	t.Logf("MNIST: RDP ε %.4f, PLD ε %.4f", rdps[0], plds[0])
}

func TestPLDPhases(t *testing.T) {
	// Two phases with the same parameters equal one phase.
	a, _ := SubsampledGaussianEvent(0.02, 1.2, 300)
	b, _ := SubsampledGaussianEvent(0.02, 1.2, 200)
	c, _ := SubsampledGaussianEvent(0.02, 1.2, 500)
	e1, err := PLDEpsilon([]Event{a, b}, 1e-5, PLDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := PLDEpsilon([]Event{c}, 1e-5, PLDOptions{})
	if math.Abs(e1-e2) > 1e-6 {
		t.Errorf("split phases %.8f, one phase %.8f", e1, e2)
	}
	// A different second phase lies between the two pure schedules.
	d, _ := SubsampledGaussianEvent(0.02, 2, 200)
	e3, _ := PLDEpsilon([]Event{a, d}, 1e-5, PLDOptions{})
	e4, _ := PLDEpsilon([]Event{a}, 1e-5, PLDOptions{})
	if !(e4 < e3 && e3 < e1) {
		t.Errorf("mixed phases ε %.5f not between %.5f and %.5f", e3, e4, e1)
	}
}

func TestPLDRejects(t *testing.T) {
	le, _ := LaplaceEvent(1, 1)
	if _, err := PLDEpsilon([]Event{le}, 1e-5, PLDOptions{}); err == nil {
		t.Error("PLD accepted a Laplace event")
	}
	ge, _ := GaussianEvent(1, 1)
	if _, err := PLDEpsilon([]Event{ge}, 1e-5, PLDOptions{Interval: -1}); err == nil {
		t.Error("negative interval accepted")
	}
}

func BenchmarkPLDEpsilonMNIST(b *testing.B) {
	ev, _ := SubsampledGaussianEvent(256.0/60000, 1.1, 14062)
	for b.Loop() {
		if _, err := PLDEpsilon([]Event{ev}, 1e-5, PLDOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPLDCompositionAgainstMonteCarlo(t *testing.T) {
	// δ(ε) of T steps of the subsampled Gaussian by direct simulation of the
	// privacy loss in both adjacency directions (independent of the grid,
	// the connect-the-dots discretisation and the FFT).
	const q, sigma, T, eps = 0.2, 1.0, 10, 0.5
	lossA := func(x float64) float64 { return math.Log(1 - q + q*math.Exp((2*x-1)/(2*sigma*sigma))) }
	src := seeded(21)
	const n = 200000
	var dRemove, dAdd, sRemove, sAdd float64
	for range n {
		var lr, la float64
		for range T {
			x := src.Gaussian(sigma)
			if src.Float64() < q {
				x++
			}
			lr += lossA(x)
			la -= lossA(src.Gaussian(sigma))
		}
		vr := math.Max(0, 1-math.Exp(eps-lr))
		va := math.Max(0, 1-math.Exp(eps-la))
		dRemove += vr
		sRemove += vr * vr
		dAdd += va
		sAdd += va * va
	}
	dRemove, dAdd = dRemove/n, dAdd/n
	se := math.Sqrt(math.Max(sRemove/n-dRemove*dRemove, sAdd/n-dAdd*dAdd) / n)
	want := math.Max(dRemove, dAdd)
	ev, _ := SubsampledGaussianEvent(q, sigma, T)
	got, err := PLDDelta([]Event{ev}, eps, PLDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 5*se+1e-3*want {
		t.Errorf("PLD δ(%g) = %.5f, Monte Carlo %.5f ± %.5f", eps, got, want, se)
	}
	t.Logf("PLD δ(%g) = %.5f, Monte Carlo %.5f ± %.5f", eps, got, want, se)
}

func TestPLDErrorsSayWhatToDo(t *testing.T) {
	ev := mustEvent(SubsampledGaussianEvent(0.01, 1, 1000))
	_, err := PLDEpsilon([]Event{ev}, 1e-5, PLDOptions{MaxSize: 1024})
	if !errors.Is(err, ErrPLDTooLarge) || !strings.Contains(err.Error(), "coarser interval") || strings.Contains(err.Error(), "raise") {
		t.Errorf("size limit: %v", err)
	}
	_, err = PLDEpsilon([]Event{mustEvent(GaussianEvent(0.5, 1))}, 1e-9, PLDOptions{TailMass: 1e-3})
	if !errors.Is(err, ErrPLDTailMass) || !strings.Contains(err.Error(), "smaller tail mass") {
		t.Errorf("tail mass: %v", err)
	}
	_, err = PLDEpsilon([]Event{mustEvent(LaplaceEvent(1, 1))}, 1e-5, PLDOptions{})
	if err == nil || strings.Contains(err.Error(), "laplace") || !strings.Contains(err.Error(), "Laplace mechanism") {
		t.Errorf("Laplace event: %v", err)
	}
}
