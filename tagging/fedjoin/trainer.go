package fedjoin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/engine"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/tagging"
)

// Trainer is the library's client.Trainer: each round it trains ψ (the
// coordinator's model) from the round's weights by Irene's noisy
// bootstrapping on the owner's decisions (collab.Bootstrap: a local
// classifier φ over the library's hashed tags, Eq. 2's loss), with the
// DP-SGD plan its client checked and charged, per person of the library,
// and returns ψ's change. φ is the library's alone: it is trained afresh
// each round beside ψ, its gradients clipped and noised with ψ's (so the
// mechanism charged is on both, NoisedDimension), and never sent.
type Trainer struct {
	data    *collab.Tagged
	classes int
	o       TrainerOptions

	mu   sync.Mutex
	plan *fedpb.DPParams // fixed by the first Plan
	key  string
}

// TrainerOptions configure a Trainer.
type TrainerOptions struct {
	// MinNoiseMultiplier is the owner's least σ (client.Policy's): a σ
	// calibrated to the budget is raised to it.
	MinNoiseMultiplier float64
	// MaxPerUnit caps a sampled person's faces per step (default 16).
	MaxPerUnit int
	// Alpha is Eq. 2's α (default 0.9).
	Alpha float64
	// Seed seeds φ's initial weights and the data order (not the noise,
	// which comes from a CSPRNG).
	Seed uint64
	// Engine runs the training (nil: a private default engine).
	Engine *engine.Engine
}

// NewTrainer builds the trainer over a library's training data (its
// people with named or accepted faces; rejections are not used: Eq. 2's
// loss has no negatives).
func NewTrainer(td *tagging.TrainingData, o TrainerOptions) (*Trainer, error) {
	if td == nil || len(td.People) == 0 {
		return nil, errors.New("fedjoin: the library has no named people")
	}
	if o.MaxPerUnit == 0 {
		o.MaxPerUnit = 16
	}
	if o.Alpha == 0 {
		o.Alpha = 0.9
	}
	if o.MaxPerUnit < 1 || !(o.Alpha > 0 && o.Alpha <= 1) || !(o.MinNoiseMultiplier >= 0) {
		return nil, fmt.Errorf("fedjoin: faces per person %d, α %g, least σ %g: want ≥ 1, in (0, 1], ≥ 0", o.MaxPerUnit, o.Alpha, o.MinNoiseMultiplier)
	}
	data := &collab.Tagged{}
	for _, p := range td.People {
		faces := slices.Concat(p.Named, p.Accepted)
		if len(faces) == 0 {
			continue
		}
		if err := data.Add(p.Class, faces); err != nil {
			return nil, fmt.Errorf("fedjoin: %w", err)
		}
	}
	if data.Units == 0 {
		return nil, errors.New("fedjoin: the library has no named faces with descriptors")
	}
	return &Trainer{data: data, classes: td.Classes, o: o}, nil
}

// People is the number of privacy units: the library's people trained on.
func (t *Trainer) People() int { return t.data.Units }

// psiOf builds ψ with the coordinator's model's weights, refusing a model
// that is not ψ on the library's descriptors.
func (t *Trainer) psiOf(model wire.Weights) (*collab.Psi, error) {
	hidden := 0
	for _, x := range model {
		if x.Name == "psi/fc2/w" && len(x.Shape) == 2 {
			hidden = x.Shape[0]
		}
	}
	ψ, err := collab.NewPsi(collab.PsiOptions{Dim: t.data.Dim, Hidden: hidden})
	if err != nil {
		return nil, fmt.Errorf("fedjoin: %w", err)
	}
	want := ψ.Params()
	if len(model) != want.Len() {
		return nil, fmt.Errorf("fedjoin: the coordinator's model has %d tensors; ψ on %d-value descriptors has %d (start the coordinator from veil fed init-model --model psi)", len(model), t.data.Dim, want.Len())
	}
	w := map[string][]float32{}
	for i, x := range model {
		s := want.Spec(i)
		if x.Name != s.Name || !slices.Equal(x.Shape, s.Shape) {
			return nil, fmt.Errorf("fedjoin: the coordinator's model's tensor %d is %q %v; ψ's is %q %v (start the coordinator from veil fed init-model --model psi)", i, x.Name, x.Shape, s.Name, s.Shape)
		}
		w[x.Name] = x.Values
	}
	if err := ψ.SetWeights(w); err != nil {
		return nil, fmt.Errorf("fedjoin: %w", err)
	}
	return ψ, nil
}

// NoisedDimension implements client.NoisedDimensioner: ψ's values and
// φ's, which DP-SGD noises together.
func (t *Trainer) NoisedDimension(model wire.Weights) (int, error) {
	ψ, err := t.psiOf(model)
	if err != nil {
		return 0, err
	}
	return collab.NoisedDimension(ψ, t.classes)
}

// shape is q, the steps per epoch and the epochs of a FedAvg round.
func (t *Trainer) shape(task *fedpb.RoundConfig) (q float64, perEpoch, epochs int, err error) {
	if task.GetStrategy() != "fedavg" {
		return 0, 0, 0, fmt.Errorf("fedjoin: a library trains FedAvg rounds of local epochs, not %q", task.GetStrategy())
	}
	if task.GetLocalEpochs() < 1 || task.GetBatch() < 1 {
		return 0, 0, 0, fmt.Errorf("fedjoin: the round asks for %d local epochs of batch %d; a library trains whole epochs", task.GetLocalEpochs(), task.GetBatch())
	}
	q = math.Min(1, float64(task.GetBatch())/float64(t.data.Units))
	return q, int(math.Ceil(1 / q)), int(task.GetLocalEpochs()), nil
}

// Plan implements client.Trainer: the round's DP-SGD per person, its σ
// the round's or, when the round leaves it to the client, calibrated once
// so that the rounds left spend the remaining budget (never below the
// owner's least σ); later rounds keep the mechanism.
func (t *Trainer) Plan(task *fedpb.RoundConfig, remaining float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	if d == nil {
		return nil, errors.New("fedjoin: the round asks for no DP")
	}
	if train.Unit(d.GetPrivacyUnit()) != train.UnitIdentity {
		return nil, fmt.Errorf("fedjoin: a library's unit is one person, the round's is %q", d.GetPrivacyUnit())
	}
	q, perEpoch, epochs, err := t.shape(task)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%d/%d/%g/%g", task.GetBatch(), epochs, d.GetClip(), d.GetDelta())
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.plan; p != nil {
		if key != t.key {
			return nil, errors.New("fedjoin: the round's batch, epochs, clip or δ differ from the earlier rounds'; a library's mechanism is fixed for the run")
		}
		if s := d.GetNoiseMultiplier(); s > 0 && s != p.GetNoiseMultiplier() {
			return nil, fmt.Errorf("fedjoin: the round asks for noise multiplier %g, this library runs %g", s, p.GetNoiseMultiplier())
		}
		return clonePlan(p), nil
	}
	steps := perEpoch * epochs
	sigma := d.GetNoiseMultiplier()
	if sigma == 0 {
		if sigma, err = t.calibrate(task, q, steps, remaining); err != nil {
			return nil, err
		}
	}
	t.plan = &fedpb.DPParams{NoiseMultiplier: sigma, Clip: d.GetClip(), SamplingRate: q, Steps: uint64(steps), Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}
	t.key = key
	return clonePlan(t.plan), nil
}

// calibrate is the σ that spends remaining over the rounds left.
func (t *Trainer) calibrate(task *fedpb.RoundConfig, q float64, steps int, remaining float64) (float64, error) {
	if !(remaining > 0) {
		return 0, fmt.Errorf("fedjoin: no privacy budget left (ε %g): %w", remaining, client.ErrBudgetExhausted)
	}
	rounds := max(1, int(task.GetRounds())-int(task.GetRound())+1)
	ψ, err := collab.NewPsi(collab.PsiOptions{Dim: t.data.Dim})
	if err != nil {
		return 0, err
	}
	dim, err := collab.NoisedDimension(ψ, t.classes)
	if err != nil {
		return 0, err
	}
	d := task.GetDp()
	o := train.DPOptions{Unit: train.UnitIdentity, Clip: d.GetClip(), SamplingRate: q, Delta: d.GetDelta(), DatasetSize: t.data.Units, MaxPerIdentity: t.o.MaxPerUnit}
	sigma, err := train.NoiseForTarget(o, dim, rounds*steps, remaining)
	if err != nil {
		return 0, fmt.Errorf("fedjoin: calibrating the noise for %d rounds of %d steps to ε = %.4g: %w", rounds, steps, remaining, err)
	}
	return math.Max(sigma, t.o.MinNoiseMultiplier), nil
}

func clonePlan(p *fedpb.DPParams) *fedpb.DPParams {
	return &fedpb.DPParams{NoiseMultiplier: p.GetNoiseMultiplier(), Clip: p.GetClip(), SamplingRate: p.GetSamplingRate(),
		Steps: p.GetSteps(), Delta: p.GetDelta(), PrivacyUnit: p.GetPrivacyUnit()}
}

// Train implements client.Trainer: ψ from the round's model, bootstrapped
// for the round's local epochs with exactly the checked plan; the update
// is ψ's new weights minus the model's.
func (t *Trainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if plan == nil || t.plan == nil || !samePlan(plan, t.plan) {
		return client.Update{}, errors.New("fedjoin: the plan is not the one this trainer made")
	}
	_, _, epochs, err := t.shape(task)
	if err != nil {
		return client.Update{}, err
	}
	ψ, err := t.psiOf(model)
	if err != nil {
		return client.Update{}, err
	}
	dim, err := collab.NoisedDimension(ψ, t.classes)
	if err != nil {
		return client.Update{}, err
	}
	want, err := client.Event(plan, dim)
	if err != nil {
		return client.Update{}, fmt.Errorf("fedjoin: %w", err)
	}
	check := func(ev dp.Event) error {
		if ev.Kind != want.Kind || ev.SamplingRate != want.SamplingRate || ev.NoiseMultiplier != want.NoiseMultiplier || ev.Count != want.Count {
			return fmt.Errorf("fedjoin: the round's privacy cost (%s) is not what the client charged (%s)", ev.Label, want.Label)
		}
		return nil
	}
	_, err = collab.Bootstrap(ctx, ψ, t.data, collab.BootstrapOptions{Classes: t.classes, Alpha: t.o.Alpha, Epochs: epochs,
		Batch: int(task.GetBatch()), LearningRate: task.GetLearningRate(), Seed: t.o.Seed ^ task.GetRound()<<16, Engine: t.o.Engine,
		DP: &collab.BootstrapDP{NoiseMultiplier: plan.GetNoiseMultiplier(), Delta: plan.GetDelta(), Clip: plan.GetClip(),
			SamplingRate: plan.GetSamplingRate(), MaxPerUnit: t.o.MaxPerUnit}, Charge: check})
	if err != nil {
		return client.Update{}, err
	}
	now := ψ.Weights()
	up := model.Clone()
	for i := range up {
		for j, old := range model[i].Values {
			up[i].Values[j] = now[up[i].Name][j] - old
		}
	}
	return client.Update{Weights: up, DP: plan}, nil
}

func samePlan(a, b *fedpb.DPParams) bool {
	return a.GetNoiseMultiplier() == b.GetNoiseMultiplier() && a.GetClip() == b.GetClip() && a.GetSamplingRate() == b.GetSamplingRate() &&
		a.GetSteps() == b.GetSteps() && a.GetDelta() == b.GetDelta() && a.GetPrivacyUnit() == b.GetPrivacyUnit()
}

var (
	_ client.Trainer           = (*Trainer)(nil)
	_ client.NoisedDimensioner = (*Trainer)(nil)
)
