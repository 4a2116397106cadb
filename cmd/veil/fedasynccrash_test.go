package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// killAfterExchanges kills the coordinator co (state file state) with
// SIGKILL once it has accepted an odd number of exchanges, at least least,
// and each of three clients has one accepted (killWhen).
func (ps *procs) killAfterExchanges(co *proc, state string, least uint64) {
	ps.t.Helper()
	ps.killWhen(co, state, func(st statusJSON) bool {
		var n uint64
		all := len(st.Clients) == 3
		for _, c := range st.Clients {
			n += c.Updates
			all = all && c.Updates > 0
		}
		// An odd count leaves an update in FedBuff's buffer (K = 2):
		// the kill then also tests that the buffer survives.
		return n >= least && all && n%2 == 1
	})
}

// storedExchanges returns the number of exchanges in a coordinator's
// state file.
func storedExchanges(t *testing.T, state string) int {
	t.Helper()
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM async_exchanges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAsyncCoordinatorSurvivesSIGKILL runs the built veil binary as a
// FedBuff coordinator (K = 2) and three clients training at different
// speeds, kills the coordinator with SIGKILL once it has accepted a few
// exchanges and holds one in its buffer, restarts it on the same state file and port, and checks that
// no exchange a client was told was accepted is lost, none is counted
// twice, and the final model is the initial one plus exactly the
// staleness-weighted buffers of the exchanges the state records.
func TestAsyncCoordinatorSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	f := newCrashFed(ps)
	const versions, k = 20, 2
	args := f.coordArgs(versions, "--strategy", "fedbuff", "--fedbuff-size", strconv.Itoa(k), "--max-staleness", "1000",
		"--secagg", "off") // K = 2 cannot be masked (masking, the default under --dp, needs K ≥ 3)
	co := ps.start("coordinator-1", args...)
	// Every client trains for a while (200, 400 and 600 ms an exchange),
	// so all three take part before the kill and after it.
	clients := make([]*proc, len(f.names))
	for i, n := range f.names {
		clients[i] = ps.start(n, "fed", "client", "--coordinator", f.addr, "--pki", f.pkiDir, "--name", n, "--budget-epsilon", "1000",
			"--budget-delta", "1e-5", "--dir", filepath.Join(dir, n), "--ledger-dir", filepath.Join(dir, n+"-ledgers"), "--trainer", "fixed",
			"--fixed-delta", fmt.Sprint(crashDeltas[i]), "--train-delay", fmt.Sprint(time.Duration(i+1)*200*time.Millisecond), "--retry-for", patience.String())
	}
	// Killed until one kill finds an update waiting in the buffer (an odd
	// number of exchanges stored: K = 2), at most five times.
	var co2 *proc
	for kill := 1; ; kill++ {
		ps.killAfterExchanges(co, f.state, uint64(6*kill))
		if err := ps.wait(co, patience); err == nil {
			t.Fatal("the killed coordinator exited 0")
		}
		stored := storedExchanges(t, f.state)
		time.Sleep(500 * time.Millisecond)
		co2 = ps.start(fmt.Sprintf("coordinator-%d", kill+1), args...)
		if stored%2 == 1 {
			t.Logf("kill %d left exchange %d in the buffer", kill, stored)
			break
		}
		if kill == 5 {
			t.Fatalf("five kills found no update in the buffer (last: %d exchanges stored)", stored)
		}
		co = co2
	}
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s\nthe restarted coordinator's log:\n%s", f.names[i], err, ps.log(c), ps.log(co2))
		}
	}
	if err := ps.wait(co2, patience); err != nil {
		t.Fatalf("restarted coordinator: %v\n%s", err, ps.log(co2))
	}

	db, err := coord.OpenStatus(f.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	type row struct {
		client string
		weight float64
	}
	stored := map[uint64]row{}
	perClient := map[string]uint64{}
	rows, err := db.QueryContext(ctx, `SELECT ticket, client, weight FROM async_exchanges`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n uint64
		var r row
		if err := rows.Scan(&n, &r.client, &r.weight); err != nil {
			t.Fatal(err)
		}
		stored[n] = r
		perClient[r.client]++
	}
	rows.Close()
	var buffered int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM async_buffer`).Scan(&buffered); err != nil {
		t.Fatal(err)
	}
	if buffered != 0 || len(stored) != versions*k {
		t.Fatalf("%d exchanges stored and %d buffers left, want %d and 0", len(stored), buffered, versions*k)
	}
	// Every exchange a client was told was accepted is in the state, as
	// that client's.
	accepted := regexp.MustCompile(`exchange (\d+): update accepted`)
	told := 0
	for _, n := range f.names {
		for _, m := range accepted.FindAllStringSubmatch(ps.log(&proc{name: n}), -1) {
			x, _ := strconv.ParseUint(m[1], 10, 64)
			if r, ok := stored[x]; !ok || r.client != n {
				t.Errorf("%s was told exchange %d was accepted; the state has %+v", n, x, r)
			}
			told++
		}
	}
	if told == 0 {
		t.Fatal("no client reported an accepted exchange")
	}
	// The coordinator's count per client is the exchanges it stored.
	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", f.state, "--json"), &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Clients {
		if c.Updates != perClient[c.ID] {
			t.Errorf("client %s: %d updates counted, %d exchanges stored", c.ID, c.Updates, perClient[c.ID])
		}
	}
	// Each buffer moves the model by 1/K times its weighted updates (the
	// fixed trainer's Δ is its delta in every coordinate): summed over
	// every stored exchange, each once.
	var move float64
	for _, r := range stored {
		for i, n := range f.names {
			if r.client == n {
				move += r.weight * crashDeltas[i] / k
			}
		}
	}
	final, err := checkpoint.Load(f.outPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.initCk.Values {
		for j, v := range f.initCk.Values[i] {
			if got, want := float64(final.Values[i][j]), float64(v)+move; math.Abs(got-want) > 1e-4 {
				t.Fatalf("final %s[%d] = %g, want %g (the initial value moved by %g)", f.initCk.Header.Params[i].Name, j, got, want, move)
			}
		}
	}
	if final.Header.Public || !(final.Header.Privacy.Epsilon > 0) {
		t.Errorf("final checkpoint's record: public %v, ε %g", final.Header.Public, final.Header.Privacy.Epsilon)
	}
}
