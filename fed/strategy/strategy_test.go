package strategy

import (
	"fmt"
	"math"
	"testing"

	"github.com/veil-privacy/veil/fed/wire"
)

// one returns one tensor "w" holding v.
func one(v ...float32) wire.Weights {
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
	next, st, err := s.Apply(model, mean, len(updates), state)
	if err != nil {
		t.Fatal(err)
	}
	return next, st
}

func TestFedAvgByHand(t *testing.T) {
	model := one(1, 2)
	updates := []wire.Weights{one(1, 0), one(0, 3)}
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
	model := one(1, 2)
	grads := []wire.Weights{one(2, 0), one(0, 4)} // mean (1, 2)
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
	sum := NewSum(one(0, 0))
	if err := sum.Add(one(1, 2, 3), 1); err == nil {
		t.Error("wrong-size update folded in")
	}
	if err := sum.Add(one(1, 2), math.Inf(1)); err == nil {
		t.Error("infinite weight accepted")
	}
	if _, err := sum.Mean(); err == nil {
		t.Error("mean of nothing")
	}
}

// TestDefaultServerLR: FedAvg's η is 1 without DP and √K rounded under DP
// (3 for the 8 clients veil fed sim measured); FedSGD has none.
func TestDefaultServerLR(t *testing.T) {
	for _, c := range []struct {
		name    string
		dp      bool
		updates int
		want    float64
	}{
		{"fedavg", false, 1, 1}, {"fedavg", false, 8, 1}, {"fedavg", false, 100, 1},
		{"fedavg", true, 1, 1}, {"fedavg", true, 2, 1}, {"fedavg", true, 3, 2}, {"fedavg", true, 6, 2},
		{"fedavg", true, 7, 3}, {"fedavg", true, 8, 3}, {"fedavg", true, 12, 3}, {"fedavg", true, 13, 4},
		{"fedavg", true, 100, 10},
	} {
		got, err := DefaultServerLR(c.name, c.dp, c.updates)
		if err != nil || got != c.want {
			t.Errorf("%s, DP %v, %d updates: η = %g (%v), want %g", c.name, c.dp, c.updates, got, err, c.want)
		}
	}
	if _, err := DefaultServerLR("fedsgd", true, 8); err == nil {
		t.Error("fedsgd got a default server learning rate")
	}
	if _, err := DefaultServerLR("fedprox", true, 8); err == nil {
		t.Error("an unknown strategy got a default server learning rate")
	}
}

// TestFedAvgStepsByTheRoundsUpdates: under DP without a configured η,
// Apply moves the model by round(√K) times the mean of K updates, worked
// out for each round; a configured η is used as it is.
func TestFedAvgStepsByTheRoundsUpdates(t *testing.T) {
	model := one(1, 2)
	auto, err := New(Options{Name: "fedavg", DP: true})
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := New(Options{Name: "fedavg", DP: true, ServerLR: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s       Strategy
		k       int
		step    float64
		explain string
	}{{auto, 8, 3, "√8 → 3"}, {auto, 4, 2, "√4 = 2"}, {auto, 2, 1, "√2 → 1"}, {fixed, 8, 0.5, "configured"}} {
		updates := make([]wire.Weights, c.k)
		for i := range updates {
			updates[i] = one(float32(i%2), 1) // mean (⌊k/2⌋/k, 1)
		}
		next, _ := round(t, c.s, model, nil, updates, make([]uint64, c.k))
		mean0 := float64(c.k/2) / float64(c.k)
		near(t, fmt.Sprintf("%d updates (%s)", c.k, c.explain), next, 1+c.step*mean0, 2+c.step)
		if got := c.s.ServerLR(c.k); got != c.step {
			t.Errorf("%d updates (%s): ServerLR %g, want %g", c.k, c.explain, got, c.step)
		}
	}
	if _, _, err := auto.Apply(model, one(1, 1), 0, nil); err == nil {
		t.Error("a mean of no updates applied")
	}
}

func TestServerLRText(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Name: "fedavg", DP: true}, "√(updates in the round), rounded"},
		{Options{Name: "fedavg"}, "1"},
		{Options{Name: "fedavg", DP: true, ServerLR: 2.5}, "2.5"},
		{Options{Name: "fedsgd", DP: true, ServerLR: 0.1}, "0.1"},
	} {
		if got := c.o.ServerLRText(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}

// BenchmarkSumAdd folds an update of the federated head's size into a sum.
func BenchmarkSumAdd(b *testing.B) {
	const n = 557824
	u := wire.Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
	for i := range u[0].Values {
		u[0].Values[i] = float32(i%97) * 0.01
	}
	s := NewSum(u)
	b.SetBytes(4 * n)
	for b.Loop() {
		if err := s.Add(u, 1); err != nil {
			b.Fatal(err)
		}
	}
}
