package coord

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// A charge worked out before queueing from a ledger that is no longer the
// stored one is never used: fold works it out again, so the stored ledger
// is the honest one whatever the precomputed charge said.
func TestFoldIgnoresAStaleCharge(t *testing.T) {
	model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
	dpp := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	c, err := New(Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: time.Minute, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1, DP: dpp}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.enrol(ctx, "alice", 100, 1e-5, "identity"); err != nil {
		t.Fatal(err)
	}
	if err := c.startRound(ctx, []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.1, Steps: 3}
	var stored []byte
	if err := c.st.db.QueryRow(`SELECT ledger FROM clients WHERE id = 'alice'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	honest, err := c.charge("alice", stored, meta, model.Len())
	if err != nil || honest.refusal != nil {
		t.Fatal(err, honest.refusal)
	}
	p := &pending{client: "alice", round: c.round.n, version: c.version, update: model.Clone(), dp: meta, reply: make(chan result, 1),
		charged: &charged{base: []byte(`{"stale": true}`), ledger: []byte(`{"forged": true}`), spent: 1e-9}}
	c.fold(ctx, []*pending{p})
	res := <-p.reply
	if res.err != nil || res.spent != honest.spent {
		t.Fatalf("fold answered %+v, want ε = %g", res, honest.spent)
	}
	var after []byte
	if err := c.st.db.QueryRow(`SELECT ledger FROM clients WHERE id = 'alice'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if string(after) != string(honest.ledger) {
		t.Fatalf("stored ledger %s, want %s", after, honest.ledger)
	}
}

// gathered returns the batch gather makes from first, none complete.
func gathered(c *Coordinator, first *pending) []*pending {
	var b []*pending
	c.gather(first, func(p *pending) bool {
		b = append(b, p)
		return false
	})
	return b
}

// A batch waits for updates still being received (group commit), and
// only for them, and not once the round needs nothing more.
//
// Two of the three claims depend on the scheduler: "does not wait" is
// only visible as returning within maxBatchWait, and "takes an update
// that arrives while waiting" needs the sender to run within
// maxBatchWait. A loaded machine can hold either goroutine for longer
// (a busy 2-core machine failed the single try 20 times in 600), so each
// is tried up to tries times and must hold once: the regressions they
// catch (always waiting; never waiting, or dropping what arrives) fail
// every try. The third claim (waiting at least maxBatchWait for an
// update that never arrives) cannot be disturbed by load: timers never
// fire early.
func TestGatherWaitsForUpdatesBeingReceived(t *testing.T) {
	const tries = 10
	first := &pending{client: "a"}
	var took []time.Duration
	for range tries {
		c := &Coordinator{queue: make(chan *pending, 8)}
		start := time.Now()
		b := gathered(c, first)
		d := time.Since(start)
		if len(b) != 1 {
			t.Fatalf("nothing being received: a batch of %d", len(b))
		}
		if took = append(took, d); d < maxBatchWait {
			break
		}
	}
	if took[len(took)-1] >= maxBatchWait {
		t.Fatalf("nothing being received, gather waited at least maxBatchWait = %s in each of %d tries: %v", maxBatchWait, tries, took)
	}

	var sizes []int
	for range tries {
		c := &Coordinator{queue: make(chan *pending, 8)}
		c.receiving.Add(1)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			time.Sleep(maxBatchWait / 10)
			c.queue <- &pending{client: "b"}
			c.receiving.Add(-1)
		}()
		b := gathered(c, first)
		<-sent // a late update of this try must not reach the next one
		if sizes = append(sizes, len(b)); len(b) == 2 && b[1].client == "b" {
			break
		}
	}
	if sizes[len(sizes)-1] != 2 {
		t.Fatalf("batches of %v in %d tries, want the update being received taken in once", sizes, tries)
	}

	// One that never arrives holds the batch for maxBatchWait at most.
	c := &Coordinator{queue: make(chan *pending, 8)}
	c.receiving.Add(1)
	start := time.Now()
	if b := gathered(c, first); len(b) != 1 || time.Since(start) < maxBatchWait {
		t.Fatalf("a batch of %d after %s", len(b), time.Since(start))
	}
}

// The ledger cache gives the charges that decoding the stored ledger
// gives, round after round, and never serves a ledger cached under other
// bytes than those stored.
func TestLedgerCacheChargesAsDecoding(t *testing.T) {
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("alice", dp.Budget{Epsilon: 50, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	stored, err := marshalLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.1, Steps: 20}
	cached, fresh := &Coordinator{}, &Coordinator{}
	for round := 1; round <= 4; round++ {
		a, err := cached.charge("alice", stored, meta, 100)
		if err != nil || a.refusal != nil {
			t.Fatal(err, a.refusal)
		}
		b, err := fresh.charge("alice", stored, meta, 100)
		if err != nil || b.refusal != nil {
			t.Fatal(err, b.refusal)
		}
		if a.spent != b.spent || !bytes.Equal(a.ledger, b.ledger) {
			t.Fatalf("round %d: cached charge ε = %g, decoded %g (ledgers equal: %v)", round, a.spent, b.spent, bytes.Equal(a.ledger, b.ledger))
		}
		cached.ledgers.put("alice", a.ledger, a.l) // as fold does after committing
		stored = a.ledger
	}
	// A ledger cached under other bytes (say, a charge whose
	// transaction failed) is not used: the stored bytes are decoded.
	other, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = other.SetBudget("alice", dp.Budget{Epsilon: 1e-3, Delta: 1e-5})
	cached.ledgers.put("alice", []byte(`{"other": true}`), other)
	got, err := cached.ledgers.take("alice", stored)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := got.Budget("alice"); b.Epsilon != 50 {
		t.Fatalf("served the ledger cached under other bytes (budget ε = %g)", b.Epsilon)
	}
}
