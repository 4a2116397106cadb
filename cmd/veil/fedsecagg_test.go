package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/nn/checkpoint"
)

// TestMaskingCoordinatorSurvivesSIGKILL runs the built veil binary as a
// coordinator with --secagg masking and three clients that require
// secure aggregation, kills the coordinator with SIGKILL while a round
// holds some masked vectors and waits for others, restarts it on the same
// state file and port, and checks that every round is done with each
// client counted once, and that the final model is the initial one plus
// exactly the mean of the clients' fixed updates per round: no accepted
// vector lost, none counted or unmasked twice (an unmasked sum missing a
// client, or holding one twice, or a mask left in, would move the model
// elsewhere).
func TestMaskingCoordinatorSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	f := newCrashFed(ps)
	names, initCk, state, outPath := f.names, f.initCk, f.state, f.outPath
	const rounds = 2
	coordArgs := f.coordArgs(rounds, "--secagg", "masking", "--secagg-phase", "30s")
	co := ps.start("coordinator-1", coordArgs...)
	clients := f.startClients(2*time.Second, "--require-secagg")
	ps.killInOpenRound(co, state, 3)
	if err := ps.wait(co, patience); err == nil {
		t.Fatal("the killed coordinator exited 0")
	}
	time.Sleep(2500 * time.Millisecond)
	co2 := ps.start("coordinator-2", coordArgs...)
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s", names[i], err, ps.log(c))
		}
	}
	if err := ps.wait(co2, patience); err != nil {
		t.Fatalf("restarted coordinator: %v\n%s", err, ps.log(co2))
	}
	if !strings.Contains(ps.log(co2), "continuing the open round") {
		t.Errorf("the restarted coordinator did not continue the round; its log:\n%s", ps.log(co2))
	}
	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", state, "--json"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != rounds {
		t.Fatalf("%d rounds in the log, want %d: %+v", len(st.Rounds), rounds, st.Rounds)
	}
	for i, r := range st.Rounds {
		if r.Round != uint64(i+1) || r.State != "done" || r.Updates != 3 {
			t.Errorf("round %+v, want round %d done with 3 updates", r, i+1)
		}
	}
	if t.Failed() {
		for _, p := range append(clients, co, co2) {
			t.Logf("%s:\n%s", p.name, ps.log(p))
		}
	}
	for _, c := range st.Clients {
		if c.Updates != rounds {
			t.Errorf("%s counted %d times, want %d", c.ID, c.Updates, rounds)
		}
	}
	// The quantisation's lattice step for clip 100 and 3 clients is
	// about 1e-8: the mean (0.01 + 0.02 + 0.06)/3 = 0.03 per round at
	// η = 1, within 1e-5.
	final, err := checkpoint.Load(outPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range initCk.Values {
		for j, v := range initCk.Values[i] {
			if got, want := float64(final.Values[i][j]), float64(v)+rounds*0.03; math.Abs(got-want) > 1e-5 {
				t.Fatalf("final %s[%d] = %g, want %g", initCk.Header.Params[i].Name, j, got, want)
			}
		}
	}
}
