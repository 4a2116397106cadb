package coord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// Service returns the gRPC service of the coordinator. Register it on a
// server whose transport credentials come from pki.ServerTLS; each call
// identifies its client by the verified certificate, and rev (may be nil)
// is consulted on every call, so a revoked client is cut off even on a
// connection opened before the revocation. The coordinator also consults
// rev for the open round's selected clients: one whose certificates are
// all revoked is waited for no more.
func (c *Coordinator) Service(rev *pki.Revocations) fedpb.CoordinatorServer {
	if rev != nil {
		c.rev.Store(rev)
	}
	return &service{c: c, rev: rev}
}

// LoopbackService returns the coordinator's gRPC service with each caller
// identified by identify instead of a TLS certificate, answering callers
// on a loopback address only. It exists so that the coordinator's cost can
// be measured without TLS (veil bench fed, package fedbench): identify is
// believed as it stands, so the service checks on every call that the
// caller's address is a loopback address (127.0.0.0/8 or ::1) and refuses
// any other caller, whatever the server listens on. A served coordinator
// must use Service: only mutual TLS authenticates a client, and any
// process on the machine can reach a loopback port. Everything else
// (enrolment, binding, validation, budgets) is the same.
//
// The check is on the peer's address rather than on the listener so that
// registering this service by mistake on a server listening on every
// interface still admits no one from another machine.
func (c *Coordinator) LoopbackService(identify func(context.Context) (string, error)) fedpb.CoordinatorServer {
	return &service{c: c, identify: identify}
}

type service struct {
	fedpb.UnimplementedCoordinatorServer
	c        *Coordinator
	rev      *pki.Revocations
	identify func(context.Context) (string, error)
}

// who returns the calling client's identity from its verified certificate
// (or from identify, see LoopbackService). An operator's certificate is
// refused: it takes part in no round.
func (s *service) who(ctx context.Context) (string, error) {
	name, role, err := s.caller(ctx)
	if err != nil {
		return "", err
	}
	if role != pki.Client {
		return "", status.Errorf(codes.PermissionDenied, "the certificate of %q has the %s role: it may ask for the status but takes part in no round", name, role)
	}
	return name, nil
}

// caller returns the caller's name and role.
func (s *service) caller(ctx context.Context) (string, pki.Role, error) {
	if s.identify != nil {
		if !fromLoopback(ctx) {
			return "", 0, status.Error(codes.PermissionDenied, "this coordinator service answers callers on this machine's loopback address only")
		}
		id, err := s.identify(ctx)
		if err != nil {
			return "", 0, status.Error(codes.Unauthenticated, err.Error())
		}
		return id, pki.Client, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", 0, status.Error(codes.Unauthenticated, "no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", 0, status.Error(codes.Unauthenticated, "the connection is not mutual TLS")
	}
	name, leaf, err := pki.PeerName(ti.State)
	if err != nil {
		return "", 0, status.Error(codes.Unauthenticated, err.Error())
	}
	if s.rev != nil {
		revoked, err := s.rev.IsRevoked(leaf.SerialNumber)
		if err != nil {
			return "", 0, status.Error(codes.Unavailable, "the coordinator's revocation list is missing, unreadable or older than one it accepted: every certificate is refused")
		}
		if revoked {
			return "", 0, status.Errorf(codes.PermissionDenied, "the certificate of %q is revoked", name)
		}
	}
	role := pki.RoleOf(leaf)
	if role == pki.Client {
		s.c.noteSerial(name, leaf.SerialNumber)
	}
	return name, role, nil
}

// fromLoopback reports whether the caller of ctx is connected from a
// loopback IP address.
func fromLoopback(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	a, ok := p.Addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

func checkVersion(v uint32) error {
	if v != fedpb.ProtocolVersion {
		return status.Errorf(codes.FailedPrecondition, "protocol version %d, this coordinator speaks %d", v, fedpb.ProtocolVersion)
	}
	return nil
}

func (s *service) Join(ctx context.Context, req *fedpb.JoinRequest) (*fedpb.JoinResponse, error) {
	id, err := s.who(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	spent, err := s.c.enrol(ctx, id, req.GetBudgetEpsilon(), req.GetBudgetDelta(), req.GetPrivacyUnit())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := s.c.rememberSerial(ctx, id, peerSerial(ctx)); err != nil {
		return nil, status.Error(codes.Internal, "recording the client's certificate in the state file")
	}
	s.c.mu.Lock()
	s.c.lastPoll[id] = time.Now()
	s.c.mu.Unlock()
	s.c.poke()
	s.c.log.Info("client joined", "client", id)
	return &fedpb.JoinResponse{ProtocolVersion: fedpb.ProtocolVersion, ClientId: id,
		BudgetEpsilon: req.GetBudgetEpsilon(), BudgetDelta: req.GetBudgetDelta(), SpentEpsilon: spent}, nil
}

func (s *service) enrolled(ctx context.Context, id string) error {
	var n int
	if err := s.c.st.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM clients WHERE id = ?`, id).Scan(&n); err != nil {
		return status.Error(codes.Internal, "reading the state file")
	}
	if n == 0 {
		return status.Errorf(codes.PermissionDenied, "client %q has not joined", id)
	}
	return nil
}

func (s *service) Poll(ctx context.Context, req *fedpb.PollRequest) (*fedpb.PollResponse, error) {
	id, err := s.who(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	if err := s.enrolled(ctx, id); err != nil {
		return nil, err
	}
	c := s.c
	if c.async != nil {
		return c.pollAsync(id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastPoll[id] = time.Now()
	resp := &fedpb.PollResponse{ProtocolVersion: fedpb.ProtocolVersion}
	switch r := c.round; {
	case c.done:
		resp.Reply = &fedpb.PollResponse_Done{Done: fmt.Sprintf("the run is over after %d rounds", c.completed)}
	case r != nil && r.selected[id] && !r.counted[id] && time.Now().Before(r.deadline):
		resp.Reply = &fedpb.PollResponse_Task{Task: r.cfg}
	default:
		resp.Reply = &fedpb.PollResponse_RetryAfterMs{RetryAfterMs: 200}
	}
	return resp, nil
}

// Subscribe holds the client's stream of work open: it pushes the task of
// each round the client is selected for the moment the round opens (at
// once if such a round is open and the client not yet counted in it or
// withdrawn from it, as after a reconnection), and the end of the run,
// after which it returns. A client with a stream open is available for
// rounds. The caller's certificate is checked again before every push, so
// a revoked client's stream ends at its next push.
func (s *service) Subscribe(req *fedpb.SubscribeRequest, stream grpc.ServerStreamingServer[fedpb.Push]) error {
	ctx := stream.Context()
	id, err := s.who(ctx)
	if err != nil {
		return err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return err
	}
	if err := s.enrolled(ctx, id); err != nil {
		return err
	}
	c := s.c
	c.mu.Lock()
	c.subs[id]++
	c.lastPoll[id] = time.Now()
	c.mu.Unlock()
	c.poke()
	defer func() {
		c.mu.Lock()
		if c.subs[id]--; c.subs[id] <= 0 {
			delete(c.subs, id)
		}
		c.lastPoll[id] = time.Now()
		c.mu.Unlock()
	}()
	if c.async != nil {
		return s.subscribeAsync(ctx, stream, id)
	}
	var pushed uint64 // the round whose task this stream has pushed
	var phase int     // and the secure aggregation phase pushed in it
	for {
		var push *fedpb.Push
		c.mu.Lock()
		changed := c.changed
		r := c.round
		withdrawn := r != nil && r.withdrawn[id] != ""
		switch {
		case c.done:
			push = &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Done{Done: fmt.Sprintf("the run is over after %d rounds", c.completed)}}
		case r != nil && r.n != pushed && r.selected[id] && !r.counted[id] && r.withdrawn[id] == "" && time.Now().Before(r.deadline):
			push = &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Task{Task: r.cfg}}
			pushed, phase = r.n, 0
		}
		c.mu.Unlock()
		if push == nil && r != nil && r.sec != nil && !withdrawn {
			// A secure round's phase message, once the client has its task
			// (on this stream, or sent before it was counted).
			if pushed != r.n {
				pushed, phase = r.n, 0
			}
			if m, p := r.sec.push(id, phase); m != nil {
				push = &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Secagg{Secagg: m}}
				phase = p
			}
		}
		if push != nil {
			if _, err := s.who(ctx); err != nil {
				return err
			}
			if err := stream.Send(push); err != nil {
				return err
			}
			if push.GetDone() != "" {
				return nil
			}
			if push.GetTask() != nil && r.sec != nil {
				// A secure round's current phase message may be due
				// too (a client pushed its task again after a
				// reconnection): look again at once.
				continue
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *service) DownloadModel(req *fedpb.ModelRequest, stream grpc.ServerStreamingServer[fedpb.WeightsChunk]) error {
	ctx := stream.Context()
	id, err := s.who(ctx)
	if err != nil {
		return err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return err
	}
	if err := s.enrolled(ctx, id); err != nil {
		return err
	}
	c := s.c
	header, payload := c.encodedModel()
	if v := req.GetModelVersion(); v != "" && v != wire.Version(header) {
		// Older versions are kept in the state file; a thinned model
		// lives with its exchange's ticket.
		w := c.servedThinned(id, v)
		if w == nil {
			if w, _, err = c.st.loadModel(v); err != nil {
				return status.Errorf(codes.NotFound, "no model version %s", short(v))
			}
		}
		header, payload = w.Header(), w.Payload()
	}
	if err := stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Header{Header: header}}); err != nil {
		return err
	}
	for p := payload; len(p) > 0; {
		b := p[:min(wire.DefaultChunk, len(p))]
		p = p[len(b):]
		c.o.Metrics.BytesOut(len(b))
		if err := stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: b}}); err != nil {
			return err
		}
	}
	return nil
}

// encodedModel returns the current model's header and payload, encoded
// once per model version rather than once per download.
func (c *Coordinator) encodedModel() (*fedpb.WeightsHeader, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.encoded.version != c.version {
		c.encoded.version, c.encoded.header, c.encoded.payload = c.version, c.model.Header(), c.model.Payload()
	}
	return c.encoded.header, c.encoded.payload
}

// openStream records that client has an update stream open; false if it
// has one already.
func (c *Coordinator) openStream(client string) bool {
	c.streamsMu.Lock()
	defer c.streamsMu.Unlock()
	if c.streams[client] {
		return false
	}
	c.streams[client] = true
	return true
}

func (c *Coordinator) closeStream(client string) {
	c.streamsMu.Lock()
	defer c.streamsMu.Unlock()
	delete(c.streams, client)
}

// SubmitUpdate receives one update. What a stream can hold is bounded:
// one stream per client at a time (a second is refused, ResourceExhausted,
// before anything is read), nothing received for StreamIdle ends the
// stream (DeadlineExceeded), and the update's buffer is taken from the
// coordinator's receive budget, waiting for room until the round's
// deadline.
func (s *service) SubmitUpdate(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) error {
	ctx := stream.Context()
	id, err := s.who(ctx)
	if err != nil {
		return err
	}
	c := s.c
	if !c.openStream(id) {
		c.o.Metrics.UpdateRefused("concurrent")
		c.log.Warn("update stream refused", "client", id, "reason", "concurrent")
		return status.Errorf(codes.ResourceExhausted, "client %q already has an update stream open: a client sends one update at a time", id)
	}
	// Deferred first, so it runs last: the stream is the client's again
	// once everything else is done, and before the client hears back.
	defer c.closeStream(id)
	rx := newReceiver(stream)
	defer rx.stop()
	idle := time.NewTimer(c.o.StreamIdle)
	defer idle.Stop()
	// next returns the stream's next message, or ends the stream if none
	// comes within StreamIdle.
	next := func() (streamMsg, error) {
		idle.Reset(c.o.StreamIdle)
		rx.want <- struct{}{}
		select {
		case m := <-rx.msgs:
			return m, nil
		case <-idle.C:
			c.o.Metrics.UpdateRefused("stalled")
			c.log.Warn("update stream ended", "client", id, "reason", "stalled", "idle", c.o.StreamIdle)
			return streamMsg{}, status.Errorf(codes.DeadlineExceeded, "the update stream sent nothing for %s and was ended", c.o.StreamIdle)
		case <-ctx.Done():
			return streamMsg{}, ctx.Err()
		}
	}
	m, err := next()
	if err != nil {
		return err
	}
	if m.err != nil {
		return status.Error(codes.InvalidArgument, "the update stream ended before its header")
	}
	h := m.header.GetHeader()
	if h == nil {
		c.o.Metrics.UpdateRefused("malformed")
		return status.Error(codes.InvalidArgument, "an update stream must start with its header")
	}
	reply := func(err error) error {
		var rf *refusal
		if errors.As(err, &rf) {
			c.o.Metrics.UpdateRefused(rf.reason)
			c.log.Warn("update refused", "client", id, "round", h.GetRound(), "reason", rf.reason)
			return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Reason: rf.reason + ": " + rf.msg})
		}
		return err
	}
	// Authenticate and bind before reading (and allocating for) the payload.
	if err := s.enrolled(ctx, id); err != nil {
		return err
	}
	if err := c.check(id, h); err != nil {
		return reply(err)
	}
	if c.secure() {
		return reply(refuse("secagg", "round %d is securely aggregated: it takes masked vectors only (SubmitMasked), never an update in plaintext", h.GetRound()))
	}
	c.receiving.Add(1)
	received := false
	defer func() {
		if !received {
			c.receiving.Add(-1)
		}
	}()
	layout, deadline := c.receiveLayout(id, h)
	// The payload's bytes come out of the receive budget before they are
	// allocated, and go back once nothing can read them any more: on a
	// refusal, or once the fold has answered (also if the client left
	// while its update waited to be folded).
	n := int64(4 * layout.Len())
	if err := c.budget.acquire(ctx, n, deadline); err != nil {
		if errors.Is(err, errBudgetTimeout) {
			return reply(refuse("busy", "the coordinator's buffers for updates being received (%d bytes) had no room for this one before round %d's deadline", c.budget.limit, h.GetRound()))
		}
		return err
	}
	// The payload goes into a buffer of an earlier update.
	buf := c.payloads.get(int(n))
	var once sync.Once
	release := func() {
		once.Do(func() {
			c.payloads.put(buf)
			c.budget.release(n)
		})
	}
	queued := false
	defer func() {
		if !queued {
			release()
		}
	}()
	dec, err := wire.NewDecoder(h.GetWeights(), wire.Limits{MaxBytes: uint64(n), Layout: layout, Buffer: *buf})
	if err != nil {
		return reply(refuse("shape", "%v", err))
	}
	for {
		m, err := next()
		if err != nil {
			return err
		}
		if m.err == io.EOF {
			break
		}
		if m.err != nil {
			return m.err
		}
		if err := copyChunk(&m.chunk, dec); err != nil {
			return reply(err)
		}
	}
	update, err := dec.Finish()
	if err != nil {
		return reply(refuse("size", "%v", err))
	}
	// The decoder squared every value as it arrived: the norm of finite
	// float32 values cannot overflow a float64, so it is finite exactly
	// when every value is.
	norm := math.Sqrt(dec.SumSquares())
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		if err := update.CheckFinite(); err != nil {
			return reply(refuse("non_finite", "%v", err))
		}
	}
	if norm > c.o.MaxUpdateNorm || math.IsNaN(norm) {
		return reply(refuse("norm", "the update's L2 norm %.4g is above the bound %.4g", norm, c.o.MaxUpdateNorm))
	}
	// The deadline is the round's, not the loop's: an update complete
	// after it is late even while the loop has not closed the round yet
	// (it does so at its next tick, later on a busy machine).
	c.mu.Lock()
	r := c.round
	c.mu.Unlock()
	if r != nil && r.n == h.GetRound() && !time.Now().Before(r.deadline) {
		return reply(refuse("stale", "the update arrived after round %d's deadline", r.n))
	}
	p := &pending{client: id, round: h.GetRound(), version: h.GetModelVersion(), update: update,
		examples: h.GetExamples(), dp: h.GetDp(), bytes: int(dec.Received()), reply: make(chan result, 1), release: release, arrived: time.Now()}
	if h.GetDp() != nil {
		// Work out the ledger charge here, in parallel with other
		// updates, rather than in the one goroutine that folds them.
		var lb []byte
		if err := c.st.db.QueryRowContext(ctx, `SELECT ledger FROM clients WHERE id = ?`, id).Scan(&lb); err == nil {
			if ch, err := c.charge(id, lb, h.GetDp(), layout.Len()); err == nil {
				p.charged = &ch
			}
		}
	}
	select {
	case c.queue <- p:
		// Queued before it stops counting as being received, so a batch
		// being gathered never misses it. From here the fold releases
		// the buffer once it has answered.
		c.receiving.Add(-1)
		received, queued = true, true
	case <-ctx.Done():
		return ctx.Err()
	}
	var res result
	select {
	case res = <-p.reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	if res.err != nil {
		return reply(res.err)
	}
	return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true, SpentEpsilon: res.spent})
}

// Status answers the operator's certificate with every client's record,
// and a client with its own only (no other client's id, budget, ε or
// updates); both get the rounds, the model version and the last
// evaluation.
func (s *service) Status(ctx context.Context, req *fedpb.StatusRequest) (*fedpb.StatusResponse, error) {
	name, role, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	var st *fedpb.StatusResponse
	switch role {
	case pki.Operator:
		st, err = ReadStatus(ctx, s.c.st.db)
	case pki.Client:
		st, err = ReadClientStatus(ctx, s.c.st.db, name)
	default:
		return nil, status.Errorf(codes.PermissionDenied, "the certificate of %q has the %s role, which may not ask for the status", name, role)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return st, nil
}

// receiver receives a stream's messages in a goroutine of its own, one
// when asked (so flow control holds back a client as before), so that
// SubmitUpdate can give up on a stream that sends nothing: a Recv cannot
// be interrupted, but the handler can return, which ends the stream (and
// with it the Recv) after its status has gone out.
type receiver struct {
	want chan struct{}
	msgs chan streamMsg
	quit chan struct{}
}

// streamMsg is one message of an update stream: the header (the first),
// or a payload chunk, or the error that ended the stream (io.EOF once the
// client has sent everything).
type streamMsg struct {
	header *fedpb.UpdateChunk
	chunk  wire.PayloadChunk
	err    error
}

func newReceiver(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) *receiver {
	rx := &receiver{want: make(chan struct{}), msgs: make(chan streamMsg), quit: make(chan struct{})}
	go func() {
		for first := true; ; first = false {
			select {
			case <-rx.want:
			case <-rx.quit:
				return
			}
			var m streamMsg
			if first {
				m.header, m.err = stream.Recv()
			} else {
				// Received as wire.PayloadChunk, so that the chunk
				// codec can hand over the frames themselves (see
				// wire.ServerOptions).
				m.err = stream.RecvMsg(&m.chunk)
			}
			select {
			case rx.msgs <- m:
			case <-rx.quit:
				m.chunk.Free()
				return
			}
			if m.err != nil {
				return
			}
		}
	}()
	return rx
}

// stop lets the goroutine go: it returns once its Recv does (at the latest
// when the handler has returned and the stream has ended).
func (rx *receiver) stop() { close(rx.quit) }
