package metric

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestNewLMNNValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"negative K", Options{K: -1}},
		{"K above MaxK", Options{K: MaxK + 1}},
		{"negative margin", Options{Margin: -1}},
		{"NaN margin", Options{Margin: math.NaN()}},
		{"infinite margin", Options{Margin: math.Inf(1)}},
		{"μ above 1", Options{Mu: 1.5}},
		{"negative μ", Options{Mu: -0.1}},
		{"NaN μ", Options{Mu: math.NaN()}},
		{"negative regularisation", Options{Regularization: -1}},
		{"negative output dimension", Options{OutputDim: -1}},
		{"huge output dimension", Options{OutputDim: MaxDim + 1}},
		{"negative iterations", Options{Solver: Solver{Iterations: -1}}},
		{"negative learning rate", Options{Solver: Solver{LearningRate: -1}}},
		{"infinite learning rate", Options{Solver: Solver{LearningRate: math.Inf(1)}}},
		{"NaN tolerance", Options{Solver: Solver{Tolerance: math.NaN()}}},
		{"negative impostors", Options{Solver: Solver{Impostors: -1}}},
		{"negative workers", Options{Solver: Solver{Workers: -2}}},
	} {
		if _, err := NewLMNN(tc.o); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	l, err := NewLMNN(Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := l.Options()
	if o.K != 3 || o.Margin != 1 || o.Mu != 0.5 || o.Iterations != 200 || o.Impostors != 64 || o.Refresh != 10 || o.Workers < 1 {
		t.Errorf("defaults %+v", o)
	}
	for _, tc := range []MTOptions{{Gamma0: -1}, {Gamma: math.NaN()}, {TaskInit: math.Inf(1)}, {TaskDim: -1}, {Mu: 2}} {
		if _, err := NewMTLMNN(tc); err == nil {
			t.Errorf("NewMTLMNN(%+v) accepted", tc)
		}
	}
}

func TestFitRejectsBadData(t *testing.T) {
	x := [][]float64{{0, 0}, {0, 1}, {5, 5}, {5, 6}}
	for _, tc := range []struct {
		name string
		d    Data
		init *Metric
		want string
	}{
		{"no vectors", Data{}, nil, "no training vectors"},
		{"label count", Data{X: x, Labels: []int{0, 0, 1}}, nil, "labels"},
		{"ragged", Data{X: [][]float64{{0, 0}, {1}}, Labels: []int{0, 0}}, nil, "size"},
		{"NaN", Data{X: [][]float64{{0, math.NaN()}, {1, 1}}, Labels: []int{0, 0}}, nil, "non-finite"},
		{"no pairs", Data{X: x, Labels: []int{0, 1, 2, Unnamed}}, nil, "no person has two"},
		{"rejection out of range", Data{X: x, Labels: []int{0, 0, 1, 1}, Rejections: []Rejection{{Face: 4, Label: 0}}}, nil, "rejection of face 4"},
		{"rejection of nobody", Data{X: x, Labels: []int{0, 0, 1, 1}, Rejections: []Rejection{{Face: 1, Label: -1}}}, nil, "names no person"},
		{"named and rejected", Data{X: x, Labels: []int{0, 0, 1, 1}, Rejections: []Rejection{{Face: 1, Label: 0}}}, nil, "both named and rejected"},
		{"init size", Data{X: x, Labels: []int{0, 0, 1, 1}}, Identity(3), "initial map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := NewLMNN(Options{})
			_, _, err := l.Fit(context.Background(), tc.d, tc.init)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Same data and seed give bit-identical maps, whatever the worker count.
func TestFitDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	d := synthFaces(rng, 10, 6, 16, 0.5)
	d.X = append(d.X, make([]float64, 16))
	d.X[len(d.X)-1][0] = 1
	d.Labels = append(d.Labels, Unnamed)
	d.Rejections = []Rejection{{Face: len(d.X) - 1, Label: 2}}
	rot, _ := RandomRotation([32]byte{'d'}, 16)
	var ref []float64
	for _, workers := range []int{1, 1, 2, 3} {
		m, _ := fit(t, Options{Solver: Solver{Workers: workers}}, d, rot)
		if ref == nil {
			ref = m.Matrix()
			continue
		}
		for i, v := range m.Matrix() {
			if math.Float64bits(v) != math.Float64bits(ref[i]) {
				t.Fatalf("workers %d: entry %d is %v, first run %v", workers, i, v, ref[i])
			}
		}
	}
}

func TestFitStopsOnCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	d := synthFaces(rng, 10, 6, 16, 0.5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l, _ := NewLMNN(Options{})
	if _, _, err := l.Fit(ctx, d, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// The MT-LMNN gradient (shared and private factors, both regularisers)
// matches finite differences, and with the shared map fixed its gradient is
// zero.
func TestMTLMNNGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 66))
	const dim = 4
	a := gridTask(rng, dim, 0, 1, 6, 1)
	b := gridTask(rng, dim, 0, 2, 6, 1)
	l, err := NewMTLMNN(MTOptions{Gamma0: 3, Gamma: 2, TaskDim: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, fixed := range []bool{false, true} {
		f, params, err := l.setup([]Task{{Data: a}, {Data: b}}, nil, fixed)
		if err != nil {
			t.Fatal(err)
		}
		for i := range params {
			params[i] += 0.3 * rng.NormFloat64()
		}
		f.refresh(params)
		g := make([]float64, len(params))
		f.value(params, g)
		if fixed {
			for i := range dim * dim {
				if g[i] != 0 {
					t.Fatalf("fixed shared map has gradient %v", g[:dim*dim])
				}
			}
			// Finite differences only over the private factors.
			h := 1e-6
			for i := dim * dim; i < len(params); i++ {
				old := params[i]
				params[i] = old + h
				fp := f.value(params, nil)
				params[i] = old - h
				fm := f.value(params, nil)
				params[i] = old
				if num := (fp - fm) / (2 * h); math.Abs(num-g[i]) > 1e-5*math.Max(1, math.Abs(num)) {
					t.Errorf("fixed W0: ∂/∂p[%d] analytic %.8g, numeric %.8g", i, g[i], num)
				}
			}
			continue
		}
		checkGradient(t, f, params, g)
	}
}

// Loss (every impostor, screened by Gram-form distances) equals a
// brute-force count over all triplets.
func TestLossMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(67, 68))
	d := synthFaces(rng, 6, 5, 8, 0.5)
	d.X = append(d.X, d.X[0])
	d.Labels = append(d.Labels, Unnamed)
	d.Rejections = []Rejection{{Face: len(d.X) - 1, Label: 0}, {Face: 7, Label: 0}}
	v := make([]float64, 5*8)
	for i := range v {
		v[i] = 2 * rng.NormFloat64()
	}
	m, _ := NewMetric(5, 8, v)
	l, _ := NewLMNN(Options{K: 2})
	got, err := l.Loss(m, d)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProblem(d, 2, 1, 0.5, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var pull, hinge float64
	var viol int
	for a := range d.X {
		if d.Labels[a] < 0 {
			continue
		}
		for _, j := range p.targets[a] {
			dp := m.SquaredDistance(d.X[a], d.X[j])
			pull += dp
			for n := range d.X {
				neg := d.Labels[n] >= 0 && d.Labels[n] != d.Labels[a]
				for _, r := range d.Rejections {
					neg = neg || (r.Face == n && r.Label == d.Labels[a])
				}
				if !neg {
					continue
				}
				if h := 1 + dp - m.SquaredDistance(d.X[a], d.X[n]); h > 0 {
					hinge += h
					viol++
				}
			}
		}
	}
	if got.Violations != viol || math.Abs(got.Hinge-hinge) > 1e-9*hinge || math.Abs(got.Pull-pull) > 1e-9*pull {
		t.Fatalf("Loss %+v; brute force pull %v, hinge %v, violations %d", got, pull, hinge, viol)
	}
	if viol == 0 {
		t.Fatal("no violations: the comparison would not test the hinge")
	}
}
