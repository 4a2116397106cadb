package coord

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// secure reports whether the open round is securely aggregated.
func (c *Coordinator) secure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.round != nil && c.round.sec != nil
}

// secureRoundFor returns the open round if it is round n and securely
// aggregated.
func (c *Coordinator) secureRoundFor(n uint64) (*openRound, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.round
	switch {
	case r == nil || r.n != n:
		return nil, refuse("stale", "round %d is not open", n)
	case r.sec == nil:
		return nil, refuse("secagg", "round %d is not securely aggregated", n)
	case !time.Now().Before(r.deadline):
		return nil, refuse("stale", "round %d is past its deadline", n)
	}
	return r, nil
}

// peerLeaf returns the caller's verified certificate (nil without mutual
// TLS).
func peerLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

// SecAggSend takes a client's key advert, shares or unmasking response in
// a secure round. A message is stored before it is acknowledged; the same
// message sent again is acknowledged again, a different one refused.
func (s *service) SecAggSend(ctx context.Context, m *fedpb.SecAggMessage) (*fedpb.SecAggAck, error) {
	id, err := s.who(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(m.GetProtocolVersion()); err != nil {
		return nil, err
	}
	c := s.c
	ack := func(err error) (*fedpb.SecAggAck, error) {
		if err == nil {
			return &fedpb.SecAggAck{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true}, nil
		}
		var rf *refusal
		if errors.As(err, &rf) {
			c.log.Warn("secure aggregation message refused", "client", id, "round", m.GetRound(), "reason", rf.reason)
			return &fedpb.SecAggAck{ProtocolVersion: fedpb.ProtocolVersion, Reason: rf.reason + ": " + rf.msg}, nil
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	r, err := c.secureRoundFor(m.GetRound())
	if err != nil {
		return ack(err)
	}
	return ack(r.sec.receive(ctx, id, peerLeaf(ctx), m))
}

// SubmitMasked receives a client's masked vector in a secure round: the
// header (bound to the round and model as an update is, with its DP
// metadata and the payload's exact size), then the masked vector's
// encoding in chunks. It is held only until it is stored.
func (s *service) SubmitMasked(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) error {
	ctx := stream.Context()
	id, err := s.who(ctx)
	if err != nil {
		return err
	}
	c := s.c
	if !c.openStream(id) {
		return status.Errorf(codes.ResourceExhausted, "client %q already has an update stream open: a client sends one update at a time", id)
	}
	defer c.closeStream(id)
	// Received in a goroutine, so a stream that sends nothing for
	// StreamIdle is ended (returning ends the stream and its Recv).
	msgs := make(chan *fedpb.UpdateChunk)
	failed := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case msgs <- m:
			case <-quit:
				return
			}
		}
	}()
	idle := time.NewTimer(c.o.StreamIdle)
	defer idle.Stop()
	recv := func() (*fedpb.UpdateChunk, error) {
		idle.Reset(c.o.StreamIdle)
		select {
		case m := <-msgs:
			return m, nil
		case err := <-failed:
			return nil, err
		case <-idle.C:
			c.o.Metrics.UpdateRefused("stalled")
			return nil, status.Errorf(codes.DeadlineExceeded, "the masked vector's stream sent nothing for %s and was ended", c.o.StreamIdle)
		}
	}
	first, err := recv()
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			return err
		}
		return status.Error(codes.InvalidArgument, "the masked vector's stream ended before its header")
	}
	h := first.GetHeader()
	reply := func(err error, spent float64) error {
		if err == nil {
			return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true, SpentEpsilon: spent})
		}
		var rf *refusal
		if errors.As(err, &rf) {
			c.o.Metrics.UpdateRefused(rf.reason)
			c.log.Warn("masked vector refused", "client", id, "round", h.GetRound(), "reason", rf.reason)
			return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Reason: rf.reason + ": " + rf.msg})
		}
		return status.Error(codes.Internal, err.Error())
	}
	if h == nil || h.GetMasked() == nil || h.GetWeights() != nil {
		return reply(refuse("malformed", "a masked vector's stream must start with a header stating the masked vector's size and no weights"), 0)
	}
	if err := s.enrolled(ctx, id); err != nil {
		return err
	}
	if h.GetProtocolVersion() != fedpb.ProtocolVersion {
		return reply(refuse("protocol", "protocol version %d, this coordinator speaks %d", h.GetProtocolVersion(), fedpb.ProtocolVersion), 0)
	}
	// The binding (round, model, selection, not counted) is checked by
	// receiveMasked once it knows the vector is not one it stored already:
	// a client that sent its vector before a restart sends it again.
	r, err := c.secureRoundFor(h.GetRound())
	if err != nil {
		return reply(err, 0)
	}
	c.mu.Lock()
	selected := r.selected[id]
	c.mu.Unlock()
	if !selected {
		return reply(refuse("not_selected", "client %q was not selected for round %d", id, r.n), 0)
	}
	want := r.sec.maskedSize()
	if h.GetMasked().GetTotalBytes() != uint64(want) {
		return reply(refuse("size", "a masked vector of %d bytes; round %d's are %d", h.GetMasked().GetTotalBytes(), r.n, want), 0)
	}
	if err := c.budget.acquire(ctx, int64(want), r.deadline); err != nil {
		if errors.Is(err, errBudgetTimeout) {
			return reply(refuse("busy", "no room for the masked vector before round %d's deadline", r.n), 0)
		}
		return err
	}
	defer c.budget.release(int64(want))
	buf := make([]byte, 0, want)
	for {
		ch, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		d := ch.GetData()
		if len(d) == 0 || len(buf)+len(d) > want {
			return reply(refuse("size", "a masked vector's chunk is empty or goes past the %d bytes announced", want), 0)
		}
		buf = append(buf, d...)
	}
	if len(buf) != want {
		return reply(refuse("size", "the masked vector has %d bytes of the %d announced", len(buf), want), 0)
	}
	spent, err := r.sec.receiveMasked(ctx, id, h, buf)
	return reply(err, spent)
}
