package local_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/training"
)

func TestSplitKeepsExamplesAndTargets(t *testing.T) {
	d, _ := localtest.Data(t, t.TempDir(), 6)
	parts, err := local.Split(d, dataset.PartitionOptions{Clients: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	full := d.Train.(train.Identified)
	total := 0
	for k, p := range parts {
		if p.Identities != 2 || p.Train.Len() != 6 || len(p.Targets) != 6 || p.Pairs != d.Pairs {
			t.Fatalf("client %d: %d people, %d examples, %d targets", k, p.Identities, p.Train.Len(), len(p.Targets))
		}
		total += p.Train.Len()
		idx := []int{0, 1, 2, 3, 4, 5}
		x, labels, err := p.Train.Batch(idx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(labels, []int32{0, 1, 2, 3, 4, 5}) {
			t.Errorf("client %d: distillation labels %v, want the subset's indices", k, labels)
		}
		// Each example's input and target are one of the full set's, of
		// an identity no other client holds.
		for i := range idx {
			found := false
			for j := 0; j < d.Train.Len(); j++ {
				fx, _, _ := d.Train.Batch([]int{j}, nil)
				if slices.Equal(fx, x[i*len(fx):(i+1)*len(fx)]) && slices.Equal(d.Targets[j], p.Targets[i]) {
					found = true
					_ = full.Identity(j)
				}
			}
			if !found {
				t.Fatalf("client %d example %d is not an example of the full set with its target", k, i)
			}
		}
	}
	if total != d.Train.Len() {
		t.Errorf("clients hold %d examples, the data %d", total, d.Train.Len())
	}
}

func newTrainer(t *testing.T, people int) (*local.Trainer, *training.Data, training.Options) {
	t.Helper()
	d, o := localtest.Data(t, t.TempDir(), people)
	tr, err := local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: d})
	if err != nil {
		t.Fatal(err)
	}
	return tr, d, o
}

func task(strategy string, rounds, epochs, batch int) *fedpb.RoundConfig {
	return &fedpb.RoundConfig{Round: 1, Rounds: uint64(rounds), Strategy: strategy, LocalEpochs: uint32(epochs), Batch: uint32(batch),
		LearningRate: 0.01, Dp: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}}
}

// TestPlanFitsTheBudget: the σ a client calibrates makes all the planned
// rounds, as the client's ledger charges them (client.Event), spend the
// budget and not more.
func TestPlanFitsTheBudget(t *testing.T) {
	cases := []struct {
		name   string
		task   *fedpb.RoundConfig
		q      float64
		steps  uint64
		budget float64
	}{
		{"fedavg q = 1/2", task("fedavg", 3, 2, 2), 0.5, 4, 8},
		{"fedavg q = 1/4", task("fedavg", 2, 1, 1), 0.25, 4, 2},
	}
	for _, c := range cases {
		tr, _, _ := newTrainer(t, 4)
		p, err := tr.Plan(c.task, c.budget)
		if err != nil {
			t.Fatal(err)
		}
		if p.SamplingRate != c.q || p.Steps != c.steps || p.Clip != 1 || p.Delta != 1e-5 || p.PrivacyUnit != "identity" || !(p.NoiseMultiplier > 0) {
			t.Fatalf("%s: plan %v", c.name, p)
		}
		eps := spend(t, p, tr.Dimension(), int(c.task.Rounds))
		if eps > c.budget || eps < c.budget*0.999 {
			t.Errorf("%s: %d rounds spend ε = %.5f, budget %g", c.name, c.task.Rounds, eps, c.budget)
		}
		// Later rounds keep the mechanism, even with less budget left.
		again, err := tr.Plan(c.task, c.budget/2)
		if err != nil || again.NoiseMultiplier != p.NoiseMultiplier {
			t.Errorf("%s: second plan %v (%v)", c.name, again, err)
		}
	}
	// A client with fewer people than the batch runs at q = 1.
	tr2, _, _ := newTrainer(t, 3)
	p, err := tr2.Plan(task("fedavg", 2, 1, 64), 8)
	if err != nil || p.SamplingRate != 1 || p.Steps != 1 {
		t.Fatalf("small client: %v (%v), want q = 1 and one step an epoch", p, err)
	}
	// FedSGD: one full-data step a round.
	tr3, _, _ := newTrainer(t, 3)
	ts := task("fedsgd", 5, 0, 2)
	ts.LocalSteps = 1
	p, err = tr3.Plan(ts, 4)
	if err != nil || p.SamplingRate != 1 || p.Steps != 1 {
		t.Fatalf("fedsgd: %v (%v)", p, err)
	}
	if eps := spend(t, p, tr3.Dimension(), 5); eps > 4 || eps < 3.99 {
		t.Errorf("fedsgd: 5 rounds spend ε = %g, budget 4", eps)
	}
}

// TestPlanKeepsTheOwnersNoiseFloor: a budget that would allow σ below
// the owner's floor is calibrated to the floor (and spends less).
func TestPlanKeepsTheOwnersNoiseFloor(t *testing.T) {
	tr, _, _ := newTrainer(t, 4)
	free, err := tr.Plan(task("fedavg", 2, 1, 1), 200)
	if err != nil {
		t.Fatal(err)
	}
	d, o := localtest.Data(t, t.TempDir(), 4)
	floored, err := local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: d, MinNoiseMultiplier: 3})
	if err != nil {
		t.Fatal(err)
	}
	p, err := floored.Plan(task("fedavg", 2, 1, 1), 200)
	if err != nil {
		t.Fatal(err)
	}
	if !(free.NoiseMultiplier < 3) || p.NoiseMultiplier != 3 {
		t.Fatalf("σ %g without a floor, %g with the floor 3", free.NoiseMultiplier, p.NoiseMultiplier)
	}
	if eps := spend(t, p, floored.Dimension(), 2); !(eps < 200) {
		t.Errorf("at the floor the rounds spend ε = %g of 200", eps)
	}
}

// spend is what a client's ledger holds after rounds rounds of plan.
func spend(t *testing.T, p *fedpb.DPParams, dim, rounds int) float64 {
	t.Helper()
	ev, err := client.Event(p, dim)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	if err := l.SetBudget("c", dp.Budget{Epsilon: 1e9, Delta: p.Delta}); err != nil {
		t.Fatal(err)
	}
	var s dp.Spent
	for range rounds {
		if s, err = l.Charge("c", ev); err != nil {
			t.Fatal(err)
		}
	}
	return s.Epsilon
}

// TestTrainRunsThePlan: a FedAvg round under DP trains (its charges are
// checked against client.Event of the plan inside Train), returns new −
// old, and a plan the trainer did not make — less noise, more steps — is
// refused before anything is trained.
func TestTrainRunsThePlan(t *testing.T) {
	tr, _, o := newTrainer(t, 4)
	ev, err := local.NewEvaluator(o.Model, o.Optim, nil)
	if err == nil || ev != nil {
		t.Fatal("an evaluator without data was built")
	}
	tk := task("fedavg", 3, 1, 2)
	p, err := tr.Plan(tk, 8)
	if err != nil {
		t.Fatal(err)
	}
	tr2, d, _ := newTrainer(t, 4)
	eval, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	model := eval.Initial()
	for _, forged := range []*fedpb.DPParams{
		{NoiseMultiplier: p.NoiseMultiplier / 2, Clip: 1, SamplingRate: p.SamplingRate, Steps: p.Steps, Delta: 1e-5, PrivacyUnit: "identity"},
		{NoiseMultiplier: p.NoiseMultiplier, Clip: 1, SamplingRate: p.SamplingRate, Steps: p.Steps + 1, Delta: 1e-5, PrivacyUnit: "identity"},
	} {
		if _, err := tr.Train(context.Background(), model, tk, forged); err == nil || !strings.Contains(err.Error(), "not the one") {
			t.Errorf("forged plan %v: err = %v", forged, err)
		}
	}
	if _, err := tr2.Train(context.Background(), model, tk, p); err == nil {
		t.Error("a trainer that made no plan trained on another's")
	}
	up, err := tr.Train(context.Background(), model, tk, p)
	if err != nil {
		t.Fatal(err)
	}
	if up.DP != p || up.Examples != 0 || up.Weights.SameLayout(model) != nil || up.Weights.Len() != tr.Dimension() {
		t.Fatalf("update: DP %v, examples %d", up.DP, up.Examples)
	}
	if up.Weights.Norm() == 0 {
		t.Error("the update is zero")
	}
	if err := up.Weights.CheckFinite(); err != nil {
		t.Error(err)
	}
}

// TestFedSGDUpdateIsTheGradient: without DP, FedSGD's update is the
// gradient at the round's model whatever the learning rate (plain SGD, no
// momentum: (old − new)/lr = g), unlike FedAvg's difference of weights.
func TestFedSGDUpdateIsTheGradient(t *testing.T) {
	_, d, o := newTrainer(t, 3)
	eval, err := local.NewEvaluator(o.Model, o.Optim, d)
	if err != nil {
		t.Fatal(err)
	}
	model := eval.Initial()
	grad := func(lr float64) []float32 {
		tr, err := local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: d})
		if err != nil {
			t.Fatal(err)
		}
		tk := &fedpb.RoundConfig{Round: 1, Rounds: 1, Strategy: "fedsgd", LocalSteps: 1, LearningRate: lr, Batch: 2}
		up, err := tr.Train(context.Background(), model, tk, nil)
		if err != nil {
			t.Fatal(err)
		}
		if up.Examples != uint64(d.Train.Len()) {
			t.Errorf("examples %d, want %d", up.Examples, d.Train.Len())
		}
		var g []float32
		for _, x := range up.Weights {
			g = append(g, x.Values...)
		}
		return g
	}
	a, b := grad(1e-3), grad(1e-2)
	var diff, norm float64
	for i := range a {
		diff += float64(a[i]-b[i]) * float64(a[i]-b[i])
		norm += float64(a[i]) * float64(a[i])
	}
	if norm == 0 || math.Sqrt(diff/norm) > 0.02 {
		t.Fatalf("gradients at two learning rates differ by %.4g relative (norm² %g)", math.Sqrt(diff/norm), norm)
	}
}

// TestAsynchronousTasksTrain: a FedBuff exchange trains whole local
// epochs as FedAvg does; an EASGD exchange's λ local steps run as the
// fewest whole epochs that hold them, and the plan states the steps run.
func TestAsynchronousTasksTrain(t *testing.T) {
	for _, c := range []struct {
		strategy string
		epochs   int
		steps    int
	}{{"fedbuff", 1, 0}, {"easgd", 0, 1}, {"easgd", 0, 7}} {
		tr, d, o := newTrainer(t, 4)
		tk := task(c.strategy, 3, c.epochs, 2)
		tk.LocalSteps = uint32(c.steps)
		p, err := tr.Plan(tk, 8)
		if err != nil {
			t.Fatalf("%s: %v", c.strategy, err)
		}
		perEpoch := uint64(math.Ceil(1 / p.SamplingRate))
		want := perEpoch * uint64(max(c.epochs, 1))
		if c.steps > 0 {
			want = perEpoch * ((uint64(c.steps) + perEpoch - 1) / perEpoch)
		}
		if p.Steps != want || p.Steps < uint64(c.steps) {
			t.Fatalf("%s with %d epochs, %d steps: the plan runs %d steps, want %d", c.strategy, c.epochs, c.steps, p.Steps, want)
		}
		eval, err := local.NewEvaluator(o.Model, o.Optim, d)
		if err != nil {
			t.Fatal(err)
		}
		up, err := tr.Train(context.Background(), eval.Initial(), tk, p)
		if err != nil {
			t.Fatalf("%s: %v", c.strategy, err)
		}
		if up.Weights.Norm() == 0 {
			t.Errorf("%s: the update is zero", c.strategy)
		}
	}
	tk := task("easgd", 3, 0, 2)
	if _, err := (func() (*fedpb.DPParams, error) { tr, _, _ := newTrainer(t, 4); return tr.Plan(tk, 8) })(); err == nil || !strings.Contains(err.Error(), "period λ") {
		t.Errorf("an EASGD exchange without steps: %v", err)
	}
}
