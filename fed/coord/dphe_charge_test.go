package coord_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
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
	f.o.RoundTimeout = 40 * time.Second
	held := &heldTrainer{vecTrainer: vecTrainer{base: 4}, started: make(chan struct{}), release: make(chan struct{})}
	cs := map[string]*client.Client{}
	for i, name := range secNames {
		var tr client.Trainer = plainTrainer{vecTrainer{base: float32(i + 1)}}
		if i == 3 {
			tr = held
		}
		cs[name] = f.dpheClientWith(t, i, 1e6, false, tr)
	}
	errs := make(chan map[string]error, 1)
	go func() { errs <- runClients(t, cs) }()
	<-held.started
	for deadline := time.Now().Add(20 * time.Second); stored(t, f.state, "dphe") < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("three contributions were not stored")
		}
	}
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
