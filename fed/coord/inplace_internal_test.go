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

// TestFailedFirstBatchLeavesTheSumEmpty: the first batch of a round adds
// to the round's own (empty) sum rather than a copy; when its transaction
// fails (here a ledger changed after the charge), the sum is empty again,
// every value zero, so the next batch's update alone makes the sum stored
// and nothing of the refused update survives in it.
func TestFailedFirstBatchLeavesTheSumEmpty(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	dpp := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	c := enrolled(t, Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 2, MinUpdates: 2, RoundTimeout: time.Hour, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1, DP: dpp}}, true, "alice", "bob")
	ctx := context.Background()
	_, v0 := c.Model()
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.1, Steps: 3}
	send := func(who string, delta float32) *pending {
		up := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{delta, 2 * delta, 3 * delta}}}
		return &pending{client: who, round: 1, version: v0, update: up, dp: meta, examples: 1, bytes: 12, reply: make(chan result, 1)}
	}
	p := send("alice", 0.5)
	b := c.newBatch()
	c.admit(ctx, b, p)
	if _, err := c.st.db.Exec(`UPDATE clients SET updates = updates, ledger = ledger || ' ' WHERE id = 'alice'`); err != nil {
		t.Fatal(err)
	}
	c.commit(ctx, b)
	if res := <-p.reply; res.err == nil {
		t.Fatal("the update was acknowledged over a ledger that changed after its charge")
	}
	if s := c.round.sum; s.Count != 0 || s.Weight != 0 || s.Values[0] != 0 || s.Values[1] != 0 || s.Values[2] != 0 {
		t.Fatalf("after the failed batch the round's sum is %v (weight %g, %d updates), want empty", s.Values, s.Weight, s.Count)
	}
	q := send("bob", 0.25)
	c.fold(ctx, []*pending{q})
	if res := <-q.reply; res.err != nil {
		t.Fatal(res.err)
	}
	var sum []byte
	if err := c.st.db.QueryRow(`SELECT sum FROM rounds WHERE round = 1`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	got, err := decodeSum(sum, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0.25 || got[1] != 0.5 || got[2] != 0.75 {
		t.Fatalf("the stored sum is %v, want bob's update alone (0.25, 0.5, 0.75)", got)
	}
}
