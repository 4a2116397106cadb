package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
)

var servingAddr = regexp.MustCompile(`key generator serving"? addr=(\S+)`)

// startKeygen starts veil fed keygen on a loopback port 0 and returns the
// process and the address it serves.
func startKeygen(t *testing.T, ps *procs, name, pkiDir, state string) (*proc, string) {
	t.Helper()
	return startKeygenWith(t, ps, name, pkiDir, state, "--bits", "512", "--insecure-test-key-size")
}

// startKeygenWith is startKeygen with the extra arguments extra (none: a
// 2048-bit key).
func startKeygenWith(t *testing.T, ps *procs, name, pkiDir, state string, extra ...string) (*proc, string) {
	t.Helper()
	p := ps.start(name, append([]string{"fed", "keygen", "--pki", pkiDir, "--name", "keygen", "--listen", "127.0.0.1:0", "--state", state}, extra...)...)
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if m := servingAddr.FindStringSubmatch(ps.log(p)); m != nil {
			return p, m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("veil fed keygen exited: %v\n%s", p.err, ps.log(p))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("veil fed keygen did not serve within %s:\n%s", patience, ps.log(p))
	return nil, ""
}

// TestKeygenSurvivesSIGKILL kills a real veil fed keygen with SIGKILL
// after a round is set up and the clients have their keys, and again after
// the round is decrypted: the restarted key generator decrypts the open
// round with the keys it handed out, and refuses the same aggregate once
// it has been decrypted, across a second kill.
func TestKeygenSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	defer ps.killAll()
	pkiDir := filepath.Join(dir, "ca")
	ca, err := pki.Init(pkiDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"keygen", "coordinator"} {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Server}); err != nil {
			t.Fatal(err)
		}
	}
	clients := []string{"client-1", "client-2", "client-3"}
	for _, n := range clients {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	dial := func(name, addr string) *dphefed.KeyGen {
		id, err := pki.LoadIdentity(filepath.Join(pkiDir, name+".crt"), filepath.Join(pkiDir, name+".key"), filepath.Join(pkiDir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		kg, err := dphefed.Dial(dphefed.DialOptions{Addr: addr, Identity: id, Name: "keygen", AllowInsecureTestKeySize: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kg.Close() })
		return kg
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	state := filepath.Join(dir, "keygen-state")
	p, addr := startKeygen(t, ps, "keygen-1", pkiDir, state)
	r, err := dphefed.StartRound(ctx, dial("coordinator", addr), dphefed.RoundRequest{Round: 1, Coordinates: 64, Capacity: 64, Clients: clients})
	if err != nil {
		t.Fatal(err)
	}
	var keys []*dphe.UserKeys
	for _, c := range clients {
		uk, err := dial(c, addr).UserKeys(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, uk)
	}
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	ps.wait(p, patience)
	p, addr = startKeygen(t, ps, "keygen-2", pkiDir, state)
	for i, c := range clients {
		u, err := dphe.NewUser(keys[i], dphe.UserOptions{Privacy: testDPHEPrivacy(t)})
		if err != nil {
			t.Fatal(err)
		}
		upd := make([]float64, 64)
		upd[i] = 0.5
		msgs, err := u.Encrypt(upd)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := r.Receive(c, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	agg, err := r.Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	coord := dial("coordinator", addr)
	sum, err := coord.Decrypt(ctx, agg)
	if err != nil {
		t.Fatalf("the round set up before SIGKILL: %v\n%s", err, ps.log(p))
	}
	if len(sum.Clients) != 3 {
		t.Errorf("sum of %v", sum.Clients)
	}
	for round, pass := range []string{"before", "after"} {
		if pass == "after" {
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			ps.wait(p, patience)
			p, addr = startKeygen(t, ps, fmt.Sprintf("keygen-%d", round+3), pkiDir, state)
			coord = dial("coordinator", addr)
		}
		_, err := coord.Decrypt(ctx, agg)
		if status.Code(errorsUnwrapAll(err)) != codes.FailedPrecondition {
			t.Errorf("the decrypted round's aggregate again, %s a SIGKILL: %v", pass, err)
		}
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state folder: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
}

// errorsUnwrapAll returns the innermost error carrying a gRPC status.
func errorsUnwrapAll(err error) error {
	for err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
	return nil
}

// testDPHEPrivacy is a client's DP release for the crash test (noise
// multiplier 1, a ledger of its own).
func testDPHEPrivacy(t *testing.T) *dphe.Privacy {
	t.Helper()
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("data", dp.Budget{Epsilon: 100, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	return &dphe.Privacy{Clip: 1, NoiseMultiplier: 1, Ledger: l, Principal: "data"}
}
