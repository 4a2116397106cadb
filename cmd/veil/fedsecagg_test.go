package main

import (
	"strings"
	"testing"
	"time"
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
	const rounds = 2
	coordArgs := f.coordArgs(rounds, "--secagg", "masking", "--secagg-phase", "30s")
	co := ps.start("coordinator-1", coordArgs...)
	clients := f.startClients(2*time.Second, "--require-secagg")
	co2 := f.killAndRestart(co, clients, coordArgs)
	if !strings.Contains(ps.log(co2), "continuing the open round") {
		t.Errorf("the restarted coordinator did not continue the round; its log:\n%s", ps.log(co2))
	}
	f.checkRounds(rounds)
	if t.Failed() {
		for _, p := range append(clients, co, co2) {
			t.Logf("%s:\n%s", p.name, ps.log(p))
		}
	}
	// The quantisation's lattice step for clip 100 and 3 clients is
	// about 1e-8.
	f.checkFinal(rounds, 1e-5)
}
