package coord_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// The last evaluation reaches veil fed status both ways: from the state
// file and from the running coordinator over mutual TLS.
func TestStatusReportsTheLastEvaluation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	h := startHarness(t, options(filepath.Join(t.TempDir(), "state.db"), 1), dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, "client-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := fedpb.NewCoordinatorClient(conn)
	remote := func() *fedpb.StatusResponse {
		st, err := api.Status(ctx, &fedpb.StatusRequest{ProtocolVersion: fedpb.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	local := func() *fedpb.StatusResponse {
		db, err := coord.OpenStatus(h.state)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		st, err := coord.ReadStatus(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := remote(); st.GetLastEvaluation() != nil {
		t.Fatalf("an evaluation before any: %v", st.GetLastEvaluation())
	}
	_, version := h.co.Model()
	for i, acc := range []float64{0.61, 0.72} {
		ev := &fedpb.Evaluation{Round: uint64(i), ModelVersion: version, Accuracy: acc, Threshold: 0.4, Pairs: "test pairs", TimeUnixMs: 1700000000000 + int64(i)}
		if err := h.co.RecordEvaluation(ctx, ev); err != nil {
			t.Fatal(err)
		}
		for name, st := range map[string]*fedpb.StatusResponse{"remote": remote(), "local": local()} {
			if !proto.Equal(st.GetLastEvaluation(), ev) {
				t.Errorf("%s status after evaluation %d: %v, want %v", name, i, st.GetLastEvaluation(), ev)
			}
		}
	}
	db, err := coord.OpenStatus(h.state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ids, err := coord.ClientIDs(ctx, db); err != nil || len(ids) != 0 {
		t.Fatalf("clients %v, %v before any joined", ids, err)
	}
	if err := h.co.RecordEvaluation(ctx, &fedpb.Evaluation{Accuracy: 1}); err == nil {
		t.Error("an evaluation of no model version was recorded")
	}
}
