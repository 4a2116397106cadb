package coord

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// runsOf returns byte runs of v as the state file could hold them: four
// consecutive values as float32 and as float64, every step values.
func runsOf(v []float64, step int) [][]byte {
	var out [][]byte
	for i := 0; i+4 <= len(v); i += step {
		var b32, b64 []byte
		for _, x := range v[i : i+4] {
			b32 = binary.LittleEndian.AppendUint32(b32, math.Float32bits(float32(x)))
			b64 = binary.LittleEndian.AppendUint64(b64, math.Float64bits(x))
		}
		out = append(out, b32, b64)
	}
	return out
}

// filesHolding returns the state file and SQLite's files beside it that
// hold any of runs, read raw as an adversary with the disk would.
func filesHolding(t *testing.T, state string, runs [][]byte) []string {
	t.Helper()
	var found []string
	for _, p := range []string{state, state + "-wal", state + "-journal"} {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if bytes.Contains(b, r) {
				found = append(found, filepath.Base(p))
				break
			}
		}
	}
	return found
}

// TestNoSumOrUpdateOnDiskAfterTheClose plays an adversary who reads the
// coordinator's files after a round closed, for the two ways a round
// closes in a fold: all its updates in one batch (no running sum is ever
// written, and the write-ahead log is not emptied after the close), and
// a first batch that stored the running sum (its one update) before the
// last closed the round (the log is emptied). Neither update, nor any
// running sum, as float32 or float64, may be found in the state file or
// its log; while the second round was open, the same scan found its
// stored sum, so the scan sees what is there.
func TestNoSumOrUpdateOnDiskAfterTheClose(t *testing.T) {
	const n = 40000
	init := wire.Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
	for i := range init[0].Values {
		init[0].Values[i] = float32(i%89)*0.5 + 1
	}
	state := filepath.Join(t.TempDir(), "state.db")
	c := enrolled(t, Options{StatePath: state, Init: init, Strategy: strategy.Options{Name: "fedavg"},
		Rounds: 2, Fraction: 1, MinAvailable: 2, MinUpdates: 2, RoundTimeout: time.Hour, MaxUpdateNorm: 1e9,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}}, false, "alice", "bob")
	ctx := context.Background()
	update := func(seed int) (wire.Weights, []float64) {
		u := init.Clone()
		f := make([]float64, n)
		for i := range u[0].Values {
			u[0].Values[i] = float32(1e-3*float64((i*7919+seed)%100003) + 3.1e-5)
			f[i] = float64(u[0].Values[i])
		}
		return u, f
	}
	for round, batches := range [][]int{{2}, {1, 1}} {
		if err := c.startRound(ctx, []string{"alice", "bob"}); err != nil {
			t.Fatal(err)
		}
		_, v := c.Model()
		var secrets [][]byte
		sum := make([]float64, n)
		next := 0
		for k, size := range batches {
			var ps []*pending
			for _, who := range []string{"alice", "bob"}[next : next+size] {
				u, f := update(100*round + next)
				secrets = append(secrets, runsOf(f, 997)...)
				for i := range sum {
					sum[i] += f[i]
				}
				ps = append(ps, &pending{client: who, round: c.round.n, version: v, update: u, examples: 1, bytes: 4 * n, reply: make(chan result, 1)})
				next++
			}
			c.fold(ctx, ps)
			for _, p := range ps {
				if res := <-p.reply; res.err != nil {
					t.Fatal(res.err)
				}
			}
			if k == 0 && len(batches) > 1 {
				if found := filesHolding(t, state, runsOf(sum, 997)); len(found) == 0 {
					t.Fatal("while the round is open its stored running sum is not found: the scan is blind")
				}
			}
		}
		if open, done := c.Round(); open != 0 || done != round+1 {
			t.Fatalf("round %d: still open after both updates (%d closed)", round+1, done)
		}
		secrets = append(secrets, runsOf(sum, 997)...)
		if found := filesHolding(t, state, secrets); len(found) > 0 {
			t.Fatalf("round %d (batches %v): after the close an update or a running sum is still in %v", round+1, batches, found)
		}
	}
}
