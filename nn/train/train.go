// Package train runs training steps of nn models on the GoMLX engine,
// without privacy (mean gradient) or with DP-SGD (Abadi et al. 2016; the
// DPLH paper's Section on DP-SGD): Poisson sampling with rate q drawn by
// the trainer from a CSPRNG, per-example or per-identity gradients clipped
// to norm C across all trainable parameters (expanded weights; dense layers
// by ghost norms, nn.GhostScope), package dp's DP-SGD noise on the clipped
// sums, division by the expected batch q·N, and ε from package dp's
// accountant of that mechanism; then SGD with momentum or Adam, weight
// decay, frozen parameters and per-group learning rates.
//
// Under DP a step can only be taken on a sample the trainer draws itself
// (DPStep, Epoch), so the accountant's assumption that batches are Poisson
// samples of the stated data set holds by construction.
//
// A step runs the model on fixed-size micro-batches (padding with masked
// examples), so variable Poisson batch sizes never recompile the graph.
package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/record"
)

// Model is a trainable embedding network.
type Model interface {
	// Params are the model's parameters (the head adds its own).
	Params() *nn.Params
	// Embed maps a batch x [B, InputDims...] to embeddings [B, D].
	Embed(s *nn.Scope, x *graph.Node) *graph.Node
	// InputDims are the dimensions of one example.
	InputDims() []int
	// UsesBatchNorm reports whether the model mixes examples through
	// batch statistics (refused under DP-SGD).
	UsesBatchNorm() bool
}

// Unit is what DP-SGD's adjacency protects (record.Unit: checkpoints keep
// it as plain data without importing the trainer).
type Unit = record.Unit

// The privacy units.
const (
	UnitExample  = record.UnitExample
	UnitIdentity = record.UnitIdentity
)

// Privacy is the privacy spent so far (record.Privacy).
type Privacy = record.Privacy

// State is the optimiser state needed to resume exactly (record.State).
type State = record.State

// DPOptions configures DP-SGD.
type DPOptions struct {
	// Unit is the privacy unit (required): UnitExample or UnitIdentity.
	Unit Unit
	// NoiseMultiplier σ: noise standard deviation is σ·Clip.
	NoiseMultiplier float64
	// Clip C bounds each unit's gradient norm across all parameters: one
	// example's gradient, or the sum of one identity's examples' gradients.
	Clip float64
	// SamplingRate q of Poisson sampling of units, in (0, 1].
	SamplingRate float64
	// Delta is the δ at which ε is reported.
	Delta float64
	// DatasetSize N is the number of units in the data (examples, or
	// identities): the clipped sum is divided by the expected batch q·N.
	// Every DP step checks it against the data it samples from.
	DatasetSize int
	// MaxPerIdentity caps the examples one sampled identity contributes to
	// a step (UnitIdentity only; 0 means MicroBatch, the largest allowed).
	// An identity with more examples contributes MaxPerIdentity of them,
	// drawn uniformly without replacement. All of a person's examples go to
	// one micro-batch, where the graph sums and clips them; a cap, rather
	// than accumulating a person's gradient across micro-batches, keeps one
	// compiled graph and bounds how much one person weighs in a step. The
	// cap is public, so it costs no privacy; clipping bounds the person's
	// influence whatever the cap.
	MaxPerIdentity int
	// MaxEpsilon, if positive, refuses steps that would exceed it.
	MaxEpsilon float64
	// Source draws both the Poisson samples and the noise. nil means a new
	// Source seeded from crypto/rand; dp.NewSeededSource is for tests only.
	Source *dp.Source
}

// Options configures a Trainer.
type Options struct {
	// Optimizer is "sgd" (with Momentum) or "adam".
	Optimizer    string
	LearningRate float64
	Momentum     float64
	WeightDecay  float64
	// GroupLR multiplies the learning rate of parameter groups; 0 freezes.
	GroupLR map[string]float64
	// MicroBatch is the fixed number of examples per graph execution.
	MicroBatch int
	// DP, if non-nil, turns on DP-SGD.
	DP *DPOptions
	// Seed seeds non-private randomness (Irene's E-step draws).
	Seed uint64
	// EMA, if in (0, 1), keeps an exponential moving average of the
	// parameters with this decay (warmed up as min(EMA, (1+t)/(10+t)) at
	// step t) and Embed uses it. Under DP-SGD the last iterate carries the
	// noise of the last steps; the average keeps the signal, which moves
	// coherently, and cancels much of the noise, which does not. It is
	// post-processing of the released iterates, so it costs no privacy.
	EMA float64
	// Engine runs the trainer's graphs; nil means a new default engine
	// of the trainer's own (see engine.OrDefault).
	Engine *engine.Engine
}

// unitOf returns p's privacy unit, reading "" (old checkpoints) as
// UnitExample.
func unitOf(p Privacy) Unit {
	if p.Unit == "" {
		return UnitExample
	}
	return p.Unit
}

// ErrBudget is returned when a DP step would exceed MaxEpsilon.
var ErrBudget = errors.New("train: privacy budget exhausted")

// ErrNotSampled is returned by Step under DP-SGD: the accountant's bound
// holds only for batches the trainer drew itself by Poisson sampling (use
// DPStep or Epoch).
var ErrNotSampled = errors.New("train: under DP-SGD a step must run on a Poisson sample the trainer draws itself (DPStep or Epoch), not on a given batch")

// Trainer holds a model, its loss head and optimiser state.
type Trainer struct {
	model   Model
	head    loss.Head
	params  *nn.Params
	opts    Options
	per     int       // values per example
	lr      []float64 // per-parameter learning-rate multiplier (0: frozen or state)
	grads   []int     // parameters that receive gradients, in order
	m, v    [][]float32
	ema     [][]float32 // nil without Options.EMA
	step    int
	privacy Privacy
	stepEx  *graph.Exec
	embEx   *graph.Exec
	rng     *rand.Rand
	dp      *private // nil without DP
}

// New validates the options and builds a trainer. The head's parameters
// must already be declared in model.Params().
func New(model Model, head loss.Head, o Options) (*Trainer, error) {
	p := model.Params()
	switch o.Optimizer {
	case "sgd", "adam":
	default:
		return nil, fmt.Errorf("train: unknown optimizer %q (want sgd or adam)", o.Optimizer)
	}
	if !(o.LearningRate > 0) || o.Momentum < 0 || o.Momentum >= 1 || o.WeightDecay < 0 {
		return nil, fmt.Errorf("train: need learning rate > 0, momentum in [0,1), weight decay ≥ 0; got %g, %g, %g", o.LearningRate, o.Momentum, o.WeightDecay)
	}
	if o.MicroBatch <= 0 {
		return nil, fmt.Errorf("train: micro-batch must be positive, got %d", o.MicroBatch)
	}
	if !(o.EMA >= 0 && o.EMA < 1) {
		return nil, fmt.Errorf("train: EMA decay must be in [0, 1), got %g", o.EMA)
	}
	for g, m := range o.GroupLR {
		if m < 0 || math.IsNaN(m) {
			return nil, fmt.Errorf("train: learning-rate multiplier of group %q is %g", g, m)
		}
	}
	if d := o.DP; d != nil {
		if model.UsesBatchNorm() {
			return nil, errors.New("train: batch normalisation mixes examples and breaks DP-SGD's per-example bound; use group norm")
		}
		if head.Coupled() {
			return nil, errors.New("train: this loss couples examples of a batch (triplet mining), so a per-example gradient bound does not hold; use softmax, cosface, arcface or irene under DP")
		}
		if err := d.validate(o.MicroBatch); err != nil {
			return nil, err
		}
	}
	t := &Trainer{model: model, head: head, params: p, opts: o, per: 1, rng: rand.New(rand.NewPCG(o.Seed, 0xe57e9))}
	for _, d := range model.InputDims() {
		t.per *= d
	}
	t.lr = multipliers(p, o.GroupLR)
	for i, s := range p.Specs() {
		if t.lr[i] > 0 {
			t.grads = append(t.grads, i)
		}
		t.m = append(t.m, make([]float32, s.Size()))
		if o.Optimizer == "adam" {
			t.v = append(t.v, make([]float32, s.Size()))
		}
	}
	if len(t.grads) == 0 {
		return nil, errors.New("train: every parameter is frozen")
	}
	if o.EMA > 0 {
		t.resetEMA()
	}
	if d := o.DP; d != nil {
		var err error
		if t.dp, err = newPrivate(*d, t.NumTrainable()); err != nil {
			return nil, err
		}
		t.privacy = Privacy{Unit: d.Unit, NoiseMultiplier: d.NoiseMultiplier, Clip: d.Clip, SamplingRate: d.SamplingRate, Delta: d.Delta}
	}
	if err := t.compile(); err != nil {
		return nil, err
	}
	return t, nil
}

// multipliers returns every parameter's learning-rate multiplier: its
// group's in groupLR (default 1), 0 for state.
func multipliers(p *nn.Params, groupLR map[string]float64) []float64 {
	lr := make([]float64, p.Len())
	for i, s := range p.Specs() {
		lr[i] = 1
		if g, ok := groupLR[s.Group]; ok {
			lr[i] = g
		}
		if s.State {
			lr[i] = 0
		}
	}
	return lr
}

// resetEMA starts the moving average at the current parameters.
func (t *Trainer) resetEMA() {
	t.ema = make([][]float32, t.params.Len())
	for i := range t.ema {
		t.ema[i] = append([]float32(nil), t.params.Values(i)...)
	}
}

// updateEMA folds the current parameters into the moving average; state
// parameters (batch-norm statistics) are copied as they are.
func (t *Trainer) updateEMA() {
	if t.ema == nil {
		return
	}
	d := min(t.opts.EMA, float64(1+t.step)/float64(10+t.step))
	for i := range t.ema {
		p := t.params.Values(i)
		if t.params.Spec(i).State {
			copy(t.ema[i], p)
			continue
		}
		e := t.ema[i]
		for j := range e {
			e[j] = float32(d*float64(e[j]) + (1-d)*float64(p[j]))
		}
	}
}

// Params returns the parameters being trained (model and head).
func (t *Trainer) Params() *nn.Params { return t.params }

// NumTrainable counts the parameter values the optimiser updates (frozen
// and state parameters excluded).
func (t *Trainer) NumTrainable() int {
	n := 0
	for _, i := range t.grads {
		n += t.params.Spec(i).Size()
	}
	return n
}

// Steps is the number of optimiser steps taken.
func (t *Trainer) Steps() int { return t.step }

// Privacy returns the privacy spent (zero without DP).
func (t *Trainer) Privacy() Privacy { return t.privacy }

func (t *Trainer) compile() error {
	eng, err := engine.OrDefault(t.opts.Engine)
	if err != nil {
		return err
	}
	be := eng.Backend()
	np := t.params.Len()
	dp := t.opts.DP != nil
	grouped := dp && t.opts.DP.Unit == UnitIdentity
	t.stepEx, err = graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
		pn := in[:np]
		x, labels, mask, aux := in[np], in[np+1], in[np+2], in[np+3]
		var groups *graph.Node
		if grouped {
			groups = in[np+4]
		}
		b := x.Shape().Dimensions[0]
		var s *nn.Scope
		var exp []*graph.Node
		var err error
		trainable := map[int]bool{}
		for _, i := range t.grads {
			trainable[i] = true
		}
		if dp {
			s, exp, err = nn.GhostScope(t.params, pn, b, func(i int) bool { return trainable[i] }, true)
		} else {
			s, err = nn.NewScope(t.params, pn, nil, true)
		}
		if err != nil {
			panic(err)
		}
		var auxNode *graph.Node
		if t.head.AuxProb() > 0 {
			auxNode = aux
		}
		res := t.head.Apply(s, t.model.Embed(s, x), loss.Batch{Labels: labels, Mask: mask, Aux: auxNode})
		sumLoss := graph.ReduceAllSum(res.Loss)
		// The reported loss leaves out non-finite examples (which DP-SGD
		// drops); the gradient is taken of the plain sum, whose derivative
		// does not depend on its value.
		shownLoss := graph.ReduceAllSum(graph.Where(graph.IsFinite(res.Loss), res.Loss, graph.ScalarZero(res.Loss.Graph(), res.Loss.DType())))
		// Keep aux used so the graph never holds an unused input.
		sumW := graph.Add(graph.ReduceAllSum(res.Weight), graph.MulScalar(graph.ReduceAllSum(aux), 0.0))
		out := []*graph.Node{shownLoss, sumW}
		if !dp {
			var nodes []*graph.Node
			for _, i := range t.grads {
				nodes = append(nodes, pn[i])
			}
			out = append(out, graph.Gradient(sumLoss, nodes...)...)
		} else {
			var sums []*graph.Node
			if grouped {
				sums, _, err = nn.ClippedGroupSums(s, sumLoss, exp, t.grads, t.opts.DP.Clip, mask, groups)
			} else {
				sums, _, err = nn.ClippedSums(s, sumLoss, exp, t.grads, t.opts.DP.Clip, mask)
			}
			if err != nil {
				panic(err)
			}
			out = append(out, sums...)
		}
		for i := 0; i < np; i++ {
			if t.params.Spec(i).State {
				if u, ok := s.StateUpdates()[i]; ok {
					out = append(out, u)
				} else {
					out = append(out, pn[i])
				}
			}
		}
		return out
	})
	if err != nil {
		return fmt.Errorf("train: building the step graph: %w", err)
	}
	t.embEx, err = graph.NewExec(be, func(in []*graph.Node) *graph.Node {
		s, err := nn.NewScope(t.params, in[:np], nil, false)
		if err != nil {
			panic(err)
		}
		return nn.L2Normalize(t.model.Embed(s, in[np]))
	})
	if err != nil {
		return fmt.Errorf("train: building the embedding graph: %w", err)
	}
	return nil
}

func (t *Trainer) paramTensors() []any { return t.tensorsOf(t.params.Values) }

// embedTensors are the parameters Embed uses: the moving average when
// there is one.
func (t *Trainer) embedTensors() []any {
	if t.ema == nil {
		return t.paramTensors()
	}
	return t.tensorsOf(func(i int) []float32 { return t.ema[i] })
}

// tensorsOf copies values(i) of every parameter into a tensor of its shape.
func (t *Trainer) tensorsOf(values func(i int) []float32) []any {
	a := make([]any, t.params.Len())
	for i := range a {
		a[i] = tensors.FromFlatDataAndDimensions(append([]float32(nil), values(i)...), t.params.Spec(i).Shape...)
	}
	return a
}

// EMAValues returns a copy of the moving average of parameter i, or nil
// without Options.EMA.
func (t *Trainer) EMAValues(i int) []float32 {
	if t.ema == nil {
		return nil
	}
	return append([]float32(nil), t.ema[i]...)
}

// StepResult reports one optimiser step.
//
// Under DP-SGD both fields are computed from the private sample without
// noise and are not covered by ε: use them to watch a run, and do not
// publish them as if they were private (with UnitIdentity, Examples also
// depends on how many images the sampled people have).
type StepResult struct {
	// Loss is the mean loss of the examples in the batch (examples whose
	// loss is not finite left out).
	Loss float64
	// Examples is the batch size (variable under Poisson sampling).
	Examples int
}

// micro is the input of one graph execution: MicroBatch examples, the
// unused ones masked.
type micro struct {
	x      []float32
	labels []int32
	mask   []float32
	groups []int32 // UnitIdentity: each example's person's slot in the micro-batch
	n      int     // examples in use
}

// newMicro returns an empty micro-batch.
func (t *Trainer) newMicro() *micro {
	mb := t.opts.MicroBatch
	m := &micro{x: make([]float32, mb*t.per), labels: make([]int32, mb), mask: make([]float32, mb)}
	if t.opts.DP != nil && t.opts.DP.Unit == UnitIdentity {
		m.groups = make([]int32, mb)
	}
	return m
}

// add appends example j of (x, labels) to the micro-batch with group slot g.
func (m *micro) add(per int, x []float32, labels []int32, j int, g int32) {
	copy(m.x[m.n*per:(m.n+1)*per], x[j*per:(j+1)*per])
	m.labels[m.n] = labels[j]
	m.mask[m.n] = 1
	if m.groups != nil {
		m.groups[m.n] = g
	}
	m.n++
}

// chunk splits n examples into consecutive micro-batches.
func (t *Trainer) chunk(x []float32, labels []int32) []*micro {
	var ms []*micro
	for j := range labels {
		if j%t.opts.MicroBatch == 0 {
			ms = append(ms, t.newMicro())
		}
		ms[len(ms)-1].add(t.per, x, labels, j, 0)
	}
	return ms
}

// run executes the step graph on every micro-batch and returns the summed
// gradients (clipped under DP), the summed loss and weight, and the state
// parameters' new values (nil when no micro-batch ran).
func (t *Trainer) run(ms []*micro) (sums [][]float32, totalLoss, totalW float64, states [][]float32, err error) {
	sums = make([][]float32, len(t.grads))
	for k, i := range t.grads {
		sums[k] = make([]float32, t.params.Spec(i).Size())
	}
	params := t.paramTensors()
	mb := t.opts.MicroBatch
	for _, m := range ms {
		aux := make([]float32, mb)
		if p := t.head.AuxProb(); p > 0 {
			for j := 0; j < m.n; j++ {
				if t.rng.Float64() < p {
					aux[j] = 1
				}
			}
		}
		args := append(append([]any{}, params...),
			tensors.FromFlatDataAndDimensions(m.x, append([]int{mb}, t.model.InputDims()...)...),
			tensors.FromFlatDataAndDimensions(m.labels, mb),
			tensors.FromFlatDataAndDimensions(m.mask, mb),
			tensors.FromFlatDataAndDimensions(aux, mb))
		if m.groups != nil {
			args = append(args, tensors.FromFlatDataAndDimensions(m.groups, mb))
		}
		out, err := t.stepEx.Call(args...)
		if err != nil {
			return nil, 0, 0, nil, fmt.Errorf("train: running the step graph: %w", err)
		}
		totalLoss += float64(tensors.MustCopyFlatData[float32](out[0])[0])
		totalW += float64(tensors.MustCopyFlatData[float32](out[1])[0])
		for k := range t.grads {
			g := tensors.MustCopyFlatData[float32](out[2+k])
			for j, v := range g {
				sums[k][j] += v
			}
		}
		states = states[:0]
		for _, o := range out[2+len(t.grads):] {
			states = append(states, tensors.MustCopyFlatData[float32](o))
		}
		for _, o := range out {
			o.FinalizeAll()
		}
	}
	return sums, totalLoss, totalW, states, nil
}

// finish stores batch-norm running statistics and updates the moving
// average after an optimiser update.
func (t *Trainer) finish(states [][]float32) {
	if states != nil {
		si := 0
		for i := 0; i < t.params.Len(); i++ {
			if t.params.Spec(i).State {
				copy(t.params.Values(i), states[si])
				si++
			}
		}
	}
	t.updateEMA()
}

// Step takes one optimiser step without DP on the n examples in x
// (n·InputDims values), labels (n): the mean gradient of the batch. It
// counts as a non-private step (Privacy.NonPrivateSteps). Under DP-SGD it
// returns ErrNotSampled.
func (t *Trainer) Step(x []float32, labels []int32) (StepResult, error) {
	if t.dp != nil {
		return StepResult{}, ErrNotSampled
	}
	n := len(labels)
	if len(x) != n*t.per {
		return StepResult{}, fmt.Errorf("train: batch has %d values for %d examples of %d values", len(x), n, t.per)
	}
	if n == 0 {
		return StepResult{}, errors.New("train: empty batch")
	}
	sums, totalLoss, totalW, states, err := t.run(t.chunk(x, labels))
	if err != nil {
		return StepResult{}, err
	}
	if totalW <= 0 {
		return StepResult{Examples: n}, errors.New("train: batch has no usable examples (triplet loss needs at least two images of an identity and one other)")
	}
	t.apply(sums, 1/totalW)
	t.finish(states)
	t.privacy.NonPrivateSteps++
	return StepResult{Examples: n, Loss: totalLoss / totalW}, nil
}

// apply does the optimiser update with gradient sums[k]·scale.
func (t *Trainer) apply(sums [][]float32, scale float64) {
	t.step++
	o := t.opts
	b1, b2 := 0.9, 0.999
	bc1 := 1 - math.Pow(b1, float64(t.step))
	bc2 := 1 - math.Pow(b2, float64(t.step))
	for k, i := range t.grads {
		p := t.params.Values(i)
		lr := o.LearningRate * t.lr[i]
		m := t.m[i]
		for j := range p {
			g := float64(sums[k][j])*scale + o.WeightDecay*float64(p[j])
			switch o.Optimizer {
			case "sgd":
				m[j] = float32(o.Momentum*float64(m[j]) + g)
				p[j] -= float32(lr * float64(m[j]))
			case "adam":
				v := t.v[i]
				m[j] = float32(b1*float64(m[j]) + (1-b1)*g)
				v[j] = float32(b2*float64(v[j]) + (1-b2)*g*g)
				p[j] -= float32(lr * (float64(m[j]) / bc1) / (math.Sqrt(float64(v[j])/bc2) + 1e-8))
			}
		}
	}
}

// Embed returns the L2-normalised embeddings of n examples, computed with
// the parameters' moving average when Options.EMA is set.
func (t *Trainer) Embed(x []float32, n int) ([][]float32, error) {
	per := t.per
	if len(x) != n*per {
		return nil, fmt.Errorf("train: %d values for %d examples of %d values", len(x), n, per)
	}
	params := t.embedTensors()
	mb := t.opts.MicroBatch
	var out [][]float32
	for start := 0; start < n; start += mb {
		end := min(start+mb, n)
		xb := make([]float32, mb*per)
		copy(xb, x[start*per:end*per])
		args := append(append([]any{}, params...), tensors.FromFlatDataAndDimensions(xb, append([]int{mb}, t.model.InputDims()...)...))
		o, err := t.embEx.Call(args...)
		if err != nil {
			return nil, fmt.Errorf("train: running the embedding graph: %w", err)
		}
		e := tensors.MustCopyFlatData[float32](o[0])
		o[0].FinalizeAll()
		d := len(e) / mb
		for j := 0; j < end-start; j++ {
			out = append(out, e[j*d:(j+1)*d])
		}
	}
	return out, nil
}

// State returns a copy of the optimiser state.
func (t *Trainer) State() State {
	cp := func(a [][]float32) [][]float32 {
		var out [][]float32
		for _, x := range a {
			out = append(out, append([]float32(nil), x...))
		}
		return out
	}
	return State{Step: t.step, Privacy: t.privacy, M: cp(t.m), V: cp(t.v), EMA: cp(t.ema)}
}

// Restore sets the optimiser state (after the parameters were loaded).
//
// Without DP the privacy record is kept as it is, and every further step
// adds to its NonPrivateSteps. Under DP-SGD Restore refuses a state whose
// weights ever took a step without DP (they may hold private data with no
// bound: laundering them through a DP run would report an ε that does not
// cover them), a state trained with another unit, σ, C, q or δ, and
// recomputes ε from the step count with this trainer's accountant.
func (t *Trainer) Restore(s State) error {
	if len(s.M) != len(t.m) || len(s.V) != len(t.v) {
		return fmt.Errorf("train: restoring %d/%d moment tensors into a trainer with %d/%d", len(s.M), len(s.V), len(t.m), len(t.v))
	}
	for i := range t.m {
		if len(s.M[i]) != len(t.m[i]) || (t.v != nil && len(s.V[i]) != len(t.v[i])) {
			return fmt.Errorf("train: moment of parameter %q has the wrong size", t.params.Spec(i).Name)
		}
	}
	if s.EMA != nil {
		if len(s.EMA) != len(t.m) {
			return fmt.Errorf("train: restoring %d moving-average tensors into a trainer with %d parameters", len(s.EMA), len(t.m))
		}
		for i := range s.EMA {
			if len(s.EMA[i]) != len(t.m[i]) {
				return fmt.Errorf("train: moving average of parameter %q has the wrong size", t.params.Spec(i).Name)
			}
		}
	}
	p := s.Privacy
	if s.Step < 0 || p.Steps < 0 || p.NonPrivateSteps < 0 {
		return fmt.Errorf("train: the state has a negative step count (%d steps, %d private, %d not)", s.Step, p.Steps, p.NonPrivateSteps)
	}
	privacy := p
	if d := t.opts.DP; d != nil {
		if p.NonPrivateSteps > 0 || s.Step != p.Steps {
			return fmt.Errorf("train: the checkpoint's weights took %d of their %d steps without DP-SGD, so they may hold private data with no bound; a DP-SGD run from them would report an ε that does not cover those steps: start from weights trained only with DP-SGD, or only on public data (a new run, not a resume)", max(p.NonPrivateSteps, s.Step-p.Steps), s.Step)
		}
		if unitOf(p) != d.Unit {
			return fmt.Errorf("train: the checkpoint was trained with DP-SGD per %s; resuming it per %s would mix two privacy units in one ε", unitOf(p), d.Unit)
		}
		if p.NoiseMultiplier != d.NoiseMultiplier || p.Clip != d.Clip || p.SamplingRate != d.SamplingRate || p.Delta != d.Delta {
			return fmt.Errorf("train: checkpoint was trained with σ=%g C=%g q=%g δ=%g, not σ=%g C=%g q=%g δ=%g", p.NoiseMultiplier, p.Clip, p.SamplingRate, p.Delta, d.NoiseMultiplier, d.Clip, d.SamplingRate, d.Delta)
		}
		privacy.Unit = d.Unit
		eps, err := t.dp.epsilon(p.Steps)
		if err != nil {
			return err
		}
		privacy.Epsilon = eps
	}
	for i := range t.m {
		copy(t.m[i], s.M[i])
		if t.v != nil {
			copy(t.v[i], s.V[i])
		}
	}
	t.step = s.Step
	t.privacy = privacy
	// The average restarts at the restored parameters when the checkpoint
	// has none (it was trained without EMA).
	if t.opts.EMA > 0 {
		t.resetEMA()
		if s.EMA != nil {
			for i := range t.ema {
				copy(t.ema[i], s.EMA[i])
			}
		}
	}
	return nil
}
