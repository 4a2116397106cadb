package fedbench

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// refuser answers every update from its header alone, without reading
// the payload, as a coordinator refusing a stale update does.
type refuser struct {
	fedpb.UnimplementedCoordinatorServer
}

func (refuser) SubmitUpdate(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Reason: "stale: round 7 is not open"})
}

// A refusal that ends the stream while the client is still sending is
// read as the refusal, not as the io.EOF that Send then returns: a
// payload far larger than gRPC's flow-control windows cannot all be sent
// before the coordinator answers.
func TestSubmitReadsARefusalThatEndsTheStream(t *testing.T) {
	srv := grpc.NewServer()
	fedpb.RegisterCoordinatorServer(srv, refuser{})
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	chunks := make([][]byte, 256) // 64 MiB in all, of one buffer
	buf := make([]byte, 256<<10)
	for i := range chunks {
		chunks[i] = buf
	}
	r, err := submit(&benchClient{name: "client-1", api: fedpb.NewCoordinatorClient(conn), ctx: ctx}, &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: 7}, chunks)
	if err != nil || r.GetAccepted() || !strings.HasPrefix(r.GetReason(), "stale") {
		t.Fatalf("got %v, %v; want the stale refusal", r, err)
	}
}
