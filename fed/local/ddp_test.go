package local_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

// TestClippedSumIsTheSessionsAtTheRoundsModel: a distributed round's
// clipped sum is training.Session.ClippedSum (the half of veil train's
// DP-SGD step fed/ddpsim uses) at the round's model, not at the trainer's
// own weights: with q = 1 every person is sampled, so the two are equal
// bit for bit; each person's gradient is clipped, so the sum's norm is at
// most people·C; a plan for another model size is refused.
func TestClippedSumIsTheSessionsAtTheRoundsModel(t *testing.T) {
	const people = 4
	tr, d, o := newTrainer(t, people)
	eval, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	model := eval.Initial()
	for i := range model {
		for j := range model[i].Values {
			model[i].Values[j] *= 1.01 // not the session's initial weights
		}
	}
	plan := ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 0.5, SamplingRate: 1, Dim: tr.Dimension()}
	tk := &fedpb.RoundConfig{Round: 7}
	got, err := tr.ClippedSum(context.Background(), model, tk, plan)
	if err != nil {
		t.Fatal(err)
	}
	opt := o.Optim
	opt.EMA = 0
	s, err := training.NewSession(o.Model, opt, &training.DPOptions{Unit: train.UnitIdentity, NoiseMultiplier: 1, Clip: 0.5, SamplingRate: 1, Delta: 1e-5}, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadWeights(local.FromWire(model)); err != nil {
		t.Fatal(err)
	}
	want, err := s.ClippedSum(d, o.Optim.Seed^7<<8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("the trainer's clipped sum is not the session's at the round's model")
	}
	var n2 float64
	for _, v := range got {
		n2 += float64(v) * float64(v)
	}
	if n := math.Sqrt(n2); n == 0 || n > people*0.5*(1+1e-4) {
		t.Fatalf("the clipped sum's norm is %g; want in (0, %g]", n, people*0.5)
	}
	plan.Dim++
	if _, err := tr.ClippedSum(context.Background(), model, tk, plan); err == nil {
		t.Error("a plan for another model size was run")
	}
}
