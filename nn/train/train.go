// Package train runs training steps of nn models on the GoMLX engine,
// without privacy (mean gradient) or with DP-SGD: per-example gradients by
// expanded weights (dense layers: ghost norms, nn.GhostScope), clipping to norm C across all trainable parameters,
// Gaussian noise of standard deviation σ·C from a CSPRNG-seeded stream,
// Poisson sampling with rate q, SGD with momentum or Adam, weight decay,
// frozen parameters and per-group learning rates, and a privacy accountant
// charged every step.
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

	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn"
	"github.com/veil-privacy/veil/nn/loss"
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

// Accountant converts a DP-SGD schedule into ε at a given δ (RDP of the
// Poisson-subsampled Gaussian mechanism).
type Accountant interface {
	Epsilon(q, sigma float64, steps int, delta float64) (float64, error)
}

// Noise adds Gaussian noise of standard deviation sigma to every element;
// it must be a CSPRNG-seeded stream.
type Noise interface {
	AddGaussian32(v []float32, sigma float64)
}

// DPOptions configures DP-SGD.
type DPOptions struct {
	// NoiseMultiplier σ: noise standard deviation is σ·Clip.
	NoiseMultiplier float64
	// Clip C bounds each example's gradient norm across all parameters.
	Clip float64
	// SamplingRate q of Poisson sampling, in (0, 1].
	SamplingRate float64
	// Delta is the δ at which ε is reported.
	Delta float64
	// DatasetSize N: the gradient sum is divided by the expected batch q·N.
	DatasetSize int
	// MaxEpsilon, if positive, refuses steps that would exceed it.
	MaxEpsilon float64
	Accountant Accountant
	Noise      Noise
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
}

// Privacy is the privacy spent so far.
type Privacy struct {
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Clip            float64 `json:"clip"`
	SamplingRate    float64 `json:"sampling_rate"`
	Steps           int     `json:"steps"`
	Delta           float64 `json:"delta"`
	Epsilon         float64 `json:"epsilon"`
}

// ErrBudget is returned when a DP step would exceed MaxEpsilon.
var ErrBudget = errors.New("train: privacy budget exhausted")

// Trainer holds a model, its loss head and optimiser state.
type Trainer struct {
	model   Model
	head    loss.Head
	params  *nn.Params
	opts    Options
	lr      []float64 // per-parameter learning-rate multiplier (0: frozen or state)
	grads   []int     // parameters that receive gradients, in order
	m, v    [][]float32
	ema     [][]float32 // nil without Options.EMA
	step    int
	privacy Privacy
	stepEx  *graph.Exec
	embEx   *graph.Exec
	rng     *rand.Rand
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
		if !(d.SamplingRate > 0 && d.SamplingRate <= 1) {
			return nil, fmt.Errorf("train: sampling rate q must be in (0, 1], got %g", d.SamplingRate)
		}
		if !(d.NoiseMultiplier > 0) || math.IsInf(d.NoiseMultiplier, 0) {
			return nil, fmt.Errorf("train: noise multiplier must be positive and finite, got %g", d.NoiseMultiplier)
		}
		if !(d.Clip > 0) || math.IsInf(d.Clip, 0) {
			return nil, fmt.Errorf("train: clipping norm must be positive and finite, got %g", d.Clip)
		}
		if !(d.Delta > 0 && d.Delta < 1) {
			return nil, fmt.Errorf("train: δ must be in (0, 1), got %g", d.Delta)
		}
		if d.DatasetSize <= 0 {
			return nil, fmt.Errorf("train: DP needs the dataset size, got %d", d.DatasetSize)
		}
		if d.Accountant == nil || d.Noise == nil {
			return nil, errors.New("train: DP needs an accountant and a noise source")
		}
	}
	t := &Trainer{model: model, head: head, params: p, opts: o, rng: rand.New(rand.NewPCG(o.Seed, 0xe57e9))}
	for i, s := range p.Specs() {
		mult := 1.0
		if g, ok := o.GroupLR[s.Group]; ok {
			mult = g
		}
		if s.State {
			mult = 0
		}
		t.lr = append(t.lr, mult)
		if mult > 0 {
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
		t.privacy = Privacy{NoiseMultiplier: d.NoiseMultiplier, Clip: d.Clip, SamplingRate: d.SamplingRate, Delta: d.Delta}
	}
	if err := t.compile(); err != nil {
		return nil, err
	}
	return t, nil
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
	be, err := engine.Backend()
	if err != nil {
		return err
	}
	np := t.params.Len()
	dp := t.opts.DP != nil
	t.stepEx, err = graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
		pn := in[:np]
		x, labels, mask, aux := in[np], in[np+1], in[np+2], in[np+3]
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
		// Keep aux used so the graph never holds an unused input.
		sumW := graph.Add(graph.ReduceAllSum(res.Weight), graph.MulScalar(graph.ReduceAllSum(aux), 0.0))
		out := []*graph.Node{sumLoss, sumW}
		if !dp {
			var nodes []*graph.Node
			for _, i := range t.grads {
				nodes = append(nodes, pn[i])
			}
			out = append(out, graph.Gradient(sumLoss, nodes...)...)
		} else {
			sums, _, err := nn.ClippedSums(s, sumLoss, exp, t.grads, t.opts.DP.Clip, mask)
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
type StepResult struct {
	// Loss is the mean loss of the examples in the batch.
	Loss float64
	// Examples is the batch size (variable under Poisson sampling).
	Examples int
}

// Step takes one optimiser step on the n examples in x (n·InputDims
// values), labels (n). Under DP the batch must come from Poisson sampling
// with the configured rate; noise is added even to an empty batch.
func (t *Trainer) Step(x []float32, labels []int32) (StepResult, error) {
	n := len(labels)
	per := 1
	for _, d := range t.model.InputDims() {
		per *= d
	}
	if len(x) != n*per {
		return StepResult{}, fmt.Errorf("train: batch has %d values for %d examples of %d values", len(x), n, per)
	}
	dp := t.opts.DP
	if dp == nil && n == 0 {
		return StepResult{}, errors.New("train: empty batch")
	}
	if dp != nil && dp.MaxEpsilon > 0 {
		eps, err := dp.Accountant.Epsilon(dp.SamplingRate, dp.NoiseMultiplier, t.privacy.Steps+1, dp.Delta)
		if err != nil {
			return StepResult{}, fmt.Errorf("train: accounting: %w", err)
		}
		if eps > dp.MaxEpsilon {
			return StepResult{}, fmt.Errorf("%w: the next step would spend ε=%.3f > %.3f", ErrBudget, eps, dp.MaxEpsilon)
		}
	}
	mb := t.opts.MicroBatch
	sums := make([][]float32, len(t.grads))
	for k, i := range t.grads {
		sums[k] = make([]float32, t.params.Spec(i).Size())
	}
	var totalLoss, totalW float64
	params := t.paramTensors()
	var states [][]float32
	for start := 0; start < n || (start == 0 && n == 0); start += mb {
		end := min(start+mb, n)
		xb := make([]float32, mb*per)
		copy(xb, x[start*per:end*per])
		lb := make([]int32, mb)
		copy(lb, labels[start:end])
		mask := make([]float32, mb)
		aux := make([]float32, mb)
		for j := 0; j < end-start; j++ {
			mask[j] = 1
		}
		if p := t.head.AuxProb(); p > 0 {
			for j := 0; j < end-start; j++ {
				if t.rng.Float64() < p {
					aux[j] = 1
				}
			}
		}
		args := append(append([]any{}, params...),
			tensors.FromFlatDataAndDimensions(xb, append([]int{mb}, t.model.InputDims()...)...),
			tensors.FromFlatDataAndDimensions(lb, mb),
			tensors.FromFlatDataAndDimensions(mask, mb),
			tensors.FromFlatDataAndDimensions(aux, mb))
		out, err := t.stepEx.Call(args...)
		if err != nil {
			return StepResult{}, fmt.Errorf("train: running the step graph: %w", err)
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
		if n == 0 {
			break
		}
	}
	// Turn sums into the gradient estimate.
	var scale float64
	if dp != nil {
		for k := range sums {
			dp.Noise.AddGaussian32(sums[k], dp.NoiseMultiplier*dp.Clip)
		}
		scale = 1 / (dp.SamplingRate * float64(dp.DatasetSize))
	} else {
		if totalW <= 0 {
			return StepResult{Examples: n}, errors.New("train: batch has no usable examples (triplet loss needs at least two images of an identity and one other)")
		}
		scale = 1 / totalW
	}
	t.apply(sums, scale)
	// Store batch-norm running statistics.
	si := 0
	for i := 0; i < t.params.Len(); i++ {
		if t.params.Spec(i).State {
			copy(t.params.Values(i), states[si])
			si++
		}
	}
	t.updateEMA()
	res := StepResult{Examples: n}
	if totalW > 0 {
		res.Loss = totalLoss / totalW
	}
	if dp != nil {
		t.privacy.Steps++
		eps, err := dp.Accountant.Epsilon(dp.SamplingRate, dp.NoiseMultiplier, t.privacy.Steps, dp.Delta)
		if err != nil {
			return res, fmt.Errorf("train: accounting: %w", err)
		}
		t.privacy.Epsilon = eps
	}
	return res, nil
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
	per := 1
	for _, d := range t.model.InputDims() {
		per *= d
	}
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

// State is the optimiser state needed to resume exactly.
type State struct {
	Step    int
	Privacy Privacy
	// M and V are the first and second moments (V only for Adam), one per
	// parameter in declaration order.
	M, V [][]float32
	// EMA is the parameters' moving average (only with Options.EMA).
	EMA [][]float32
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
	if t.opts.DP != nil {
		p := s.Privacy
		d := t.opts.DP
		if p.NoiseMultiplier != d.NoiseMultiplier || p.Clip != d.Clip || p.SamplingRate != d.SamplingRate || p.Delta != d.Delta {
			return fmt.Errorf("train: checkpoint was trained with σ=%g C=%g q=%g δ=%g, not σ=%g C=%g q=%g δ=%g", p.NoiseMultiplier, p.Clip, p.SamplingRate, p.Delta, d.NoiseMultiplier, d.Clip, d.SamplingRate, d.Delta)
		}
	} else if s.Privacy.Steps > 0 {
		t.privacy = s.Privacy // keep what was spent before, even if continuing without DP noise
	}
	for i := range t.m {
		copy(t.m[i], s.M[i])
		if t.v != nil {
			copy(t.v[i], s.V[i])
		}
	}
	t.step = s.Step
	if t.opts.DP != nil {
		t.privacy = s.Privacy
	}
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
