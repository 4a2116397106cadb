package dp

import (
	"math"
	"testing"
)

func TestMNISTSchedule(t *testing.T) {
	// Abadi et al.'s MNIST schedule: q = 256/60000, σ = 1.1, 60 epochs, δ = 1e-5.
	steps := int(60 * 60000 / 256) // 14062
	if steps != 14062 {
		t.Fatalf("steps = %d", steps)
	}
	eps, order, err := ScheduleEpsilon(256.0/60000, 1.1, steps, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(eps-2.597) > 0.001 || order != 8.1 {
		t.Errorf("MNIST ε = %.5f at order %g, want ≈ 2.597 at order 8.1", eps, order)
	}
}

func TestDefaultOrders(t *testing.T) {
	o := DefaultOrders()
	for i := 1; i < len(o); i++ {
		if !(o[i] > o[i-1]) {
			t.Fatalf("orders not ascending at %d: %g after %g", i, o[i], o[i-1])
		}
	}
	have := map[float64]bool{}
	for _, a := range o {
		have[a] = true
	}
	// Opacus's grid, small orders for large ε, large ones for small ε.
	for _, a := range []float64{1.01, 1.09, 1.1, 2.5, 10.9, 11, 12, 63, 64, 128, 256, 512, 1024, 2048, 4096} {
		if !have[a] {
			t.Errorf("default orders lack %g", a)
		}
	}
	if o[0] != 1.01 || o[len(o)-1] != 4096 {
		t.Errorf("default orders run from %g to %g", o[0], o[len(o)-1])
	}
}

// logAByIntegration computes log A_α = log E_{z~N(0,σ²)}[((1−q) + q·e^{(2z−1)/(2σ²)})^α]
// by Simpson's rule, independently of the series in rdp.go.
func logAByIntegration(q, sigma, alpha float64) float64 {
	f := func(z float64) float64 {
		l := math.Log1p(q*math.Expm1((2*z-1)/(2*sigma*sigma))) * alpha
		return math.Exp(l - z*z/(2*sigma*sigma))
	}
	lo := -14 * sigma
	hi := alpha + 14*sigma + 1
	v := simpson(f, lo, hi, 200000) / (sigma * math.Sqrt(2*math.Pi))
	return math.Log(v)
}

func TestSubsampledGaussianRDPAgainstIntegration(t *testing.T) {
	for _, q := range []float64{0.01, 0.1, 0.5} {
		for _, sigma := range []float64{0.8, 1.5, 4} {
			for _, alpha := range []float64{1.5, 2, 2.5, 3, 5.7, 8, 12, 20.5} {
				got, err := SubsampledGaussianRDP(q, sigma, alpha)
				if err != nil {
					t.Fatal(err)
				}
				want := logAByIntegration(q, sigma, alpha) / (alpha - 1)
				if math.Abs(got-want) > 1e-7+1e-6*math.Abs(want) {
					t.Errorf("RDP(q=%g, σ=%g, α=%g) = %.10g, integration gives %.10g", q, sigma, alpha, got, want)
				}
			}
		}
	}
}

func TestIntegerOrderClosedForm(t *testing.T) {
	// α = 2: A_2 = (1−q)² + 2q(1−q) + q²·e^{1/σ²} = 1 + q²(e^{1/σ²} − 1).
	for _, tc := range []struct{ q, sigma float64 }{{0.01, 1}, {0.2, 0.7}, {0.5, 3}} {
		got, _ := SubsampledGaussianRDP(tc.q, tc.sigma, 2)
		want := math.Log1p(tc.q * tc.q * math.Expm1(1/(tc.sigma*tc.sigma)))
		if math.Abs(got-want) > 1e-13 {
			t.Errorf("RDP(%v, α=2) = %.15g, closed form %.15g", tc, got, want)
		}
	}
	// q = 1 is the plain Gaussian: α/(2σ²).
	if got, _ := SubsampledGaussianRDP(1, 2, 7.5); got != 7.5/8 {
		t.Errorf("q=1: %g, want %g", got, 7.5/8)
	}
}

func TestFractionalOrderIsBetweenIntegers(t *testing.T) {
	// RDP is non-decreasing in α: frac series must sit between the integer values.
	q, sigma := 0.004, 1.1
	for a := 2.0; a < 30; a++ {
		lo, _ := SubsampledGaussianRDP(q, sigma, a)
		mid, _ := SubsampledGaussianRDP(q, sigma, a+0.5)
		hi, _ := SubsampledGaussianRDP(q, sigma, a+1)
		if !(lo <= mid && mid <= hi) {
			t.Errorf("RDP not monotone around α=%g: %g %g %g", a+0.5, lo, mid, hi)
		}
	}
}

func TestLaplaceRDPAgainstIntegration(t *testing.T) {
	for _, lambda := range []float64{0.5, 1, 3} {
		for _, alpha := range []float64{1.5, 2, 4, 10} {
			got, err := LaplaceRDP(lambda, alpha)
			if err != nil {
				t.Fatal(err)
			}
			f := func(x float64) float64 {
				p := math.Exp(-math.Abs(x)/lambda) / (2 * lambda)
				lq := -math.Abs(x-1)/lambda - math.Log(2*lambda)
				return math.Exp(alpha*math.Log(p) + (1-alpha)*lq)
			}
			// Split at the kinks 0 and 1 for Simpson's accuracy.
			v := simpson(f, -60*lambda, 0, 200000) + simpson(f, 0, 1, 20000) + simpson(f, 1, 1+60*lambda, 200000)
			want := math.Log(v) / (alpha - 1)
			if math.Abs(got-want) > 1e-8+1e-6*want {
				t.Errorf("LaplaceRDP(λ=%g, α=%g) = %.10g, integration %.10g", lambda, alpha, got, want)
			}
		}
	}
}

func TestRDPToDPFormula(t *testing.T) {
	// One order: ε = r − (ln δ + ln α)/(α−1) + ln((α−1)/α).
	eps, order, err := RDPToDP([]float64{2}, []float64{1}, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	want := 1 - (math.Log(1e-5)+math.Log(2))/1 + math.Log(0.5)
	if math.Abs(eps-want) > 1e-12 || order != 2 {
		t.Errorf("ε = %.12g at %g, want %.12g at 2", eps, order, want)
	}
	// The minimum over orders is taken.
	eps, order, _ = RDPToDP([]float64{2, 10}, []float64{1, 1}, 1e-5)
	want10 := 1 - (math.Log(1e-5)+math.Log(10))/9 + math.Log(0.9)
	if math.Abs(eps-want10) > 1e-12 || order != 10 {
		t.Errorf("ε = %.12g at %g, want %.12g at 10", eps, order, want10)
	}
}

func TestAccountantComposition(t *testing.T) {
	a, _ := NewAccountant(nil)
	if err := a.Step(0.01, 1, 300); err != nil {
		t.Fatal(err)
	}
	if err := a.Step(0.01, 1, 700); err != nil {
		t.Fatal(err)
	}
	e1, o1, _ := a.Epsilon(1e-5)
	e2, o2, _ := ScheduleEpsilon(0.01, 1, 1000, 1e-5)
	if math.Abs(e1-e2) > 1e-12 || o1 != o2 {
		t.Errorf("two phases (%g @%g) differ from one (%g @%g)", e1, o1, e2, o2)
	}
	// Phases with different q and σ: RDP adds order by order.
	b, _ := NewAccountant([]float64{2, 4, 8})
	_ = b.Step(0.02, 1.2, 10)
	_ = b.Step(0.05, 2, 5)
	r := b.RDP()
	for i, al := range []float64{2, 4, 8} {
		x, _ := SubsampledGaussianRDP(0.02, 1.2, al)
		y, _ := SubsampledGaussianRDP(0.05, 2, al)
		if math.Abs(r[i]-(10*x+5*y)) > 1e-12 {
			t.Errorf("order %g: %g, want %g", al, r[i], 10*x+5*y)
		}
	}
	// Mixed mechanisms in one accountant.
	le, _ := LaplaceEvent(2, 3)
	ge, _ := GaussianEvent(5, 2)
	if err := b.Add(le, ge); err != nil {
		t.Fatal(err)
	}
	r2 := b.RDP()
	l4, _ := LaplaceRDP(2, 4)
	if math.Abs(r2[1]-r[1]-3*l4-2*4/50.0) > 1e-12 {
		t.Errorf("mixed composition at order 4: %g", r2[1]-r[1])
	}
	// Empty accountant spends nothing.
	c, _ := NewAccountant(nil)
	if e, _, err := c.Epsilon(1e-5); e != 0 || err != nil {
		t.Errorf("empty accountant: %g, %v", e, err)
	}
}

func TestMoreNoiseLessEpsilon(t *testing.T) {
	prev := math.Inf(1)
	for _, s := range []float64{0.7, 0.9, 1.1, 1.5, 2, 4} {
		e, _, err := ScheduleEpsilon(0.01, s, 1000, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if e >= prev {
			t.Errorf("σ=%g: ε=%g not below %g", s, e, prev)
		}
		prev = e
	}
}

func TestNoiseMultiplierInverse(t *testing.T) {
	for _, tc := range []struct {
		q      float64
		steps  int
		target float64
	}{{256.0 / 60000, 14062, 2.597}, {0.01, 1000, 1}, {0.1, 100, 8}, {1, 10, 5}} {
		s, err := NoiseMultiplier(tc.q, tc.steps, tc.target, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		e, _, _ := ScheduleEpsilon(tc.q, s, tc.steps, 1e-5)
		if e > tc.target {
			t.Errorf("%v: σ=%g gives ε=%g above target", tc, s, e)
		}
		e2, _, _ := ScheduleEpsilon(tc.q, s*(1-3e-4), tc.steps, 1e-5)
		if e2 <= tc.target {
			t.Errorf("%v: σ=%g not minimal (%.4g still meets target)", tc, s, s*(1-3e-4))
		}
	}
	s, _ := NoiseMultiplier(256.0/60000, 14062, 2.597, 1e-5)
	if math.Abs(s-1.1) > 0.002 {
		t.Errorf("inverse of the MNIST schedule gives σ=%g, want ≈ 1.1", s)
	}
}

func TestInvalidParameters(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		q, s  float64
		steps int
		delta float64
	}{
		{"q zero", 0, 1, 10, 1e-5},
		{"q above one", 1.5, 1, 10, 1e-5},
		{"q NaN", nan, 1, 10, 1e-5},
		{"sigma zero", 0.1, 0, 10, 1e-5},
		{"sigma negative", 0.1, -1, 10, 1e-5},
		{"sigma NaN", 0.1, nan, 10, 1e-5},
		{"sigma Inf", 0.1, math.Inf(1), 10, 1e-5},
		{"negative steps", 0.1, 1, -3, 1e-5},
		{"zero steps", 0.1, 1, 0, 1e-5},
		{"delta one", 0.1, 1, 10, 1},
		{"delta zero", 0.1, 1, 10, 0},
		{"delta NaN", 0.1, 1, 10, nan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ScheduleEpsilon(tc.q, tc.s, tc.steps, tc.delta); err == nil {
				t.Error("accepted")
			}
			if _, err := PLDEpsilon([]Event{{Kind: KindSubsampledGaussian, SamplingRate: tc.q, NoiseMultiplier: tc.s, Count: tc.steps}}, tc.delta, PLDOptions{}); err == nil {
				t.Error("PLD accepted")
			}
		})
	}
	if _, err := SubsampledGaussianRDP(0.1, 1, 1); err == nil {
		t.Error("order 1 accepted")
	}
	if _, err := NewAccountant([]float64{2, 1.5}); err == nil {
		t.Error("descending orders accepted")
	}
	if _, err := NoiseMultiplier(0.1, 10, 0, 1e-5); err == nil {
		t.Error("target ε = 0 accepted")
	}
	a, _ := NewAccountant(nil)
	_ = a.Step(0.1, 1, 5)
	before := a.RDP()
	if err := a.Step(0.1, 1, -1); err == nil {
		t.Error("negative steps accepted")
	}
	bad := Event{Kind: "mystery", Count: 1}
	good, _ := GaussianEvent(1, 1)
	if err := a.Add(good, bad); err == nil {
		t.Error("unknown kind accepted")
	}
	after := a.RDP()
	for i := range before {
		if before[i] != after[i] {
			t.Fatal("refused Add changed the accountant")
		}
	}
	if len(a.Events()) != 1 {
		t.Errorf("refused Add recorded events: %d", len(a.Events()))
	}
}

func BenchmarkRDPEpsilonMNIST(b *testing.B) {
	for b.Loop() {
		if _, _, err := ScheduleEpsilon(256.0/60000, 1.1, 14062, 1e-5); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPureCompositionWhenTighter(t *testing.T) {
	// Two Laplace releases of scale 10 (ε = 0.1 each): basic composition
	// gives 0.2, tighter than any RDP conversion at δ = 1e-5.
	a, _ := NewAccountant(nil)
	le, _ := LaplaceEvent(10, 2)
	_ = a.Add(le)
	eps, order, err := a.Epsilon(1e-5)
	if err != nil || math.Abs(eps-0.2) > 1e-12 || order != 0 {
		t.Errorf("ε = %g at order %g (%v), want 0.2 by pure composition", eps, order, err)
	}
	// Adding a Gaussian release makes the pure bound infinite: RDP wins.
	ge, _ := GaussianEvent(1, 1)
	_ = a.Add(ge)
	if _, order, _ := a.Epsilon(1e-5); order == 0 {
		t.Error("pure composition used with a Gaussian event")
	}
}

// TestEpsilonFloorValue pins the floor the documentation states: 0.000536
// at δ = 1e-5 with the default orders (the README once said 0.0008), the
// conversion's value at order 4096 for zero Rényi DP.
func TestEpsilonFloorValue(t *testing.T) {
	f, err := EpsilonFloor(nil, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	a := 4096.0
	want := (math.Log(1e5)-math.Log(a))/(a-1) + math.Log((a-1)/a)
	if math.Abs(f-want) > 1e-15 || math.Abs(f-0.000536) > 5e-7 {
		t.Fatalf("EpsilonFloor(1e-5) = %.9g, want %.9g (0.000536)", f, want)
	}
	if _, err := NoiseMultiplier(0.01, 1000, f, 1e-5); err == nil {
		t.Error("a target at the floor was accepted")
	}
	if _, err := NoiseMultiplier(0.01, 1000, 0.00054, 1e-5); err != nil {
		t.Errorf("ε = 0.00054, just above the floor, was refused: %v", err)
	}
}
