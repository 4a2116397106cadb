package dp

import (
	"math"
	"strings"
	"testing"
)

// simpson integrates f over [a, b] with n (even) intervals.
func simpson(f func(float64) float64, a, b float64, n int) float64 {
	h := (b - a) / float64(n)
	s := f(a) + f(b)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * f(a+float64(i)*h)
	}
	return s * h / 3
}

func normPDF(x, mu, sigma float64) float64 {
	z := (x - mu) / sigma
	return math.Exp(-z*z/2) / (sigma * math.Sqrt(2*math.Pi))
}

func TestClassicGaussianSigma(t *testing.T) {
	tests := []struct{ sens, eps, delta, want float64 }{
		{1, 1, 1e-5, math.Sqrt(2*math.Log(125000)) / 1},
		{2, 0.5, 1e-6, 2 * math.Sqrt(2*math.Log(1.25e6)) / 0.5},
		{1, 1, 1.25e-2, math.Sqrt(2 * math.Log(100))},
	}
	for _, tc := range tests {
		got, err := ClassicGaussianSigma(tc.sens, tc.eps, tc.delta)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tc.want) > 1e-12*tc.want {
			t.Errorf("ClassicGaussianSigma(%g,%g,%g) = %.12g, want %.12g", tc.sens, tc.eps, tc.delta, got, tc.want)
		}
	}
	// Literal value: √(2 ln 125000) = 4.844805...
	if got, _ := ClassicGaussianSigma(1, 1, 1e-5); math.Abs(got-4.8448) > 1e-4 {
		t.Errorf("classic σ at ε=1, δ=1e-5 is %.5f, want 4.8448", got)
	}
}

func TestGaussianDeltaAgainstIntegration(t *testing.T) {
	// δ(ε) = ∫ max(0, p(x) − e^ε q(x)) dx with p = N(Δ, σ²), q = N(0, σ²).
	for _, tc := range []struct{ sens, sigma, eps float64 }{
		{1, 1, 0.5}, {1, 2, 1}, {2, 1.5, 3}, {1, 0.7, 0.1},
	} {
		got, err := GaussianDelta(tc.sens, tc.sigma, tc.eps)
		if err != nil {
			t.Fatal(err)
		}
		f := func(x float64) float64 {
			return math.Max(0, normPDF(x, tc.sens, tc.sigma)-math.Exp(tc.eps)*normPDF(x, 0, tc.sigma))
		}
		want := simpson(f, -20*tc.sigma, tc.sens+20*tc.sigma, 400000)
		if math.Abs(got-want) > 1e-7+1e-5*want {
			t.Errorf("GaussianDelta(%v) = %.9g, integration gives %.9g", tc, got, want)
		}
	}
}

func TestAnalyticGaussianSigma(t *testing.T) {
	for _, tc := range []struct{ sens, eps, delta float64 }{
		{1, 0.5, 1e-5}, {1, 1, 1e-5}, {3, 4, 1e-6}, {1, 20, 1e-9}, {1, 0.05, 1e-3},
	} {
		s, err := AnalyticGaussianSigma(tc.sens, tc.eps, tc.delta)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := GaussianDelta(tc.sens, s, tc.eps)
		if d > tc.delta*(1+1e-9) {
			t.Errorf("%v: σ=%g gives δ=%g > target", tc, s, d)
		}
		d2, _ := GaussianDelta(tc.sens, s*0.999, tc.eps)
		if d2 <= tc.delta {
			t.Errorf("%v: σ=%g is not minimal: 0.999σ still gives δ=%g", tc, s, d2)
		}
		if tc.eps < 1 {
			c, _ := ClassicGaussianSigma(tc.sens, tc.eps, tc.delta)
			if s > c {
				t.Errorf("%v: analytic σ %g above classic %g", tc, s, c)
			}
		}
	}
}

func TestLaplaceScale(t *testing.T) {
	if b, err := LaplaceScale(2, 0.5); err != nil || b != 4 {
		t.Errorf("LaplaceScale(2, 0.5) = %g, %v; want 4", b, err)
	}
}

func TestCalibrationRejectsBadInput(t *testing.T) {
	nan := math.NaN()
	bad := []struct{ sens, eps, delta float64 }{
		{0, 1, 1e-5}, {-1, 1, 1e-5}, {nan, 1, 1e-5}, {1, 0, 1e-5}, {1, -1, 1e-5}, {1, nan, 1e-5},
		{1, math.Inf(1), 1e-5}, {1, 1, 0}, {1, 1, 1}, {1, 1, 1.5}, {1, 1, nan},
	}
	for _, tc := range bad {
		if _, err := ClassicGaussianSigma(tc.sens, tc.eps, tc.delta); err == nil {
			t.Errorf("ClassicGaussianSigma%v accepted", tc)
		}
		if _, err := AnalyticGaussianSigma(tc.sens, tc.eps, tc.delta); err == nil {
			t.Errorf("AnalyticGaussianSigma%v accepted", tc)
		}
	}
	if _, err := LaplaceScale(1, 0); err == nil {
		t.Error("LaplaceScale with ε=0 accepted")
	}
}

func TestRegIncBeta(t *testing.T) {
	tests := []struct{ x, a, b, want float64 }{
		{0.3, 1, 1, 0.3},
		{0.3, 2.5, 1, math.Pow(0.3, 2.5)},
		{0.6, 1, 0.5, 1 - math.Sqrt(0.4)},
		{0.5, 3, 3, 0.5},
		{0.2, 2, 3, 1 - (1-0.2)*(1-0.2)*(1-0.2)*(1+3*0.2)}, // I_x(2,3) = 1 − (1−x)³(1+3x)
	}
	for _, tc := range tests {
		got, err := RegIncBeta(tc.x, tc.a, tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("I_%g(%g,%g) = %.15g, want %.15g", tc.x, tc.a, tc.b, got, tc.want)
		}
	}
	for _, bad := range [][3]float64{{-0.1, 1, 1}, {1.1, 1, 1}, {0.5, 0, 1}, {0.5, 1, -1}, {math.NaN(), 1, 1}} {
		if _, err := RegIncBeta(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("RegIncBeta%v accepted", bad)
		}
	}
}

// TestSmallEpsilon: small targets are normal requests. The inverse must
// return a σ whose forward ε is within 1% of (and not above) the target,
// ε must keep falling as σ grows, and a target no noise can reach must be
// refused in words.
func TestSmallEpsilon(t *testing.T) {
	schedules := []struct {
		q     float64
		steps int
	}{{0.01, 1000}, {256.0 / 60000, 14062}, {0.05, 380}, {0.1, 10}}
	for _, c := range schedules {
		for _, target := range []float64{0.1, 0.05, 0.01} {
			sigma, err := NoiseMultiplier(c.q, c.steps, target, 1e-5)
			if err != nil {
				t.Errorf("q=%g steps=%d ε=%g: %v", c.q, c.steps, target, err)
				continue
			}
			got, _, err := ScheduleEpsilon(c.q, sigma, c.steps, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			if got > target || got < 0.99*target {
				t.Errorf("q=%g steps=%d: σ=%g for target ε=%g gives ε=%g", c.q, c.steps, sigma, target, got)
			}
		}
	}
	prev := math.Inf(1)
	for _, sigma := range []float64{1, 10, 100, 1000, 1e4, 1e5} {
		e, _, err := ScheduleEpsilon(0.01, sigma, 1000, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if !(e < prev) {
			t.Errorf("ε stopped falling: %g at σ=%g after %g", e, sigma, prev)
		}
		prev = e
	}
	if prev > 0.002 {
		t.Errorf("ε at σ=1e5 is %g; the orders should certify below 0.002", prev)
	}
	// No noise reaches ε below the conversion's floor: say so.
	_, err := NoiseMultiplier(0.01, 1000, 1e-4, 1e-5)
	if err == nil || !strings.Contains(err.Error(), "cannot be reached") || !strings.Contains(err.Error(), "larger δ") {
		t.Errorf("unreachable target: %v", err)
	}
	for _, bad := range []float64{1, 2, 0} {
		_, err := NoiseMultiplier(0.01, 1000, 1, bad)
		if err == nil || !strings.Contains(err.Error(), "between 0 and 1") {
			t.Errorf("δ=%g: %v", bad, err)
		}
	}
	// The cancellation that used to make order 1.1 negative.
	for _, a := range []float64{1.01, 1.1, 1.5, 1.9} {
		r, err := SubsampledGaussianRDP(0.01, 1e4, a)
		if err != nil || r < 0 {
			t.Errorf("RDP at order %g with σ=1e4: %g, %v", a, r, err)
		}
	}
}

func TestSGDNoiseMultiplier(t *testing.T) {
	cfg := SGDConfig{ClipNorm: 1, SamplingRate: 0.054, ExpectedBatchSize: 500, Dimension: 557824}
	for _, target := range []float64{8, 1, 0.1} {
		s, err := SGDNoiseMultiplier(cfg, 380, target, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.NoiseMultiplier = s
		d, err := NewDPSGD(c, seeded(1))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := NewAccountant(nil)
		if err := d.Charge(a, 380); err != nil {
			t.Fatal(err)
		}
		e, _, _ := a.Epsilon(1e-5)
		if e > target || e < 0.99*target {
			t.Errorf("σ=%g for ε=%g charges ε=%g", s, target, e)
		}
		cont, _ := NoiseMultiplier(0.054, 380, target, 1e-5)
		if s < cont*(1-2e-4) || s > cont*1.02 {
			t.Errorf("discrete σ=%g, continuous σ=%g for ε=%g", s, cont, target)
		}
	}
}
