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

// stored counts the secure round messages of a kind in the state file.
func stored(t *testing.T, state, kind string) int {
	t.Helper()
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM secagg WHERE kind = ?`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMaskingRoundSurvivesARestart stops the coordinator in the middle
// of a masking round and starts a new one on the same state file and
// address: once with three masked vectors stored and the fourth client
// still training, once with three unmasking answers stored and the
// fourth client holding its answer back. The clients reconnect; the new
// coordinator replays the stored adverts, shares, vectors and answers,
// and the round finishes: one sum is unmasked over both processes, and it
// is exactly the sum of the four quantised vectors; each client is
// counted and charged once, and the stored messages are gone. The same
// holds for a FedBuff buffer under masking (a masking round).
func TestMaskingRoundSurvivesARestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold is the phase client-4 is held before (3: training, 4:
		// answering the unmasking request); kind and n what must be
		// stored before the stop.
		hold int
		kind string
		// fedbuff runs the round as a FedBuff buffer under masking.
		fedbuff bool
	}{
		{"masked vectors", 3, "masked", false},
		{"unmasking answers", 4, "unmask", false},
		{"FedBuff buffer, masked vectors", 3, "masked", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			testCA(t, dir)
			state := filepath.Join(t.TempDir(), "state.db")
			o := secOptions(t, dir, state, 1)
			o.RoundTimeout, o.SecAgg.PhaseTimeout = 40*time.Second, 6*time.Second
			if tc.fedbuff {
				o.Async = &coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 4}
			}
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
				var hold func(uint64, int) bool
				if name == "client-4" {
					if tc.hold == 3 {
						tr = held
					} else {
						hold = func(_ uint64, phase int) bool {
							if phase == 4 {
								held.once.Do(func() { close(held.started) })
								<-held.release
							}
							return false
						}
					}
				}
				c := secClient(t, h, name, tr, hold, &inputs)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := c.Run(ctx); err != nil {
						errs <- err
					}
				}()
			}
			<-held.started
			for deadline := time.Now().Add(20 * time.Second); stored(t, state, tc.kind) < 3; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("three %s messages were not stored", tc.kind)
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
			if len(sums) != 1 || !slices.Equal(sums[0], sumOf(t, &inputs, secNames)) {
				t.Fatalf("%d sums unmasked; want one, the four quantised vectors' sum", len(sums))
			}
			for _, c := range readStatus(t, state).Clients {
				if c.Updates != 1 {
					t.Errorf("client %s counted %d times", c.Id, c.Updates)
				}
			}
			for _, kind := range []string{"cert", "advert", "shares", "masked", "unmask"} {
				if n := stored(t, state, kind); n != 0 {
					t.Fatalf("%d stored %s messages left after the round", n, kind)
				}
			}
		})
	}
}
