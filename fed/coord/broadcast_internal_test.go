package coord

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// chunkSink is a download stream that keeps what is sent.
type chunkSink struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*fedpb.WeightsChunk
}

func (s *chunkSink) Context() context.Context { return s.ctx }

func (s *chunkSink) Send(m *fedpb.WeightsChunk) error {
	s.sent = append(s.sent, m)
	return nil
}

type callerKey struct{}

// TestModelIsEncodedOnceForEveryClient: the round's model is encoded once
// per version, and every client's download sends the same header message
// and chunks that are views of the same payload bytes (the codec then
// writes them without a copy, see wire.ServerOptions): nothing of the
// model is encoded or copied per client.
func TestModelIsEncodedOnceForEveryClient(t *testing.T) {
	const n = 600_000 // 2.4 MB: three chunks
	model := wire.Weights{{Name: "w", Shape: []int{n}, Values: make([]float32, n)}}
	for i := range model[0].Values {
		model[0].Values[i] = float32(i%97) / 97
	}
	c, err := New(Options{StatePath: filepath.Join(t.TempDir(), "state.db"), Init: model, Strategy: strategy.Options{Name: "fedavg"},
		Rounds: 1, Fraction: 1, MinAvailable: 1, MinUpdates: 1, RoundTimeout: 60e9, MaxUpdateNorm: 10,
		Task: Task{LocalSteps: 1, LearningRate: 0.1, Batch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	svc := c.LoopbackService(func(ctx context.Context) (string, error) { return ctx.Value(callerKey{}).(string), nil })
	header, payload := c.encodedModel()
	version := wire.Version(header)
	for _, who := range []string{"alice", "bob", "carol"} {
		if _, err := c.enrol(ctx, who, 100, 1e-5, "identity"); err != nil {
			t.Fatal(err)
		}
		cctx := peer.NewContext(context.WithValue(ctx, callerKey{}, who), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
		sink := &chunkSink{ctx: cctx}
		if err := svc.DownloadModel(&fedpb.ModelRequest{ProtocolVersion: fedpb.ProtocolVersion, ModelVersion: version}, sink); err != nil {
			t.Fatal(err)
		}
		if len(sink.sent) != 1+(len(payload)+wire.DefaultChunk-1)/wire.DefaultChunk {
			t.Fatalf("%s: %d messages for a payload of %d bytes", who, len(sink.sent), len(payload))
		}
		if sink.sent[0].GetHeader() != header {
			t.Errorf("%s was sent a header other than the one encoded for the version", who)
		}
		off := 0
		for k, m := range sink.sent[1:] {
			d := m.GetData()
			if unsafe.SliceData(d) != unsafe.SliceData(payload[off:]) || len(d) != min(wire.DefaultChunk, len(payload)-off) {
				t.Fatalf("%s: chunk %d is not a view of the encoded payload at offset %d", who, k, off)
			}
			off += len(d)
		}
		if h, p := c.encodedModel(); h != header || unsafe.SliceData(p) != unsafe.SliceData(payload) {
			t.Fatalf("the model was encoded again after %s's download", who)
		}
	}
}
