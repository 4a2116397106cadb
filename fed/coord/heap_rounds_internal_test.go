package coord

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
)

// liveHeap is the heap in use after two full collections (the second
// frees what the first's sync.Pool victim cache still held).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHeapFlatOverRounds is the guard against a coordinator that keeps
// something of every closed round in memory (its sum, its updates, its
// encoded model, a buffer not given back): it runs 25 fedavg rounds of 8
// head-sized updates (557,824 values, 2.2 MB each) and requires the live
// heap after round 25 to be within 8 MiB of that after round 5. Holding one
// model-sized array per round would add 20 × 2.1 MiB = 43 MiB. (The peak
// resident set veil bench fed reports grows with the rounds for another
// reason, the collector's pacing: see docs/results.md.)
func TestHeapFlatOverRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("25 rounds of head-sized updates")
	}
	const clients, rounds, early, tolerance = 8, 25, 5, 8 << 20
	model := headLayout()
	dpp := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1}
	meta := &fedpb.DPParams{Clip: 1, Delta: 1e-5, PrivacyUnit: "identity", NoiseMultiplier: 1, SamplingRate: 0.05, Steps: 20}
	o := Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: rounds + 1, Fraction: 1, MinAvailable: clients, MinUpdates: clients, RoundTimeout: time.Hour, MaxUpdateNorm: 1e9,
		Task: Task{LocalEpochs: 1, LearningRate: 0.01, Batch: 32, DP: dpp}}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%02d", i)
		if _, err := c.enrol(ctx, ids[i], 1e9, 1e-5, "identity"); err != nil {
			t.Fatal(err)
		}
	}
	var atEarly uint64
	for r := 1; r <= rounds; r++ {
		if err := c.startRound(ctx, ids); err != nil {
			t.Fatal(err)
		}
		_, v := c.Model()
		n, _ := c.Round()
		ps := make([]*pending, clients)
		for i, id := range ids {
			// A fresh update per client and round, as the server decodes one.
			update := model.Clone()
			for k := range update {
				for j := range update[k].Values {
					update[k].Values[j] *= 1e-3 * float32(r%7+1)
				}
			}
			ps[i] = &pending{client: id, round: n, version: v, update: update, dp: meta, examples: 100, bytes: 4 * model.Len(), reply: make(chan result, 1)}
		}
		c.fold(ctx, ps)
		for i, p := range ps {
			if res := <-p.reply; res.err != nil {
				t.Fatalf("round %d, update %d: %v", r, i, res.err)
			}
		}
		if open, _ := c.Round(); open != 0 {
			t.Fatalf("round %d is still open after its last update", open)
		}
		switch r {
		case early:
			atEarly = liveHeap()
		case rounds:
			late := liveHeap()
			t.Logf("live heap after round %d: %.1f MiB; after round %d: %.1f MiB", early, float64(atEarly)/(1<<20), rounds, float64(late)/(1<<20))
			if late > atEarly+tolerance {
				t.Errorf("the live heap grew by %.1f MiB from round %d to %d (tolerance %d MiB): something of each closed round is kept",
					float64(late-atEarly)/(1<<20), early, rounds, tolerance>>20)
			}
		}
	}
}
