package coord_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// TestRoundsSelectOnlyTheirUnit: a client enrolled per example (when the
// state file's coordinator ran rounds per example) keeps polling a
// coordinator that now runs rounds per identity; it is never selected,
// never offered a task, while the three per-identity clients run the
// round. A client declaring the other unit is refused when it joins, with
// the reason.
func TestRoundsSelectOnlyTheirUnit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	state := filepath.Join(t.TempDir(), "state.db")
	ex := options(state, 1)
	ex.Task.DP = proto.Clone(task.DP).(*fedpb.DPParams)
	ex.Task.DP.PrivacyUnit = "example"
	ex.MinAvailable, ex.MinUpdates = 4, 4 // no round starts
	h := startHarness(t, ex, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := func(h *harness, name string) fedpb.CoordinatorClient {
		conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return fedpb.NewCoordinatorClient(conn)
	}
	perExample := &fedpb.JoinRequest{ProtocolVersion: fedpb.ProtocolVersion, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "example"}
	if _, err := api(h, "client-4").Join(ctx, perExample); err != nil {
		t.Fatal(err)
	}
	h.stop()

	// The same state file, rounds per identity.
	h = startHarness(t, options(state, 1), dir)
	a4 := api(h, "client-4")
	_, err := a4.Join(ctx, perExample)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `rounds protect privacy unit "identity" and client "client-4" protects "example"`) {
		t.Fatalf("joining per example: %v", err)
	}
	// client-4, enrolled already, polls without joining again.
	var offered atomic.Int32
	var polled sync.WaitGroup
	polled.Add(1)
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	go func() {
		first := true
		for pollCtx.Err() == nil {
			r, err := a4.Poll(pollCtx, &fedpb.PollRequest{ProtocolVersion: fedpb.ProtocolVersion})
			if err == nil && r.GetTask() != nil {
				offered.Add(1)
			}
			if first {
				first = false
				polled.Done()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	polled.Wait()
	trainers := map[string]fixedTrainer{"client-1": {0.1, 1, 0.1}, "client-2": {0.2, 1, 0.1}, "client-3": {0.6, 1, 0.1}}
	var wg sync.WaitGroup
	for name, tr := range trainers {
		c := h.client(t, name, tr, 100)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	stopPolling()
	if n := offered.Load(); n != 0 {
		t.Errorf("the per-example client was offered a per-identity round %d times", n)
	}
	db, err := sql.Open("sqlite", "file:"+state+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var selected, done int
	if err := db.QueryRow(`SELECT COUNT(*) FROM round_clients WHERE client = 'client-4'`).Scan(&selected); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM rounds WHERE state = 'done' AND updates = 3`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if selected != 0 || done != 1 {
		t.Errorf("client-4 selected in %d rounds; %d rounds done with the 3 per-identity updates, want 0 and 1", selected, done)
	}
}
