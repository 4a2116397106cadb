package metric

import (
	"context"
	"math/rand/v2"
	"testing"
)

// twoDims returns n points per class for classes at signal offsets
// 0, gap, 2·gap… along u, with Gaussian noise of sd noise along u⊥ and
// sd jitter along u.
func twoDims(rng *rand.Rand, classes, n int, gap, jitter, noise float64, u [2]float64) Data {
	var d Data
	for c := range classes {
		for range n {
			s := float64(c)*gap + jitter*rng.NormFloat64()
			t := noise * rng.NormFloat64()
			d.X = append(d.X, []float64{s*u[0] - t*u[1], s*u[1] + t*u[0]})
			d.Labels = append(d.Labels, c)
		}
	}
	return d
}

func fit(t *testing.T, o Options, d Data, init *Metric) (*Metric, *Report) {
	t.Helper()
	l, err := NewLMNN(o)
	if err != nil {
		t.Fatal(err)
	}
	m, rep, err := l.Fit(context.Background(), d, init)
	if err != nil {
		t.Fatal(err)
	}
	return m, rep
}

// Known optimum (1): dimension 1 is pure noise, dimension 0 separates the
// classes, so the learned W must weigh dimension 0 far above dimension 1.
func TestLMNNShrinksNoiseDimension(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noise float64
		ratio float64 // required W00 / W11
	}{
		{"noise comparable to gap", 1, 50},
		{"noise 3x gap", 3, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			d := twoDims(rng, 4, 25, 1, 0.1, tc.noise, [2]float64{1, 0})
			m, rep := fit(t, Options{}, d, nil)
			w := m.Mahalanobis()
			if got := w[0] / w[3]; got < tc.ratio {
				t.Errorf("W = %v: signal/noise weight %.3g, want ≥ %v (report %+v)", w, got, tc.ratio, rep)
			}
			if rep.Final.Objective >= rep.Initial.Objective {
				t.Errorf("objective %v → %v did not decrease", rep.Initial.Objective, rep.Final.Objective)
			}
			t.Logf("W = %.4g, ratio %.3g, iterations %d, objective %.4g → %.4g, violations %d → %d",
				w, w[0]/w[3], rep.Iterations, rep.Initial.Objective, rep.Final.Objective, rep.Initial.Violations, rep.Final.Violations)
		})
	}
}
