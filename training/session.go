package training

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/loss"
	"github.com/veil-privacy/veil/nn/train"
)

// Mechanism is a DP-SGD configuration with σ, q and N resolved: what a
// Session runs.
type Mechanism struct {
	Unit            train.Unit
	NoiseMultiplier float64
	Clip            float64
	SamplingRate    float64
	Delta           float64
	// Units is N, the number of privacy units (images or identities).
	Units          int
	MaxPerIdentity int
}

// StepsPerEpoch is the number of DP-SGD steps of one epoch, ⌈1/q⌉.
func (m Mechanism) StepsPerEpoch() int { return int(math.Ceil(1 / m.SamplingRate)) }

// trainOptions are the trainer's DP options of the mechanism.
func (m Mechanism) trainOptions() *train.DPOptions {
	return &train.DPOptions{Unit: m.Unit, NoiseMultiplier: m.NoiseMultiplier, Clip: m.Clip, SamplingRate: m.SamplingRate,
		Delta: m.Delta, DatasetSize: m.Units, MaxPerIdentity: m.MaxPerIdentity}
}

// mechanism resolves N from the data and the unit and q from o (or
// batch/N); σ is o's, or 0 when it is to be calibrated to o.TargetEpsilon.
func (o *DPOptions) mechanism(d *Data, batch int) (Mechanism, error) {
	m := Mechanism{Unit: o.Unit, Clip: o.Clip, Delta: o.Delta, NoiseMultiplier: o.NoiseMultiplier, MaxPerIdentity: o.MaxPerIdentity}
	switch o.Unit {
	case train.UnitExample:
		m.Units = d.Train.Len()
	case train.UnitIdentity:
		id, ok := d.Train.(train.Identified)
		if !ok || d.Identities == 0 {
			return Mechanism{}, errors.New("train: identity-level DP needs training data labelled by identity")
		}
		m.Units = id.Identities()
	default:
		return Mechanism{}, fmt.Errorf("train: unknown privacy unit %q", o.Unit)
	}
	if m.Units < 1 {
		return Mechanism{}, errors.New("train: no training data")
	}
	m.SamplingRate = o.SamplingRate
	if m.SamplingRate == 0 {
		m.SamplingRate = math.Min(1, float64(batch)/float64(m.Units))
	}
	return m, nil
}

// Session is a model, its loss head and a trainer over one data set: the
// unit a federated client trains locally with (LoadWeights, Train,
// Weights, Privacy), and what Job drives for veil train.
type Session struct {
	model  train.Model
	config arch.Config
	loss   loss.Config
	optim  OptimOptions
	mech   *Mechanism
	data   *Data
	tr     *train.Trainer
}

// NewSession builds the model of m with its loss head for d, initialised
// from o.Seed, and a trainer. dpo, if non-nil, turns on DP-SGD; a target ε
// calibrates σ so that epochs epochs of this model's mechanism spend it
// (the noised dimension is the model's trainable parameters).
func NewSession(m ModelOptions, o OptimOptions, dpo *DPOptions, epochs int, d *Data) (*Session, error) {
	if err := m.validate(dpo != nil); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := o.validate(m.Kind); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if d == nil || d.Train == nil || d.Train.Len() == 0 {
		return nil, errors.New("train: no training data")
	}
	var mech *Mechanism
	if dpo != nil {
		c := *dpo
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		mm, err := c.mechanism(d, o.Batch)
		if err != nil {
			return nil, err
		}
		mech = &mm
	}
	var mc arch.Config
	if m.Kind == "head" {
		mc = arch.Config{Kind: "head", Hidden: m.Hidden}
		if m.Features != "descriptor" {
			mc.Features = m.Features
		}
	} else {
		mc = arch.Config{Kind: "lightface", Input: m.Input, Width: m.Width, Norm: m.Norm}
	}
	model, err := arch.New(mc)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	lc := loss.Config{Kind: m.Loss, Classes: d.Train.Classes(), Targets: d.Targets}
	if m.Loss == "distill" {
		if len(d.Targets) != d.Train.Len() {
			return nil, fmt.Errorf("train: distillation needs one target per example, got %d for %d", len(d.Targets), d.Train.Len())
		}
		lc.Classes = len(d.Targets)
	}
	if m.Loss == "cosface" || m.Loss == "arcface" {
		lc.Scale = m.Scale
	}
	if m.Loss == "cosface" || m.Loss == "arcface" || m.Loss == "triplet" {
		lc.Margin = m.Margin
	}
	lc = lc.Defaults()
	mc = model.Config()
	head, err := loss.New(model.Params(), lc, mc.Embedding)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	model.Params().Init(o.Seed)
	opts := train.Options{Optimizer: o.Optimizer, LearningRate: o.LearningRate, Momentum: o.Momentum, WeightDecay: o.WeightDecay,
		MicroBatch: o.MicroBatch, Seed: o.Seed, EMA: o.EMA, Engine: o.Engine}
	if o.FreezeBlocks > 0 {
		for b := 1; b <= o.FreezeBlocks; b++ {
			model.Params().SetGroup(arch.LightFaceBlockName(b)+"/", "frozen")
		}
		opts.GroupLR = map[string]float64{"frozen": 0}
	}
	if mech != nil {
		if dpo.TargetEpsilon > 0 {
			if epochs < 1 {
				return nil, fmt.Errorf("train: calibrating σ needs the number of epochs, got %d", epochs)
			}
			dim := train.NoisedDimension(model.Params(), opts.GroupLR)
			sigma, err := train.NoiseForTarget(*mech.trainOptions(), dim, epochs*mech.StepsPerEpoch(), dpo.TargetEpsilon)
			if err != nil {
				return nil, fmt.Errorf("train: calibrating σ for ε = %g: %w", dpo.TargetEpsilon, err)
			}
			mech.NoiseMultiplier = sigma
		}
		opts.DP = mech.trainOptions()
	}
	tr, err := train.New(model, head, opts)
	if err != nil {
		return nil, err
	}
	return &Session{model: model, config: mc, loss: lc, optim: o, mech: mech, data: d, tr: tr}, nil
}

// Model is the model's configuration (as checkpoints record it).
func (s *Session) Model() arch.Config { return s.config }

// Loss is the loss head's configuration.
func (s *Session) Loss() loss.Config { return s.loss }

// Trainable counts the parameter values the optimiser (and, under DP,
// clipping and noise) touches.
func (s *Session) Trainable() int { return s.tr.NumTrainable() }

// Steps is the number of optimiser steps taken (restored ones included).
func (s *Session) Steps() int { return s.tr.Steps() }

// Privacy is what the weights have spent so far.
func (s *Session) Privacy() train.Privacy { return s.tr.Privacy() }

// Mechanism is the DP-SGD mechanism, or nil without DP.
func (s *Session) Mechanism() *Mechanism { return s.mech }

// StepsPerEpoch is the number of optimiser steps of one epoch.
func (s *Session) StepsPerEpoch() int { return s.tr.StepsPerEpoch(s.data.Train.Len(), s.optim.Batch) }

// EpochEvent is the privacy event of epochs more epochs of DP-SGD: what a
// ledger must be charged before they run.
func (s *Session) EpochEvent(epochs int) (dp.Event, error) {
	return s.eventFor(epochs * s.StepsPerEpoch())
}

// eventFor is the privacy event of steps more DP-SGD steps of this
// session's mechanism (the trainer's own, dp's DP-SGD on its noised
// coordinates).
func (s *Session) eventFor(steps int) (dp.Event, error) {
	if s.mech == nil {
		return dp.Event{}, errors.New("train: training without DP has no privacy event")
	}
	return s.tr.EventOf(steps)
}

// Weights are named parameter values: what a federated client receives
// and sends back.
type Weights struct {
	Names  []string
	Shapes [][]int
	Values [][]float32
}

// Weights returns a copy of the current parameters (not their moving
// average: that is for evaluation).
func (s *Session) Weights() Weights {
	p := s.tr.Params()
	var w Weights
	for i := 0; i < p.Len(); i++ {
		sp := p.Spec(i)
		w.Names = append(w.Names, sp.Name)
		w.Shapes = append(w.Shapes, slices.Clone(sp.Shape))
		w.Values = append(w.Values, slices.Clone(p.Values(i)))
	}
	return w
}

// LoadWeights sets every parameter from w, which must hold exactly the
// session's parameters (names and shapes, in order). The optimiser state
// is left as it is.
func (s *Session) LoadWeights(w Weights) error {
	p := s.tr.Params()
	if len(w.Names) != p.Len() || len(w.Shapes) != p.Len() || len(w.Values) != p.Len() {
		return fmt.Errorf("train: %d weights for a model of %d parameters", len(w.Names), p.Len())
	}
	for i := 0; i < p.Len(); i++ {
		sp := p.Spec(i)
		if w.Names[i] != sp.Name || !slices.Equal(w.Shapes[i], sp.Shape) || len(w.Values[i]) != sp.Size() {
			return fmt.Errorf("train: weight %d is %q %v, the model has %q %v", i, w.Names[i], w.Shapes[i], sp.Name, sp.Shape)
		}
	}
	for i := 0; i < p.Len(); i++ {
		copy(p.Values(i), w.Values[i])
	}
	return nil
}

// Init starts from a checkpoint's weights (ApplyInit: the moving average
// when it kept one; the loss head may differ).
func (s *Session) Init(ck *checkpoint.Checkpoint) error {
	_, err := ck.ApplyInit(s.config, s.tr.Params(), loss.ParamPrefix)
	return err
}

// Resume restores a checkpoint's weights and optimiser state, which must
// belong to this model, loss and mechanism.
func (s *Session) Resume(ck *checkpoint.Checkpoint) error {
	if ck.Header.Loss.Kind != s.loss.Kind || ck.Header.Loss.Classes != s.loss.Classes {
		return fmt.Errorf("train: the checkpoint was trained with loss %s on %d classes, not %s on %d", ck.Header.Loss.Kind, ck.Header.Loss.Classes, s.loss.Kind, s.loss.Classes)
	}
	if err := ck.Apply(s.config, s.tr.Params()); err != nil {
		return err
	}
	return s.tr.Restore(ck.State)
}

// Checkpoint captures the session after epoch epochs.
func (s *Session) Checkpoint(epoch int, optimizer string, seed uint64, public bool) *checkpoint.Checkpoint {
	return checkpoint.FromTrainer(checkpoint.Header{Model: s.config, Loss: s.loss, Optimizer: optimizer, Epoch: epoch, Seed: seed,
		Data: s.data.Name, Public: public}, s.tr.Params(), s.tr.State())
}

// TrainEpoch runs epoch number epoch (0-based; it seeds the data order
// and augmentation) and returns its mean step loss. progress, if set, is
// called after each step.
func (s *Session) TrainEpoch(ctx context.Context, epoch int, progress func(step, steps int, loss float64)) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.tr.Epoch(s.data.Train, train.EpochOptions{Epoch: epoch, Batch: s.optim.Batch, Seed: s.optim.Seed, Augment: s.optim.Augment,
		Progress: progress})
}

// Evaluate embeds the pair images with the current weights (their moving
// average with OptimOptions.EMA) and returns the accuracy on the test
// pairs and the threshold chosen on the tuning pairs.
func (s *Session) Evaluate() (acc, threshold float64, err error) {
	p := s.data.Pairs
	if p == nil {
		return 0, 0, errors.New("train: the data have no evaluation pairs")
	}
	if len(p.paths) == 0 {
		return 0, 0, errors.New("train: no pair images")
	}
	x, err := p.inputs()
	if err != nil {
		return 0, 0, err
	}
	emb, err := s.tr.Embed(x, len(p.paths))
	if err != nil {
		return 0, 0, err
	}
	vecs := make(map[string][]float32, len(emb))
	for i, path := range p.paths {
		vecs[path] = emb[i]
	}
	return p.accuracy(vecs)
}

// Update is the result of local training: the new weights and what they
// have spent.
type Update struct {
	Weights Weights
	Privacy train.Privacy
	// Steps is the number of optimiser steps taken by this call.
	Steps int
	// LossCurve is each epoch's mean step loss.
	LossCurve []float64
}

// Local trains a session for epochs epochs from the given weights (a
// federated client's round: the coordinator's weights in, the client's
// data partition in the session's data, DP-SGD per its mechanism) and
// returns the new weights and their privacy. Under DP, charge is called
// with the privacy event of each epoch before the epoch touches the data
// (a client's ledger: dp.Ledger.Charge, or Ledger.Charge); if it returns
// an error, nothing more is trained and the error is returned. The
// session's optimiser state carries over between calls; firstEpoch numbers
// the first epoch (it seeds the data order).
func (s *Session) Local(ctx context.Context, start Weights, firstEpoch, epochs int, charge func(dp.Event) error) (Update, error) {
	if epochs < 1 {
		return Update{}, fmt.Errorf("train: the number of local epochs must be positive, got %d", epochs)
	}
	if s.mech != nil && charge == nil {
		return Update{}, errors.New("train: local DP training needs a ledger to charge")
	}
	if err := s.LoadWeights(start); err != nil {
		return Update{}, err
	}
	before := s.Steps()
	var u Update
	for e := firstEpoch; e < firstEpoch+epochs; e++ {
		if s.mech != nil {
			ev, err := s.EpochEvent(1)
			if err != nil {
				return Update{}, err
			}
			if err := charge(ev); err != nil {
				return Update{}, fmt.Errorf("train: epoch %d: %w", e+1, err)
			}
		}
		l, err := s.TrainEpoch(ctx, e, nil)
		if err != nil {
			return Update{}, err
		}
		u.LossCurve = append(u.LossCurve, l)
	}
	u.Weights, u.Privacy, u.Steps = s.Weights(), s.Privacy(), s.Steps()-before
	return u, nil
}

// ClippedSum draws a Poisson sample of d's units (a client's part of the
// data) at the session's sampling rate and returns the sum of their
// clipped gradients at the session's current weights, without noise: a
// client's half of a distributed DP-SGD step (package fed/ddp), which the
// client must noise before anything leaves it. seed seeds augmentation.
func (s *Session) ClippedSum(d *Data, seed uint64) ([]float32, error) {
	if s.mech == nil {
		return nil, errors.New("train: a clipped gradient sum needs DP-SGD's mechanism (clip, sampling rate)")
	}
	if d == nil || d.Train == nil {
		return nil, errors.New("train: no data to sample")
	}
	var aug *rand.Rand
	if s.optim.Augment {
		aug = rand.New(rand.NewPCG(seed, 0xd5a9))
	}
	sum, _, err := s.tr.ClippedSum(d.Train, aug)
	return sum, err
}

// ApplyReleased takes the optimiser step with a released noisy gradient
// sum (ClippedSum's layout) divided by expectedBatch, as DP-SGD's step
// does after its noise; mechanism and epsilon go into the weights' privacy
// record (train.Trainer.ApplyReleased).
func (s *Session) ApplyReleased(released []float32, expectedBatch float64, mechanism string, epsilon float64) error {
	return s.tr.ApplyReleased(released, 1/expectedBatch, mechanism, epsilon)
}
