package dp

import (
	"math"
	"testing"
)

func TestDPSGDAggregateExact(t *testing.T) {
	cfg := SGDConfig{ClipNorm: 1, NoiseMultiplier: 1.1, SamplingRate: 0.01, ExpectedBatchSize: 4}
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
	for j := range out {
		want := (sum[j] + ref.Gaussian(1.1*1)) / 4
		if math.Abs(float64(out[j])-want) > 1e-6 {
			t.Errorf("coordinate %d: %g, want %g", j, out[j], want)
		}
	}
}

func TestDPSGDNoiseScale(t *testing.T) {
	// Empty batches give pure noise of standard deviation σC/B.
	cfg := SGDConfig{ClipNorm: 2, NoiseMultiplier: 1.5, SamplingRate: 0.1, ExpectedBatchSize: 10}
	d, _ := NewDPSGD(cfg, seeded(8))
	out := make([]float32, 1<<17)
	if _, err := d.Aggregate(nil, out); err != nil {
		t.Fatal(err)
	}
	var ss float64
	for _, v := range out {
		ss += float64(v) * float64(v)
	}
	sd := math.Sqrt(ss / float64(len(out)))
	if want := 1.5 * 2 / 10; math.Abs(sd/want-1) > 0.01 {
		t.Errorf("noise sd %g, want %g", sd, want)
	}
}

func TestDPSGDErrorsAndCharge(t *testing.T) {
	for _, cfg := range []SGDConfig{
		{ClipNorm: 0, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1},
		{ClipNorm: 1, NoiseMultiplier: 0, SamplingRate: 0.1, ExpectedBatchSize: 1},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0, ExpectedBatchSize: 1},
		{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 0},
		{ClipNorm: math.NaN(), NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 1},
	} {
		if _, err := NewDPSGD(cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	d, _ := NewDPSGD(SGDConfig{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.1, ExpectedBatchSize: 5}, nil)
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
	e2, _, _ := ScheduleEpsilon(0.1, 1, 100, 1e-5)
	if e1 != e2 {
		t.Errorf("charged ε %g, want %g", e1, e2)
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

func BenchmarkDPSGDAggregate(b *testing.B) {
	d, _ := NewDPSGD(SGDConfig{ClipNorm: 1, NoiseMultiplier: 1, SamplingRate: 0.01, ExpectedBatchSize: 64}, seeded(1))
	grads := make([][]float32, 64)
	for i := range grads {
		grads[i] = make([]float32, 100000)
		for j := range grads[i] {
			grads[i][j] = float32(j%7) * 0.01
		}
	}
	out := make([]float32, 100000)
	for b.Loop() {
		_, _ = d.Aggregate(grads, out)
	}
}
