// Package local is a federated client's local trainer: a client.Trainer
// built on package training's Session, so that a client trains exactly
// as veil train does (the same model, loss, DP-SGD, privacy accounting
// and evaluation), on its own partition of the data.
//
// # What a round runs
//
// FedAvg: E local epochs of DP-SGD (or plain training) from the round's
// model with the configured optimiser at the round's learning rate; the
// update is the new weights minus the round's model.
//
// FedSGD (McMahan et al. 2017, B = ∞): one step of plain SGD (no
// momentum, no weight decay) on the gradient over all the client's data
// at the round's model; the update is (old − new)/lr, the (noisy)
// gradient itself. Under DP that step samples every person (q = 1), so
// there is no amplification by subsampling: the price of FedSGD's single
// full-data gradient per round.
//
// Dropout-thinned models (an asynchronous coordinator's --thin-p, Irene
// Section III.C): a served model that is the head with only some of its
// hidden units (strategy.Thin: the first layer's columns, its bias and
// PReLU slopes, the next layer's rows) is trained as the network of those
// units, built at the served width, and its update returned in the served
// shape, which the coordinator merges on the kept units. Its DP-SGD noises
// the served values, and the client charges it on that dimension.
//
// Only trainable parameters travel, all of them: a model with frozen or
// state parameters is refused, and so is a loss whose parameters depend on
// the client's data (a softmax over the client's own identities would
// give each client another shape). The distillation head of veil train
// has neither.
//
// # Privacy
//
// The unit is the round's (identity by default: all the images of one
// person). N is the client's number of privacy units (its people, or
// images for the example unit) and q = min(1, batch/N) with batch the
// round's expected batch. A client with fewer people than the batch runs
// at q = 1: every person in every step, no amplification; its guarantee is
// still the accountant's for q = 1, only weaker for the same noise.
//
// Plan states (σ, q, steps, clip, δ, unit) before any data are touched.
// When the round leaves σ to the client (noise multiplier 0), the first
// Plan calibrates it once, with package training's calibration of the
// mechanism the session runs (train.NoiseForTarget: dp's discretised
// DP-SGD on the model's trainable values), so that all the rounds the run
// still plans (RoundConfig.Rounds − Round + 1), at the client's q and
// steps per round, spend the remaining budget; later rounds keep that σ,
// so a round the client misses leaves budget unspent rather than raising
// the noise of the others. A calibrated σ is never below
// Options.MinNoiseMultiplier, the owner's floor. What Train charges per
// epoch is checked against the plan (client.Event) before each epoch runs.
// The calibration is on the whole model's dimension; a thinned exchange
// runs the same σ on fewer values, whose discretised cost differs from the
// planned one by about 1e-7 relative (either way), and the client's ledger,
// charged the exchange's cost on the values trained, refuses an exchange
// past the budget.
package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// Options configure a local trainer.
type Options struct {
	// Model is the network and its loss (veil train's options).
	Model training.ModelOptions
	// Optim is FedAvg's local optimiser; its learning rate is replaced by
	// the round's, its batch by the round's, and EMA is not used (only
	// the weights travel). FedSGD runs plain SGD whatever it says.
	Optim training.OptimOptions
	// Data is the client's partition (Split, Subset).
	Data *training.Data
	// MaxPerIdentity caps a sampled person's images per DP-SGD step
	// (identity unit; 0: the micro-batch).
	MaxPerIdentity int
	// MinNoiseMultiplier is the least σ a calibrated plan runs (the
	// owner's client.Policy.MinNoiseMultiplier): when the budget would
	// allow less noise the client runs this and spends less.
	MinNoiseMultiplier float64
}

// Trainer is a client.Trainer over one client's data. Its methods may be
// called from several goroutines, but run one at a time.
type Trainer struct {
	o      Options
	dim    int
	layout wire.Weights // the configured model's tensors (names and shapes)

	mu       sync.Mutex
	plan     *fedpb.DPParams // the mechanism, fixed by the first Plan
	planKey  string          // strategy, batch and epochs the plan was made for
	sess     *training.Session
	sessKey  string
	epoch    int // local epochs run so far (seeds the data order)
	lastLoss float64
}

// New builds a trainer for o, checking that the model can be federated.
func New(o Options) (*Trainer, error) {
	if o.Data == nil || o.Data.Train == nil || o.Data.Train.Len() == 0 {
		return nil, errors.New("local: the client has no training data")
	}
	o.Optim.EMA = 0
	s, err := training.NewSession(o.Model, o.Optim, nil, 0, o.Data)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	w := s.Weights()
	n := 0
	for _, v := range w.Values {
		n += len(v)
	}
	if n != s.Trainable() {
		return nil, fmt.Errorf("local: the model has %d parameter values of which %d are trained; federating frozen or state parameters is not supported", n, s.Trainable())
	}
	return &Trainer{o: o, dim: n, layout: ToWire(w)}, nil
}

// Dimension is the number of values an update carries (every trainable
// parameter), the dimension DP-SGD noises.
func (t *Trainer) Dimension() int { return t.dim }

// Mechanism is the DP-SGD this client runs (nil before its first plan).
func (t *Trainer) Mechanism() *fedpb.DPParams {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.plan == nil {
		return nil
	}
	return clonePlan(t.plan)
}

// LastLoss is the mean step loss of the last local epoch.
func (t *Trainer) LastLoss() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastLoss
}

// units is N, the client's number of privacy units.
func (t *Trainer) units(unit string) (int, error) {
	switch train.Unit(unit) {
	case train.UnitIdentity:
		id, ok := t.o.Data.Train.(train.Identified)
		if !ok || id.Identities() < 1 {
			return 0, errors.New("local: identity-level DP needs training data labelled by identity")
		}
		return id.Identities(), nil
	case train.UnitExample:
		return t.o.Data.Train.Len(), nil
	}
	return 0, fmt.Errorf("local: privacy unit %q (want identity or example)", unit)
}

// shape returns q, the steps per local epoch and the local epochs of a
// round of task on n units.
func shape(task *fedpb.RoundConfig, n int) (q float64, perEpoch, epochs int, err error) {
	switch task.GetStrategy() {
	case "easgd":
		// λ = LocalSteps steps on the client's own clock, run as the
		// fewest whole local epochs that hold them (the plan states, and
		// the client charges, the steps run).
		if task.GetLocalSteps() < 1 || task.GetBatch() < 1 {
			return 0, 0, 0, fmt.Errorf("local: EASGD needs its period λ ≥ 1 in local steps and a positive batch; the exchange asks for %d steps, batch %d", task.GetLocalSteps(), task.GetBatch())
		}
		q = math.Min(1, float64(task.GetBatch())/float64(n))
		perEpoch = int(math.Ceil(1 / q))
		return q, perEpoch, (int(task.GetLocalSteps()) + perEpoch - 1) / perEpoch, nil
	case "fedavg", "fedbuff":
		if task.GetLocalEpochs() < 1 {
			return 0, 0, 0, fmt.Errorf("local: FedAvg here trains whole local epochs; the round asks for %d epochs and %d steps", task.GetLocalEpochs(), task.GetLocalSteps())
		}
		if task.GetBatch() < 1 {
			return 0, 0, 0, errors.New("local: the round's batch size must be positive")
		}
		q = math.Min(1, float64(task.GetBatch())/float64(n))
		return q, int(math.Ceil(1 / q)), int(task.GetLocalEpochs()), nil
	case "fedsgd":
		if task.GetLocalSteps() > 1 || task.GetLocalEpochs() > 1 {
			return 0, 0, 0, fmt.Errorf("local: FedSGD takes one local step; the round asks for %d steps and %d epochs", task.GetLocalSteps(), task.GetLocalEpochs())
		}
		return 1, 1, 1, nil
	}
	return 0, 0, 0, fmt.Errorf("local: unknown strategy %q (want fedavg, fedsgd, easgd or fedbuff)", task.GetStrategy())
}

// Plan implements client.Trainer: the DP-SGD this client runs in the
// round, calibrating σ to the remaining budget at the first call when the
// round leaves it to the client.
func (t *Trainer) Plan(task *fedpb.RoundConfig, remaining float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	if d == nil {
		return nil, errors.New("local: the round asks for no DP")
	}
	n, err := t.units(d.GetPrivacyUnit())
	if err != nil {
		return nil, err
	}
	q, perEpoch, epochs, err := shape(task, n)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s/%d/%d", task.GetStrategy(), task.GetBatch(), epochs)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.plan; p != nil {
		if key != t.planKey || d.GetClip() != p.GetClip() || d.GetDelta() != p.GetDelta() || d.GetPrivacyUnit() != p.GetPrivacyUnit() {
			return nil, errors.New("local: the round's strategy, batch, epochs, clip, δ or unit differ from the earlier rounds'; a client's mechanism is fixed for the run")
		}
		if s := d.GetNoiseMultiplier(); s > 0 && s != p.GetNoiseMultiplier() {
			return nil, fmt.Errorf("local: the round asks for noise multiplier %g, this client runs %g", s, p.GetNoiseMultiplier())
		}
		return clonePlan(p), nil
	}
	steps := perEpoch * epochs
	sigma := d.GetNoiseMultiplier()
	if sigma == 0 {
		if !(remaining > 0) {
			return nil, fmt.Errorf("local: no privacy budget left (ε %g): %w", remaining, client.ErrBudgetExhausted)
		}
		rounds := int(task.GetRounds()) - int(task.GetRound()) + 1
		if a := task.GetAsync(); a != nil {
			// An asynchronous run's Rounds are model versions and Round a
			// ticket: the budget is spread over every exchange the run
			// takes (versions × FedBuff's K), as if this client made them
			// all, so it can take part until the end.
			rounds = int(task.GetRounds()) * max(1, int(a.GetBufferSize()))
			if a.GetStrategy() == "easgd" {
				rounds = int(task.GetRounds())
			}
		}
		if rounds < 1 {
			rounds = 1
		}
		o := train.DPOptions{Unit: train.Unit(d.GetPrivacyUnit()), Clip: d.GetClip(), SamplingRate: q, Delta: d.GetDelta(),
			DatasetSize: n, MaxPerIdentity: t.o.MaxPerIdentity}
		if sigma, err = train.NoiseForTarget(o, t.dim, rounds*steps, remaining); err != nil {
			return nil, fmt.Errorf("local: calibrating the noise for %d rounds of %d steps to ε = %.4g: %w", rounds, steps, remaining, err)
		}
		sigma = math.Max(sigma, t.o.MinNoiseMultiplier)
	}
	t.plan = &fedpb.DPParams{NoiseMultiplier: sigma, Clip: d.GetClip(), SamplingRate: q, Steps: uint64(steps),
		Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}
	t.planKey = key
	return clonePlan(t.plan), nil
}

func clonePlan(p *fedpb.DPParams) *fedpb.DPParams {
	return &fedpb.DPParams{NoiseMultiplier: p.GetNoiseMultiplier(), Clip: p.GetClip(), SamplingRate: p.GetSamplingRate(),
		Steps: p.GetSteps(), Delta: p.GetDelta(), PrivacyUnit: p.GetPrivacyUnit()}
}

func samePlan(a, b *fedpb.DPParams) bool {
	return a.GetNoiseMultiplier() == b.GetNoiseMultiplier() && a.GetClip() == b.GetClip() && a.GetSamplingRate() == b.GetSamplingRate() &&
		a.GetSteps() == b.GetSteps() && a.GetDelta() == b.GetDelta() && a.GetPrivacyUnit() == b.GetPrivacyUnit()
}

// session returns the training session for the round on a head of hidden
// width hidden (0: the configured model), built on first use and rebuilt
// if the round's optimiser settings or the width change.
func (t *Trainer) session(task *fedpb.RoundConfig, plan *fedpb.DPParams, hidden int) (*training.Session, error) {
	o := t.o.Optim
	o.EMA = 0
	o.LearningRate = task.GetLearningRate()
	if !(o.LearningRate > 0) {
		return nil, fmt.Errorf("local: the round's learning rate must be positive, got %g", o.LearningRate)
	}
	fedsgd := task.GetStrategy() == "fedsgd"
	if fedsgd {
		o.Optimizer, o.Momentum, o.WeightDecay = "sgd", 0, 0
		o.Batch = t.o.Data.Train.Len() // without DP: one step on all the data
	} else if task.GetBatch() > 0 {
		o.Batch = int(task.GetBatch())
	}
	var dpo *training.DPOptions
	if plan != nil {
		dpo = &training.DPOptions{Unit: train.Unit(plan.GetPrivacyUnit()), NoiseMultiplier: plan.GetNoiseMultiplier(), Clip: plan.GetClip(),
			SamplingRate: plan.GetSamplingRate(), Delta: plan.GetDelta(), MaxPerIdentity: t.o.MaxPerIdentity}
	}
	key := fmt.Sprintf("%s/%g/%d/%v/%d", task.GetStrategy(), o.LearningRate, o.Batch, plan, hidden)
	if t.sess != nil && key == t.sessKey {
		return t.sess, nil
	}
	m := t.o.Model
	m.Hidden = hidden
	s, err := training.NewSession(m, o, dpo, 0, t.o.Data)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if hidden == 0 && s.Trainable() != t.dim {
		return nil, fmt.Errorf("local: the session trains %d values, the model has %d", s.Trainable(), t.dim)
	}
	t.sess, t.sessKey = s, key
	return s, nil
}

// Train implements client.Trainer: it trains from model as the round
// asks and returns the update (FedAvg: new − model; FedSGD: the gradient).
func (t *Trainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if (plan == nil) != (task.GetDp() == nil) {
		return client.Update{}, errors.New("local: a round under DP needs a plan, and a round without DP none")
	}
	if plan != nil && (t.plan == nil || !samePlan(plan, t.plan)) {
		return client.Update{}, errors.New("local: the plan is not the one this trainer made")
	}
	n := 0
	if plan != nil {
		var err error
		if n, err = t.units(plan.GetPrivacyUnit()); err != nil {
			return client.Update{}, err
		}
	} else {
		n = t.o.Data.Train.Len()
	}
	_, perEpoch, epochs, err := shape(task, n)
	if err != nil {
		return client.Update{}, err
	}
	hidden, err := t.servedWidth(model)
	if err != nil {
		return client.Update{}, err
	}
	s, err := t.session(task, plan, hidden)
	if err != nil {
		return client.Update{}, err
	}
	// The mechanism runs on what is trained: the served model's values.
	dim := t.dim
	if hidden != 0 {
		if err := model.SameLayout(ToWire(s.Weights())); err != nil {
			return client.Update{}, fmt.Errorf("local: the served model is not this head thinned to %d hidden units: %w", hidden, err)
		}
		dim = s.Trainable()
	}
	start := FromWire(model)
	var charge func(dp.Event) error
	if plan != nil {
		if s.StepsPerEpoch() != perEpoch || uint64(perEpoch*epochs) != plan.GetSteps() {
			return client.Update{}, fmt.Errorf("local: the session runs %d steps an epoch, the plan %d steps in %d epochs", s.StepsPerEpoch(), plan.GetSteps(), epochs)
		}
		one := clonePlan(plan)
		one.Steps = uint64(perEpoch)
		want, err := client.Event(one, dim)
		if err != nil {
			return client.Update{}, fmt.Errorf("local: %w", err)
		}
		charged := 0
		charge = func(ev dp.Event) error {
			if ev.Kind != want.Kind || ev.SamplingRate != want.SamplingRate || ev.NoiseMultiplier != want.NoiseMultiplier || ev.Count != want.Count {
				return errors.New("local: the epoch's privacy cost is not what the client charged for it")
			}
			charged += ev.Count
			if uint64(charged) > plan.GetSteps() {
				return errors.New("local: the round would run more DP-SGD steps than the client charged for")
			}
			return nil
		}
	}
	u, err := s.Local(ctx, start, t.epoch, epochs, charge)
	if err != nil {
		return client.Update{}, err
	}
	t.epoch += epochs
	if len(u.LossCurve) > 0 {
		t.lastLoss = u.LossCurve[len(u.LossCurve)-1]
	}
	if plan != nil && uint64(u.Steps) != plan.GetSteps() {
		return client.Update{}, fmt.Errorf("local: ran %d DP-SGD steps, the plan says %d", u.Steps, plan.GetSteps())
	}
	next := ToWire(u.Weights)
	if err := model.SameLayout(next); err != nil {
		return client.Update{}, err
	}
	up := model.Clone()
	lr := float32(task.GetLearningRate())
	for i := range up {
		for j, old := range model[i].Values {
			if task.GetStrategy() == "fedsgd" {
				up[i].Values[j] = (old - next[i].Values[j]) / lr
			} else {
				up[i].Values[j] = next[i].Values[j] - old
			}
		}
	}
	out := client.Update{Weights: up, DP: plan}
	if plan == nil {
		out.Examples = uint64(t.o.Data.Train.Len())
	}
	return out, nil
}

// servedWidth is the hidden width of the head a served model is (0: the
// configured model itself). A dropout-thinned model (fed/strategy.Thin,
// served by an asynchronous coordinator with thinning) is the configured
// head with only the kept hidden units: its first weight's columns are
// the hidden width; Train builds that network, trains it and returns the
// update of the kept units in the served shape.
func (t *Trainer) servedWidth(model wire.Weights) (int, error) {
	if t.layout.SameLayout(model) == nil {
		return 0, nil
	}
	if t.o.Model.Kind != "head" {
		return 0, fmt.Errorf("local: the served model's layout is not this %s network's (a thinned model can be trained only with the head)", t.o.Model.Kind)
	}
	first := func(w wire.Weights) (string, []int) {
		for _, ts := range w {
			if len(ts.Shape) == 2 {
				return ts.Name, ts.Shape
			}
		}
		return "", nil
	}
	name, full := first(t.layout)
	if got, sh := first(model); name != "" && got == name && len(sh) == 2 && sh[0] == full[0] && sh[1] >= 1 && sh[1] < full[1] {
		return sh[1], nil
	}
	return 0, fmt.Errorf("local: the served model's layout is neither this head's nor a thinning of its hidden layer %s %v", name, full)
}

// ToWire converts a session's weights to the protocol's tensors.
func ToWire(w training.Weights) wire.Weights {
	out := make(wire.Weights, len(w.Names))
	for i := range w.Names {
		out[i] = wire.Tensor{Name: w.Names[i], Shape: append([]int(nil), w.Shapes[i]...), Values: append([]float32(nil), w.Values[i]...)}
	}
	return out
}

// FromWire converts the protocol's tensors to a session's weights.
func FromWire(w wire.Weights) training.Weights {
	var out training.Weights
	for _, t := range w {
		out.Names = append(out.Names, t.Name)
		out.Shapes = append(out.Shapes, append([]int(nil), t.Shape...))
		out.Values = append(out.Values, append([]float32(nil), t.Values...))
	}
	return out
}

// Evaluator scores models on the development pairs exactly as veil train
// does (training.Session.Evaluate: cosine similarity, threshold from the
// tuning pairs, accuracy on the test pairs).
type Evaluator struct {
	mu sync.Mutex
	s  *training.Session
}

// NewEvaluator builds the model of m on d (whose Pairs are scored); the
// weights it starts with are the model's initial ones for o.Seed.
func NewEvaluator(m training.ModelOptions, o training.OptimOptions, d *training.Data) (*Evaluator, error) {
	o.EMA = 0 // a moving average would score the initial weights, not the loaded ones
	s, err := training.NewSession(m, o, nil, 0, d)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return &Evaluator{s: s}, nil
}

// Initial returns the model's initial weights (the coordinator's first
// model).
func (e *Evaluator) Initial() wire.Weights {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ToWire(e.s.Weights())
}

// Accuracy loads w and returns the development-pairs accuracy and the
// threshold chosen on the tuning pairs.
func (e *Evaluator) Accuracy(w wire.Weights) (acc, threshold float64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.s.LoadWeights(FromWire(w)); err != nil {
		return 0, 0, fmt.Errorf("local: %w", err)
	}
	return e.s.Evaluate()
}

// ClippedSum implements client.DistributedTrainer: it Poisson-samples the
// client's units at the plan's rate and returns the sum of their gradients
// at model, each clipped to the plan's C (training.Session.ClippedSum, the
// step half veil train's DP-SGD and fed/ddpsim use), without noise: the
// client encodes it with its noise share (fed/ddp) before it leaves.
func (t *Trainer) ClippedSum(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan ddp.Plan) ([]float32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if plan.Dim != t.dim {
		return nil, fmt.Errorf("local: the plan sums %d values, the model has %d", plan.Dim, t.dim)
	}
	key := fmt.Sprintf("ddp/%s/%g/%g/%g", plan.Unit, plan.Clip, plan.SamplingRate, plan.Delta)
	if t.sess == nil || t.sessKey != key {
		o := t.o.Optim
		o.EMA = 0
		// The trainer's own noise is never added (the clients' shares
		// are the noise); the session needs a multiplier to be built.
		s, err := training.NewSession(t.o.Model, o, &training.DPOptions{Unit: train.Unit(plan.Unit), NoiseMultiplier: 1, Clip: plan.Clip,
			SamplingRate: plan.SamplingRate, Delta: plan.Delta, MaxPerIdentity: t.o.MaxPerIdentity}, 0, t.o.Data)
		if err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		if s.Trainable() != t.dim {
			return nil, fmt.Errorf("local: the session trains %d values, the model has %d", s.Trainable(), t.dim)
		}
		t.sess, t.sessKey = s, key
	}
	if err := t.sess.LoadWeights(FromWire(model)); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	sum, err := t.sess.ClippedSum(t.o.Data, t.o.Optim.Seed^task.GetRound()<<8)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return sum, nil
}

// The local trainer takes part in distributed DP-SGD rounds.
var _ client.DistributedTrainer = (*Trainer)(nil)
