package ops_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

// initCheckpoint is a checkpoint holding model0's weights with the given
// record.
func initCheckpoint(h checkpoint.Header) *checkpoint.Checkpoint {
	c := &checkpoint.Checkpoint{Header: h}
	for _, t := range model0() {
		c.Header.Params = append(c.Header.Params, checkpoint.ParamInfo{Name: t.Name, Shape: t.Shape})
		c.Values = append(c.Values, append([]float32(nil), t.Values...))
		c.State.M = append(c.State.M, make([]float32, len(t.Values)))
	}
	c.State.Privacy = h.Privacy
	return c
}

// The records a federation may start from.
var (
	publicInit  = checkpoint.Header{Public: true}
	plainInit   = checkpoint.Header{Data: "lfw", Step: 500, Privacy: train.Privacy{NonPrivateSteps: 500}}
	noRecord    = checkpoint.Header{Data: "lfw"}
	dpInit      = checkpoint.Header{Data: "lfw", Step: 300, Privacy: train.Privacy{Unit: train.UnitIdentity, NoiseMultiplier: 1.1, Clip: 1, SamplingRate: 0.01, Steps: 300, Delta: 1e-6, Epsilon: 1.5}}
	dpExample   = checkpoint.Header{Data: "lfw", Step: 300, Privacy: train.Privacy{NoiseMultiplier: 1.1, Clip: 1, SamplingRate: 0.01, Steps: 300, Delta: 1e-6, Epsilon: 1.5}}
	mixedSteps  = checkpoint.Header{Data: "lfw", Step: 400, Privacy: train.Privacy{Unit: train.UnitIdentity, Steps: 300, Delta: 1e-6, Epsilon: 1.5}}
	federatedDP = checkpoint.Header{Data: "federated", Privacy: train.Privacy{Unit: train.UnitIdentity, Delta: 1e-5, Epsilon: 2},
		Federation: &checkpoint.Federation{DPRounds: 3, Clients: 2, Unit: train.UnitIdentity, Delta: 1e-5, EpsilonOneClient: 2,
			KClients: []checkpoint.ClientsEpsilon{{K: 1, Epsilon: 2, Exact: true}, {K: 2, Epsilon: 2.6, Exact: true}}}}
)

// A DP federation refuses to start from weights that may hold private
// data with no bound, with the reason; public and DP-trained weights are
// accepted, and without DP anything is.
func TestCheckInitRefusesPrivateInit(t *testing.T) {
	initHead, err := ops.InitialHead(ops.InitialHeadOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ck   *checkpoint.Checkpoint
		want string // "" accepted under DP
	}{
		{"veil fed init-model", initHead, ""},
		{"public", initCheckpoint(publicInit), ""},
		{"DP-SGD only", initCheckpoint(dpInit), ""},
		{"DP-SGD only, per example", initCheckpoint(dpExample), ""},
		{"a DP federation's model", initCheckpoint(federatedDP), ""},
		{"trained without DP", initCheckpoint(plainInit), "took 500 optimiser steps without DP-SGD"},
		{"no record at all", initCheckpoint(noRecord), "not marked public"},
		{"some steps without DP", initCheckpoint(mixedSteps), "100 of its 400 optimiser steps"},
	} {
		err := ops.CheckInit(c.ck, true)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
		} else if !errors.Is(err, ops.ErrPrivateInit) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "init-model") {
			t.Errorf("%s: error %v, want ErrPrivateInit saying %q and what to start from instead", c.name, err, c.want)
		}
		if err := ops.CheckInit(c.ck, false); err != nil {
			t.Errorf("%s without DP: %v", c.name, err)
		}
	}
}

// runFederation runs a DP federation from model0 over real TLS: three
// clients of the fixed trainer (σ 1, q 0.1, 5 steps a round), two rounds.
// It returns the state file.
func runFederation(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	makePKI(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	co, err := coord.New(coord.Options{StatePath: state, Init: model0(), Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 2, Fraction: 1, MinAvailable: 3, MinUpdates: 3, RoundTimeout: time.Minute,
		Task:          coord.Task{LocalSteps: 5, LearningRate: 0.1, Batch: 8, DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}},
		MaxUpdateNorm: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := pki.ReadCert(filepath.Join(dir, "ca.crt"))
	srv, err := ops.NewServer(ops.ServerOptions{Coordinator: co, StatePath: state, Identity: id,
		Revocations: pki.NewRevocations(filepath.Join(dir, "revoked.crl"), ca), Listen: "127.0.0.1:0", Linger: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	runClients(ctx, t, srv.Addr(), dir, 0.1, 0.2, 0.3)
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	return state
}

// TestFederatedModelRecord runs one real federation and writes its model
// from initial checkpoints of the same weights with different records:
// the record composes the initial model's (a DP init's ε is added, per the
// weaker unit, and says the data sets differ; a non-private init keeps
// the model marked non-private for good, and its model is refused as the
// initial model of a further DP federation), the k-clients figures match
// an independent composition (one ledger charged every round of k
// clients), and a checkpoint that is not the state's initial model is
// refused.
func TestFederatedModelRecord(t *testing.T) {
	state := runFederation(t)
	ctx := context.Background()
	fed, log, err := ops.ReadFederationPrivacy(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	if log.DPRounds != 2 || log.PlainRounds != 0 || len(log.Clients) != 3 || fed.Clients != 3 || fed.Unit != train.UnitIdentity || fed.Delta != 1e-5 {
		t.Fatalf("log %+v, federation %+v", log, fed)
	}
	// k clients × 2 rounds of the same event, charged to one ledger.
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if len(fed.KClients) != 3 {
		t.Fatalf("k-clients figures %+v", fed.KClients)
	}
	one := chargeFor(t, 6, 2)
	for i, kc := range fed.KClients {
		want := chargeFor(t, 6, 2*(i+1))
		if kc.K != i+1 || !near(kc.Epsilon, want) || !kc.Exact {
			t.Errorf("k = %d: %+v, want ε = %.10g", i+1, kc, want)
		}
		if i > 0 && !(kc.Epsilon < float64(i+1)*one) {
			t.Errorf("k = %d: ε %g is not below k·ε₁ = %g", i+1, kc.Epsilon, float64(i+1)*one)
		}
	}
	if !near(fed.EpsilonOneClient, one) || !strings.Contains(fed.Assumption, "one client alone") || !strings.Contains(fed.Assumption, "k clients") {
		t.Fatalf("federation %+v, want ε₁ = %g and the assumption stated", fed, one)
	}
	final := wire.Weights{{Name: "w", Shape: []int{2, 2}, Values: []float32{5, 6, 7, 8}}, {Name: "b", Shape: []int{2}, Values: []float32{1, 1}}}
	o := ops.ModelOptions{DP: true, Unit: train.UnitIdentity, Delta: 1e-5, Clip: 1}
	write := func(h checkpoint.Header) *checkpoint.Checkpoint {
		t.Helper()
		out, err := ops.FederatedModel(initCheckpoint(h), final, log, o)
		if err != nil {
			t.Fatal(err)
		}
		// What is read back is what was written.
		path := filepath.Join(t.TempDir(), "out.ckpt")
		if err := out.Save(path); err != nil {
			t.Fatal(err)
		}
		back, err := checkpoint.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if back.Header.Federation == nil || back.Header.Federation.Init == nil {
			t.Fatalf("the written record lost its federation part: %+v", back.Header)
		}
		return back
	}

	// A public init adds nothing.
	p := write(publicInit).Header
	if !near(p.Privacy.Epsilon, one) || p.Privacy.Delta != 1e-5 || p.Privacy.Unit != train.UnitIdentity || !p.Privacy.Bounded() || p.Public ||
		!p.Federation.Init.Public || p.Federation.KClients[2].WithInit != 0 {
		t.Errorf("from a public init: %+v %+v", p.Privacy, p.Federation)
	}
	if err := ops.CheckInit(&checkpoint.Checkpoint{Header: p}, true); err != nil {
		t.Errorf("a DP federation's model is refused as a DP federation's init: %v", err)
	}

	// A DP init's ε is composed, per person, and the record says whose.
	d := write(dpInit).Header
	if !near(d.Privacy.Epsilon, one+1.5) || !near(d.Privacy.Delta, 1e-5+1e-6) || d.Privacy.Unit != train.UnitIdentity || !d.Privacy.Bounded() {
		t.Errorf("from a DP init: %+v, want ε = %g + 1.5 at δ = 1.1e-5 per identity", d.Privacy, one)
	}
	in := d.Federation.Init
	if in.Privacy.Epsilon != 1.5 || in.Data != "lfw" || !strings.Contains(in.Note, "different data set") || !strings.Contains(in.Note, "lfw") {
		t.Errorf("the init's record %+v", in)
	}
	for _, kc := range d.Federation.KClients {
		if !near(kc.WithInit, kc.Epsilon+1.5) {
			t.Errorf("k = %d with the init: %g, want %g + 1.5", kc.K, kc.WithInit, kc.Epsilon)
		}
	}
	// Per example on one side: the composition is per example.
	if e := write(dpExample).Header; e.Privacy.Unit != train.UnitExample || !near(e.Privacy.Epsilon, one+1.5) || !strings.Contains(e.Federation.Init.Note, "per example") {
		t.Errorf("from a per-example DP init: %+v, note %q", e.Privacy, e.Federation.Init.Note)
	}
	// A federated DP init: the same people, its k-clients figures compose.
	f := write(federatedDP).Header
	if !near(f.Privacy.Epsilon, one+2) || !strings.Contains(f.Federation.Init.Note, "same people") ||
		!near(f.Federation.KClients[1].WithInit, f.Federation.KClients[1].Epsilon+2.6) ||
		!near(f.Federation.KClients[2].WithInit, f.Federation.KClients[2].Epsilon+2.6) {
		t.Errorf("from a federated init: %+v, k-clients %+v", f.Privacy, f.Federation.KClients)
	}

	// A non-private init's marker survives: the model never reads as
	// private, and a further DP federation refuses it.
	for _, h := range []checkpoint.Header{plainInit, noRecord} {
		n := write(h).Header
		if n.Privacy.Bounded() || n.Privacy.NonPrivateSteps < max(h.Privacy.NonPrivateSteps, 1) || !strings.Contains(n.Federation.Init.Note, "no privacy guarantee") {
			t.Errorf("from %+v: record %+v, note %q: want it marked non-private", h.Privacy, n.Privacy, n.Federation.Init.Note)
		}
		if err := ops.CheckInit(&checkpoint.Checkpoint{Header: n}, true); !errors.Is(err, ops.ErrPrivateInit) {
			t.Errorf("its model accepted as a DP federation's init: %v", err)
		}
	}

	// Another model than the state started from is refused.
	other := initCheckpoint(publicInit)
	other.Values[0][0] = 9
	if _, err := ops.FederatedModel(other, final, log, o); err == nil || !strings.Contains(err.Error(), "started from") {
		t.Errorf("another initial model: %v", err)
	}
}

// FederationPrivacy from logs a real run would take long to make: many
// clients (k listed one by one to 10, then in steps, ending with all),
// rounds without DP (the assumption says the guarantee is void), none
// with DP, and a round per example (the weaker unit wins).
func TestFederationPrivacyFromLogs(t *testing.T) {
	ev, err := dp.SubsampledGaussianEvent(0.1, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	many := &coord.PrivacyLog{DPRounds: 1, Units: []string{"identity"}, Deltas: []float64{1e-5}}
	for i := range 25 {
		many.Clients = append(many.Clients, coord.ClientEvents{ID: fmt.Sprint(i), Updates: 1, Events: []dp.Event{ev}})
	}
	many.Clients = append(many.Clients, coord.ClientEvents{ID: "idle"}) // enrolled, never charged
	f, err := ops.FederationPrivacy(many)
	if err != nil {
		t.Fatal(err)
	}
	var ks []int
	for _, k := range f.KClients {
		ks = append(ks, k.K)
	}
	if fmt.Sprint(ks) != "[1 2 3 4 5 6 7 8 9 10 20 25]" || f.Clients != 25 {
		t.Fatalf("k listed %v for %d clients", ks, f.Clients)
	}
	all, _, err := dp.ScheduleEpsilon(0.1, 1, 25*5, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if last := f.KClients[len(f.KClients)-1]; math.Abs(last.Epsilon-all) > 1e-9*all || !strings.Contains(f.Assumption, "all 25 clients") {
		t.Errorf("all clients: %+v, want ε = %g; assumption %q", last, all, f.Assumption)
	}

	plain := *many
	plain.PlainRounds, plain.Units = 2, []string{"example", "identity"}
	f, err = ops.FederationPrivacy(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if f.PlainRounds != 2 || f.Unit != train.UnitExample || !strings.Contains(f.Assumption, "2 rounds ran without DP-SGD") || !strings.Contains(f.Assumption, "example (one image)") {
		t.Errorf("with plain rounds and a per-example round: %+v", f)
	}
	none := &coord.PrivacyLog{PlainRounds: 3, Clients: []coord.ClientEvents{{ID: "a", Updates: 3}}}
	if f, err = ops.FederationPrivacy(none); err != nil || f.EpsilonOneClient != 0 || len(f.KClients) != 0 || !strings.Contains(f.Assumption, "no privacy guarantee") {
		t.Errorf("no DP round: %+v, %v", f, err)
	}
	// Its model: the plain rounds count as non-private steps even when the
	// last run had --dp.
	v := wire.Version(model0().Header())
	plain.InitialVersion = v
	out, err := ops.FederatedModel(initCheckpoint(publicInit), model0(), &plain, ops.ModelOptions{DP: true, Clip: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p := out.Header.Privacy; p.Bounded() || p.NonPrivateSteps != 2 || p.Unit != train.UnitExample {
		t.Errorf("model of a federation with 2 plain rounds: %+v", p)
	}
}
