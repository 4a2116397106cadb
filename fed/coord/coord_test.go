package coord_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// fixedTrainer is the local trainer of a test client: its update is the
// constant delta in every coordinate, and it states the DP it "ran".
type fixedTrainer struct {
	delta float32
	sigma float64
	q     float64
}

func (f fixedTrainer) Plan(task *fedpb.RoundConfig, _ float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	return &fedpb.DPParams{NoiseMultiplier: f.sigma, Clip: d.GetClip(), SamplingRate: f.q, Steps: uint64(task.GetLocalSteps()),
		Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}, nil
}

func (f fixedTrainer) Train(_ context.Context, model wire.Weights, _ *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	up := model.Clone()
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = f.delta
		}
	}
	return client.Update{Weights: up, DP: plan}, nil
}

type harness struct {
	dir   string
	ca    *pki.CA
	addr  string
	state string
	co    *coord.Coordinator
	stop  func()
	done  chan error
}

func model0() wire.Weights {
	return wire.Weights{{Name: "w", Shape: []int{2, 2}, Values: []float32{1, 2, 3, 4}}, {Name: "b", Shape: []int{2}, Values: []float32{0, 0}}}
}

var task = coord.Task{LocalSteps: 5, LearningRate: 0.1, Batch: 8,
	DP: &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}}

func options(state string, rounds int) coord.Options {
	return coord.Options{StatePath: state, Init: model0(), Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: rounds, Fraction: 1, MinAvailable: 3, MinUpdates: 3, RoundTimeout: 20 * time.Second,
		Task: task, MaxUpdateNorm: 10}
}

func startHarness(t *testing.T, o coord.Options, dir string) *harness {
	t.Helper()
	return startHarnessAt(t, o, dir, "127.0.0.1:0", nil)
}

// startHarnessAt starts a harness listening on addr; setup, if set, is
// given the coordinator before its loop runs.
func startHarnessAt(t *testing.T, o coord.Options, dir, addr string, setup func(*coord.Coordinator)) *harness {
	t.Helper()
	return startHarnessOpts(t, o, dir, addr, setup, nil)
}

// startHarnessWith starts a harness on loopback whose gRPC server has the
// extra options too.
func startHarnessWith(t *testing.T, o coord.Options, dir string, extra []grpc.ServerOption, setup func(*coord.Coordinator)) *harness {
	t.Helper()
	return startHarnessOpts(t, o, dir, "127.0.0.1:0", setup, extra)
}

// testCA loads the test authority in dir, or makes it with the
// coordinator's, four clients' and the operator's certificates.
func testCA(t *testing.T, dir string) *pki.CA {
	t.Helper()
	ca, err := pki.Load(dir)
	if err == nil {
		return ca
	}
	if ca, err = pki.Init(dir, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "coordinator", Role: pki.Server}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"client-1", "client-2", "client-3", "client-4"} {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "operator", Role: pki.Operator}); err != nil {
		t.Fatal(err)
	}
	return ca
}

func startHarnessOpts(t *testing.T, o coord.Options, dir, addr string, setup func(*coord.Coordinator), extra []grpc.ServerOption) *harness {
	t.Helper()
	h := &harness{dir: dir, state: o.StatePath, ca: testCA(t, dir)}
	var err error
	if h.co, err = coord.New(o); err != nil {
		t.Fatal(err)
	}
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// As veil fed coordinator watches the list: its number kept in the state file.
	rev, err := pki.OpenRevocations(pki.RevocationsOptions{Path: filepath.Join(dir, "revoked.crl"), CA: h.ca.Cert(), Numbers: h.co})
	if err != nil {
		t.Fatal(err)
	}
	// As veil fed coordinator serves: with the coordinator's codec.
	srv := grpc.NewServer(append(append(h.co.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, rev)))), extra...)...)
	fedpb.RegisterCoordinatorServer(srv, h.co.Service(rev))
	if setup != nil {
		setup(h.co)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go srv.Serve(ln)
	// A safety net only: no test waits for it to pass.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	h.done = make(chan error, 1)
	go func() { h.done <- h.co.Run(ctx) }()
	h.stop = func() { cancel(); srv.Stop(); h.co.Close() }
	t.Cleanup(h.stop)
	return h
}

func (h *harness) creds(t *testing.T, name string) credentials.TransportCredentials {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(pki.ClientTLS(id, "localhost"))
}

func (h *harness) client(t *testing.T, name string, tr client.Trainer, budget float64) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: client.DefaultPolicy(dp.Budget{Epsilon: budget, Delta: 1e-5}),
		Dir: filepath.Join(h.dir, "clients", name), LedgerDir: filepath.Join(h.dir, "clients", name, "ledgers"), DataSet: name, Trainer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// chargeFor is the ε a ledger holds after k rounds of the fixed trainer.
func chargeFor(t *testing.T, tr fixedTrainer, dim, k int) float64 {
	t.Helper()
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = l.SetBudget("x", dp.Budget{Epsilon: 1e9, Delta: 1e-5})
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: tr.sigma, Clip: 1, SamplingRate: tr.q, Steps: 5, Delta: 1e-5}, dim)
	if err != nil {
		t.Fatal(err)
	}
	var s dp.Spent
	for range k {
		if s, err = l.Charge("x", ev); err != nil {
			t.Fatal(err)
		}
	}
	return s.Epsilon
}

func TestThreeClientsTwoRoundsOverMutualTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	h := startHarness(t, options(filepath.Join(t.TempDir(), "state.db"), 2), dir)
	trainers := map[string]fixedTrainer{"client-1": {0.1, 1, 0.1}, "client-2": {0.2, 1, 0.1}, "client-3": {0.6, 1, 0.1}}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for name, tr := range trainers {
		c := h.client(t, name, tr, 100)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	// Uniform FedAvg under DP, the server learning rate by default
	// round(√3) = 2 (strategy.DefaultServerLR): each round adds twice the
	// mean delta (0.1+0.2+0.6)/3 = 0.3.
	w, _ := h.co.Model()
	want := []float32{2.2, 3.2, 4.2, 5.2}
	for i, v := range w[0].Values {
		if math.Abs(float64(v-want[i])) > 1e-6 {
			t.Fatalf("model %v, want %v", w[0].Values, want)
		}
	}
	db, err := coord.OpenStatus(h.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 3 {
		t.Fatalf("rounds %v", st.Rounds)
	}
	wantEps := chargeFor(t, trainers["client-1"], 6, 2)
	for _, c := range st.Clients {
		if c.Updates != 2 || math.Abs(c.Epsilon-wantEps) > 1e-9 {
			t.Fatalf("client %s: %d updates, ε %g, want 2 and %g", c.Id, c.Updates, c.Epsilon, wantEps)
		}
	}
}

func TestClientStopsAtItsBudget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := options(filepath.Join(t.TempDir(), "state.db"), 3)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 1, 1, 3*time.Second
	h := startHarness(t, o, dir)
	tr := fixedTrainer{0.1, 1, 0.1}
	// A budget between one round's charge and two rounds': the client
	// trains once, then refuses (RDP composes sublinearly, so this is not
	// simply twice one round).
	one, two := chargeFor(t, tr, 6, 1), chargeFor(t, tr, 6, 2)
	budget := (one + two) / 2
	c := h.client(t, "client-1", tr, budget)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := c.Run(ctx)
	if !errors.Is(err, client.ErrBudgetExhausted) || !strings.Contains(err.Error(), "past its budget") {
		t.Fatalf("got %v, want the budget refusal", err)
	}
	s, _ := c.Spent()
	if math.Abs(s.Epsilon-one) > 1e-9 {
		t.Fatalf("client spent %g, want one round's %g", s.Epsilon, one)
	}
	// The ledger on disk says the same after a restart of the client.
	c2 := h.client(t, "client-1", tr, budget)
	if s2, _ := c2.Spent(); s2.Epsilon != s.Epsilon {
		t.Fatalf("ledger on disk %g, in memory %g", s2.Epsilon, s.Epsilon)
	}
}

// dbDigest hashes the coordinator's stored state (clients with ledgers,
// rounds with sums, selections).
func dbDigest(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := sha256.New()
	for _, q := range []string{
		`SELECT id, budget_epsilon, updates, hex(ledger) FROM clients ORDER BY id`,
		`SELECT round, state, updates, hex(COALESCE(sum, x'')), sum_weight FROM rounds ORDER BY round`,
		`SELECT round, client, counted FROM round_clients ORDER BY round, client`,
		`SELECT version FROM models ORDER BY version`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(d, vals...)
		}
		rows.Close()
	}
	return hex.EncodeToString(d.Sum(nil))
}

func TestRefusedUpdatesChangeNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	// Three clients selected, one of which (client-4) stays silent, so
	// the round is still open when client-2 has been revoked (no longer
	// waited for) and client-1 counted.
	o.MinAvailable, o.MinUpdates = 3, 2
	o.MaxUpdateNorm = 1
	h := startHarness(t, o, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := func(name string) fedpb.CoordinatorClient { return h.api(t, name) }
	a1, a2 := api("client-1"), api("client-2")
	for _, a := range []fedpb.CoordinatorClient{a1, a2, api("client-4")} {
		if _, err := a.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: 1, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
			t.Fatal(err)
		}
	}
	var cfg *fedpb.RoundConfig
	for cfg == nil {
		r, err := a1.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		cfg = r.GetTask()
		_, _ = a2.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: 1})
		time.Sleep(20 * time.Millisecond)
	}
	base := model0()
	small := base.Clone()
	for i := range small {
		for j := range small[i].Values {
			small[i].Values[j] = 0.01
		}
	}
	goodDP := &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}
	header := func(w wire.Weights) *fedpb.UpdateHeader {
		return &fedpb.UpdateHeader{ProtocolVersion: 1, Round: cfg.Round, ModelVersion: cfg.ModelVersion, Dp: goodDP, Weights: w.Header()}
	}
	send := func(a fedpb.CoordinatorClient, h *fedpb.UpdateHeader, w wire.Weights) (string, error) {
		r, err := client.SendUpdate(ctx, a, h, w)
		if err != nil {
			return "", err
		}
		if r.GetAccepted() {
			return "accepted", nil
		}
		return r.GetReason(), nil
	}
	before := dbDigest(t, h.state)
	nan := small.Clone()
	nan[0].Values[1] = float32(math.NaN())
	inf := small.Clone()
	inf[1].Values[0] = float32(math.Inf(1))
	big := small.Clone()
	big[0].Values[0] = 5
	shape := wire.Weights{{Name: "w", Shape: []int{4}, Values: []float32{0, 0, 0, 0}}, small[1]}
	stale := header(small)
	stale.ModelVersion = strings.Repeat("0", 64)
	oldRound := header(small)
	oldRound.Round = cfg.Round + 7
	forged := header(small)
	forged.Dp = &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 1, Steps: 100000, Delta: 1e-5, PrivacyUnit: "identity"}
	wrongClip := header(small)
	wrongClip.Dp = &fedpb.DPParams{NoiseMultiplier: 1, Clip: 10, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}
	cases := []struct {
		name   string
		h      *fedpb.UpdateHeader
		w      wire.Weights
		reason string
	}{
		{"wrong shape", header(shape), shape, "shape"},
		{"NaN", header(nan), nan, "non_finite"},
		{"Inf", header(inf), inf, "non_finite"},
		{"norm over the bound", header(big), big, "norm"},
		{"stale model version", stale, small, "stale"},
		{"another round", oldRound, small, "stale"},
		{"forged DP beyond the budget", forged, small, "budget"},
		{"DP settings not the round's", wrongClip, small, "dp"},
	}
	for _, c := range cases {
		got, err := send(a1, c.h, c.w)
		if err != nil || !strings.HasPrefix(got, c.reason) {
			t.Errorf("%s: got %q (%v), want a %q refusal", c.name, got, err, c.reason)
		}
		if d := dbDigest(t, h.state); d != before {
			t.Fatalf("%s: the stored state changed", c.name)
		}
	}
	// Truncated and oversized streams.
	hdr := header(small)
	stream, err := a1.SubmitUpdate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: hdr}})
	_ = stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: small.Payload()[:10]}})
	if r, err := stream.CloseAndRecv(); err != nil || r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "size") {
		t.Errorf("truncated stream: %v %v", r, err)
	}
	stream, _ = a1.SubmitUpdate(ctx)
	_ = stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: hdr}})
	_ = stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: append(small.Payload(), 1, 2, 3, 4)}})
	if r, err := stream.CloseAndRecv(); err != nil || r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "size") {
		t.Errorf("oversized stream: %v %v", r, err)
	}
	if d := dbDigest(t, h.state); d != before {
		t.Fatal("a malformed stream changed the stored state")
	}
	// A client not selected (never joined) and a revoked client.
	a3 := api("client-3")
	if _, err := send(a3, header(small), small); err == nil {
		t.Error("an update from a client that never joined was answered")
	}
	if err := h.ca.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := send(a2, header(small), small); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked client: %v", err)
	}
	if d := dbDigest(t, h.state); d != before {
		t.Fatal("refused clients changed the stored state")
	}
	// The genuine update is accepted once; its replay is refused.
	if got, err := send(a1, header(small), small); got != "accepted" {
		t.Fatalf("genuine update: %q %v", got, err)
	}
	after := dbDigest(t, h.state)
	if got, _ := send(a1, header(small), small); !strings.HasPrefix(got, "replay") {
		t.Errorf("replay: %q", got)
	}
	if d := dbDigest(t, h.state); d != after {
		t.Fatal("the replay changed the stored state")
	}
}
