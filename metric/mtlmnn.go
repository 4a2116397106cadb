package metric

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/internal/vec"
)

// MTOptions configures multi-task LMNN. The zero value of each field means
// its default.
type MTOptions struct {
	// K, Margin and Mu are as in Options (defaults 3, 1, 0.5).
	K      int
	Margin float64
	Mu     float64
	// Gamma0 weighs ‖W₀ − I‖²_F and Gamma each task's ‖W_k‖²_F, in the units
	// of Eq. 7, where the pull and slack sums are unnormalised (with μ = 0.5
	// our loss is exactly Eq. 7's). Both default to 1, the paper's weights.
	// A large Gamma makes the tasks share W₀ alone; a large Gamma0 pins W₀
	// to the Euclidean metric.
	Gamma0, Gamma float64
	// TaskDim is the number of rows of each private factor V_k (default: the
	// input dimension). The shared factor V₀ is square, so W₀ can equal I.
	TaskDim int
	// TaskInit scales the default initial private factor, TaskInit·I
	// (default 0.1). V_k = 0 is a stationary point of W_k = V_kᵀV_k, so the
	// private part must start away from it.
	TaskInit float64
	Solver
}

// MTLMNN learns one shared metric W₀ = V₀ᵀV₀ and a private W_k = V_kᵀV_k per
// task (per library), each task's distance being d_{W₀,W_k} (Irene Eq. 6–7;
// Parameswaran & Weinberger 2010), by gradient descent in the factors.
// Build one with NewMTLMNN.
type MTLMNN struct {
	o MTOptions
}

// NewMTLMNN validates o and fills in its defaults.
func NewMTLMNN(o MTOptions) (*MTLMNN, error) {
	lo, err := NewLMNN(Options{K: o.K, Margin: o.Margin, Mu: o.Mu, Solver: o.Solver})
	if err != nil {
		return nil, err
	}
	if o.TaskDim < 0 || o.TaskDim > MaxDim {
		return nil, fmt.Errorf("metric: task dimension %d outside 0…%d", o.TaskDim, MaxDim)
	}
	for _, g := range []float64{o.Gamma0, o.Gamma, o.TaskInit} {
		if !(g >= 0) || math.IsInf(g, 0) {
			return nil, errors.New("metric: MT-LMNN weights and initial scale must be finite and not negative")
		}
	}
	if o.Gamma0 == 0 {
		o.Gamma0 = 1
	}
	if o.Gamma == 0 {
		o.Gamma = 1
	}
	if o.TaskInit == 0 {
		o.TaskInit = 0.1
	}
	o.K, o.Margin, o.Mu, o.Solver = lo.o.K, lo.o.Margin, lo.o.Mu, lo.o.Solver
	return &MTLMNN{o: o}, nil
}

// Options returns the options in use, defaults filled in.
func (l *MTLMNN) Options() MTOptions { return l.o }

// Task is one task's (one library's) training data and, optionally, its
// initial private factor V_k (TaskDim × input). A library passes its secret
// RandomRotation scaled down (Scale) so its V_k's coordinates are keyed.
type Task struct {
	Data
	Init *Metric
}

// MTModel is a trained MT-LMNN: the shared factor V₀ and each task's
// private factor V_k.
type MTModel struct {
	Shared *Metric
	Tasks  []*Metric
}

// Task returns task k's metric, [V₀; V_k], whose Mahalanobis matrix is
// W₀ + W_k (Eq. 6).
func (m *MTModel) Task(k int) (*Metric, error) {
	if k < 0 || k >= len(m.Tasks) {
		return nil, fmt.Errorf("metric: no task %d among %d", k, len(m.Tasks))
	}
	return m.Shared.Stack(m.Tasks[k])
}

// MTReport describes an MT-LMNN fit: each task's loss under its combined
// metric W₀ + W_k before and after (Loss.Objective there is the task's
// LMNN objective, without Eq. 7's regularisers), and the solver's account
// (Progress.Objective is the whole of Eq. 7 divided by the number of target
// pairs over all tasks).
type MTReport struct {
	Initial, Final []Loss
	Progress
}

type mtObjective struct {
	ps          []*problem
	in, dk      int
	gamma0, gam float64
	fixedShared bool
	pairs       int
	mu          float64
	stack, sg   []float64
}

func (f *mtObjective) shared(params []float64) []float64 { return params[:f.in*f.in] }
func (f *mtObjective) task(params []float64, k int) []float64 {
	o := f.in*f.in + k*f.dk*f.in
	return params[o : o+f.dk*f.in]
}

func (f *mtObjective) stacked(params []float64, k int) []float64 {
	f.stack = append(append(f.stack[:0], f.shared(params)...), f.task(params, k)...)
	return f.stack
}

func (f *mtObjective) refresh(params []float64) {
	for k, p := range f.ps {
		p.refresh(f.stacked(params, k), f.in+f.dk)
	}
}

func (f *mtObjective) value(params, grad []float64) float64 {
	if grad != nil {
		clear(grad)
	}
	scale := 2 / float64(f.pairs)
	out := f.in + f.dk
	n0 := f.in * f.in
	var obj float64
	for k, p := range f.ps {
		sv := f.stacked(params, k)
		var sg []float64
		if grad != nil {
			if len(f.sg) != len(sv) {
				f.sg = make([]float64, len(sv))
			}
			sg = f.sg
			clear(sg)
		}
		r := p.eval(sv, out, scale, sg)
		obj += scale * ((1-f.mu)*r.pull + f.mu*r.hinge)
		if grad != nil {
			if !f.fixedShared {
				vec.Axpy(1, sg[:n0], f.shared(grad))
			}
			vec.Axpy(1, sg[n0:], f.task(grad, k))
		}
	}
	reg := func(v []float64, rows int, gamma float64, minusI bool, g []float64) {
		w := gram(v, rows, f.in)
		if minusI {
			for i := range f.in {
				w[i*f.in+i]--
			}
		}
		obj += gamma / float64(f.pairs) * vec.Dot(w, w)
		if g != nil {
			vec.Axpy(4*gamma/float64(f.pairs), matMul(v, w, rows, f.in, f.in), g)
		}
	}
	if !f.fixedShared {
		var g0 []float64
		if grad != nil {
			g0 = f.shared(grad)
		}
		reg(f.shared(params), f.in, f.gamma0, true, g0)
	}
	for k := range f.ps {
		var gk []float64
		if grad != nil {
			gk = f.task(grad, k)
		}
		reg(f.task(params, k), f.dk, f.gam, false, gk)
	}
	return obj
}

func (l *MTLMNN) setup(tasks []Task, shared *Metric, fixed bool) (*mtObjective, []float64, error) {
	if len(tasks) == 0 {
		return nil, nil, errors.New("metric: MT-LMNN needs at least one task")
	}
	f := &mtObjective{gamma0: l.o.Gamma0, gam: l.o.Gamma, fixedShared: fixed, mu: l.o.Mu}
	for k, t := range tasks {
		p, err := newProblem(t.Data, l.o.K, l.o.Margin, l.o.Mu, l.o.Impostors, l.o.Workers)
		if err != nil {
			return nil, nil, fmt.Errorf("metric: task %d: %w", k, err)
		}
		if k > 0 && p.in != f.in {
			return nil, nil, fmt.Errorf("metric: task %d has %d-vectors, task 0 has %d", k, p.in, f.in)
		}
		f.in = p.in
		f.pairs += p.pairs
		f.ps = append(f.ps, p)
	}
	f.dk = l.o.TaskDim
	if f.dk == 0 {
		f.dk = f.in
	}
	params := make([]float64, 0, f.in*f.in+len(tasks)*f.dk*f.in)
	switch {
	case shared == nil:
		params = append(params, Identity(f.in).v...)
	case shared.out != f.in || shared.in != f.in:
		return nil, nil, fmt.Errorf("metric: shared map is %d×%d, MT-LMNN needs %d×%d", shared.out, shared.in, f.in, f.in)
	default:
		params = append(params, shared.v...)
	}
	for k, t := range tasks {
		switch {
		case t.Init == nil:
			for r := range f.dk {
				for c := range f.in {
					v := 0.0
					if r == c {
						v = l.o.TaskInit
					}
					params = append(params, v)
				}
			}
		case t.Init.out != f.dk || t.Init.in != f.in:
			return nil, nil, fmt.Errorf("metric: task %d's initial map is %d×%d, needs %d×%d", k, t.Init.out, t.Init.in, f.dk, f.in)
		default:
			params = append(params, t.Init.v...)
		}
	}
	return f, params, nil
}

func (l *MTLMNN) run(ctx context.Context, f *mtObjective, params []float64) (*MTModel, *MTReport, error) {
	lmnn := &LMNN{o: Options{K: l.o.K, Margin: l.o.Margin, Mu: l.o.Mu, Solver: l.o.Solver}}
	rep := &MTReport{}
	var pull float64
	for k, p := range f.ps {
		ls := lmnn.loss(p, f.stacked(params, k), f.in+f.dk)
		rep.Initial = append(rep.Initial, ls)
		pull += ls.Pull
	}
	prog, err := descend(ctx, f, params, l.o.Solver, pull/float64(f.pairs))
	rep.Progress = prog
	if err != nil {
		return nil, rep, err
	}
	m := &MTModel{}
	if m.Shared, err = NewMetric(f.in, f.in, f.shared(params)); err != nil {
		return nil, rep, fmt.Errorf("metric: training diverged (try a smaller learning rate): %w", err)
	}
	for k, p := range f.ps {
		rep.Final = append(rep.Final, lmnn.loss(p, f.stacked(params, k), f.in+f.dk))
		vk, err := NewMetric(f.dk, f.in, f.task(params, k))
		if err != nil {
			return nil, rep, fmt.Errorf("metric: training diverged (try a smaller learning rate): %w", err)
		}
		m.Tasks = append(m.Tasks, vk)
	}
	return m, rep, nil
}

// Fit learns W₀ and every task's W_k jointly (Eq. 7), starting W₀ at shared
// (nil: the identity, the minimiser of its regulariser). Target neighbours
// and the active set are as in LMNN.Fit, per task.
func (l *MTLMNN) Fit(ctx context.Context, tasks []Task, shared *Metric) (*MTModel, *MTReport, error) {
	f, params, err := l.setup(tasks, shared, false)
	if err != nil {
		return nil, nil, err
	}
	return l.run(ctx, f, params)
}

// FitTask learns one task's private factor V_k with the shared metric held
// fixed at shared (from the federation): it minimises γ‖W_k‖²_F plus the
// task's loss under W₀ + W_k. The returned model's Shared is shared itself.
func (l *MTLMNN) FitTask(ctx context.Context, shared *Metric, task Task) (*MTModel, *MTReport, error) {
	if shared == nil {
		return nil, nil, errors.New("metric: FitTask needs the shared map")
	}
	f, params, err := l.setup([]Task{task}, shared, true)
	if err != nil {
		return nil, nil, err
	}
	m, rep, err := l.run(ctx, f, params)
	if err != nil {
		return nil, rep, err
	}
	m.Shared = shared
	return m, rep, nil
}
