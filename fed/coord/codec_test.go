package coord

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

func newChunkCodec() chunkCodec {
	return chunkCodec{base: encoding.GetCodecV2(grpcproto.Name), chunks: &bufferPool{}}
}

// split cuts b into a BufferSlice of pieces of at most size bytes, as
// HTTP/2 frames deliver a message.
func split(b []byte, size int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(size, len(b))
		s = append(s, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return s
}

// checkLikeProtobuf decodes b (cut in frames of size bytes) with the
// chunk codec and with protobuf: both must refuse it, or both must give
// the same message.
func checkLikeProtobuf(t *testing.T, b []byte, size int) {
	t.Helper()
	cc := newChunkCodec()
	got, want := &fedpb.UpdateChunk{}, &fedpb.UpdateChunk{}
	gotErr := cc.Unmarshal(split(b, size), got)
	wantErr := proto.Unmarshal(b, want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("% x in frames of %d: the codec says %v, protobuf %v", b, size, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if !proto.Equal(got, want) || (got.GetData() == nil) != (want.GetData() == nil) || !bytes.Equal(got.GetData(), want.GetData()) {
		t.Fatalf("% x in frames of %d: the codec decodes %v, protobuf %v", b, size, got, want)
	}
}

func chunkSeeds(t testing.TB) [][]byte {
	data, err := proto.Marshal(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: bytes.Repeat([]byte{1, 2, 3}, 100)}})
	if err != nil {
		t.Fatal(err)
	}
	header, err := proto.Marshal(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: &fedpb.UpdateHeader{ProtocolVersion: 1, Round: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{
		data,
		header,
		{dataTag, 0},                         // empty data
		{dataTag, 0x82, 0x00, 7, 8},          // a padded length varint (protobuf accepts it)
		{dataTag, 3, 1, 2},                   // truncated
		{dataTag, 1, 9, 0x08, 1},             // data, then an unknown varint field
		{dataTag, 1, 9, dataTag, 2, 5, 6},    // data twice: the last wins
		{dataTag, 2, 5, 6, 0x0a, 2, 0x08, 1}, // data, then a header: the header wins
		{dataTag, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // an absurd length
		{},
	}
}

// TestChunkCodecDecodesLikeProtobuf: every seed, in frames of every size,
// decodes as protobuf decodes it.
func TestChunkCodecDecodesLikeProtobuf(t *testing.T) {
	for _, b := range chunkSeeds(t) {
		for _, size := range []int{1, 2, 3, 7, 1 << 20} {
			checkLikeProtobuf(t, b, size)
		}
	}
	// The fast path takes the common chunk (and hands out pooled memory).
	data := chunkSeeds(t)[0]
	cc := newChunkCodec()
	if b, ok := cc.readData(split(data, 16)); !ok || len(b) != 300 {
		t.Fatalf("a payload chunk is not read by the fast path (%d bytes, %v)", len(b), ok)
	}
}

// FuzzChunkCodec: for any bytes cut in any frame size, the chunk codec
// decodes an UpdateChunk exactly as protobuf does, or refuses it as
// protobuf does.
func FuzzChunkCodec(f *testing.F) {
	for _, b := range chunkSeeds(f) {
		f.Add(b, uint8(5))
	}
	f.Fuzz(func(t *testing.T, b []byte, size uint8) {
		checkLikeProtobuf(t, b, int(size)+1)
	})
}

// TestChunkCodecEncodesLikeProtobuf: model chunks, sent without copying
// their bytes, are on the wire exactly what protobuf encodes.
func TestChunkCodecEncodesLikeProtobuf(t *testing.T) {
	cc := newChunkCodec()
	for _, m := range []*fedpb.WeightsChunk{
		{Part: &fedpb.WeightsChunk_Data{Data: []byte{7}}},
		{Part: &fedpb.WeightsChunk_Data{Data: bytes.Repeat([]byte{1, 2, 3, 4}, 1<<18)}},
		{Part: &fedpb.WeightsChunk_Data{Data: []byte{}}},
		{Part: &fedpb.WeightsChunk_Header{Header: &fedpb.WeightsHeader{ProtocolVersion: 1, TotalBytes: 8}}},
		{},
	} {
		got, err := cc.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Errorf("%d data bytes: the codec writes % x…, protobuf % x…", len(m.GetData()), got.Materialize()[:min(8, got.Len())], want[:min(8, len(want))])
		}
		back := &fedpb.WeightsChunk{}
		if err := cc.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%d data bytes: read back as %v (%v)", len(m.GetData()), back, err)
		}
		got.Free()
	}
}
