package training

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training/trainingtest"
)

// TestLocalRound is a federated client's round: weights in, one epoch of
// identity-level DP-SGD on the client's data with the charge made first,
// weights and privacy out.
func TestLocalRound(t *testing.T) {
	dir := t.TempDir()
	trainingtest.WriteLFW(t, dir)
	o := dpHead(dir, "unused.ckpt", 1)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := LoadData(&o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSession(o.Model, o.Optim, o.DP, 1, d)
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Mechanism(); m == nil || m.Units != 2 || m.SamplingRate != 0.5 || m.StepsPerEpoch() != 2 || m.NoiseMultiplier != 1 {
		t.Fatalf("mechanism %+v: want 2 people sampled at 0.5, 2 steps an epoch, σ = 1", m)
	}
	start := s.Weights()
	var charged []dp.Event
	var stepsAtCharge []int
	charge := func(ev dp.Event) error {
		charged = append(charged, ev)
		stepsAtCharge = append(stepsAtCharge, s.Steps())
		return nil
	}
	u, err := s.Local(context.Background(), start, 0, 2, charge)
	if err != nil {
		t.Fatal(err)
	}
	if u.Steps != 4 || u.Privacy.Steps != 4 || u.Privacy.Unit != train.UnitIdentity || !(u.Privacy.Epsilon > 0) || len(u.LossCurve) != 2 {
		t.Errorf("update: %d steps, privacy %+v, losses %v", u.Steps, u.Privacy, u.LossCurve)
	}
	if len(charged) != 2 || !slices.Equal(stepsAtCharge, []int{0, 2}) || charged[0].Count != 2 {
		t.Errorf("charges %+v at steps %v: want one epoch (2 steps) charged before each epoch", charged, stepsAtCharge)
	}
	// What was charged is what the trainer accounts.
	a, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(charged...); err != nil {
		t.Fatal(err)
	}
	if eps, _, err := a.Epsilon(1e-5); err != nil || eps < u.Privacy.Epsilon*(1-1e-9) {
		t.Errorf("charged ε = %v (%v), trainer's ε = %v", eps, err, u.Privacy.Epsilon)
	}
	moved := 0
	for i := range start.Values {
		if !slices.Equal(start.Values[i], u.Weights.Values[i]) {
			moved++
		}
	}
	if moved == 0 {
		t.Error("local training did not change the weights")
	}
	// A refused charge stops the round before any step.
	refused := errors.New("budget spent")
	before := s.Steps()
	if _, err := s.Local(context.Background(), start, 2, 1, func(dp.Event) error { return refused }); !errors.Is(err, refused) || s.Steps() != before {
		t.Errorf("refused charge: err = %v, steps %d → %d", err, before, s.Steps())
	}
	if _, err := s.Local(context.Background(), start, 2, 1, nil); err == nil {
		t.Error("local DP training without a ledger succeeded")
	}
	// Weights of another model are refused.
	bad := s.Weights()
	bad.Shapes[0] = []int{1}
	if err := s.LoadWeights(bad); err == nil || !strings.Contains(err.Error(), "the model has") {
		t.Errorf("weights of another shape: err = %v", err)
	}
}

// TestPublicPretrainingThenDPFineTuning runs public distillation on MTFL
// faces, then DP fine-tuning from its weights with frozen blocks: the
// public run's checkpoint is marked public, the DP run keeps the frozen
// blocks exactly and is marked private, and DP may not start from it.
func TestPublicPretrainingThenDPFineTuning(t *testing.T) {
	data, mtfl, dir := t.TempDir(), t.TempDir(), t.TempDir()
	trainingtest.WriteLFW(t, data)
	trainingtest.WriteMTFL(t, datadir.ForTest(t, "mtfl"), mtfl)
	base := func(ckpt string) Options {
		return Options{
			Model:      ModelOptions{Kind: "lightface", Input: 32, Width: 0.25, Norm: "group", Loss: "distill"},
			Data:       DataOptions{Set: "lfw", LFW: data, MTFL: mtfl, MinImages: 1, Crop: 128, CentreImages: filepath.Join(mtfl, "net_7876"), CentreCount: 512},
			Optim:      OptimOptions{Batch: 4, MicroBatch: 4, Optimizer: "adam", LearningRate: 0.002, Seed: 1, Augment: true},
			Epochs:     1,
			Checkpoint: ckpt,
			Describers: Describers{Teacher: func() (eval.Describer, error) { return trainingtest.BlockDescriber(128), nil }},
			Workers:    1,
		}
	}
	pub := filepath.Join(dir, "public.ckpt")
	po := base(pub)
	po.Data.Set = "mtfl"
	r := run(t, po)
	if r.TrainSet != "mtfl" || r.Images != 3 || r.Identities != 0 || r.DP || r.Trainable == 0 || r.Epsilon != nil || r.Ledger != "" {
		t.Errorf("public run report %+v: want 3 MTFL images, no identities, no DP, no ledger", r)
	}
	priv := filepath.Join(dir, "private.ckpt")
	do := base(priv)
	do.Init, do.Optim.FreezeBlocks = pub, 12
	do.LedgerDir = filepath.Join(dir, "ledgers")
	do.DP = &DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1, SamplingRate: 0.5, Clip: 1, Delta: 1e-5}
	d := run(t, do)
	if d.TrainSet != "lfw" || !d.DP || d.Epsilon == nil || d.PrivacyUnit != "identity" || d.Init != pub || d.FrozenBlocks != 12 || !(d.Trainable > 0 && d.Trainable < r.Trainable) {
		t.Errorf("DP fine-tuning report %+v (public run trained %d parameters)", d, r.Trainable)
	}
	a, err := checkpoint.Load(pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.Load(priv)
	if err != nil {
		t.Fatal(err)
	}
	if a.Header.Data != "mtfl" || !a.Header.Public || b.Header.Data != "lfw" || b.Header.Public {
		t.Errorf("headers: public run %q/%v, DP run %q/%v", a.Header.Data, a.Header.Public, b.Header.Data, b.Header.Public)
	}
	frozen, moved := 0, 0
	for i, info := range b.Header.Params {
		if a.Header.Params[i].Name != info.Name {
			t.Fatalf("parameter %d is %q and %q", i, a.Header.Params[i].Name, info.Name)
		}
		isFrozen := false
		for blk := 1; blk <= 12; blk++ {
			isFrozen = isFrozen || strings.HasPrefix(info.Name, arch.LightFaceBlockName(blk)+"/")
		}
		same := slices.Equal(a.Values[i], b.Values[i])
		switch {
		case isFrozen && !same:
			t.Errorf("frozen parameter %s changed", info.Name)
		case isFrozen:
			frozen++
		case !same:
			moved++
		}
	}
	if frozen == 0 || moved == 0 {
		t.Errorf("%d frozen parameters kept, %d trainable ones moved; want both", frozen, moved)
	}
	// The DP run's checkpoint is private: DP training may not start from it.
	again := base(filepath.Join(dir, "again.ckpt"))
	again.Init = priv
	again.DP, again.LedgerDir = do.DP, do.LedgerDir
	if err := runErr(again); err == nil || !strings.Contains(err.Error(), "trained on private data") {
		t.Errorf("DP from a private checkpoint: err = %v", err)
	}
}
