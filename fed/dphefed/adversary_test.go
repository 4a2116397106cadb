package dphefed_test

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/secagg/dphe"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err carries the gRPC status code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	var se interface{ GRPCStatus() *status.Status }
	if err == nil || !errors.As(err, &se) || se.GRPCStatus().Code() != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

// contributions has clients 1…n contribute to round r and returns the
// coordinator's round with everything received.
func contributions(t *testing.T, h *harness, coord *dphefed.KeyGen, round uint64, n int) *dphefed.Round {
	t.Helper()
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, clientName(i))
	}
	r, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: round, Coordinates: testCoords, Capacity: testCount, Clients: names, Pack: true, Bound: 4, MaxUsers: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		c, err := dphefed.Contribute(ctxT(t), h.dial(t, clientName(i)), round, testUpdate(i, r.Packing.Lanes), dphefed.ContributeOptions{Privacy: clientPrivacy(t, testCount, byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if err := r.Receive(clientName(i), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// TestKeyGenRefusesFewerThanThreeClients: no round of two clients is set
// up, and an aggregate that names two of a round's three clients (the
// third's contributions cut out) is refused; the round stays open for the
// complete aggregate.
func TestKeyGenRefusesFewerThanThreeClients(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	_, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 1, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2"}})
	wantCode(t, "a round of two clients", err, codes.InvalidArgument)
	r := contributions(t, h, coord, 2, 3)
	full, err := r.Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	pk := h.svc.Key()
	a, err := dphe.DecodeAggregate(full, pk)
	if err != nil {
		t.Fatal(err)
	}
	last := a.Contributions[len(a.Contributions)-1].UserID
	for len(a.Contributions) > 0 && a.Contributions[len(a.Contributions)-1].UserID == last {
		a.Contributions = a.Contributions[:len(a.Contributions)-1]
	}
	two, err := a.Encode(pk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = coord.Decrypt(ctxT(t), two)
	wantCode(t, "an aggregate naming two clients", err, codes.InvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "too few users") {
		t.Errorf("refusal does not say why: %v", err)
	}
	if _, err := coord.Decrypt(ctxT(t), full); err != nil {
		t.Errorf("the complete aggregate after a refused one: %v", err)
	}
}

// TestKeyGenRefusesReplayAndSecondDecryption: an aggregate is decrypted
// once; the same bytes sent again, also after the key generator restarts
// on its state, are refused.
func TestKeyGenRefusesReplayAndSecondDecryption(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	agg, err := contributions(t, h, coord, 1, 3).Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Decrypt(ctxT(t), agg); err != nil {
		t.Fatal(err)
	}
	_, err = coord.Decrypt(ctxT(t), agg)
	wantCode(t, "the same aggregate again", err, codes.FailedPrecondition)
	h.restart(t)
	coord = h.dial(t, "coordinator")
	_, err = coord.Decrypt(ctxT(t), agg)
	wantCode(t, "the same aggregate after a restart", err, codes.FailedPrecondition)
	_, err = dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 1, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2", "client-3"}})
	wantCode(t, "round 1 set up again after a restart", err, codes.FailedPrecondition)
	if _, err := contributions(t, h, coord, 2, 3).Finish(ctxT(t)); err != nil {
		t.Errorf("a new round after the restart: %v", err)
	}
}

// TestKeyGenRefusesUnauthenticatedAggregates: only the coordinator's
// certificate may ask for a decryption (a client's, the operator's and
// another server's are refused), and an aggregate whose tags or
// ciphertexts were altered is refused.
func TestKeyGenRefusesUnauthenticatedAggregates(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	agg, err := contributions(t, h, coord, 1, 3).Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client-1", "operator", "impostor"} {
		_, err := h.dial(t, name).Decrypt(ctxT(t), agg)
		wantCode(t, name+" asking for a decryption", err, codes.PermissionDenied)
	}
	pk := h.svc.Key()
	a, err := dphe.DecodeAggregate(agg, pk)
	if err != nil {
		t.Fatal(err)
	}
	a.Contributions[1].Tag[0] ^= 1
	forged, err := a.Encode(pk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = coord.Decrypt(ctxT(t), forged)
	wantCode(t, "an aggregate with a forged tag", err, codes.PermissionDenied)
	a.Contributions[1].Tag[0] ^= 1
	a.Ciphertexts[0] = pk.AddPlain(a.Ciphertexts[0], big.NewInt(1)) // one coordinate shifted
	swapped, err := a.Encode(pk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = coord.Decrypt(ctxT(t), swapped)
	wantCode(t, "an aggregate with altered ciphertexts", err, codes.PermissionDenied)
}

// TestRoundKeysGoOnlyToTheirClients: a client outside the round, the
// coordinator and the operator get no round keys; only the coordinator
// sets up rounds; a revoked client is refused at the handshake.
func TestRoundKeysGoOnlyToTheirClients(t *testing.T) {
	h := newHarness(t, 4)
	coord := h.dial(t, "coordinator")
	if _, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 1, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2", "client-3"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client-4", "coordinator", "operator"} {
		_, err := h.dial(t, name).UserKeys(ctxT(t), 1)
		wantCode(t, name+" asking for round keys", err, codes.PermissionDenied)
	}
	if _, err := h.dial(t, "client-1").UserKeys(ctxT(t), 1); err != nil {
		t.Errorf("client-1's own keys: %v", err)
	}
	_, err := dphefed.StartRound(ctxT(t), h.dial(t, "client-1"), dphefed.RoundRequest{Round: 2, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2", "client-3"}})
	wantCode(t, "a client setting up a round", err, codes.PermissionDenied)
	if err := h.ca.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.dial(t, "client-2").UserKeys(ctxT(t), 1); err == nil {
		t.Error("a revoked client received round keys")
	}
}

// TestClientRefusesAnImpostorKeyGenerator: a server with another
// certificate of the same authority (here the coordinator's) cannot pose
// as the key generator to hand a client keys it knows.
func TestClientRefusesAnImpostorKeyGenerator(t *testing.T) {
	h := newHarness(t, 3)
	svc, err := keygen.Open(keygen.Options{Dir: t.TempDir(), Coordinator: "coordinator", Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	fake := h.serve(t, svc, "coordinator")
	_, _, err = h.dialAt(t, "client-1", fake, "keygen").PublicKey(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "not the key generator") {
		t.Errorf("a client talked to the coordinator posing as the key generator: %v", err)
	}
}

// TestOpenRoundSurvivesRestart: a round set up before the key generator
// restarts keeps its keys: a client fetching them after the restart sends
// messages the coordinator's keys from before the restart accept, and the
// round decrypts.
func TestOpenRoundSurvivesRestart(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	r, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 7, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2", "client-3"}, Pack: true, Bound: 4, MaxUsers: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if i == 3 {
			h.restart(t)
			coord = h.dial(t, "coordinator")
		}
		c, err := dphefed.Contribute(ctxT(t), h.dial(t, clientName(i)), 7, testUpdate(i, r.Packing.Lanes), dphefed.ContributeOptions{Privacy: clientPrivacy(t, testCount, byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if err := r.Receive(clientName(i), m); err != nil {
				t.Fatalf("client %d after the restart: %v", i, err)
			}
		}
	}
	agg, err := r.Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Decrypt(ctxT(t), agg); err != nil {
		t.Errorf("decrypting the round after the restart: %v", err)
	}
}

// TestStateFolderHasOneKeyGenerator: a second key generator on the same
// state folder is refused (two could each decrypt a round once).
func TestStateFolderHasOneKeyGenerator(t *testing.T) {
	h := newHarness(t, 3)
	if _, err := keygen.Open(keygen.Options{Dir: h.stateDir, Coordinator: "coordinator", AllowInsecureTestKeySize: true}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second key generator on the same state: %v", err)
	}
}

// TestCoordinatorRefusesAnotherClientsMessages: a message is accepted
// only from the client it belongs to.
func TestCoordinatorRefusesAnotherClientsMessages(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	r, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 1, Coordinates: testCoords, Capacity: testCount, Clients: []string{"client-1", "client-2", "client-3"}, Pack: true, Bound: 4, MaxUsers: 8})
	if err != nil {
		t.Fatal(err)
	}
	c, err := dphefed.Contribute(ctxT(t), h.dial(t, "client-1"), 1, testUpdate(1, r.Packing.Lanes), dphefed.ContributeOptions{Privacy: clientPrivacy(t, testCount, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Receive("client-2", c.Messages[0]); !errors.Is(err, dphe.ErrAuth) {
		t.Errorf("client-1's message as client-2's: %v", err)
	}
	if err := r.Receive("client-9", c.Messages[0]); err == nil {
		t.Error("a message from outside the round was accepted")
	}
	if err := r.Receive("client-1", c.Messages[0]); err != nil {
		t.Errorf("client-1's own message: %v", err)
	}
	if err := r.Receive("client-1", c.Messages[0]); !errors.Is(err, dphe.ErrReplay) {
		t.Errorf("client-1's message twice: %v", err)
	}
}

// TestContributionPastTheBudgetSendsNothing: a client whose ledger cannot
// pay for the selection and the values' release gets an error naming the
// budget, nothing to send, and an unchanged ledger.
func TestContributionPastTheBudgetSendsNothing(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	if _, err := dphefed.StartRound(ctxT(t), coord, dphefed.RoundRequest{Round: 1, Coordinates: testCoords, Capacity: testCount,
		Clients: []string{"client-1", "client-2", "client-3"}, Pack: true, Bound: 4, MaxUsers: 8}); err != nil {
		t.Fatal(err)
	}
	priv := clientPrivacy(t, testCount, 1)
	if err := priv.Ledger.(*dp.Ledger).SetBudget("photos", dp.Budget{Epsilon: 1, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	before, err := priv.Ledger.(*dp.Ledger).Spent("photos")
	if err != nil {
		t.Fatal(err)
	}
	c, err := dphefed.Contribute(ctxT(t), h.dial(t, "client-1"), 1, testUpdate(1, 16), dphefed.ContributeOptions{Privacy: priv})
	if !errors.Is(err, dp.ErrBudgetExceeded) || c != nil {
		t.Fatalf("contribution past the budget: %v, %v", c, err)
	}
	after, err := priv.Ledger.(*dp.Ledger).Spent("photos")
	if err != nil {
		t.Fatal(err)
	}
	if after.Epsilon != before.Epsilon {
		t.Errorf("ledger moved from ε = %v to %v on a refused contribution", before.Epsilon, after.Epsilon)
	}
}
