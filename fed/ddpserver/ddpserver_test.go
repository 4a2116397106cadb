package ddpserver_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/ddpserver"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/training"
)

// setup is a server of veil fed init-model's head (veil train's
// Adam, weight decay and moving average) for distributed DP-SGD rounds at
// T = 3, and three released sums.
func setup(t *testing.T, lr float64) (ddpserver.Options, [][]float32) {
	t.Helper()
	ck, err := ops.InitialHead(ops.InitialHeadOptions{Features: "agegender", Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	init, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	plan := ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.02, Rounds: 10, Clients: 4, Threshold: 3, Noise: 3000,
		Dim: init.Len(), Block: 1 << 14, Scale: 1 << 20, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 50}
	o := ddpserver.Options{Model: training.ModelOptions{Kind: "head", Features: "agegender", Loss: "distill"},
		Optim: training.OptimOptions{Optimizer: "adam", LearningRate: lr, WeightDecay: 5e-4, EMA: 0.95, MicroBatch: 8, Batch: 50, Seed: 1},
		Plan:  plan, MinHonest: 3, Init: init}
	rng := rand.New(rand.NewPCG(1, 2))
	sums := make([][]float32, 3)
	for k := range sums {
		sums[k] = make([]float32, init.Len())
		for i := range sums[k] {
			sums[k][i] = float32(rng.NormFloat64())
		}
	}
	return o, sums
}

func equal(a, b wire.Weights) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !slices.Equal(a[i].Values, b[i].Values) {
			return false
		}
	}
	return true
}

// TestRestoredServerStepsExactlyAsAnUninterruptedOne takes three steps
// with one server, and the last two with a second server restored from
// the state the first returned after step 1: the weights, their moving
// average, the state and the privacy record are bit for bit the same. A
// server restored without the state (fresh Adam moments, the average
// restarted) steps elsewhere, so the comparison can fail.
func TestRestoredServerStepsExactlyAsAnUninterruptedOne(t *testing.T) {
	o, sums := setup(t, 0.002)
	mech := o.Plan.Mechanism(o.MinHonest)
	label := mech.Label()
	s1, err := ddpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	m := o.Init
	var states [][]byte
	models := []wire.Weights{m}
	for _, r := range sums {
		var st []byte
		if m, st, err = s1.Step(m, r, o.Plan.ExpectedBatch, label); err != nil {
			t.Fatal(err)
		}
		models, states = append(models, m), append(states, st)
	}
	s2, err := ddpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Restore(models[1], states[0]); err != nil {
		t.Fatal(err)
	}
	m2 := models[1]
	var st2 []byte
	for _, r := range sums[1:] {
		if m2, st2, err = s2.Step(m2, r, o.Plan.ExpectedBatch, label); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case !equal(m2, models[3]):
		t.Fatal("the restored server's weights differ from the uninterrupted server's")
	case !equal(s2.Average(), s1.Average()):
		t.Fatal("the restored server's moving average differs")
	case !bytes.Equal(st2, states[2]):
		t.Fatal("the restored server's state differs")
	case s2.Privacy() != s1.Privacy():
		t.Fatalf("privacy records %+v and %+v differ", s2.Privacy(), s1.Privacy())
	}
	if equal(s1.Average(), models[3]) {
		t.Fatal("the moving average is the weights: no average was kept")
	}
	s3, err := ddpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Restore(models[1], nil); err != nil {
		t.Fatal(err)
	}
	m3, _, err := s3.Step(models[1], sums[1], o.Plan.ExpectedBatch, label)
	if err != nil {
		t.Fatal(err)
	}
	if equal(m3, models[2]) {
		t.Fatal("a server without the stored state took the same step: the test cannot tell a lost state")
	}
}

// TestPrivacyRecordNamesTheDistributedMechanism checks the weights'
// record after three steps: the effective noise multiplier of the T
// honest clients' summed noise (√T·σ/Δ, not a placeholder), ε after three
// rounds of the mechanism at the plan's δ, the mechanism's label with
// its trust assumption, and the plan's unit, clip and sampling rate.
func TestPrivacyRecordNamesTheDistributedMechanism(t *testing.T) {
	o, sums := setup(t, 0.002)
	mech := o.Plan.Mechanism(o.MinHonest)
	s, err := ddpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	m := o.Init
	for _, r := range sums {
		if m, _, err = s.Step(m, r, o.Plan.ExpectedBatch, mech.Label()); err != nil {
			t.Fatal(err)
		}
	}
	eps, err := mech.Epsilon(3, o.Plan.Delta)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Privacy()
	want := math.Sqrt(3) * 3000 / o.Plan.Sensitivity()
	switch {
	case math.Abs(p.NoiseMultiplier-want) > 1e-12*want || p.NoiseMultiplier == 1:
		t.Errorf("noise multiplier %g, want σ_eff = √3·3000/Δ = %g", p.NoiseMultiplier, want)
	case p.Steps != 3 || math.Abs(p.Epsilon-eps) > 1e-9*eps:
		t.Errorf("%d steps at ε = %g, want 3 at %g", p.Steps, p.Epsilon, eps)
	case !strings.Contains(p.Mechanism, "distributed DP-SGD") || !strings.Contains(p.Mechanism, "at least 3 honest clients"):
		t.Errorf("mechanism %q", p.Mechanism)
	case p.Unit != "identity" || p.Clip != 1 || p.SamplingRate != 0.02 || p.Delta != 1e-5:
		t.Errorf("record %+v", p)
	}
}

// TestRestoreRefusesOtherSettings: a state taken with another learning
// rate is refused (its moments belong to other steps), as is one that is
// not a state.
func TestRestoreRefusesOtherSettings(t *testing.T) {
	o, sums := setup(t, 0.002)
	s, err := ddpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	next, st, err := s.Step(o.Init, sums[0], o.Plan.ExpectedBatch, "m")
	if err != nil {
		t.Fatal(err)
	}
	o2, _ := setup(t, 0.01)
	s2, err := ddpserver.New(o2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Restore(next, st); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("a state of another learning rate: %v", err)
	}
	if err := s2.Restore(next, []byte("not a state")); err == nil {
		t.Fatal("a malformed state was restored")
	}
}
