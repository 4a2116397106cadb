package coord

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// TestRoundClosesInTheCommitOfItsLastUpdate: the fold that counts a
// round's last expected update closes the round in the same transaction,
// so the round is closed, its model current and its sum gone within one
// commit of that update, with no step of the loop (nor its tick) in
// between; an update that does not complete the round is committed alone
// and leaves it open.
func TestRoundClosesInTheCommitOfItsLastUpdate(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	c := enrolled(t, Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg"},
		Rounds: 2, Fraction: 1, MinAvailable: 2, MinUpdates: 2, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}}, true, "alice", "bob")
	ctx := context.Background()
	_, v0 := c.Model()
	send := func(who string, delta float32) {
		t.Helper()
		up := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{delta, delta, delta}}}
		p := &pending{client: who, round: 1, version: v0, update: up, examples: 1, bytes: 12, reply: make(chan result, 1)}
		before := c.st.commits.Load()
		c.fold(ctx, []*pending{p})
		if res := <-p.reply; res.err != nil {
			t.Fatalf("%s's update: %v", who, res.err)
		}
		if n := c.st.commits.Load() - before; n != 1 {
			t.Fatalf("%s's update took %d commits, want 1", who, n)
		}
	}
	send("alice", 0.5)
	if open, done := c.Round(); open != 1 || done != 0 {
		t.Fatalf("after the first of two updates: open round %d, %d closed; want round 1 open", open, done)
	}
	send("bob", 1.5)
	if open, done := c.Round(); open != 0 || done != 1 {
		t.Fatalf("after the last update: open round %d, %d closed; want round 1 closed in that commit", open, done)
	}
	w, v1 := c.Model()
	if v1 == v0 || w[0].Values[0] != 2 {
		t.Fatalf("the model after round 1 is %v (version changed: %v), want 1 + mean(0.5, 1.5) = 2", w[0].Values, v1 != v0)
	}
	var state string
	var updates int
	var sumNull bool
	if err := c.st.db.QueryRow(`SELECT state, updates, sum IS NULL FROM rounds WHERE round = 1`).Scan(&state, &updates, &sumNull); err != nil {
		t.Fatal(err)
	}
	if state != "done" || updates != 2 || !sumNull {
		t.Fatalf("round 1 stored as %s with %d updates (sum gone: %v)", state, updates, sumNull)
	}
	// The close encoded the next model once: the bytes it stored are
	// already the broadcast's, before any client asks for them.
	var stored []byte
	if err := c.st.db.QueryRow(`SELECT payload FROM models WHERE version = ?`, v1).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if c.encoded.version != v1 || string(c.encoded.payload) != string(stored) || wire.Version(c.encoded.header) != v1 {
		t.Fatalf("after the close the broadcast holds version %.12s, not the stored model %.12s", c.encoded.version, v1)
	}
}

// TestCommitRefusesALedgerChangedAfterItsCheck: a batch checks and charges
// each update against its client's ledger as it arrives and commits
// later; if the stored ledger changed in between (only the loop's
// goroutine writes ledgers, so this stands for a broken assumption), the
// transaction fails as a whole and stores nothing: the changed ledger is
// not overwritten by one charged from the old, nothing is counted and the
// update is not acknowledged; the round's sum, which that first batch
// added to in place, is all zeros again.
func TestCommitRefusesALedgerChangedAfterItsCheck(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	dpp := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	c := enrolled(t, Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 2, MinUpdates: 1, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1, DP: dpp}}, true, "alice", "bob")
	ctx := context.Background()
	_, v0 := c.Model()
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.1, Steps: 3}
	up := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 1, 1}}}
	p := &pending{client: "alice", round: 1, version: v0, update: up, dp: meta, examples: 1, bytes: 12, reply: make(chan result, 1)}
	b := c.newBatch()
	c.admit(ctx, b, p)
	// The ledger as it stands after some other charge.
	var before []byte
	if err := c.st.db.QueryRow(`SELECT ledger FROM clients WHERE id = 'alice'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	ch, err := c.charge("alice", before, &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 2, SamplingRate: 0.01, Steps: 1}, 3)
	if err != nil || ch.refusal != nil {
		t.Fatal(err, ch.refusal)
	}
	if _, err := c.st.db.Exec(`UPDATE clients SET ledger = ? WHERE id = 'alice'`, ch.ledger); err != nil {
		t.Fatal(err)
	}
	commits := c.st.commits.Load()
	c.commit(ctx, b)
	if res := <-p.reply; res.err == nil {
		t.Fatal("the update was acknowledged over a ledger that changed after its charge")
	}
	var after []byte
	var counted, updates int
	var sumNull bool
	if err := c.st.db.QueryRow(`SELECT ledger, updates FROM clients WHERE id = 'alice'`).Scan(&after, &updates); err != nil {
		t.Fatal(err)
	}
	if err := c.st.db.QueryRow(`SELECT counted FROM round_clients WHERE round = 1 AND client = 'alice'`).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if err := c.st.db.QueryRow(`SELECT sum IS NULL FROM rounds WHERE round = 1`).Scan(&sumNull); err != nil {
		t.Fatal(err)
	}
	if string(after) != string(ch.ledger) || updates != 0 || counted != 0 || !sumNull || c.st.commits.Load() != commits {
		t.Fatalf("a failed batch changed the state: ledger kept %v, updates %d, counted %d, sum stored %v", string(after) == string(ch.ledger), updates, counted, !sumNull)
	}
	if c.round.counted["alice"] || c.round.sum.Count != 0 {
		t.Fatal("a failed batch changed the open round in memory")
	}
	// The batch added to the round's own sum (it was the round's first):
	// every value is zero again, so bob's update alone makes the sum
	// stored next, with nothing of alice's in it.
	for i, v := range c.round.sum.Values {
		if v != 0 || c.round.sum.Weight != 0 {
			t.Fatalf("after the failed batch the round's sum holds %g at %d (weight %g)", v, i, c.round.sum.Weight)
		}
	}
	q := &pending{client: "bob", round: 1, version: v0, update: wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{0.25, 0.5, 0.75}}},
		dp: meta, examples: 1, bytes: 12, reply: make(chan result, 1)}
	c.fold(ctx, []*pending{q})
	if res := <-q.reply; res.err != nil {
		t.Fatal(res.err)
	}
	var sumB []byte
	if err := c.st.db.QueryRow(`SELECT sum FROM rounds WHERE round = 1`).Scan(&sumB); err != nil {
		t.Fatal(err)
	}
	if got, err := decodeSum(sumB, 3); err != nil || got[0] != 0.25 || got[1] != 0.5 || got[2] != 0.75 {
		t.Fatalf("the stored sum is %v (%v), want bob's update alone", got, err)
	}
}

// TestWithdrawalSurvivesARestart: a client's withdrawal from the open
// round is in the state file, so a coordinator restarted mid-round still
// does not wait for it: the other client's update closes the round, in
// one commit.
func TestWithdrawalSurvivesARestart(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	o := Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg"},
		Rounds: 1, Fraction: 1, MinAvailable: 2, MinUpdates: 1, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, who := range []string{"alice", "bob"} {
		if _, err := c.enrol(ctx, who, 100, 1e-5, "identity"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.startRound(ctx, []string{"alice", "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := c.withdraw(ctx, 1, "bob", "policy: clip"); err != nil {
		t.Fatal(err)
	}
	_, v0 := c.Model()
	c.Close()

	c, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if open, _ := c.Round(); open != 1 {
		t.Fatalf("after the restart the open round is %d, want 1", open)
	}
	if c.waitingFor(c.round) != 1 || c.round.withdrawn["bob"] != "policy: clip" {
		t.Fatalf("after the restart the round waits for %d clients, bob's withdrawal %q", c.waitingFor(c.round), c.round.withdrawn["bob"])
	}
	// An update from bob, were it sent now, is refused: it withdrew.
	err = c.check("bob", &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: 1, ModelVersion: v0})
	if rf, ok := err.(*refusal); !ok || rf.reason != "withdrawn" {
		t.Fatalf("an update of the withdrawn client: %v, want a refusal for its withdrawal", err)
	}
	up := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 1, 1}}}
	p := &pending{client: "alice", round: 1, version: v0, update: up, examples: 1, bytes: 12, reply: make(chan result, 1)}
	c.fold(ctx, []*pending{p})
	if res := <-p.reply; res.err != nil {
		t.Fatal(res.err)
	}
	if open, done := c.Round(); open != 0 || done != 1 {
		t.Fatalf("alice's update left round %d open (%d closed)", open, done)
	}
}
