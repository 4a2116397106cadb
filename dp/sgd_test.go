package dp

import (
	"math"
	"strings"
	"testing"
)

func TestDPSGDAggregateExact(t *testing.T) {
	cfg := SGDConfig{ClipNorm: 1, NoiseMultiplier: 1.1, SamplingRate: 0.01, ExpectedBatchSize: 4, Dimension: 3}
	d, err := NewDPSGD(cfg, seeded(7))
	if err != nil {
		t.Fatal(err)
	}
	grads := [][]float32{
		{3, 4, 0},   // norm 5 → scaled by 1/5
		{0.3, 0, 0}, // norm 0.3 → unchanged
		{0, 0, -2},  // norm 2 → scaled by 1/2
	}
	out := make([]float32, 3)
	clipped, err := d.Aggregate(grads, out)
	if err != nil {
		t.Fatal(err)
	}
	if clipped != 2 {
		t.Errorf("clipped %d gradients, want 2", clipped)
	}
	sum := []float64{0.6 + 0.3, 0.8, -1}
	ref := seeded(7)
	g := d.Grid()
	for j := range out {
		want := float32(release(snap(sum[j], g.Gamma), ref.tableGaussian(d.table), g.Gamma) / 4)
		if out[j] != want {
			t.Errorf("coordinate %d: %g, want %g", j, out[j], want)
		}
		if math.Abs(float64(out[j])*4-sum[j]) > 8*1.1 {
			t.Errorf("coordinate %d: %g is far from the sum %g", j, out[j], sum[j])
		}
	}
}

func TestDPSGDNoiseScale(t *testing.T) {
	// Empty batches give pure noise of standard deviation σC/B.
	cfg := SGDConfig{ClipNorm: 2, NoiseMultiplier: 1.5, SamplingRate: 0.1, ExpectedBatchSize: 10, Dimension: 1 << 16}
	d, _ := NewDPSGD(cfg, seeded(8))
	out := make([]float32, 1<<16)
	if _, err := d.Aggregate(nil, out); err != nil {
		t.Fatal(err)
	}
	var ss float64
	for _, v := range out {
		ss += float64(v) * float64(v)
	}
	sd := math.Sqrt(ss / float64(len(out)))
	if want := 1.5 * 2 / 10; math.Abs(sd/want-1) > 0.015 {
		t.Errorf("noise sd %g, want %g", sd, want)
	}
}

func TestNoiseSumsContract(t *testing.T) {
	for _, workers := range []int{1, 2, 3} {
		cfg := SGDConfig{ClipNorm: 0.5, NoiseMultiplier: 2, SamplingRate: 0.05, ExpectedBatchSize: 20, Dimension: 5000, Workers: workers}
		d, err := NewDPSGD(cfg, seeded(9))
		if err != nil {
			t.Fatal(err)
		}
		a := make([]float32, 1000)
		b := make([]float32, 4000)
		for i := range a {
			a[i] = 0.001 * float32(i)
		}
		if err := d.NoiseSums(a, b); err != nil {
			t.Fatal(err)
		}
		g := d.Grid()
		var ss float64
		for _, s := range [][]float32{a, b} {
			for i, v := range s {
				if k := float64(v) / g.Gamma; k != math.Trunc(k) {
					t.Fatalf("workers %d: coordinate %d = %g is not a multiple of γ = %g", workers, i, v, g.Gamma)
				}
			}
		}
		for _, v := range b {
			ss += float64(v) * float64(v)
		}
		if sd := math.Sqrt(ss / float64(len(b))); math.Abs(sd/(2*0.5)-1) > 0.05 {
			t.Errorf("workers %d: noise sd %g, want 1", workers, sd)
		}
		if err := d.NoiseSums(a); err == nil || !strings.Contains(err.Error(), "1000 coordinates") {
			t.Errorf("wrong total length: %v", err)
		}
		bad := []float32{float32(math.NaN())}
		keep := a[0]
		if err := d.NoiseSums(a[:999], bad, b); err == nil {
			t.Error("NaN accepted")
		} else if a[0] != keep {
			t.Error("refused sums were changed")
		}
	}
}

func TestDPSGDEventAccountsForRounding(t *testing.T) {
	cfg := SGDConfig{ClipNorm: 1, NoiseMultiplier: 1.1, SamplingRate: 0.01, ExpectedBatchSize: 64, Dimension: 557824}
	d, err := NewDPSGD(cfg, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := d.Event(1000)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != KindSubsampledDiscreteGaussian || ev.Count != 1000 || ev.SamplingRate != 0.01 {
		t.Errorf("event %+v", ev)
	}
	// The effective multiplier is Scale/(C/γ + √d): below σ by at most 2^−20 relative.
	g := d.Grid()
	want := float64(g.Scale) / (1/g.Gamma + math.Sqrt(557824))
	if math.Abs(ev.NoiseMultiplier/want-1) > 1e-12 || ev.NoiseMultiplier >= 1.1 || ev.NoiseMultiplier < 1.1*(1-math.Ldexp(1, -20)) {
		t.Errorf("effective multiplier %.12g, want %.12g (σ = 1.1)", ev.NoiseMultiplier, want)
	}
	// A huge σ coarsens the grid (σC/γ ≤ 2^31) and the event says so.
	big := cfg
	big.NoiseMultiplier = 1e4
	m, err := big.EffectiveNoiseMultiplier()
	if err != nil {
		t.Fatal(err)
	}
	if !(m < 1e4 && m > 1e4*0.99) {
		t.Errorf("σ = 1e4: effective multiplier %g", m)
	}
}

func TestDPSGDErrorsAndCharge(t *testing.T) {
	for _, cfg := range []SGDConfig{
		{ClipNorm: 0, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1, Dimension: 3},
		{ClipNorm: 1, NoiseMultiplier: 0, SamplingRate: 0.1, ExpectedBatchSize: 1, Dimension: 3},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0, ExpectedBatchSize: 1, Dimension: 3},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 0, Dimension: 3},
		{ClipNorm: math.NaN(), NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1, Dimension: 3},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1, Dimension: 0},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1, Dimension: 3, Workers: -1},
	} {
		if _, err := NewDPSGD(cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		} else if strings.Count(err.Error(), "dp:") != 1 {
			t.Errorf("message repeats its prefix: %v", err)
		}
	}
	d, _ := NewDPSGD(SGDConfig{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 5, Dimension: 3}, nil)
	if _, err := d.Aggregate([][]float32{{1, 2}}, make([]float32, 3)); err == nil {
		t.Error("dimension mismatch accepted")
	}
	if _, err := d.Aggregate([][]float32{{float32(math.NaN()), 0, 0}}, make([]float32, 3)); err == nil {
		t.Error("NaN gradient accepted")
	}
	if _, err := d.Aggregate(nil, nil); err == nil {
		t.Error("empty output accepted")
	}
	a, _ := NewAccountant(nil)
	if err := d.Charge(a, 100); err != nil {
		t.Fatal(err)
	}
	e1, _, _ := a.Epsilon(1e-5)
	mu, _ := d.Config().EffectiveNoiseMultiplier()
	ev, _ := SubsampledDiscreteGaussianEvent(0.1, mu, 100)
	b, _ := NewAccountant(nil)
	_ = b.Add(ev)
	e2, _, _ := b.Epsilon(1e-5)
	e3, _, _ := ScheduleEpsilon(0.1, 1, 100, 1e-5)
	if e1 != e2 || !(e1 >= e3) || e1 > e3*1.01 {
		t.Errorf("charged ε %g, want %g (continuous Gaussian %g)", e1, e2, e3)
	}
}

func TestClipL2(t *testing.T) {
	v := []float32{3, 4}
	if s := ClipL2(v, 1); math.Abs(s-0.2) > 1e-12 || math.Abs(float64(v[0])-0.6) > 1e-6 {
		t.Errorf("ClipL2: factor %g, v %v", s, v)
	}
	w := []float32{0.1, 0.1}
	if s := ClipL2(w, 1); s != 1 || w[0] != 0.1 {
		t.Errorf("ClipL2 changed a short vector: %g %v", s, w)
	}
}

// BenchmarkNoiseDPSGD noises one step of the LightFace-sized model
// (557,824 coordinates), with one and two workers.
func BenchmarkNoiseDPSGD(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(map[int]string{1: "workers=1", 2: "workers=2"}[workers], func(b *testing.B) {
			d, _ := NewDPSGD(SGDConfig{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.01, ExpectedBatchSize: 64, Dimension: 557824, Workers: workers}, seeded(1))
			sums := make([]float32, 557824)
			for b.Loop() {
				_ = d.NoiseSums(sums)
			}
			b.ReportMetric(float64(b.N)*557824/b.Elapsed().Seconds(), "coords/s")
		})
	}
}
