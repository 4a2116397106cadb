package coord_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// TestDPHEChargesCoordinatorLedgers runs two DPHE rounds of four clients
// with real noise (σ = 2, selection ε = 1): while round 1 waits for its
// fourth client, three contributions are stored and the coordinator's
// copy of every ledger is still uncharged (the charge belongs to the
// round's close); once the rounds are done, each client's ε in the
// coordinator's copy is exactly what the client's own ledger spent (the
// same events, composed by the same accountant), and the federation's
// privacy record counts two DP rounds.
func TestDPHEChargesCoordinatorLedgers(t *testing.T) {
	f := startDPHEWith(t, 2, func(o *coord.DPHEOptions) { o.NoiseMultiplier, o.SelectionEpsilon = 2, 1 })
	cs, held, errs := f.heldRun(t, 1e6)
	for _, c := range readStatus(t, f.state).Clients {
		if c.Epsilon != 0 {
			t.Fatalf("client %s charged ε = %g in the coordinator's copy before the round closed", c.Id, c.Epsilon)
		}
	}
	close(held.release)
	for name, err := range <-errs {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	st := readStatus(t, f.state)
	if len(st.Clients) != 4 {
		t.Fatalf("%d clients in the status", len(st.Clients))
	}
	for _, c := range st.Clients {
		own, err := cs[c.Id].Spent()
		if err != nil {
			t.Fatal(err)
		}
		if !(own.Epsilon > 0) || math.Abs(c.Epsilon-own.Epsilon) > 1e-12*own.Epsilon {
			t.Errorf("client %s: the coordinator's copy spent ε = %.15g, the client's own ledger %.15g", c.Id, c.Epsilon, own.Epsilon)
		}
		if c.Updates != 2 {
			t.Errorf("client %s counted %d times, want 2", c.Id, c.Updates)
		}
	}
	db, err := coord.OpenStatus(f.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pl, err := coord.ReadPrivacy(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if pl.DPRounds != 2 || pl.PlainRounds != 0 || len(pl.Units) != 1 || pl.Units[0] != "identity" || len(pl.Deltas) != 1 || pl.Deltas[0] != 1e-6 {
		t.Errorf("the federation's privacy log: %d DP rounds, %d plain, units %v, δ %v", pl.DPRounds, pl.PlainRounds, pl.Units, pl.Deltas)
	}
	for _, c := range pl.Clients {
		if len(c.Events) != 4 {
			t.Errorf("client %s: %d events in the coordinator's copy, want 4 (a selection and a release per round)", c.ID, len(c.Events))
		}
	}
}

// TestDPHECoordinatorRefusesPastBudget plays a client that ignores its
// own ledger: it declared a budget of ε = 1, below one contribution's
// charge at σ = 2 and selection ε₁ = 1, and sends a contribution made
// with a ledger of its own. The coordinator's copy of its ledger refuses
// it before it enters the aggregator ("budget"), leaves the copy
// uncharged, and the round completes with the other three clients, their
// copies charged.
func TestDPHECoordinatorRefusesPastBudget(t *testing.T) {
	f := startDPHEWith(t, 1, func(o *coord.DPHEOptions) { o.NoiseMultiplier, o.SelectionEpsilon = 2, 1 })
	cs := map[string]*client.Client{}
	for i, name := range secNames[:3] {
		cs[name] = f.dpheClient(t, i, 1e6, false)
	}
	sitter, tasks, id4 := f.sitter(t, 1)
	cs["client-4"] = sitter
	errs := make(chan map[string]error, 1)
	go func() { errs <- runClients(t, cs) }()
	cfg := (<-tasks).GetDphe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := f.sendRaw(ctx, t, "client-4", f.contributeRaw(ctx, t, id4, cfg, make([]float32, 6)))
	if a.GetAccepted() || !strings.Contains(a.GetReason(), "past its privacy budget") {
		t.Fatalf("a contribution past the client's budget: accepted %v (%s)", a.GetAccepted(), a.GetReason())
	}
	<-errs
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	if st := roundState(t, f.state, 1); st != "done" {
		t.Fatalf("round 1 is %q, want done with three clients", st)
	}
	for _, c := range readStatus(t, f.state).Clients {
		if (c.Id == "client-4") != (c.Epsilon == 0) {
			t.Errorf("client %s: ε = %g in the coordinator's copy", c.Id, c.Epsilon)
		}
	}
}

// heldRun starts the four DPHE clients with budget eps, the fourth held in
// its training (released by closing held.release), and waits until the
// other three's contributions are stored; errs will carry the clients'
// errors once they stop.
func (f *dpheFed) heldRun(t *testing.T, eps float64) (cs map[string]*client.Client, held *heldTrainer, errs chan map[string]error) {
	t.Helper()
	f.o.RoundTimeout = 40 * time.Second
	held = &heldTrainer{vecTrainer: vecTrainer{base: 4}, started: make(chan struct{}), release: make(chan struct{})}
	cs = map[string]*client.Client{}
	for i, name := range secNames {
		var tr client.Trainer = plainTrainer{vecTrainer{base: float32(i + 1)}}
		if i == 3 {
			tr = held
		}
		cs[name] = f.dpheClientWith(t, i, eps, false, tr)
	}
	errs = make(chan map[string]error, 1)
	go func() { errs <- runClients(t, cs) }()
	<-held.started
	waitStored(t, f.state, 3)
	return cs, held, errs
}

// waitStored waits until n DPHE contributions are stored in state.
func waitStored(t *testing.T, state string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); stored(t, state, "dphe") < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d contributions were not stored", n)
		}
	}
}

// sitter is client-4 with budget eps: selected, but sending nothing
// itself; the tasks it is given go to the channel (when it has room). It
// returns client-4's identity too, for the test to act as it.
func (f *dpheFed) sitter(t *testing.T, eps float64) (*client.Client, <-chan *fedpb.RoundConfig, *pki.Identity) {
	t.Helper()
	tasks := make(chan *fedpb.RoundConfig, 1)
	id, err := pki.LoadIdentity(filepath.Join(f.dir, "client-4.crt"), filepath.Join(f.dir, "client-4.key"), filepath.Join(f.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pol := client.DefaultPolicy(dp.Budget{Epsilon: eps, Delta: 1e-5})
	pol.MinNoiseMultiplier, pol.MaxClip = 0, 20
	c, err := client.New(client.Options{Addr: f.addr, Creds: f.creds(t, "client-4"), Policy: pol, Identity: id,
		Dir: filepath.Join(f.dir, "clients", "client-4"), LedgerDir: filepath.Join(f.dir, "clients", "client-4", "ledgers"), DataSet: "client-4",
		Trainer: plainTrainer{vecTrainer{base: 4}}, SitOut: func(task *fedpb.RoundConfig) bool {
			select {
			case tasks <- task:
			default:
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, tasks, id
}

// contributeRaw makes the contribution of update to round 1 as the client
// of identity id, with the round's settings cfg and a ledger of its own
// (of no limit): what a client that ignores its policy and ledger sends.
func (f *dpheFed) contributeRaw(ctx context.Context, t *testing.T, id *pki.Identity, cfg *fedpb.DPHEConfig, update []float32) [][]byte {
	t.Helper()
	kg, err := dphefed.Dial(dphefed.DialOptions{Addr: f.kgAddr, Identity: id, Name: "keygen", AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kg.Close()
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("u", dp.Budget{Epsilon: 1e300, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	upd := make([]float64, len(update))
	for i, v := range update {
		upd[i] = float64(v)
	}
	ct, err := dphefed.Contribute(ctx, kg, 1, upd, dphefed.ContributeOptions{Privacy: &dphe.Privacy{Clip: cfg.GetClip(), NoiseMultiplier: cfg.GetNoiseMultiplier(),
		Ledger: l, Principal: "u", Select: &dphe.Selection{Epsilon: cfg.GetSelectionEpsilon(), Delta: cfg.GetSelectionDelta(), Threshold: cfg.GetSelectionThreshold(),
			Count: int(cfg.GetCount())}}})
	if err != nil {
		t.Fatal(err)
	}
	return ct.Messages
}

// sendRaw sends msgs as name's DPHE contribution to round 1 and returns
// the coordinator's answer.
func (f *dpheFed) sendRaw(ctx context.Context, t *testing.T, name string, msgs [][]byte) *fedpb.SecAggAck {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, append(wire.DialOptions(), grpc.WithTransportCredentials(f.creds(t, name)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a, err := fedpb.NewCoordinatorClient(conn).SecAggSend(ctx, &fedpb.SecAggMessage{ProtocolVersion: fedpb.ProtocolVersion, Round: 1,
		Msg: &fedpb.SecAggMessage_Dphe{Dphe: &fedpb.DPHEContribution{Messages: msgs}}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// lateTrainer is plainTrainer, late in round 1: it returns once wait
// does.
type lateTrainer struct {
	plainTrainer
	wait func(ctx context.Context)
}

func (l lateTrainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	if task.GetRound() == 1 {
		l.wait(ctx)
	}
	return l.plainTrainer.Train(ctx, model, task, plan)
}

// TestDPHELateClientGoesOn: client-4 trains past round 1's deadline, so
// round 1 closes with the other three; client-4 goes on (its run does not
// end) and takes part in round 2, which is done with all four. Late by
// 10 s against a deadline of 8 s, its contribution is refused as stale
// (or, on a loaded machine where round 1 is decrypted first, its keys);
// waiting until round 1 is done, its keys are refused by the key
// generator, nothing charged or sent.
func TestDPHELateClientGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(state string) func(context.Context)
	}{
		{"past the deadline", func(string) func(context.Context) {
			return func(ctx context.Context) {
				select {
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
				}
			}
		}},
		{"after the round's decryption", func(state string) func(context.Context) {
			return func(ctx context.Context) {
				for ctx.Err() == nil && !roundDone(state, 1) {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startDPHE(t, 2)
			f.o.RoundTimeout = 8 * time.Second
			cs := map[string]*client.Client{}
			for i, name := range secNames {
				var tr client.Trainer = plainTrainer{vecTrainer{base: float32(i + 1)}}
				if i == 3 {
					tr = lateTrainer{plainTrainer: plainTrainer{vecTrainer{base: 4}}, wait: tc.wait(f.state)}
				}
				cs[name] = f.dpheClientWith(t, i, 1e300, false, tr)
			}
			checkLateClientGoesOn(t, f, cs)
		})
	}
}

// roundDone reports whether round n of the state file is done.
func roundDone(state string, n int) bool {
	db, err := coord.OpenStatus(state)
	if err != nil {
		return false
	}
	defer db.Close()
	var st string
	return db.QueryRow(`SELECT state FROM rounds WHERE round = ?`, n).Scan(&st) == nil && st == "done"
}

// checkLateClientGoesOn runs cs and checks round 1 done with three
// contributions, round 2 with four, client-4 counted once.
func checkLateClientGoesOn(t *testing.T, f *dpheFed, cs map[string]*client.Client) {
	t.Helper()
	errs := make(chan map[string]error, 1)
	go func() { errs <- runClients(t, cs) }()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(80 * time.Second):
		t.Fatal("the run did not end: the late client did not take part in round 2")
	}
	for name, err := range <-errs {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	st := readStatus(t, f.state)
	if len(st.Rounds) != 2 || st.Rounds[0].State != "done" || st.Rounds[0].Updates != 3 || st.Rounds[1].State != "done" || st.Rounds[1].Updates != 4 {
		t.Fatalf("rounds %v, want round 1 done with 3 contributions and round 2 with 4", st.Rounds)
	}
	for _, c := range st.Clients {
		if want := map[bool]uint64{true: 1, false: 2}[c.Id == "client-4"]; c.Updates != want {
			t.Errorf("%s counted %d times, want %d", c.Id, c.Updates, want)
		}
	}
}
