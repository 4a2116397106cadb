package coord_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// heldTrainer trains as vecTrainer, after started is closed, waiting
// for release.
type heldTrainer struct {
	vecTrainer
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldTrainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	h.once.Do(func() { close(h.started) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return client.Update{}, ctx.Err()
	}
	return h.vecTrainer.Train(ctx, model, task, plan)
}

// TestMaskingRoundSurvivesARestart stops the coordinator in the middle
// of a masking round, with three masked vectors stored and the fourth
// client still training, and starts a new one on the same state file and
// address. The clients reconnect; the new coordinator replays the stored
// adverts, shares and vectors, and the round finishes: the unmasked sum
// is exactly the sum of the four quantised vectors, each client is
// counted and charged once, and the stored messages are gone.
func TestMaskingRoundSurvivesARestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	state := filepath.Join(t.TempDir(), "state.db")
	o := secOptions(t, dir, state, 1)
	o.RoundTimeout, o.SecAgg.PhaseTimeout = 40*time.Second, 6*time.Second
	var mu sync.Mutex
	var sums [][]uint32
	onSum := func(c *coord.Coordinator) {
		coord.OnSecureSum(c, func(_ uint64, s []uint32) { mu.Lock(); sums = append(sums, s); mu.Unlock() })
	}
	h := startHarnessOpts(t, o, dir, "127.0.0.1:0", onSum, nil)
	held := &heldTrainer{vecTrainer: vecTrainer{base: 4}, started: make(chan struct{}), release: make(chan struct{})}
	var inputs sync.Map
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i, name := range secNames {
		var tr client.Trainer = vecTrainer{base: float32(i + 1)}
		if name == "client-4" {
			tr = held
		}
		c := secClient(t, h, name, tr, nil, &inputs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	<-held.started
	// Wait until the three others' vectors are stored.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, n, _, _ := roundRow(t, state, "client-1"); n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the three vectors were not stored")
		}
	}
	h.stop()
	h2 := startHarnessOpts(t, o, dir, h.addr, onSum, nil)
	close(held.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-h2.done; err != nil {
		t.Fatal(err)
	}
	st, updates, reason, _ := roundRow(t, state, "client-1")
	if st != "done" || updates != 4 {
		t.Fatalf("round 1: %s with %d updates (%s)", st, updates, reason)
	}
	var want []uint32
	for _, name := range secNames {
		x, ok := inputs.Load(name)
		if !ok {
			t.Fatalf("%s quantised nothing", name)
		}
		if want == nil {
			want = make([]uint32, len(x.([]uint32)))
		}
		for i, v := range x.([]uint32) {
			want[i] += v
		}
	}
	if len(sums) != 1 || !slices.Equal(sums[0], want) {
		t.Fatalf("%d sums unmasked; want one, the four quantised vectors' sum", len(sums))
	}
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Clients {
		if c.Updates != 1 {
			t.Errorf("client %s counted %d times", c.Id, c.Updates)
		}
	}
	var left int
	if err := db.QueryRow(`SELECT COUNT(*) FROM secagg`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d stored messages left after the round (%v)", left, err)
	}
}
