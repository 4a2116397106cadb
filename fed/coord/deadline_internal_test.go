package coord

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// An update complete after its round's deadline is refused as stale even
// while the round is still open. The coordinator's loop closes a round at
// its first tick after the deadline, which a busy or loaded coordinator
// reaches late, and an update arriving in between must not be counted
// (fed/sim's TestDropOutsAndStragglers counts on the straggler's refusal).
// The loop here folds what is queued and never closes the round, the
// latest a loop can be; the same update before the deadline is accepted,
// so the refusal is the deadline's.
func TestUpdateAfterTheDeadlineIsRefusedBeforeTheClose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		accepted bool
	}{
		{"before the deadline", time.Minute, true},
		{"after the deadline, round not closed yet", time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{1, 2, 3}}}
			c, err := New(Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg"},
				Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: tc.timeout, MaxUpdateNorm: 10,
				Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.enrol(ctx, "alice", 100, 1e-5, "identity"); err != nil {
				t.Fatal(err)
			}
			if err := c.startRound(ctx, []string{"alice"}); err != nil {
				t.Fatal(err)
			}
			folded := make(chan struct{})
			go func() {
				defer close(folded)
				select {
				case p := <-c.queue:
					c.fold(ctx, []*pending{p})
				case <-ctx.Done():
				}
			}()
			srv := grpc.NewServer(c.ServerOptions()...)
			fedpb.RegisterCoordinatorServer(srv, c.LoopbackService(func(context.Context) (string, error) { return "alice", nil }))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			c.mu.Lock()
			r, version := c.round, c.version
			c.mu.Unlock()
			if !tc.accepted {
				// Sleeping lasts at least as long as asked: the deadline
				// has passed when it returns, whatever the load.
				time.Sleep(time.Until(r.deadline) + time.Millisecond)
			}
			up := wire.Weights{{Name: "w", Shape: []int{3}, Values: []float32{0.1, 0.1, 0.1}}}
			stream, err := fedpb.NewCoordinatorClient(conn).SubmitUpdate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hdr := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: r.n, ModelVersion: version, Weights: up.Header(), Examples: 1}
			if err := stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: hdr}}); err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: up.Payload()}}); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.CloseAndRecv()
			if err != nil {
				t.Fatal(err)
			}
			if tc.accepted {
				<-folded
				if !resp.GetAccepted() {
					t.Fatalf("an update before the deadline was refused: %s", resp.GetReason())
				}
				return
			}
			if resp.GetAccepted() || !strings.HasPrefix(resp.GetReason(), "stale") {
				t.Fatalf("an update after the deadline: accepted %v, reason %q; want a stale refusal", resp.GetAccepted(), resp.GetReason())
			}
			var updates int
			if err := c.st.db.QueryRow(`SELECT updates FROM clients WHERE id = 'alice'`).Scan(&updates); err != nil || updates != 0 {
				t.Fatalf("the late update was counted: %d updates (%v)", updates, err)
			}
		})
	}
}
