package coord_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// TestLoopbackServiceRefusesOtherMachines plays a caller from another
// machine against the unauthenticated service veil bench fed uses: it
// claims to be an enrolled client's name (the service believes names),
// yet it is refused and nothing is enrolled, as is a caller whose address
// is unknown; the same request from 127.0.0.1 or ::1 is answered.
func TestLoopbackServiceRefusesOtherMachines(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.db")
	co, err := coord.New(options(state, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	svc := co.LoopbackService(func(context.Context) (string, error) { return "alice", nil })
	join := &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: 8, BudgetDelta: 1e-5, PrivacyUnit: "identity"}
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
	}
	for name, ctx := range map[string]context.Context{
		"another machine":          from("192.0.2.7"),
		"another machine (IPv6)":   from("2001:db8::7"),
		"a mapped public address":  from("::ffff:192.0.2.7"),
		"no known address":         context.Background(),
		"this machine's interface": from("10.1.2.3"),
	} {
		_, err := svc.Join(ctx, join)
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: Join answered %v, want PermissionDenied", name, err)
		}
		if _, err := svc.Poll(ctx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: Poll answered %v, want PermissionDenied", name, err)
		}
	}
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := coord.ClientIDs(context.Background(), db)
	db.Close()
	if err != nil || len(ids) != 0 {
		t.Fatalf("after refused joins the state holds clients %v (%v)", ids, err)
	}
	for _, ip := range []string{"127.0.0.1", "127.3.4.5", "::1"} {
		if _, err := svc.Join(from(ip), join); err != nil {
			t.Errorf("Join from %s: %v", ip, err)
		}
	}
}
