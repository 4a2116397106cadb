package main

import (
	"encoding/json"
	"math"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/nn/checkpoint"
)

// ddpFed is a crashFed run as distributed DP-SGD: the coordinator with
// --ddp (SGD at learning rate 1 on the released sum over the expected
// batch of 10, no weight decay, the weights' moving average written by
// --out), three veil fed client processes whose fixed trainer's clipped
// gradient sum is crashDeltas[i] in every coordinate, and veil fed
// init-model's head. The budgets are so large (ε = 10^6 for the plan;
// each client's half as much again, since a client whose advert could not
// reach a killed coordinator charges that round again when the restarted
// one pushes it: its own ledger over-counts, never under-counts) that the
// noise
// is about 10^-4 per coordinate and step, which averages out over the
// head's 557,824 values: the mean of the final model's displacement is
// the clients' sum, 0.09 per round, over the batch, within 2·10^-5.
type ddpFed struct {
	*crashFed
	rounds int
}

func newDDPFed(ps *procs, rounds int) *ddpFed {
	ps.t.Helper()
	f := newCrashFed(ps)
	ps.run("fed", "init-model", "--out", f.initPath, "--force")
	var err error
	if f.initCk, err = checkpoint.Load(f.initPath); err != nil {
		ps.t.Fatal(err)
	}
	return &ddpFed{crashFed: f, rounds: rounds}
}

func (f *ddpFed) coordArgs() []string {
	return []string{"fed", "coordinator", "--state", f.state, "--pki", f.pkiDir, "--listen", f.addr, "--init", f.initPath, "--out", f.outPath,
		"--rounds", strconv.Itoa(f.rounds), "--min-available", "3", "--min-updates", "3", "--fraction", "1", "--deadline", patience.String(),
		"--clip", "1", "--delta", "1e-5", "--linger", patience.String(), "--json", "--secagg-phase", "30s", "--secagg-min-honest", "3",
		"--ddp", "--ddp-people", "100", "--batch", "10", "--ddp-epsilon", "1e6", "--ddp-optimizer", "sgd", "--ddp-lr", "1", "--ddp-weight-decay", "0"}
}

func (f *ddpFed) startClients(delay time.Duration) []*proc {
	return f.crashFed.startClients(delay, "--require-secagg", "--secagg-min-honest", "3", "--ddp-rounds", strconv.Itoa(f.rounds),
		"--budget-epsilon", "1.5e6")
}

// check checks the state's rounds and ledgers and the final model: every
// round done with the three clients, each counted once per round and
// charged in the coordinator's copy (the same ε for all), and the mean
// displacement of the written moving average what veil train's average
// of SGD steps of exactly the three clients' sum gives.
func (f *ddpFed) check() {
	ps := f.ps
	t := ps.t
	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", f.state, "--json"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != f.rounds {
		t.Fatalf("%d rounds in the log, want %d: %+v", len(st.Rounds), f.rounds, st.Rounds)
	}
	for i, r := range st.Rounds {
		if r.Round != uint64(i+1) || r.State != "done" || r.Updates != 3 {
			t.Errorf("round %+v, want round %d done with 3 updates", r, i+1)
		}
	}
	for _, c := range st.Clients {
		if c.Updates != uint64(f.rounds) || !(c.Epsilon > 0) || c.Epsilon != st.Clients[0].Epsilon {
			t.Errorf("%s: %d updates, ε = %g in the coordinator's copy; want %d, the same ε > 0 for all", c.ID, c.Updates, c.Epsilon, f.rounds)
		}
	}
	final, err := checkpoint.Load(f.outPath)
	if err != nil {
		t.Fatal(err)
	}
	// SGD: the weights move by s = 0.09/10 per round; veil train's
	// moving average after step k is d·e + (1−d)·w with
	// d = min(0.95, (1+k)/(10+k)).
	s := (crashDeltas[0] + crashDeltas[1] + crashDeltas[2]) / 10
	var e float64
	for k := 1; k <= f.rounds; k++ {
		d := math.Min(0.95, float64(1+k)/float64(10+k))
		e = d*e + (1-d)*(-float64(k)*s)
	}
	var sum float64
	var n int
	for i := range f.initCk.Values {
		for j, v := range f.initCk.Values[i] {
			sum += float64(final.Values[i][j]) - float64(v)
			n++
		}
	}
	if got := sum / float64(n); math.Abs(got-e) > 2e-5 {
		t.Fatalf("the final moving average moved by %g on average, want %g (the three clients' sum in every round, steps continued exactly)", got, e)
	}
	p := final.Header.Privacy
	if p.Unit != "identity" || !(p.Epsilon > 0) || p.NoiseMultiplier == 1 || !(p.NoiseMultiplier > 0) || p.NonPrivateSteps != 0 {
		t.Errorf("the final model's privacy record %+v", p)
	}
}

// TestDistributedCoordinator runs veil fed coordinator --ddp and three
// veil fed client processes over mutual TLS for two rounds of distributed
// DP-SGD: every round is unmasked from the three clients, the server's
// steps move the model by exactly their sum (ddpFed.check), each client is
// charged in the coordinator's copy, and the final model's record is a
// DP record with the mechanism's σ_eff.
func TestDistributedCoordinator(t *testing.T) {
	bin := buildVeil(t)
	ps := &procs{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(ps.killAll)
	f := newDDPFed(ps, 2)
	co := ps.start("coordinator", f.coordArgs()...)
	clients := f.startClients(0)
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s", f.names[i], err, ps.log(c))
		}
	}
	if err := ps.wait(co, patience); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, ps.log(co))
	}
	f.check()
	if t.Failed() {
		for _, p := range append(clients, co) {
			t.Logf("%s:\n%s", p.name, ps.log(p))
		}
	}
}

// TestDistributedCoordinatorSurvivesSIGKILL kills veil fed coordinator
// --ddp with SIGKILL once a round has closed and the next is under way,
// restarts it on the same state file and port, and checks that the run
// ends as an uninterrupted one would (ddpFed.check): the moving average's
// step count and values, stored with the closed round's model, continue
// exactly (restarting them would move the average's mean by about 10^-3,
// fifty times the tolerance), and no round counts a client twice or
// misses one.
func TestDistributedCoordinatorSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	ps := &procs{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(ps.killAll)
	f := newDDPFed(ps, 3)
	co := ps.start("coordinator-1", f.coordArgs()...)
	clients := f.startClients(time.Second)
	ps.killAfterDone(co, f.state, 1)
	if err := ps.wait(co, patience); err == nil {
		t.Fatal("the killed coordinator exited 0")
	}
	time.Sleep(2500 * time.Millisecond)
	co2 := ps.start("coordinator-2", f.coordArgs()...)
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s", f.names[i], err, ps.log(c))
		}
	}
	if err := ps.wait(co2, patience); err != nil {
		t.Fatalf("restarted coordinator: %v\n%s", err, ps.log(co2))
	}
	f.check()
	if t.Failed() {
		for _, p := range append(clients, co, co2) {
			t.Logf("%s:\n%s", p.name, ps.log(p))
		}
	}
}

// killAfterDone polls veil fed status --json until n rounds of the
// coordinator co are done and another is open, then kills co with
// SIGKILL.
func (ps *procs) killAfterDone(co *proc, state string, n int) {
	ps.t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			ps.t.Fatalf("%d rounds were not seen done; coordinator log:\n%s", n, ps.log(co))
		}
		select {
		case <-co.done:
			ps.t.Fatalf("the coordinator exited before the kill: %v\n%s", co.err, ps.log(co))
		default:
		}
		var st statusJSON
		if out, err := exec.Command(ps.bin, "fed", "status", "--state", state, "--json").Output(); err != nil || json.Unmarshal(out, &st) != nil {
			continue
		}
		done, open := 0, false
		for _, r := range st.Rounds {
			done += map[bool]int{true: 1}[r.State == "done"]
			open = open || r.State == "open"
		}
		if done >= n && open {
			if err := syscall.Kill(co.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				ps.t.Fatal(err)
			}
			ps.t.Logf("killed the coordinator with %d rounds done and the next open", done)
			return
		}
	}
}
