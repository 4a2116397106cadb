package coord_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// api returns a coordinator client dialled with the certificate name.
func (h *harness) api(t *testing.T, name string) fedpb.CoordinatorClient {
	t.Helper()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fedpb.NewCoordinatorClient(conn)
}

func join(ctx context.Context, a fedpb.CoordinatorClient, budget float64) error {
	_, err := a.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: 1, BudgetEpsilon: budget, BudgetDelta: 1e-5, PrivacyUnit: "identity"})
	return err
}

func askStatus(ctx context.Context, a fedpb.CoordinatorClient) (*fedpb.StatusResponse, error) {
	return a.Status(ctx, &fedpb.StatusRequest{ProtocolVersion: 1})
}

// TestStatusShowsAClientItsOwnRecordOnly plays a client curious about the
// others: client-1 asks the coordinator's Status and must find its own
// record and nothing of client-2 (neither its id nor its budget); the
// operator's certificate sees both; and the operator's certificate cannot
// join a round.
func TestStatusShowsAClientItsOwnRecordOnly(t *testing.T) {
	h := startHarness(t, options(filepath.Join(t.TempDir(), "state.db"), 1), filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a1, a2 := h.api(t, "client-1"), h.api(t, "client-2")
	if err := join(ctx, a1, 11); err != nil {
		t.Fatal(err)
	}
	if err := join(ctx, a2, 7.25); err != nil {
		t.Fatal(err)
	}
	st, err := askStatus(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetClients()) != 1 || st.GetClients()[0].GetId() != "client-1" || st.GetClients()[0].GetBudget() != 11 {
		t.Errorf("client-1's status lists clients %v, want its own record only", st.GetClients())
	}
	if text := prototext.Format(st); strings.Contains(text, "client-2") || strings.Contains(text, "7.25") {
		t.Errorf("client-1's status tells of client-2:\n%s", text)
	}
	op := h.api(t, "operator")
	st, err = askStatus(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetClients()) != 2 || st.GetClients()[0].GetId() != "client-1" || st.GetClients()[1].GetBudget() != 7.25 {
		t.Errorf("the operator's status lists clients %v, want both", st.GetClients())
	}
	if err := join(ctx, op, 5); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "operator") {
		t.Errorf("the operator's certificate joining: %v, want PermissionDenied (an operator's)", err)
	}
}

// TestRevocationListFailsClosed plays an adversary on the coordinator's
// machine who wants a revoked client back in: deleting the revocation list
// locks every client out; putting back an older signed list (on which the
// revoked client is not yet) is refused, also after the coordinator
// restarts, and the revoked client stays out; the current list lets the
// others in again.
func TestRevocationListFailsClosed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	state := filepath.Join(t.TempDir(), "state.db")
	h := startHarness(t, options(state, 1), dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crl := filepath.Join(dir, "revoked.crl")
	read := func() []byte {
		b, err := os.ReadFile(crl)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := func(b []byte) {
		// Written beside and renamed, as a copy would land.
		if err := os.WriteFile(crl+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(crl+".new", crl); err != nil {
			t.Fatal(err)
		}
	}
	a1, a2 := h.api(t, "client-1"), h.api(t, "client-2")
	if err := join(ctx, a1, 10); err != nil {
		t.Fatal(err)
	}
	if err := join(ctx, a2, 10); err != nil {
		t.Fatal(err)
	}
	older := read()
	if err := h.ca.Revoke("client-2"); err != nil {
		t.Fatal(err)
	}
	current := read()
	if err := join(ctx, a2, 10); err == nil {
		t.Fatal("the revoked client-2 joined")
	}
	// Fresh connections each time: a refusal at the handshake or at the
	// call, both count.
	check := func(when string, want1 bool) {
		t.Helper()
		err := join(ctx, h.api(t, "client-1"), 10)
		if (err == nil) != want1 {
			t.Errorf("%s: client-1 joining: %v (want accepted: %v)", when, err, want1)
		}
		if err := join(ctx, h.api(t, "client-2"), 10); err == nil {
			t.Errorf("%s: the revoked client-2 joined", when)
		}
		if _, err := askStatus(ctx, h.api(t, "operator")); (err == nil) != want1 {
			t.Errorf("%s: the operator asking the status: %v (want answered: %v)", when, err, want1)
		}
	}
	check("with the current list", true)
	if err := os.Remove(crl); err != nil {
		t.Fatal(err)
	}
	check("with the list deleted", false)
	put(older)
	check("with an older list put back", false)
	h.stop()
	h = startHarness(t, options(state, 1), dir)
	check("with an older list, after a restart", false)
	put(current)
	check("with the current list back", true)
}
