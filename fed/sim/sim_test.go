package sim_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/fed/sim"
)

func options(t *testing.T, people, clients int) sim.Options {
	t.Helper()
	d, o := localtest.Data(t, t.TempDir(), people)
	return sim.Options{Data: d, Model: o.Model, Optim: o.Optim, Partition: dataset.PartitionOptions{Clients: clients, Seed: 1},
		Strategy: "fedavg", Rounds: 2, LocalEpochs: 1, Batch: 1, LearningRate: 0.01,
		DP: &sim.DP{Epsilon: 8, Delta: 1e-5, Clip: 1}, Dir: t.TempDir(), RoundTimeout: time.Minute, Seed: 3}
}

// status reads the coordinator's state file after a run.
func status(t *testing.T, dir string) *fedpb.StatusResponse {
	t.Helper()
	db, err := coord.OpenStatus(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// spent is ε after rounds rounds of plan (what a client's ledger holds).
func spent(t *testing.T, q, sigma float64, steps uint64, dim, rounds int) float64 {
	t.Helper()
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: sigma, Clip: 1, SamplingRate: q, Steps: steps, Delta: 1e-5, PrivacyUnit: "identity"}, dim)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = l.SetBudget("c", dp.Budget{Epsilon: 1e9, Delta: 1e-5})
	var s dp.Spent
	for range rounds {
		if s, err = l.Charge("c", ev); err != nil {
			t.Fatal(err)
		}
	}
	return s.Epsilon
}

// TestThreeClientsTwoRounds runs FedAvg under DP over mutual TLS on
// loopback: every client takes part in both rounds, spends its whole
// budget and not more, and the coordinator's ledgers agree.
func TestThreeClientsTwoRounds(t *testing.T) {
	o := options(t, 6, 3)
	o.EMA, o.Curve = 0.5, true
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// The score is the rounds' average (the mean of the two rounds'
	// models), the last model's is reported beside it, and the curve has
	// one point per round ending with both.
	if len(rep.RoundAccuracy) != 2 || len(rep.RoundEMAAccuracy) != 2 || rep.EMA != 0.5 ||
		rep.LastAccuracy != rep.RoundAccuracy[1] || rep.DevAccuracy != rep.RoundEMAAccuracy[1] {
		t.Errorf("ema %g: accuracy %g, last model %g, curve %v and %v", rep.EMA, rep.DevAccuracy, rep.LastAccuracy, rep.RoundAccuracy, rep.RoundEMAAccuracy)
	}
	if rep.Strategy != "fedavg" || rep.ServerLR != "√(updates in the round), rounded" || rep.Clients != 3 || rep.Rounds != 2 || rep.FailedRounds != 0 || rep.Updates != 6 || rep.Refused != 0 {
		t.Fatalf("report %+v", rep)
	}
	if !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) || rep.PrivacyUnit != "identity" || rep.Delta != 1e-5 {
		t.Errorf("accuracy %g, unit %q, δ %g", rep.DevAccuracy, rep.PrivacyUnit, rep.Delta)
	}
	if rep.BytesPerClientRound < float64(rep.ModelBytes+rep.UpdateBytes) || rep.UpdateBytes != rep.ModelBytes || rep.ModelBytes != 4*rep.Parameters {
		t.Errorf("%g bytes per client and round for a model of %d bytes and updates of %d", rep.BytesPerClientRound, rep.ModelBytes, rep.UpdateBytes)
	}
	// The report says what ε means: the one-client figure is the largest
	// client's, and a person in the data of k clients is exposed to k of
	// them, more than one client's ε and less than k times it.
	pr := rep.Privacy
	if pr == nil || pr.Clients != 3 || pr.DPRounds != 2 || len(pr.KClients) != 3 || !strings.Contains(pr.Assumption, "one client alone") {
		t.Fatalf("privacy %+v", pr)
	}
	maxEps := 0.0
	for _, e := range rep.EpsilonPerClient {
		maxEps = math.Max(maxEps, e)
	}
	if math.Abs(pr.EpsilonOneClient-maxEps) > 1e-9 || pr.KClients[0].Epsilon != pr.EpsilonOneClient ||
		!(pr.KClients[2].Epsilon > pr.KClients[1].Epsilon && pr.KClients[1].Epsilon > maxEps && pr.KClients[2].Epsilon < 3*maxEps) {
		t.Errorf("one client %g (clients' largest %g), k clients %+v", pr.EpsilonOneClient, maxEps, pr.KClients)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 2 || st.Rounds[1].State != "done" {
		t.Fatalf("rounds %v", st.Rounds)
	}
	if st.Rounds[0].ModelVersion == st.Rounds[1].ModelVersion {
		t.Error("the second round trained the same model as the first")
	}
	for _, c := range st.Clients {
		eps := rep.EpsilonPerClient[c.Id]
		if c.Updates != 2 || eps > 8 || eps < 7.99 || math.Abs(c.Epsilon-eps) > 1e-9 {
			t.Errorf("%s: %d updates, its ledger ε = %g, the coordinator's %g; want 2 updates and ε just under 8 in both", c.Id, c.Updates, eps, c.Epsilon)
		}
		if rep.IdentitiesPerClient[c.Id] != 2 || rep.SamplingRate[c.Id] != 0.5 {
			t.Errorf("%s: %d identities at q = %g, want 2 at 0.5", c.Id, rep.IdentitiesPerClient[c.Id], rep.SamplingRate[c.Id])
		}
	}
}

// TestDropOutsAndStragglers: in one round with seed 4, client-2 is the
// straggler and client-3 drops out. The drop-out is not charged, the
// straggler's late update is refused (its own ledger has paid for the
// training, the coordinator's has not), client-1's update is accepted
// and charged alike by both ledgers, and the round, one update short of
// MinUpdates, fails.
func TestDropOutsAndStragglers(t *testing.T) {
	o := options(t, 6, 3)
	o.Rounds, o.Dropout, o.Stragglers, o.Seed = 1, 0.3, 1.0/3, 4
	o.RoundTimeout = 20 * time.Second
	o.MinUpdates = 2
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Updates != 1 || rep.Refused != 1 || rep.DropOuts != 1 || rep.FailedRounds != 1 || len(rep.Stragglers) != 1 || rep.Stragglers[0] != "client-2" {
		t.Fatalf("%d updates, %d refused, %d drop-outs, %d failed rounds, stragglers %v; want 1, 1, 1, 1 and client-2",
			rep.Updates, rep.Refused, rep.DropOuts, rep.FailedRounds, rep.Stragglers)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 1 || st.Rounds[0].State != "failed" {
		t.Fatalf("rounds %v", st.Rounds)
	}
	coordEps := map[string]float64{}
	for _, c := range st.Clients {
		coordEps[c.Id] = c.Epsilon
	}
	one := rep.EpsilonPerClient["client-1"]
	if want := spent(t, rep.SamplingRate["client-1"], rep.NoiseMultiplier["client-1"], 2, rep.Parameters, 1); math.Abs(one-want) > 1e-9 || math.Abs(coordEps["client-1"]-one) > 1e-9 || one > 8 || one < 7.99 {
		t.Errorf("client-1: its ledger ε = %g, the coordinator's %g, one round costs %g", one, coordEps["client-1"], want)
	}
	if two := rep.EpsilonPerClient["client-2"]; !(two > 7.99 && two <= 8) || coordEps["client-2"] != 0 {
		t.Errorf("straggler: its ledger ε = %g, the coordinator's %g; want its training paid by itself only", two, coordEps["client-2"])
	}
	if three := rep.EpsilonPerClient["client-3"]; three != 0 || coordEps["client-3"] != 0 || rep.NoiseMultiplier["client-3"] != 0 {
		t.Errorf("drop-out: ε = %g (coordinator %g), σ %g; want nothing spent", three, coordEps["client-3"], rep.NoiseMultiplier["client-3"])
	}
	// The failed round aggregated nothing, but the coordinator saw
	// client-1's update: the privacy report counts its charge.
	if pr := rep.Privacy; pr == nil || pr.DPRounds != 0 || pr.Clients != 1 || math.Abs(pr.EpsilonOneClient-coordEps["client-1"]) > 1e-9 || len(pr.KClients) != 1 {
		t.Errorf("privacy %+v: want client-1's charge, from a failed round", pr)
	}
}

// TestAlone: each client trains its own rounds without the federation,
// each round charged first, the whole budget spent and not more.
func TestAlone(t *testing.T) {
	o := options(t, 6, 3)
	rep, err := sim.Alone(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clients != 3 || len(rep.Accuracy) != 3 || rep.BestAccuracy < rep.MeanAccuracy || rep.PrivacyUnit != "identity" {
		t.Fatalf("report %+v", rep)
	}
	for name, eps := range rep.EpsilonPerClient {
		if eps > 8 || eps < 7.99 {
			t.Errorf("%s spent ε = %g alone, want just under 8", name, eps)
		}
	}
	o.Strategy = "fedsgd"
	if _, err := sim.Alone(context.Background(), o); err == nil {
		t.Error("FedSGD alone was accepted")
	}
}

// TestMaskingSim runs the simulation under masking secure aggregation
// (three clients, two rounds): both rounds are aggregated from all three
// clients' masked vectors, each client is charged as in plaintext rounds,
// and nothing of the rounds' messages is left in the state file.
func TestMaskingSim(t *testing.T) {
	o := options(t, 6, 3)
	o.SecAgg = "masking"
	rep, err := sim.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedRounds != 0 || rep.Updates != 6 || rep.Refused != 0 || !(rep.DevAccuracy >= 0 && rep.DevAccuracy <= 1) {
		t.Fatalf("report %+v", rep)
	}
	st := status(t, o.Dir)
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Fatalf("rounds %v", st.Rounds)
	}
	for _, c := range st.Clients {
		if eps := rep.EpsilonPerClient[c.Id]; c.Updates != 2 || math.Abs(c.Epsilon-eps) > 1e-9 || eps > 8 {
			t.Errorf("%s: %d updates, ε %g and %g", c.Id, c.Updates, eps, c.Epsilon)
		}
	}
	o.SecAgg = "plain"
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), `secure aggregation "plain"`) {
		t.Errorf("an unknown mode: %v", err)
	}
}
