// Package clienttest is an adversarial coordinator for the tests of
// federation clients: a real gRPC server over real TLS (a temporary
// authority from package pki) that offers whichever client polls or
// subscribes one scripted round, whatever the client declared when it joined, serves a
// model, and accepts and records any update it is sent. It plays a
// coordinator trying to make a client train under weaker privacy than its
// owner set; a client that keeps its policy refuses the round and sends
// nothing.
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// Coordinator is the adversary.
type Coordinator struct {
	fedpb.UnimplementedCoordinatorServer
	// Addr is its host:port on 127.0.0.1; PKI the folder of its authority,
	// holding ca.crt and NAME.crt, NAME.key for each client name Start was
	// given.
	Addr, PKI string

	model wire.Weights
	task  *fedpb.RoundConfig

	mu        sync.Mutex
	joins     []*fedpb.JoinRequest
	polls     int
	downloads int
	updates   []*fedpb.UpdateHeader
	declines  []*fedpb.DeclineRequest
	// got is closed when the first update arrives.
	got chan struct{}
}

// Start serves the adversary until the test ends. task is the round it
// offers (its protocol version, model version and deadline are filled
// in); model the model it serves; clients the certificate names it issues.
func Start(t testing.TB, task *fedpb.RoundConfig, model wire.Weights, clients ...string) *Coordinator {
	t.Helper()
	c := &Coordinator{PKI: filepath.Join(t.TempDir(), "pki"), model: model, task: proto.Clone(task).(*fedpb.RoundConfig), got: make(chan struct{})}
	c.task.ProtocolVersion = fedpb.ProtocolVersion
	c.task.ModelVersion = wire.Version(model.Header())
	c.task.DeadlineUnixMs = time.Now().Add(10 * time.Minute).UnixMilli()
	ca, err := pki.Init(c.PKI, "adversary")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "coordinator", Role: pki.Server}); err != nil {
		t.Fatal(err)
	}
	for _, n := range clients {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	id, err := pki.LoadIdentity(filepath.Join(c.PKI, "coordinator.crt"), filepath.Join(c.PKI, "coordinator.key"), filepath.Join(c.PKI, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	rev := pki.NewRevocations(filepath.Join(c.PKI, "revoked.crl"), ca.Cert())
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, rev))))
	fedpb.RegisterCoordinatorServer(srv, c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c
}

// Creds returns the client credentials of name (one of Start's clients).
func (c *Coordinator) Creds(t testing.TB, name string) credentials.TransportCredentials {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(c.PKI, name+".crt"), filepath.Join(c.PKI, name+".key"), filepath.Join(c.PKI, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(pki.ClientTLS(id, "localhost"))
}

// Joins returns the join requests received.
func (c *Coordinator) Joins() []*fedpb.JoinRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fedpb.JoinRequest(nil), c.joins...)
}

// Declines returns the declines received.
func (c *Coordinator) Declines() []*fedpb.DeclineRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fedpb.DeclineRequest(nil), c.declines...)
}

// Polls returns the number of times the round was offered: polls
// answered and streams of work opened.
func (c *Coordinator) Polls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.polls
}

// Downloads returns the number of model downloads served.
func (c *Coordinator) Downloads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downloads
}

// Updates returns the headers of the updates received (all accepted).
func (c *Coordinator) Updates() []*fedpb.UpdateHeader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fedpb.UpdateHeader(nil), c.updates...)
}

// Join accepts any client with any budget.
func (c *Coordinator) Join(_ context.Context, req *fedpb.JoinRequest) (*fedpb.JoinResponse, error) {
	c.mu.Lock()
	c.joins = append(c.joins, proto.Clone(req).(*fedpb.JoinRequest))
	c.mu.Unlock()
	return &fedpb.JoinResponse{ProtocolVersion: fedpb.ProtocolVersion, ClientId: "client",
		BudgetEpsilon: req.GetBudgetEpsilon(), BudgetDelta: req.GetBudgetDelta()}, nil
}

// Poll offers the round until an update has arrived, then says the run is
// over.
func (c *Coordinator) Poll(context.Context, *fedpb.PollRequest) (*fedpb.PollResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.polls++
	if len(c.updates) > 0 {
		return &fedpb.PollResponse{ProtocolVersion: fedpb.ProtocolVersion, Reply: &fedpb.PollResponse_Done{Done: "the adversary has what it wanted"}}, nil
	}
	return &fedpb.PollResponse{ProtocolVersion: fedpb.ProtocolVersion, Reply: &fedpb.PollResponse_Task{Task: c.task}}, nil
}

// Subscribe pushes the round, then, once an update has arrived, says the
// run is over.
func (c *Coordinator) Subscribe(_ *fedpb.SubscribeRequest, stream grpc.ServerStreamingServer[fedpb.Push]) error {
	c.mu.Lock()
	c.polls++
	c.mu.Unlock()
	if err := stream.Send(&fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Task{Task: c.task}}); err != nil {
		return err
	}
	select {
	case <-c.got:
		return stream.Send(&fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Done{Done: "the adversary has what it wanted"}})
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// Decline records a client's refusal.
func (c *Coordinator) Decline(_ context.Context, req *fedpb.DeclineRequest) (*fedpb.DeclineResponse, error) {
	c.mu.Lock()
	c.declines = append(c.declines, proto.Clone(req).(*fedpb.DeclineRequest))
	c.mu.Unlock()
	return &fedpb.DeclineResponse{ProtocolVersion: fedpb.ProtocolVersion}, nil
}

// DownloadModel serves the model.
func (c *Coordinator) DownloadModel(_ *fedpb.ModelRequest, stream grpc.ServerStreamingServer[fedpb.WeightsChunk]) error {
	c.mu.Lock()
	c.downloads++
	c.mu.Unlock()
	if err := stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Header{Header: c.model.Header()}}); err != nil {
		return err
	}
	return c.model.Chunks(wire.DefaultChunk, func(b []byte) error {
		return stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: b}})
	})
}

// SubmitUpdate reads an update and accepts it.
func (c *Coordinator) SubmitUpdate(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return errors.New("clienttest: the update stream does not start with a header")
	}
	n := 0
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n += len(ch.GetData())
	}
	if uint64(n) != h.GetWeights().GetTotalBytes() {
		return fmt.Errorf("clienttest: the update has %d bytes, its header says %d", n, h.GetWeights().GetTotalBytes())
	}
	c.mu.Lock()
	if len(c.updates) == 0 {
		close(c.got)
	}
	c.updates = append(c.updates, proto.Clone(h).(*fedpb.UpdateHeader))
	c.mu.Unlock()
	return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true})
}
