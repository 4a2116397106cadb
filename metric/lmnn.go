package metric

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/internal/vec"
)

// Options configures LMNN. The zero value of each field means its default.
type Options struct {
	// K is the number of target neighbours per named face (default 3, at
	// most MaxK).
	K int
	// Margin is the required gap d²(a, n) − d²(a, p) (Eq. 4; default 1, the
	// paper's). It is in squared input units, so it also sets the scale of V.
	Margin float64
	// Mu ∈ (0, 1] weighs the push (hinge) term against the pull term:
	// (1−μ)·Σ d²(a, p) + μ·Σ ξ (default 0.5, which is Eq. 5 up to a factor 2).
	Mu float64
	// Regularization λ ≥ 0 adds λ·‖V‖²_F = λ·tr(W) (default 0: Eq. 5 has
	// none). The trace is the convex surrogate of rank and bounds the scale.
	Regularization float64
	// OutputDim is the number of rows of V (default: the input dimension).
	OutputDim int
	Solver
}

// MaxK bounds the number of target neighbours per face.
const MaxK = 64

// LMNN learns a Mahalanobis metric W = VᵀV by large margin nearest
// neighbours (Irene Eq. 3–5; Weinberger & Saul 2009), solved in the factor V
// by gradient descent. Build one with NewLMNN.
type LMNN struct {
	o Options
}

// NewLMNN validates o and fills in its defaults.
func NewLMNN(o Options) (*LMNN, error) {
	if o.K < 0 || o.OutputDim < 0 {
		return nil, errors.New("metric: K and output dimension must not be negative")
	}
	if o.K > MaxK {
		return nil, fmt.Errorf("metric: %d target neighbours, at most %d", o.K, MaxK)
	}
	if o.OutputDim > MaxDim {
		return nil, fmt.Errorf("metric: output dimension %d above %d", o.OutputDim, MaxDim)
	}
	if !(o.Margin >= 0) || math.IsInf(o.Margin, 0) {
		return nil, errors.New("metric: margin must be finite and positive")
	}
	if !(o.Mu >= 0 && o.Mu <= 1) {
		return nil, fmt.Errorf("metric: push weight μ = %v outside (0, 1]", o.Mu)
	}
	if !(o.Regularization >= 0) || math.IsInf(o.Regularization, 0) {
		return nil, errors.New("metric: regularisation must be finite and not negative")
	}
	if o.K == 0 {
		o.K = 3
	}
	if o.Margin == 0 {
		o.Margin = 1
	}
	if o.Mu == 0 {
		o.Mu = 0.5
	}
	s, err := o.Solver.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Solver = s
	return &LMNN{o: o}, nil
}

// Options returns the options in use, defaults filled in.
func (l *LMNN) Options() Options { return l.o }

// Loss is LMNN's objective at one map, every impostor counted (no active set).
type Loss struct {
	Pull       float64 // Σ over target pairs of d²(a, p)
	Hinge      float64 // Σ over triplets of max(0, margin + d²(a, p) − d²(a, n))
	Violations int     // triplets with a positive hinge
	Pairs      int     // target pairs
	// Objective = ((1−μ)·Pull + μ·Hinge) / Pairs + λ‖V‖²_F.
	Objective float64
}

// Report describes a Fit.
type Report struct {
	Initial, Final Loss
	Progress
	// ActiveSetMisses is the number of violated triplets at the final map
	// whose impostor was outside the active set; 0 means the active-set
	// approximation lost nothing at the end.
	ActiveSetMisses int
}

type lmnnObjective struct {
	p    *problem
	out  int
	lam  float64
	last evalResult
}

func (f *lmnnObjective) value(v, grad []float64) float64 {
	scale := 1 / float64(f.p.pairs)
	if grad != nil {
		clear(grad)
	}
	r := f.p.eval(v, f.out, scale, grad)
	f.last = r
	obj := scale*((1-f.p.mu)*r.pull+f.p.mu*r.hinge) + f.lam*vec.Dot(v, v)
	if grad != nil && f.lam != 0 {
		vec.Axpy(2*f.lam, v, grad)
	}
	return obj
}

func (f *lmnnObjective) refresh(v []float64) { f.p.refresh(v, f.out) }

func (l *LMNN) problem(d Data) (*problem, error) {
	return newProblem(d, l.o.K, l.o.Margin, l.o.Mu, l.o.Impostors, l.o.Workers)
}

func (l *LMNN) loss(p *problem, v []float64, out int) Loss {
	r := p.exact(v, out)
	return Loss{Pull: r.pull, Hinge: r.hinge, Violations: r.active, Pairs: p.pairs,
		Objective: ((1-l.o.Mu)*r.pull+l.o.Mu*r.hinge)/float64(p.pairs) + l.o.Regularization*vec.Dot(v, v)}
}

// Loss evaluates LMNN's objective for m on d exactly (every impostor).
func (l *LMNN) Loss(m *Metric, d Data) (Loss, error) {
	p, err := l.problem(d)
	if err != nil {
		return Loss{}, err
	}
	if m.in != p.in {
		return Loss{}, fmt.Errorf("metric: map takes %d-vectors, data has %d", m.in, p.in)
	}
	return l.loss(p, m.v, m.out), nil
}

// Fit learns V from d starting at init (nil: the identity, or the top
// principal directions when OutputDim is smaller than the input). A library
// passes its secret RandomRotation (truncated to OutputDim rows) as init; to
// retrain as names accumulate it passes its previous V.
//
// Every step maps V to V·(I − 2η·C) for a symmetric C, so when V has fewer
// rows than columns its rows can only turn through C: a row that starts on
// an eigenvector of C stays there. Principal directions can be close to
// such saddles (a test where the signal is orthogonal to them stalls from
// PCA); a random rotation's rows are generic.
//
// Target neighbours are each named face's K nearest faces of the same person
// in the input space, as in LMNN, and stay fixed. Since the input space is
// Euclidean and init is typically a rotation, this is the same as the
// initial space; it also makes a warm-started retraining optimise the same
// objective as a cold start.
//
// Impostors are handled by an active set (see Solver.Impostors): between
// rebuilds, only each anchor's nearest differently-named faces at the last
// rebuild (and the faces rejected as its person) can violate its margins.
// A far face that moves inside the margin is missed until the next rebuild;
// Report.ActiveSetMisses counts what is still missed at the end.
func (l *LMNN) Fit(ctx context.Context, d Data, init *Metric) (*Metric, *Report, error) {
	p, err := l.problem(d)
	if err != nil {
		return nil, nil, err
	}
	out := l.o.OutputDim
	if out == 0 {
		out = p.in
		if init != nil {
			out = init.out
		}
	}
	var v []float64
	switch {
	case init != nil:
		if init.in != p.in || init.out != out {
			return nil, nil, fmt.Errorf("metric: initial map is %d×%d, training needs %d×%d", init.out, init.in, out, p.in)
		}
		v = init.Matrix()
	case out == p.in:
		v = Identity(p.in).v
	default:
		v = pcaMap(p, out)
	}
	f := &lmnnObjective{p: p, out: out, lam: l.o.Regularization}
	rep := &Report{Initial: l.loss(p, v, out)}
	scale := rep.Initial.Pull / float64(p.pairs)
	prog, err := descend(ctx, f, v, l.o.Solver, scale)
	rep.Progress = prog
	if err != nil {
		return nil, rep, err
	}
	rep.Final = l.loss(p, v, out)
	f.refresh(v)
	f.value(v, nil)
	rep.ActiveSetMisses = rep.Final.Violations - f.last.active
	m, err := NewMetric(out, p.in, v)
	if err != nil {
		return nil, rep, fmt.Errorf("metric: training diverged (try a smaller learning rate): %w", err)
	}
	return m, rep, nil
}

// pcaMap returns the out × in map onto the top principal directions of the
// training inputs.
func pcaMap(p *problem, out int) []float64 {
	in := p.in
	mean := make([]float64, in)
	for i := range p.n {
		vec.Axpy(1/float64(p.n), p.x[i*in:(i+1)*in], mean)
	}
	cov := make([]float64, in*in)
	c := make([]float64, in)
	for i := range p.n {
		for j := range in {
			c[j] = p.x[i*in+j] - mean[j]
		}
		for a := range in {
			vec.Axpy(c[a], c, cov[a*in:(a+1)*in])
		}
	}
	_, vecs := vec.SymEig(cov, in)
	return vecs[:out*in]
}
