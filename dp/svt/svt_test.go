package svt

import (
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

func seeded(b byte) *dp.Source {
	var s [32]byte
	s[0] = b
	return dp.NewSeededSource(s)
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Abs(b) }

func TestIreneScalesConstants(t *testing.T) {
	// Hand-computed from the paper's formulas for ε = 1, δ = 1e-5, c = 10:
	// ε₁ = √512/√513 = 0.9990253, ε₂ = 2/√513 = 0.0883022,
	// σ(1) = √(320·ln 2e5) = 62.49755.
	s, err := IreneScales(IreneParams{Epsilon: 1, Delta: 1e-5, Clip: 1, Threshold: 0, MaxCount: 10})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"ε₁", s.Eps1, 0.9990253},
		{"ε₂", s.Eps2, 0.0883022},
		{"threshold scale σ(ε₁)", s.Threshold, 62.49755 / 0.9990253},
		{"comparison scale 2σ(ε₁)", s.Compare, 2 * 62.49755 / 0.9990253},
		{"answer scale σ(ε₂)", s.Answer, 62.49755 / 0.0883022},
	}
	for _, c := range checks {
		if !near(c.got, c.want, 1e-6) {
			t.Errorf("%s = %.7g, want %.7g", c.name, c.got, c.want)
		}
	}
	// Sensitivity scales every noise linearly.
	s2, _ := IreneScales(IreneParams{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 10, Sensitivity: 0.25})
	if !near(s2.Answer, s.Answer/4, 1e-12) || !near(s2.Threshold, s.Threshold/4, 1e-12) {
		t.Error("sensitivity does not scale the noise")
	}
}

func TestIreneCost(t *testing.T) {
	p := IreneParams{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 10}
	c, err := IreneCost(p)
	if err != nil {
		t.Fatal(err)
	}
	// 10·(1/62.5585 + 2/125.117) + 10/707.776 = 0.319701 + 0.014129.
	if !near(c.PureEpsilon, 0.333830, 1e-4) {
		t.Errorf("pure ε = %.6f, want 0.333830", c.PureEpsilon)
	}
	if c.ClaimedEpsilon != 1 || c.ClaimedDelta != 1e-5 {
		t.Errorf("claimed (%g, %g)", c.ClaimedEpsilon, c.ClaimedDelta)
	}
	a, _ := dp.NewAccountant(nil)
	if err := a.Add(c.Events...); err != nil {
		t.Fatal(err)
	}
	eps, _, _ := a.Epsilon(1e-5)
	if eps <= 0 || eps > c.PureEpsilon {
		t.Errorf("accountant ε %g should be positive and at most the pure total %g", eps, c.PureEpsilon)
	}
}

// TestIreneCostCoversTheGrid: the noise Irene draws is discrete Laplace on
// a power-of-two grid, so the shifts of the privacy proof must be whole
// grid steps: ⌈Δ/γ_t⌉ for the threshold, ⌈(Δ + ⌈Δ/γ_t⌉γ_t)/γ_q⌉ for the
// selected comparison, and ⌊Δ/γ_a⌋ + 1 for an answer's snapped value,
// each step costing 1/t (t the integer scale). The charge must cover
// these worst cases; before, it was the continuous Δ/b_t + 2Δ/b_q and
// Laplace(b_a/Δ), short by up to a step per noise. It may exceed them by
// at most 2^−20 per noise (t ≥ 2^20).
func TestIreneCostCoversTheGrid(t *testing.T) {
	for _, p := range []IreneParams{
		{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 10},
		{Epsilon: 3, Delta: 1e-6, Clip: 1, MaxCount: 3, Sensitivity: 0.01},
	} {
		s, err := IreneScales(p)
		if err != nil {
			t.Fatal(err)
		}
		d := p.sens()
		grid := func(b float64) (gamma, scale float64) {
			g, err := dp.LaplaceGrid(b, 1)
			if err != nil {
				t.Fatal(err)
			}
			return g.Gamma, float64(g.Scale)
		}
		gt, tt := grid(s.Threshold)
		gq, tq := grid(s.Compare)
		ga, ta := grid(s.Answer)
		shiftT := math.Ceil(d/gt) * gt
		run := shiftT/gt/tt + math.Ceil((d+shiftT)/gq)/tq
		answer := (math.Floor(d/ga) + 1) / ta
		c, err := IreneCost(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(p.MaxCount) * (run + answer); c.PureEpsilon < want {
			t.Errorf("%+v: pure ε %.12g below the discretised mechanisms' %.12g", p, c.PureEpsilon, want)
		}
		for i, want := range []float64{run, answer} {
			e := c.Events[i]
			if e.Kind != dp.KindPureDP || e.Count != p.MaxCount || e.Epsilon < want {
				t.Errorf("%+v: event %d is %s ε %.12g ×%d, want pure ε ≥ %.12g ×%d", p, i, e.Kind, e.Epsilon, e.Count, want, p.MaxCount)
			}
			cont := []float64{d/s.Threshold + 2*d/s.Compare, d / s.Answer}[i]
			if e.Epsilon > cont+[]float64{3, 1}[i]*math.Ldexp(1, -20) {
				t.Errorf("%+v: event %d ε %.12g is more than a grid step per noise above the continuous %.12g", p, i, e.Epsilon, cont)
			}
		}
	}
}

func TestIreneSelectsAndClips(t *testing.T) {
	// With a huge ε the noise is negligible: exactly the coordinates whose
	// clipped value reaches γ₃ are released, clipped to γ₂.
	p := IreneParams{Epsilon: 1e9, Delta: 0.5, Clip: 2, Threshold: 1, MaxCount: 3}
	tmp := []float64{5, -5, 0.1, 3, 0.99, 1.5, -1}
	res, err := Irene(p, tmp, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	sel := slices.Clone(res.Selected)
	sort.Ints(sel)
	if !slices.Equal(sel, []int{0, 3, 5}) {
		t.Fatalf("selected %v, want [0 3 5]", sel)
	}
	for i, v := range res.Gradient {
		want := 0.0
		switch i {
		case 0, 3:
			want = 2
		case 5:
			want = 1.5
		}
		if math.Abs(v-want) > 1e-6 {
			t.Errorf("g[%d] = %g, want %g", i, v, want)
		}
	}
	// Count γ₄ stops the run.
	p.MaxCount = 1
	res, _ = Irene(p, tmp, seeded(2))
	if len(res.Selected) != 1 {
		t.Errorf("released %d coordinates with γ₄ = 1", len(res.Selected))
	}
	// Too few pass: the run ends after examining every coordinate.
	p.MaxCount = 100
	res, _ = Irene(p, tmp, seeded(3))
	if res.Examined != len(tmp) || len(res.Selected) != 3 {
		t.Errorf("examined %d, selected %d", res.Examined, len(res.Selected))
	}
}

func TestIreneAnswerNoiseIsLaplace(t *testing.T) {
	// Every coordinate selected (threshold far below), no clipping: the
	// answers are pure Lap(σ(ε₂)) noise. KS test against that scale.
	const n = 40000
	p := IreneParams{Epsilon: 1, Delta: 1e-5, Clip: 1e12, Threshold: -1e12, MaxCount: n}
	s, _ := IreneScales(p)
	res, err := Irene(p, make([]float64, n), seeded(4))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Selected) != n {
		t.Fatalf("selected %d of %d", len(res.Selected), n)
	}
	x := slices.Clone(res.Gradient)
	slices.Sort(x)
	ks := func(b float64) float64 {
		var d float64
		for i, v := range x {
			f := 0.5 * math.Exp(v/b)
			if v >= 0 {
				f = 1 - 0.5*math.Exp(-v/b)
			}
			d = math.Max(d, math.Max(f-float64(i)/n, float64(i+1)/n-f))
		}
		return d
	}
	crit := 1.63 / math.Sqrt(n)
	if d := ks(s.Answer); d > crit {
		t.Errorf("answers: KS %.4f against Lap(%g), critical %.4f", d, s.Answer, crit)
	}
	if d := ks(s.Answer * 1.1); d <= crit {
		t.Errorf("KS cannot tell a 10%% larger scale apart (D=%.4f)", d)
	}
}

func TestSparseScales(t *testing.T) {
	tests := []struct {
		p              SparseParams
		thresh, compar float64
	}{
		// c = 1: ε₁ = 1/(1 + 2^{2/3}) = 0.386488, ε₂ = 0.613512.
		{SparseParams{Epsilon: 1, Sensitivity: 1, MaxCount: 1}, 2.587401, 2 / 0.613512},
		// Monotonic, c = 1: ε₁ = ε₂ = 0.5.
		{SparseParams{Epsilon: 1, Sensitivity: 1, MaxCount: 1, Monotonic: true}, 2, 2},
		// c = 4, Δ = 0.5, ε = 2: r = 8^{2/3} = 4, ε₁ = 0.4, ε₂ = 1.6.
		{SparseParams{Epsilon: 2, Sensitivity: 0.5, MaxCount: 4}, 0.5 / 0.4, 8 * 0.5 / 1.6},
	}
	for _, tc := range tests {
		tb, cb, err := SparseScales(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if !near(tb, tc.thresh, 1e-5) || !near(cb, tc.compar, 1e-5) {
			t.Errorf("%+v: scales (%g, %g), want (%g, %g)", tc.p, tb, cb, tc.thresh, tc.compar)
		}
	}
}

func TestSparseEmpiricalPrivacy(t *testing.T) {
	// AboveThreshold (c = 1, ε = 1) on neighbouring query streams: the
	// probability of each outcome (index of the first positive, or none)
	// may differ by at most e^ε.
	a := []float64{0, 0, 0, 1}
	b := []float64{1, 1, 1, 0}
	const trials = 60000
	run := func(q []float64, seed byte) []float64 {
		src := seeded(seed)
		counts := make([]float64, len(q)+1)
		for range trials {
			s, _ := NewSparse(SparseParams{Epsilon: 1, Sensitivity: 1, Threshold: 2, MaxCount: 1}, src)
			out := len(q)
			for i, v := range q {
				if up, _ := s.Query(v); up {
					out = i
					break
				}
			}
			counts[out]++
		}
		return counts
	}
	ca, cb := run(a, 5), run(b, 6)
	for k := range ca {
		if ca[k] < 500 || cb[k] < 500 {
			continue
		}
		r := math.Max(ca[k]/cb[k], cb[k]/ca[k])
		if r > math.E*1.1 {
			t.Errorf("outcome %d: probability ratio %.3f exceeds e^ε", k, r)
		}
	}
}

func TestSparseExhaustionAndErrors(t *testing.T) {
	s, err := NewSparse(SparseParams{Epsilon: 1e9, Sensitivity: 1, Threshold: 0, MaxCount: 2}, seeded(7))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if up, err := s.Query(10); !up || err != nil {
			t.Fatalf("query: %v %v", up, err)
		}
	}
	if !s.Done() {
		t.Error("not done after c positives")
	}
	if _, err := s.Query(10); err == nil {
		t.Error("query after exhaustion accepted")
	}
	if c, _ := s.Cost(); c.PureEpsilon != 1e9 || len(c.Events) != 1 {
		t.Errorf("cost %+v", c)
	}
	for _, p := range []SparseParams{
		{Epsilon: 0, Sensitivity: 1, MaxCount: 1},
		{Epsilon: 1, Sensitivity: 0, MaxCount: 1},
		{Epsilon: 1, Sensitivity: 1, MaxCount: 0},
		{Epsilon: 1, Sensitivity: 1, MaxCount: 1, Threshold: math.NaN()},
	} {
		if _, err := NewSparse(p, nil); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	for _, p := range []IreneParams{
		{Epsilon: 0, Delta: 1e-5, Clip: 1, MaxCount: 1},
		{Epsilon: 1, Delta: 1, Clip: 1, MaxCount: 1},
		{Epsilon: 1, Delta: 1e-5, Clip: 0, MaxCount: 1},
		{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 0},
		{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 1, Sensitivity: -1},
	} {
		if _, err := Irene(p, []float64{1}, nil); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := Irene(IreneParams{Epsilon: 1, Delta: 1e-5, Clip: 1, MaxCount: 1}, []float64{math.NaN()}, nil); err == nil {
		t.Error("NaN gradient accepted")
	}
}
