package main

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/nn/checkpoint"
)

// TestDPHECoordinatorSurvivesSIGKILL runs the built veil binary as a key
// generator (its own process, a 2048-bit key), a coordinator with
// --secagg dphe and three clients trusting the key generator, kills the
// coordinator with SIGKILL while a round holds some clients' encrypted
// contributions and waits for the others, restarts it on the same state
// file and port, and checks that: both rounds are done with every client
// counted once per round; the key generator decrypted each round once
// (its log: one "round decrypted" per round, no refusal, the restarted
// coordinator never asked twice); the final model is the initial one
// plus exactly the mean of the clients' fixed updates per round, within
// the release's noise (σ·C = 1e-4 per value) and fixed point, so no accepted
// contribution was lost or counted twice; and each client's own ledger
// holds one DPHE charge per round, as much as the coordinator's copy.
func TestDPHECoordinatorSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	f := newCrashFed(ps)
	ps.run("fed", "certs", "issue", "keygen", "--role", "coordinator", "--pki", f.pkiDir)
	kg, kgAddr := startKeygenWith(t, ps, "keygen", f.pkiDir, filepath.Join(dir, "keygen-state"))
	const rounds = 2
	// Every block is sent (selection ε 1e6, threshold 0: every non-zero
	// block passes), unclipped (clip 10 above the updates' norms, at most
	// 0.06·√1350 = 2.2) with noise σ·C = 1e-4 per value.
	coordArgs := f.coordArgs(rounds, "--dp", "--secagg", "dphe", "--keygen", kgAddr, "--keygen-name", "keygen", "--clip", "10", "--noise-multiplier", "1e-5",
		"--dphe-count", "1000", "--dphe-selection-epsilon", "1e6", "--dphe-threshold", "0")
	co := ps.start("coordinator-1", coordArgs...)
	clients := make([]*proc, len(f.names))
	for i, n := range f.names {
		clients[i] = ps.start(n, "fed", "client", "--coordinator", f.addr, "--pki", f.pkiDir, "--name", n, "--budget-epsilon", "1e15",
			"--budget-delta", "1e-5", "--min-noise-multiplier", "0", "--max-clip", "10", "--keygen-name", "keygen", "--dir", filepath.Join(dir, n),
			"--ledger-dir", filepath.Join(dir, n+"-ledgers"), "--trainer", "fixed", "--fixed-delta", fmt.Sprint(crashDeltas[i]),
			"--train-delay", fmt.Sprint(time.Duration(i)*3*time.Second), "--retry-for", patience.String(), "--json")
	}
	co2 := f.killAndRestart(co, clients, coordArgs)
	defer func() {
		if t.Failed() {
			for _, p := range append(clients, kg, co, co2) {
				t.Logf("%s:\n%s", p.name, ps.log(p))
			}
		}
	}()
	if !strings.Contains(ps.log(co2), "continuing the open round") {
		t.Errorf("the restarted coordinator did not continue the round")
	}
	klog := ps.log(kg)
	if n := strings.Count(klog, "round decrypted"); n != rounds || strings.Contains(klog, "decryption refused") {
		t.Errorf("the key generator decrypted %d times (want %d, one per round, none refused)", n, rounds)
	}
	st := f.checkRounds(rounds)
	// The release's noise on the mean is about 6e-5 per value and round.
	f.checkFinal(rounds, 1e-3)
	for _, c := range st.Clients {
		charges, own := clientDPHECharges(ps, filepath.Join(dir, c.ID+"-ledgers"))
		if charges != rounds || math.Abs(own-c.Epsilon) > 1e-9*own {
			t.Errorf("%s: %d DPHE charges spending ε = %g in its own ledger, ε = %g in the coordinator's copy; want %d, equal", c.ID, charges, own, c.Epsilon, rounds)
		}
	}
}

// clientDPHECharges reads a client's ledger folder with veil privacy
// ledger show: its DPHE charges and the worst ε its people spent.
func clientDPHECharges(ps *procs, dir string) (int, float64) {
	ps.t.Helper()
	var out struct {
		Ledgers []struct {
			WorstEpsilon float64 `json:"worst_epsilon"`
			History      []struct {
				Note string `json:"note"`
			} `json:"history"`
		} `json:"ledgers"`
	}
	if err := json.Unmarshal(ps.run("privacy", "ledger", "show", "--ledger-dir", dir, "--json"), &out); err != nil || len(out.Ledgers) != 1 {
		ps.t.Fatalf("%s: %d ledgers (%v)", dir, len(out.Ledgers), err)
	}
	n := 0
	for _, h := range out.Ledgers[0].History {
		if strings.Contains(h.Note, "DPHE round") {
			n++
		}
	}
	return n, out.Ledgers[0].WorstEpsilon
}

// killAndRestart kills the coordinator co with SIGKILL once a round holds
// some but not all of its three updates, starts it again with args, and
// waits for the clients and the restarted coordinator to finish; it
// returns the restarted coordinator.
func (f *crashFed) killAndRestart(co *proc, clients []*proc, args []string) *proc {
	ps := f.ps
	ps.t.Helper()
	ps.killInOpenRound(co, f.state, 3)
	if err := ps.wait(co, patience); err == nil {
		ps.t.Fatal("the killed coordinator exited 0")
	}
	time.Sleep(2500 * time.Millisecond)
	co2 := ps.start("coordinator-2", args...)
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			ps.t.Fatalf("%s: %v\n%s", f.names[i], err, ps.log(c))
		}
	}
	if err := ps.wait(co2, patience); err != nil {
		ps.t.Fatalf("restarted coordinator: %v\n%s", err, ps.log(co2))
	}
	return co2
}

// checkRounds reads veil fed status: rounds rounds, each done with the
// three clients' updates, each client counted once per round.
func (f *crashFed) checkRounds(rounds int) statusJSON {
	ps := f.ps
	ps.t.Helper()
	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", f.state, "--json"), &st); err != nil {
		ps.t.Fatal(err)
	}
	if len(st.Rounds) != rounds {
		ps.t.Fatalf("%d rounds in the log, want %d: %+v", len(st.Rounds), rounds, st.Rounds)
	}
	for i, r := range st.Rounds {
		if r.Round != uint64(i+1) || r.State != "done" || r.Updates != 3 {
			ps.t.Errorf("round %+v, want round %d done with 3 updates", r, i+1)
		}
	}
	for _, c := range st.Clients {
		if c.Updates != uint64(rounds) {
			ps.t.Errorf("%s counted %d times, want %d", c.ID, c.Updates, rounds)
		}
	}
	return st
}

// checkFinal checks that the final model is the initial one plus the
// mean of the clients' fixed updates, (0.01 + 0.02 + 0.06)/3 = 0.03 per
// round at η = 1, within tol: an update lost or counted twice moves a
// value by 0.01/3 or more per round.
func (f *crashFed) checkFinal(rounds int, tol float64) {
	ps := f.ps
	ps.t.Helper()
	final, err := checkpoint.Load(f.outPath)
	if err != nil {
		ps.t.Fatal(err)
	}
	for i := range f.initCk.Values {
		for j, v := range f.initCk.Values[i] {
			if got, want := float64(final.Values[i][j]), float64(v)+float64(rounds)*0.03; math.Abs(got-want) > tol {
				ps.t.Fatalf("final %s[%d] = %g, want %g ± %g", f.initCk.Header.Params[i].Name, j, got, want, tol)
			}
		}
	}
}
