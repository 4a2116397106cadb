package strategy

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
)

func vec(v ...float32) wire.Weights {
	return wire.Weights{{Name: "w", Shape: []int{len(v)}, Values: v}}
}

func near(t *testing.T, what string, got wire.Weights, want ...float64) {
	t.Helper()
	for i, w := range want {
		if math.Abs(float64(got[0].Values[i])-w) > 1e-6 {
			t.Fatalf("%s: value %d = %g, want %g (hand-computed)", what, i, got[0].Values[i], w)
		}
	}
}

// round folds updates with their example counts and applies the strategy.
func round(t *testing.T, s Strategy, model wire.Weights, state wire.Weights, updates []wire.Weights, examples []uint64) (wire.Weights, wire.Weights) {
	t.Helper()
	sum := NewSum(model)
	for i, u := range updates {
		w, err := s.Weight(examples[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(u, w); err != nil {
			t.Fatal(err)
		}
	}
	mean, err := sum.Mean()
	if err != nil {
		t.Fatal(err)
	}
	next, st, err := s.Apply(model, mean, state)
	if err != nil {
		t.Fatal(err)
	}
	return next, st
}

func TestFedAvgByHand(t *testing.T) {
	model := vec(1, 2)
	updates := []wire.Weights{vec(1, 0), vec(0, 3)}
	byEx, err := New(Options{Name: "fedavg"})
	if err != nil {
		t.Fatal(err)
	}
	// Weighted by examples 1 and 3: mean (1·1+0·3)/4, (0·1+3·3)/4 = 0.25, 2.25.
	next, _ := round(t, byEx, model, nil, updates, []uint64{1, 3})
	near(t, "fedavg by examples", next, 1.25, 4.25)
	// Under DP the default is uniform: mean 0.5, 1.5.
	uni, _ := New(Options{Name: "fedavg", DP: true})
	next, _ = round(t, uni, model, nil, updates, []uint64{0, 0})
	near(t, "fedavg uniform", next, 1.5, 3.5)
	// Server learning rate 0.5 halves the step.
	half, _ := New(Options{Name: "fedavg", Weighting: "uniform", ServerLR: 0.5})
	next, _ = round(t, half, model, nil, updates, []uint64{5, 5})
	near(t, "fedavg η=0.5", next, 1.25, 2.75)
	if _, err := byEx.Weight(0); err == nil {
		t.Fatal("example weighting accepted an update without a count")
	}
}

func TestFedSGDByHand(t *testing.T) {
	s, err := New(Options{Name: "fedsgd", ServerLR: 0.1, Momentum: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	model := vec(1, 2)
	grads := []wire.Weights{vec(2, 0), vec(0, 4)} // mean (1, 2)
	// v = (1, 2); model − 0.1·v = (0.9, 1.8).
	next, st := round(t, s, model, nil, grads, []uint64{0, 0})
	near(t, "fedsgd step 1", next, 0.9, 1.8)
	// v = 0.5·(1, 2) + (1, 2) = (1.5, 3); (0.9, 1.8) − 0.1·v = (0.75, 1.5).
	next, _ = round(t, s, next, st, grads, []uint64{0, 0})
	near(t, "fedsgd step 2", next, 0.75, 1.5)
}

func TestBadOptionsAndUpdates(t *testing.T) {
	for _, o := range []Options{
		{Name: "fedprox"}, {Name: "fedsgd"}, {Name: "fedsgd", ServerLR: 1, Momentum: 1},
		{Name: "fedavg", Weighting: "size"}, {Name: "fedavg", ServerLR: math.NaN()},
		{Name: "fedavg", Momentum: 0.9}, {Name: "fedsgd", ServerLR: 1, Weighting: "examples"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	sum := NewSum(vec(0, 0))
	if err := sum.Add(vec(1, 2, 3), 1); err == nil {
		t.Error("wrong-size update folded in")
	}
	if err := sum.Add(vec(1, 2), math.Inf(1)); err == nil {
		t.Error("infinite weight accepted")
	}
	if _, err := sum.Mean(); err == nil {
		t.Error("mean of nothing")
	}
}
