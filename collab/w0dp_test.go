package collab

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/metric"
)

// smallLibs are libraries of synthetic people in 8 dimensions.
func smallLibs(seed uint64, libs, people, faces int) []*Library {
	rng := rand.New(rand.NewPCG(seed, 9))
	out := make([]*Library, libs)
	for li := range out {
		l := &Library{Stranger: map[int]bool{}}
		for p := range people {
			c := make([]float64, 8)
			for i := range c {
				c[i] = 0.3 * rng.NormFloat64()
			}
			for range faces {
				d := make([]float32, 8)
				for i := range d {
					d[i] = float32(c[i] + 0.1*rng.NormFloat64())
				}
				l.Descs = append(l.Descs, d)
				l.Person = append(l.Person, p)
			}
		}
		out[li] = l
	}
	return out
}

// TestW0ExchangeSensitivity plays the adversary of the W₀ exchange's
// guarantee: one person of one library, with faces of any size, changes
// the noiseless sum the coordinator releases by at most 2·Clip (the
// sensitivity the noise is calibrated to), whatever the clip.
func TestW0ExchangeSensitivity(t *testing.T) {
	o := &Options{Seed: 3}
	for _, tc := range []struct {
		name  string
		clip  float64
		scale float32
	}{
		{"ordinary person, clip 1", 1, 1},
		{"huge faces, clip 1", 1, 1e4},
		{"huge faces, clip 0.1", 0.1, 1e4},
		{"tiny clip", 1e-3, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Neighbour: library 1 without its person 3, whose faces
			// the adversary made huge in the other world.
			with := smallLibs(1, 3, 4, 4)
			for i, p := range with[1].Person {
				if p == 3 {
					for k := range with[1].Descs[i] {
						with[1].Descs[i][k] *= tc.scale
					}
				}
			}
			without := smallLibs(1, 3, 4, 4)
			l := without[1]
			var keep Library
			keep.Stranger = l.Stranger
			for i, p := range l.Person {
				if p != 3 {
					keep.Descs = append(keep.Descs, l.Descs[i])
					keep.Person = append(keep.Person, p)
				}
			}
			without[1] = &keep
			d := W0DP{Epsilon: 1, Delta: 1e-5, Clip: tc.clip}
			if err := d.defaults(); err != nil {
				t.Fatal(err)
			}
			ta, dim, err := w0Tasks(with, nil, o)
			if err != nil {
				t.Fatal(err)
			}
			tb, _, err := w0Tasks(without, nil, o)
			if err != nil {
				t.Fatal(err)
			}
			v0 := metric.Identity(dim).Matrix()
			for step := range 3 {
				sa, _ := clippedSum(ta, v0, dim, d)
				sb, _ := clippedSum(tb, v0, dim, d)
				for i := range sa {
					sa[i] -= sb[i]
				}
				if n := frob(sa); n > 2*tc.clip*(1+1e-9) {
					t.Fatalf("step %d: one person moved the sum by %g > 2·clip = %g", step, n, 2*tc.clip)
				}
			}
		})
	}
}

// TestW0ExchangeChargesFirst: the exchange's event is charged before any
// library computes, a refusing ledger stops it with nothing released,
// and the report's ε is the charged event's at the target.
func TestW0ExchangeChargesFirst(t *testing.T) {
	libs := smallLibs(2, 3, 4, 4)
	o := &Options{Seed: 1}
	refuse := errors.New("ledger refuses")
	m, _, err := SharedMetricDP(context.Background(), libs, nil, o, W0DP{Epsilon: 2, Delta: 1e-5, Source: dp.NewSeededSource([32]byte{2})},
		func(dp.Event) error { return refuse })
	if !errors.Is(err, refuse) || m != nil {
		t.Fatalf("a refusing ledger: metric %v, error %v", m, err)
	}
	var got dp.Event
	m, rep, err := SharedMetricDP(context.Background(), libs, nil, o, W0DP{Epsilon: 2, Delta: 1e-5, Steps: 5, Source: dp.NewSeededSource([32]byte{2})},
		func(ev dp.Event) error { got = ev; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != dp.KindGaussian || got.Count != 5 || got.NoiseMultiplier != rep.NoiseMultiplier {
		t.Fatalf("charged %+v, report %+v", got, rep)
	}
	eps, _, err := dp.ScheduleEpsilon(1, got.NoiseMultiplier, got.Count, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if eps > 2 || math.Abs(eps-rep.Epsilon) > 1e-12 || eps < 1.9 {
		t.Fatalf("the charged event is ε = %g, report %g, target 2", eps, rep.Epsilon)
	}
	if out, in := m.Dims(); out != 8 || in != 8 {
		t.Fatalf("W₀'s map is %d×%d", out, in)
	}
}

// TestW0ExchangeLearnsWithoutNoise: with negligible noise (a huge ε) the
// exchange lowers the libraries' LMNN loss, so the mechanism's signal is
// real and what DP costs is the noise.
func TestW0ExchangeLearnsWithoutNoise(t *testing.T) {
	libs := smallLibs(3, 4, 5, 4)
	o := &Options{Seed: 1}
	lm, err := metric.NewLMNN(metric.Options{})
	if err != nil {
		t.Fatal(err)
	}
	loss := func(m *metric.Metric) float64 {
		tasks, _, err := w0Tasks(libs, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for _, tk := range tasks {
			l, err := lm.Loss(m, metric.Data{X: tk.x, Labels: tk.person})
			if err != nil {
				t.Fatal(err)
			}
			s += l.Objective
		}
		return s
	}
	m, _, err := SharedMetricDP(context.Background(), libs, nil, o, W0DP{Epsilon: 1e5, Delta: 1e-5, Steps: 50, LearningRate: 0.05, Margin: 1,
		Source: dp.NewSeededSource([32]byte{3})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, after := loss(metric.Identity(8)), loss(m)
	if !(after < before) {
		t.Fatalf("LMNN loss %g at the identity, %g after the exchange", before, after)
	}
}
