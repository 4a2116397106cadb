//go:build unix

package coord_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// updateNeedles returns byte runs of an update as the coordinator could
// store them: four consecutive values as float32 (the payload) and as
// float64 (the running sum of a one-update round, weight 1), taken every
// step values.
func updateNeedles(u []float32, step int) [][]byte {
	var out [][]byte
	for i := 0; i+4 <= len(u); i += step {
		var b32, b64 []byte
		for _, v := range u[i : i+4] {
			b32 = binary.LittleEndian.AppendUint32(b32, math.Float32bits(v))
			b64 = binary.LittleEndian.AppendUint64(b64, math.Float64bits(float64(v)))
		}
		out = append(out, b32, b64)
	}
	return out
}

// findUpdate reads the state file and SQLite's files beside it, raw, as
// an adversary with the disk would, and returns the files in which any
// needle occurs.
func findUpdate(t *testing.T, state string, needles [][]byte) []string {
	t.Helper()
	var found []string
	for _, p := range []string{state, state + "-wal", state + "-journal", state + "-shm"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range needles {
			if bytes.Contains(b, n) {
				found = append(found, filepath.Base(p))
				break
			}
		}
	}
	return found
}

// TestClosedRoundLeavesNoUpdateOnDisk plays an adversary who reads the
// coordinator's files: a round closes with one client's update (its
// running sum is that update), and the state file, its write-ahead log and
// journal must then hold no run of the update's bytes, as float32 or as
// the sum's float64, in live or free pages. While the round was open the
// same scan finds the sum (so the scan can see it). The files are their
// owner's only (0600, the new folder 0700), whatever the umask.
func TestClosedRoundLeavesNoUpdateOnDisk(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	const n = 120000 // a 480 KB payload, a 960 KB sum: overflow pages
	init := wire.Weights{{Name: "w", Shape: []int{300, 400}, Values: make([]float32, n)}, {Name: "b", Shape: []int{2}, Values: []float32{1, 2}}}
	for i := range init[0].Values {
		init[0].Values[i] = float32(i%97)*0.25 + 1
	}
	stateDir := filepath.Join(t.TempDir(), "coordinator")
	state := filepath.Join(stateDir, "state.db")
	o := coord.Options{StatePath: state, Init: init, Strategy: strategy.Options{Name: "fedavg", DP: true},
		Rounds: 1, Fraction: 1, MinAvailable: 2, MinUpdates: 1, RoundTimeout: 4 * time.Second, Task: task, MaxUpdateNorm: 1e9}
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := func(name string) fedpb.CoordinatorClient { return h.api(t, name) }
	a1, a2 := api("client-1"), api("client-2")
	for _, a := range []fedpb.CoordinatorClient{a1, a2} {
		if _, err := a.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: 1, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
			t.Fatal(err)
		}
	}
	var cfg *fedpb.RoundConfig
	for cfg == nil {
		r, err := a1.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		if cfg = r.GetTask(); cfg == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	up := init.Clone()
	for i := range up[0].Values {
		up[0].Values[i] = float32(1e-3*float64((i*7919)%100003) + 3.1e-5)
	}
	hdr := &fedpb.UpdateHeader{ProtocolVersion: 1, Round: cfg.Round, ModelVersion: cfg.ModelVersion, Weights: up.Header(),
		Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}}
	r, err := client.SendUpdate(ctx, a1, hdr, up)
	if err != nil || !r.GetAccepted() {
		t.Fatalf("the update was not accepted: %v %v", r, err)
	}
	needles := updateNeedles(up[0].Values, 1000)
	if found := findUpdate(t, state, needles); len(found) == 0 {
		t.Fatal("while the round is open its running sum is stored, yet the scan finds none of it: the scan is blind")
	}
	// client-2 sends nothing: the round closes at its deadline with one update.
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the round did not close")
	}
	if found := findUpdate(t, state, needles); len(found) > 0 {
		t.Errorf("after the round closed, the update's bytes are still in %v", found)
	}
	fi, err := os.Stat(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o700 {
		t.Errorf("the state folder has mode %o, want 700", m)
	}
	for _, p := range []string{state, state + "-wal", state + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s has mode %o, want 600", filepath.Base(p), m)
		}
	}
	// And once the coordinator has closed the file.
	h.stop()
	if found := findUpdate(t, state, needles); len(found) > 0 {
		t.Errorf("after the coordinator closed, the update's bytes are still in %v", found)
	}
}
