package coord_test

import (
	"bytes"
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// gatedDDPTrainer is ddpTrainer whose ClippedSum first calls gate with the
// round (which may hold it).
type gatedDDPTrainer struct {
	ddpTrainer
	gate func(round uint64)
}

func (g gatedDDPTrainer) ClippedSum(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan ddp.Plan) ([]float32, error) {
	if g.gate != nil {
		g.gate(task.GetRound())
	}
	return g.ddpTrainer.ClippedSum(ctx, model, task, plan)
}

// ddpOptions are secOptions (the authority in dir, a new state file) with
// distributed DP-SGD rounds of the plan every ddpClientPolicy accepts,
// stepped by srv.
func ddpOptions(t *testing.T, rounds int, srv coord.DDPServer) (o coord.Options, plan ddp.Plan, dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	o = secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), rounds)
	o.Task.DP = nil
	o.RoundTimeout, o.SecAgg.PhaseTimeout = 40*time.Second, 6*time.Second
	plan = ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 10, Clients: 4, Threshold: 3, Noise: 1,
		Dim: 6, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 2}
	dpol, err := ddpClientPolicy().Distributed()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Noise, err = ddp.RequiredNoise(dpol, plan); err != nil {
		t.Fatal(err)
	}
	o.SecAgg.DDP = &coord.DDPOptions{Plan: plan, Server: srv}
	return o, plan, dir
}

// ddpClient is a client of h with policy pol, its ledgers in ledgers,
// computing ddpSums(i) (gated by gate).
func ddpClient(t *testing.T, h *harness, i int, pol client.Policy, ledgers string, gate func(uint64), inputs *sync.Map) *client.Client {
	t.Helper()
	name := secNames[i]
	id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: pol, Identity: id,
		Dir: filepath.Join(h.dir, "clients", name), LedgerDir: ledgers, DataSet: name,
		Trainer: gatedDDPTrainer{ddpTrainer{sum: ddpSums(i), ids: &sync.Map{}}, gate}, Quantised: func(n uint64, x []uint32) {
			if inputs != nil {
				inputs.Store([2]any{n, name}, x)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runDDPClients runs the clients until they stop and reports their errors.
func runDDPClients(ctx context.Context, t *testing.T, cs []*client.Client) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				t.Errorf("client: %v", err)
			}
		}()
	}
	wg.Wait()
}

// storedDDPState reads the optimiser state the state file holds and the
// model version it is stored for.
func storedDDPState(t *testing.T, state string) (st []byte, version string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+state+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'ddp_state'`).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'ddp_state_version'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return st, string(v)
}

// TestDistributedOptimiserStateSurvivesARestart runs three distributed
// DP-SGD rounds with a server whose optimiser has state (momentum and a
// step count), stops the coordinator after the first round has closed
// while the clients hold round 2, and starts a new coordinator with a new
// server on the same state file. The new server must be given exactly the
// state the first returned with round 1's model, and the final model and
// the stored state must equal, bit for bit, those of one server that took
// the three steps uninterrupted with the same released sums. A
// coordinator that stored no optimiser state (or restored none) restarts
// the momentum at zero and ends elsewhere.
func TestDistributedOptimiserStateSurvivesARestart(t *testing.T) {
	srv1 := &sgdServer{lr: 0.5}
	o, _, dir := ddpOptions(t, 3, srv1)
	state := o.StatePath
	h := startHarnessOpts(t, o, dir, "127.0.0.1:0", nil, nil)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gate := func(n uint64) {
		if n == 2 {
			once.Do(func() { close(held) })
			<-release
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cs []*client.Client
	for i, name := range secNames {
		cs = append(cs, ddpClient(t, h, i, ddpClientPolicy(), filepath.Join(h.dir, "clients", name, "ledgers"), gate, nil))
	}
	done := make(chan struct{})
	go func() { runDDPClients(ctx, t, cs); close(done) }()
	<-held
	h.stop()
	srv1.mu.Lock()
	if len(srv1.steps) != 1 {
		t.Fatalf("the first coordinator took %d steps before the stop, want 1", len(srv1.steps))
	}
	srv1.mu.Unlock()
	srv2 := &sgdServer{lr: 0.5}
	o.SecAgg.DDP.Server = srv2
	h2 := startHarnessOpts(t, o, dir, h.addr, nil, nil)
	close(release)
	<-done
	if err := <-h2.done; err != nil {
		t.Fatal(err)
	}
	if len(srv2.restored) != 1 || !bytes.Equal(srv2.restored[0], srv1.steps[0].state) {
		t.Fatalf("the restarted coordinator restored %d states, not round 1's", len(srv2.restored))
	}
	if len(srv2.steps) != 2 {
		t.Fatalf("the restarted coordinator took %d steps, want 2", len(srv2.steps))
	}
	// One server, uninterrupted, with the same released sums.
	ref := &sgdServer{lr: 0.5}
	m := model0()
	var st []byte
	for _, s := range append(slices.Clone(srv1.steps), srv2.steps...) {
		var err error
		if m, st, err = ref.Step(m, s.released, s.batch, s.mech); err != nil {
			t.Fatal(err)
		}
	}
	got, version := h2.co.Model()
	for i := range m {
		if !slices.Equal(got[i].Values, m[i].Values) {
			t.Fatalf("tensor %d after the restart is %v, the uninterrupted run's %v", i, got[i].Values, m[i].Values)
		}
	}
	stored, sv := storedDDPState(t, state)
	if !bytes.Equal(stored, st) || sv != version {
		t.Fatal("the stored optimiser state is not the uninterrupted run's, or not stored with the current model")
	}
}

// TestDistributedRoundsChargeTheCoordinatorsLedgers runs three
// distributed DP-SGD rounds of four clients and checks that the
// coordinator's copy of each client's ledger holds exactly what the
// client's own ledger holds (the plan's mechanism at T, once per round:
// the same ε at the same δ), that it counts each client three times, and
// that the state's privacy log counts the rounds as DP rounds per the
// plan's unit and δ (so that the final model's record is not marked
// non-private).
func TestDistributedRoundsChargeTheCoordinatorsLedgers(t *testing.T) {
	const rounds = 3
	o, plan, dir := ddpOptions(t, rounds, &sgdServer{lr: 0.5})
	state := o.StatePath
	h := startHarnessOpts(t, o, dir, "127.0.0.1:0", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cs []*client.Client
	for i, name := range secNames {
		cs = append(cs, ddpClient(t, h, i, ddpClientPolicy(), filepath.Join(h.dir, "clients", name, "ledgers"), nil, nil))
	}
	runDDPClients(ctx, t, cs)
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	want, err := plan.Mechanism(2).Epsilon(rounds, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	st := readStatus(t, state)
	if len(st.GetClients()) != len(secNames) {
		t.Fatalf("%d clients in the status", len(st.GetClients()))
	}
	for i, c := range st.GetClients() {
		own, err := cs[i].Spent()
		if err != nil {
			t.Fatal(err)
		}
		if c.GetId() != secNames[i] || c.GetUpdates() != rounds || math.Abs(c.GetEpsilon()-own.Epsilon) > 1e-9*own.Epsilon ||
			math.Abs(own.Epsilon-want) > 1e-9*want {
			t.Errorf("%s: the coordinator's copy holds ε = %g over %d updates, the client's own ledger ε = %g; want ε = %g over %d",
				c.GetId(), c.GetEpsilon(), c.GetUpdates(), own.Epsilon, want, rounds)
		}
	}
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log, err := coord.ReadPrivacy(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if log.DPRounds != rounds || log.PlainRounds != 0 || !slices.Equal(log.Units, []string{"identity"}) || !slices.Equal(log.Deltas, []float64{1e-5}) {
		t.Fatalf("privacy log: %d DP rounds, %d plain, units %v, δ %v; want %d DP rounds per identity at δ = 1e-5", log.DPRounds, log.PlainRounds, log.Units, log.Deltas, rounds)
	}
	for _, c := range log.Clients {
		if len(c.Events) != rounds {
			t.Errorf("%s's copy holds %d events, want %d", c.ID, len(c.Events), rounds)
		}
	}
}

// TestDistributedRoundRefusesAClientPastItsBudget plays a client that
// forgets its own ledger: client-4's budget admits one round of the plan
// but not two; after round 1 it drops out and comes back with an empty
// ledger folder, and sends its masked vector for round 3. The
// coordinator's copy of its ledger refuses the charge (reason budget):
// the vector is not stored, the round is unmasked over the three others
// only (its sum is exactly theirs), and the copy still holds one round.
func TestDistributedRoundRefusesAClientPastItsBudget(t *testing.T) {
	const rounds = 3
	o, plan, dir := ddpOptions(t, rounds, &sgdServer{lr: 0.5})
	state := o.StatePath
	o.MinUpdates = 3
	// client-4 drops out of round 2 before sending: the round waits for
	// its vector until the masked vectors' deadline (25 s); the phases
	// leave room for a loaded machine.
	o.RoundTimeout, o.SecAgg.PhaseTimeout = 30*time.Second, 5*time.Second
	one, err := plan.Mechanism(2).Epsilon(1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	two, err := plan.Mechanism(2).Epsilon(2, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	three, err := plan.Mechanism(2).Epsilon(rounds, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if two <= 1.05*one {
		t.Fatalf("two rounds spend ε = %g, one %g: the test needs a budget between", two, one)
	}
	tight := ddpClientPolicy()
	tight.Budget = dp.Budget{Epsilon: 1.05 * one, Delta: 1e-5}
	tight.DDP.Rounds = 1
	var inputs sync.Map
	var mu sync.Mutex
	sums := map[uint64][]uint32{}
	h := startHarnessOpts(t, o, dir, "127.0.0.1:0", func(c *coord.Coordinator) {
		coord.OnSecureSum(c, func(n uint64, s []uint32) { mu.Lock(); sums[n] = s; mu.Unlock() })
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cs []*client.Client
	for i, name := range secNames[:3] {
		cs = append(cs, ddpClient(t, h, i, ddpClientPolicy(), filepath.Join(h.dir, "clients", name, "ledgers"), nil, &inputs))
	}
	// client-4 takes round 1 with its first ledger folder, stops in round
	// 2 before sending, and comes back for round 3 with an empty one.
	c4ctx, c4stop := context.WithCancel(ctx)
	c4 := ddpClient(t, h, 3, tight, filepath.Join(h.dir, "clients", "client-4", "ledger-a"), func(n uint64) {
		if n == 2 {
			c4stop()
		}
	}, &inputs)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); runDDPClients(ctx, t, cs) }()
	go func() {
		defer wg.Done()
		_ = c4.Run(c4ctx) // stopped in round 2
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, closed := h.co.Round(); closed >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Error("round 2 did not close")
				return
			}
		}
		c4b := ddpClient(t, h, 3, tight, filepath.Join(h.dir, "clients", "client-4", "ledger-b"), nil, &inputs)
		_ = c4b.Run(ctx) // its masked vector is refused
	}()
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	for _, c := range readStatus(t, state).GetClients() {
		wantUpdates, wantEps := rounds, three
		if c.GetId() == "client-4" {
			wantUpdates, wantEps = 1, one
		}
		if c.GetUpdates() != uint64(wantUpdates) || math.Abs(c.GetEpsilon()-wantEps) > 1e-9*wantEps {
			t.Errorf("%s: %d updates, ε = %g in the coordinator's copy; want %d, ε = %g", c.GetId(), c.GetUpdates(), c.GetEpsilon(), wantUpdates, wantEps)
		}
	}
	db, err := sql.Open("sqlite", "file:"+state+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var st string
	var updates int
	if err := db.QueryRow(`SELECT state, updates FROM rounds WHERE round = 3`).Scan(&st, &updates); err != nil {
		t.Fatal(err)
	}
	if st != "done" || updates != 3 {
		t.Fatalf("round 3 is %s with %d updates, want done with the 3 others", st, updates)
	}
	if _, ok := inputs.Load([2]any{uint64(3), "client-4"}); !ok {
		t.Fatal("client-4 did not encode a vector in round 3: the refusal was not exercised")
	}
	var want []uint32
	for _, name := range secNames[:3] {
		x, ok := inputs.Load([2]any{uint64(3), name})
		if !ok {
			t.Fatalf("%s sent no vector in round 3", name)
		}
		if want == nil {
			want = make([]uint32, len(x.([]uint32)))
		}
		if err := ddp.Add(want, x.([]uint32)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(sums[3], want) {
		t.Fatal("round 3's unmasked sum is not exactly the three other clients' encodings")
	}
}
