package main

import (
	"strconv"
	"testing"
)

// TestDefaultCoordinatorMasks runs the built veil binary as a coordinator
// given only its files, address, round count and --server-lr 1 (so that
// the model moves by the plain mean; no --secagg, no
// --min-available: DP is on by default, so masking is too, and rounds wait
// for 3 clients) and three clients that require secure aggregation (each
// refuses a round that would send its update in plaintext). The round
// completes with all three, and the model moves by exactly the mean of
// their fixed updates: the coordinator unmasked their sum.
func TestDefaultCoordinatorMasks(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	f := newCrashFed(ps)
	const rounds = 1
	co := ps.start("coordinator", "fed", "coordinator", "--state", f.state, "--pki", f.pkiDir, "--listen", f.addr, "--init", f.initPath,
		"--out", f.outPath, "--rounds", strconv.Itoa(rounds), "--server-lr", "1", "--json")
	clients := f.startClients(0, "--require-secagg")
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s\ncoordinator:\n%s", f.names[i], err, ps.log(c), ps.log(co))
		}
	}
	if err := ps.wait(co, patience); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, ps.log(co))
	}
	f.checkRounds(rounds)
	// The quantisation's lattice step for --max-update-norm 100 and 3
	// clients is about 1e-8.
	f.checkFinal(rounds, 1e-5)
}
