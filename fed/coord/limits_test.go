package coord_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
)

// joined returns the API of each named client, joined and polled until
// the round's task reached the first one (every one is selected when the
// options select all available clients).
func joined(t *testing.T, ctx context.Context, h *harness, names ...string) ([]fedpb.CoordinatorClient, *fedpb.RoundConfig) {
	t.Helper()
	var apis []fedpb.CoordinatorClient
	for _, name := range names {
		conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(h.creds(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		a := fedpb.NewCoordinatorClient(conn)
		if _, err := a.Join(ctx, &fedpb.JoinRequest{ProtocolVersion: 1, BudgetEpsilon: 100, BudgetDelta: 1e-5, PrivacyUnit: "identity"}); err != nil {
			t.Fatal(err)
		}
		apis = append(apis, a)
	}
	for {
		r, err := apis[0].Poll(ctx, &fedpb.PollRequest{ProtocolVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		if cfg := r.GetTask(); cfg != nil {
			return apis, cfg
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// smallUpdate is a valid update of model0 with its header for round cfg.
func smallUpdate(cfg *fedpb.RoundConfig) (*fedpb.UpdateHeader, []byte) {
	w := model0()
	for i := range w {
		for j := range w[i].Values {
			w[i].Values[j] = 0.01
		}
	}
	h := &fedpb.UpdateHeader{ProtocolVersion: 1, Round: cfg.Round, ModelVersion: cfg.ModelVersion, Weights: w.Header(),
		Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}}
	return h, w.Payload()
}

// openPartial opens an update stream and sends its header and the first
// part bytes of payload, then nothing more; the answer (or the stream's
// error) arrives on the returned channel once the coordinator gives it.
func openPartial(t *testing.T, ctx context.Context, a fedpb.CoordinatorClient, h *fedpb.UpdateHeader, payload []byte, part int) (grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse], <-chan error) {
	t.Helper()
	s, err := a.SubmitUpdate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: h}})
	if part > 0 {
		_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload[:part]}})
	}
	answer := make(chan error, 1)
	go func() {
		var r fedpb.SubmitResponse
		err := s.RecvMsg(&r)
		if err == nil && !r.GetAccepted() {
			err = status.Error(codes.Unknown, "refused: "+r.GetReason())
		}
		answer <- err
	}()
	return s, answer
}

// finish sends the rest of the payload and closes the sending side.
func finish(s grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse], payload []byte, part int) {
	_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload[part:]}})
	_ = s.CloseSend()
}

// TestOneUpdateStreamPerClient: a selected client opens 40 update streams
// at once, each holding its stream open after part of the payload (as an
// attacker pinning the coordinator's memory would); all but one are
// refused with ResourceExhausted, and the one left completes and is
// accepted.
func TestOneUpdateStreamPerClient(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 1, 1, 5*time.Minute
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apis, cfg := joined(t, ctx, h, "client-1")
	hdr, payload := smallUpdate(cfg)
	const n = 40
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, n)
	streams := make([]grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse], n)
	for i := range n {
		var ch <-chan error
		streams[i], ch = openPartial(t, ctx, apis[0], hdr, payload, 8)
		go func() { answers <- answer{i, <-ch} }()
	}
	refused := map[int]bool{}
	for len(refused) < n-1 {
		select {
		case a := <-answers:
			if status.Code(a.err) != codes.ResourceExhausted || !strings.Contains(a.err.Error(), "one update at a time") {
				t.Fatalf("stream %d: %v, want ResourceExhausted (one update at a time)", a.i, a.err)
			}
			refused[a.i] = true
		case <-ctx.Done():
			t.Fatalf("%d of %d streams of one client refused; want all but one", len(refused), n)
		}
	}
	open := 0
	for refused[open] {
		open++
	}
	finish(streams[open], payload, 8)
	if a := <-answers; a.i != open || a.err != nil {
		t.Fatalf("the one stream left (%d): stream %d answered %v", open, a.i, a.err)
	}
	// The client may open a stream again (no ResourceExhausted): its
	// second update is refused as a replay, or as stale once the loop has
	// closed the round its one update completed (either may come first).
	r, err := sendUpdate(ctx, apis[0], hdr, payload)
	if err != nil || r.GetAccepted() || !(strings.HasPrefix(r.GetReason(), "replay") || strings.HasPrefix(r.GetReason(), "stale")) {
		t.Fatalf("the next stream: %v %v, want a replay or stale refusal", r, err)
	}
}

func sendUpdate(ctx context.Context, a fedpb.CoordinatorClient, h *fedpb.UpdateHeader, payload []byte) (*fedpb.SubmitResponse, error) {
	s, err := a.SubmitUpdate(ctx)
	if err != nil {
		return nil, err
	}
	_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: h}})
	_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload}})
	return s.CloseAndRecv()
}

// TestStalledStreamIsEnded: a client that opens an update stream and then
// sends nothing, before its header or in the middle of its payload, has
// the stream ended by the coordinator after StreamIdle (DeadlineExceeded,
// saying so), with nothing held for it; the test only waits for the
// coordinator's answer. The client can then send its update.
func TestStalledStreamIsEnded(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 1, 1, 5*time.Minute
	o.StreamIdle = 300 * time.Millisecond
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apis, cfg := joined(t, ctx, h, "client-1")
	hdr, payload := smallUpdate(cfg)
	for _, tc := range []struct {
		name string
		stop func(grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse]) <-chan error
	}{
		{"before the header", func(s grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse]) <-chan error {
			return recvAnswer(s)
		}},
		{"in the payload", func(s grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse]) <-chan error {
			_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: hdr}})
			_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload[:8]}})
			return recvAnswer(s)
		}},
		{"after the payload, not closed", func(s grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse]) <-chan error {
			_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: hdr}})
			_ = s.Send(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload}})
			return recvAnswer(s)
		}},
	} {
		sctx, scancel := context.WithCancel(ctx)
		s, err := apis[0].SubmitUpdate(sctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-tc.stop(s):
			if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "sent nothing for 300ms") {
				t.Errorf("%s: %v, want DeadlineExceeded from the coordinator (sent nothing for 300ms)", tc.name, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the coordinator never ended the stalled stream", tc.name)
		}
		scancel()
		if st := h.co.ReceiveStats(); st.Held != 0 || st.Waiting != 0 {
			t.Errorf("%s: after the stream ended %d bytes are held, %d streams wait", tc.name, st.Held, st.Waiting)
		}
	}
	r, err := sendUpdate(ctx, apis[0], hdr, payload)
	if err != nil || !r.GetAccepted() {
		t.Fatalf("the update after the stalls: %v %v", r, err)
	}
}

func recvAnswer(s grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse]) <-chan error {
	answer := make(chan error, 1)
	go func() { answer <- s.RecvMsg(new(fedpb.SubmitResponse)) }()
	return answer
}

// TestReceiveBudgetBoundsBufferedBytes: four selected clients each hold an
// update stream open after part of the payload, with a receive budget of
// two updates' payloads. The coordinator holds buffers for two and lets
// the other two wait (not refused); the bytes held never exceed the
// budget; once the first two finish, the others are received, and all
// four are accepted.
func TestReceiveBudgetBoundsBufferedBytes(t *testing.T) {
	o := options(filepath.Join(t.TempDir(), "state.db"), 1)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 4, 4, 5*time.Minute
	one := int64(4 * model0().Len())
	o.ReceiveBudget = 2 * one
	h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apis, cfg := joined(t, ctx, h, "client-1", "client-2", "client-3", "client-4")
	hdr, payload := smallUpdate(cfg)
	var peak int64
	watch := func() coord.ReceiveStats {
		st := h.co.ReceiveStats()
		if st.Budget != 2*one {
			t.Fatalf("budget %d, want %d", st.Budget, 2*one)
		}
		peak = max(peak, st.Held)
		if st.Held > st.Budget || st.Peak > st.Budget {
			t.Fatalf("%d bytes held (peak %d), over the budget of %d", st.Held, st.Peak, st.Budget)
		}
		return st
	}
	streams := make([]grpc.ClientStreamingClient[fedpb.UpdateChunk, fedpb.SubmitResponse], len(apis))
	answers := make([]<-chan error, len(apis))
	for i, a := range apis {
		streams[i], answers[i] = openPartial(t, ctx, a, hdr, payload, 8)
	}
	// Wait (bounded) until the coordinator has taken all four streams in:
	// two holding buffers, two waiting for room.
	for st := watch(); st.Held != 2*one || st.Waiting != 2; st = watch() {
		if ctx.Err() != nil {
			t.Fatalf("the coordinator holds %d bytes with %d streams waiting; want %d held, 2 waiting", st.Held, st.Waiting, 2*one)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range streams {
		finish(streams[i], payload, 8)
	}
	for i := range answers {
		select {
		case err := <-answers[i]:
			if err != nil {
				t.Errorf("client-%d: %v", i+1, err)
			}
		case <-ctx.Done():
			t.Fatalf("client-%d was never answered", i+1)
		}
		watch()
	}
	if st := watch(); st.Held != 0 || st.Waiting != 0 || st.Peak != 2*one {
		t.Errorf("after every update was answered: held %d, waiting %d, peak %d (want 0, 0, %d)", st.Held, st.Waiting, st.Peak, 2*one)
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
}
