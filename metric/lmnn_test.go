package metric

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/veil-privacy/veil/internal/vec"
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

// Known optimum (2): classes already separated with margin. The hinge loss
// is zero; with μ = 1 and no regularisation the gradient is exactly zero so
// the map does not move; with the default μ the pull only shrinks the
// metric, and the induced neighbours do not change.
func TestLMNNSeparatedIsStationary(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := twoDims(rng, 3, 10, 10, 0.1, 0.1, [2]float64{1, 0})
	l, err := NewLMNN(Options{Mu: 1})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Loss(Identity(2), d)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Hinge != 0 || ls.Violations != 0 {
		t.Fatalf("separated data has hinge %v, %d violations", ls.Hinge, ls.Violations)
	}
	p, _ := l.problem(d)
	f := &lmnnObjective{p: p, out: 2}
	v := Identity(2).Matrix()
	g := make([]float64, 4)
	f.refresh(v)
	f.value(v, g)
	for _, x := range g {
		if x != 0 {
			t.Fatalf("gradient %v at a zero-loss point with μ = 1", g)
		}
	}
	m, rep := fit(t, Options{Mu: 1}, d, nil)
	if got := m.Matrix(); got[0] != 1 || got[1] != 0 || got[2] != 0 || got[3] != 1 {
		t.Errorf("μ = 1: map moved to %v (report %+v)", got, rep)
	}

	// Default μ: the pull shrinks W (anisotropically, so the order of a
	// person's own faces may change) but every face's neighbours stay its
	// own person's and no margin is broken.
	m, rep = fit(t, Options{}, d, nil)
	if rep.Final.Hinge != 0 || rep.Final.Pull >= rep.Initial.Pull {
		t.Errorf("default μ: pull %v → %v, hinge %v", rep.Initial.Pull, rep.Final.Pull, rep.Final.Hinge)
	}
	for _, mm := range []*Metric{Identity(2), m} {
		for i, nb := range neighbourGraph(mm, d.X, 5) {
			for _, j := range nb {
				if d.Labels[j] != d.Labels[i] {
					t.Fatalf("W = %v: face %d has neighbour %d of another person", mm.Mahalanobis(), i, j)
				}
			}
		}
	}
}

func neighbourGraph(m *Metric, x [][]float64, k int) [][]int32 {
	g := make([][]int32, len(x))
	for i := range x {
		var h nearest
		h.reset(k)
		for j := range x {
			if j != i {
				h.offer(m.SquaredDistance(x[i], x[j]), int32(j))
			}
		}
		g[i] = h.sorted()
	}
	return g
}

// Known optimum (3): in 2-D, classes differ only along the rotated axis
// u = (cos θ, sin θ) and the orthogonal direction is pure noise, larger than
// the signal. The optimal map is rank one along u: a 1-row V started from a
// secret random direction must turn to ±u, and a full W's top eigenvector
// must be u with the other eigenvalue vanishing.
func TestLMNNRotatedAxis(t *testing.T) {
	for _, theta := range []float64{0.3, 1.1, 2.5} {
		u := [2]float64{math.Cos(theta), math.Sin(theta)}
		rng := rand.New(rand.NewPCG(7, uint64(theta*10)))
		d := twoDims(rng, 4, 20, 1, 0.1, 3, u)

		rot, err := RandomRotation([32]byte{byte(theta * 10)}, 2)
		if err != nil {
			t.Fatal(err)
		}
		init, err := rot.Truncate(1)
		if err != nil {
			t.Fatal(err)
		}
		m, rep := fit(t, Options{OutputDim: 1}, d, init)
		v := m.Matrix()
		cos := math.Abs(v[0]*u[0]+v[1]*u[1]) / math.Hypot(v[0], v[1])
		if cos < 0.999 {
			t.Errorf("θ = %v: 1-row V = %v at |cos| %.5f to u (report %+v)", theta, v, cos, rep)
		}

		m, _ = fit(t, Options{}, d, nil)
		vals, vecs := vec.SymEig(m.Mahalanobis(), 2)
		cos = math.Abs(vecs[0]*u[0] + vecs[1]*u[1])
		if cos < 0.999 || vals[1] > 1e-3*vals[0] {
			t.Errorf("θ = %v: W eigenvalues %v, top eigenvector %v at |cos| %.5f to u", theta, vals, vecs[:2], cos)
		}
	}
}

func mustProblem(t *testing.T, d Data) *problem {
	t.Helper()
	p, err := newProblem(d, 3, 1, 0.5, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Known optimum (4): the analytic gradient in V matches central finite
// differences of the objective (on a fixed active set, away from kinks).
func TestLMNNGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const dim, out = 5, 3
	var d Data
	for i := range 40 {
		x := make([]float64, dim)
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		d.X = append(d.X, x)
		d.Labels = append(d.Labels, i%4)
	}
	d.X = append(d.X, []float64{0.1, 0.2, 0.3, 0.4, 0.5})
	d.Labels = append(d.Labels, Unnamed)
	d.Rejections = []Rejection{{Face: 40, Label: 1}, {Face: 3, Label: 2}}
	for _, lam := range []float64{0, 0.3} {
		p := mustProblem(t, d)
		f := &lmnnObjective{p: p, out: out, lam: lam}
		v := make([]float64, out*dim)
		for i := range v {
			v[i] = 0.5 * rng.NormFloat64()
		}
		f.refresh(v)
		g := make([]float64, len(v))
		f.value(v, g)
		if f.last.active == 0 {
			t.Fatal("no active triplets: the check would not test the hinge")
		}
		checkGradient(t, f, v, g)
	}
}

func checkGradient(t *testing.T, f objectiveFunc, v, g []float64) {
	t.Helper()
	const h = 1e-6
	for i := range v {
		old := v[i]
		v[i] = old + h
		fp := f.value(v, nil)
		v[i] = old - h
		fm := f.value(v, nil)
		v[i] = old
		num := (fp - fm) / (2 * h)
		if math.Abs(num-g[i]) > 1e-5*math.Max(1, math.Abs(num)) {
			t.Errorf("∂/∂v[%d]: analytic %.8g, finite differences %.8g", i, g[i], num)
		}
	}
}

// Known optimum (5): a rejection is a negative. An unnamed face sits inside
// person 0's cluster; without the rejection LMNN has no reason to move it,
// with "face is not person 0" it must end up beyond person 0's target
// neighbours by the margin.
func TestLMNNRejectionPushesApart(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var d Data
	for c := range 2 {
		for range 15 {
			d.X = append(d.X, []float64{float64(c)*5 + 0.3*rng.NormFloat64(), 0.3 * rng.NormFloat64()})
			d.Labels = append(d.Labels, c)
		}
	}
	// The stranger shares person 0's position in dimension 0 but is offset
	// in dimension 1, which separates no named people (so plain LMNN
	// shrinks it and brings the stranger into person 0's cluster).
	stranger := len(d.X)
	d.X = append(d.X, []float64{0, 2.5})
	d.Labels = append(d.Labels, Unnamed)

	// gap is the smallest, over person 0's faces a, of
	// d²(a, stranger) − d²(a, farthest target of a): LMNN's constraint
	// (Eq. 4) for the rejection asks for gap ≥ margin = 1.
	targets := mustProblem(t, d).targets
	gap := func(m *Metric) float64 {
		g := math.Inf(1)
		for a := range 15 {
			far := 0.0
			for _, p := range targets[a] {
				far = max(far, m.SquaredDistance(d.X[a], d.X[p]))
			}
			g = min(g, m.SquaredDistance(d.X[a], d.X[stranger])-far)
		}
		return g
	}
	plain, _ := fit(t, Options{}, d, nil)
	d.Rejections = []Rejection{{Face: stranger, Label: 0}}
	rejected, _ := fit(t, Options{}, d, nil)
	g0, g1 := gap(plain), gap(rejected)
	t.Logf("stranger's gap beyond person 0's targets: without the rejection %.3g, with %.3g (margin 1); W without %.3g, with %.3g",
		g0, g1, plain.Mahalanobis(), rejected.Mahalanobis())
	if g0 > 0.5 {
		t.Errorf("test data wrong: without the rejection the stranger is already beyond the margin (gap %.3g)", g0)
	}
	// The pull and the hinge balance at the hinge's kink (gap = margin),
	// which a subgradient method reaches only approximately.
	if g1 < 0.9 {
		t.Errorf("with the rejection the stranger's gap is %.3g, want ≈ the margin 1", g1)
	}
	if d2 := rejected.SquaredDistance(d.X[0], d.X[stranger]); d2 < 5*plain.SquaredDistance(d.X[0], d.X[stranger]) {
		t.Errorf("the rejection did not push the stranger away: d² %.3g with, %.3g without", d2, plain.SquaredDistance(d.X[0], d.X[stranger]))
	}
}
