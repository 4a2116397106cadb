package wire

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

func newChunkCodec() chunkCodec {
	return chunkCodec{base: encoding.GetCodecV2(grpcproto.Name)}
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
// chunk codec, as SubmitUpdate receives a chunk after the header, and
// with protobuf: both must refuse it, or the codec must hand over the
// same payload bytes (the frames themselves, or protobuf's message), and
// writing them to a decoder must take exactly those bytes.
func checkLikeProtobuf(t *testing.T, b []byte, size int) {
	t.Helper()
	cc := newChunkCodec()
	var got PayloadChunk
	want := &fedpb.UpdateChunk{}
	frames := split(b, size)
	gotErr := cc.Unmarshal(frames, &got)
	frames.Free() // as gRPC does once Unmarshal returns
	wantErr := proto.Unmarshal(b, want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("% x in frames of %d: the codec says %v, protobuf %v", b, size, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if got.msg != nil {
		if !proto.Equal(got.msg, want) || (got.msg.GetData() == nil) != (want.GetData() == nil) {
			t.Fatalf("% x in frames of %d: the codec decodes %v, protobuf %v", b, size, got.msg, want)
		}
	} else if want.GetData() == nil || got.frames.Len()-got.skip != len(want.GetData()) {
		t.Fatalf("% x in frames of %d: the codec kept %d bytes after %d as data, protobuf decodes %v", b, size, got.frames.Len(), got.skip, want)
	}
	// What SubmitUpdate writes to the update's decoder: exactly the
	// data bytes (the decoder's SHA-256 says so), a chunk of no bytes
	// refused for its size, one without data as malformed.
	data := want.GetData()
	pad := make([]byte, (4-len(data)%4)%4)
	if len(data) == 0 {
		pad = make([]byte, 4)
	}
	full := append(append([]byte(nil), data...), pad...)
	sum := sha256.Sum256(full)
	h := &fedpb.WeightsHeader{ProtocolVersion: fedpb.ProtocolVersion, TotalBytes: uint64(len(full)),
		Tensors: []*fedpb.TensorSpec{{Name: "w", Shape: []int64{int64(len(full) / 4)}}}, Sha256: sum[:]}
	dec, err := NewDecoder(h, Limits{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	werr := got.CopyTo(dec)
	switch {
	case data == nil:
		if !errors.Is(werr, ErrSecondHeader) {
			t.Fatalf("% x: a chunk without data was taken: %v", b, werr)
		}
		return
	case len(data) == 0:
		if !errors.Is(werr, ErrRefused) {
			t.Fatalf("% x: an empty chunk was taken: %v", b, werr)
		}
		return
	case werr != nil:
		t.Fatalf("% x in frames of %d: %v", b, size, werr)
	}
	if err := dec.Write(pad); len(pad) > 0 && err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Finish(); err != nil {
		t.Fatalf("% x in frames of %d: the decoder did not get the data bytes: %v", b, size, err)
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
	// The fast path takes the common chunk: the frames themselves.
	data := chunkSeeds(t)[0]
	var pc PayloadChunk
	if err := newChunkCodec().Unmarshal(split(data, 16), &pc); err != nil || pc.msg != nil || pc.frames.Len()-pc.skip != 300 {
		t.Fatalf("a payload chunk is not kept as its frames (%v, %d bytes after %d)", err, pc.frames.Len(), pc.skip)
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

// chunkMessage is what both chunk types have in common.
type chunkMessage interface {
	proto.Message
	GetData() []byte
}

// checkEncodesLikeProtobuf marshals each message with the chunk codec
// (sent without copying its bytes) and requires exactly protobuf's
// encoding; read back, each must equal what was sent (fresh makes an empty
// message of the same type).
func checkEncodesLikeProtobuf[M chunkMessage](t *testing.T, msgs []M, fresh func() M) {
	t.Helper()
	cc := newChunkCodec()
	for _, m := range msgs {
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
		back := fresh()
		if err := cc.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%d data bytes: read back as %v (%v)", len(m.GetData()), back, err)
		}
		got.Free()
	}
}

// TestChunkCodecEncodesUpdatesLikeProtobuf: a client's update chunks,
// sent without copying their bytes (DialOptions), are on the wire exactly
// what protobuf encodes.
func TestChunkCodecEncodesUpdatesLikeProtobuf(t *testing.T) {
	checkEncodesLikeProtobuf(t, []*fedpb.UpdateChunk{
		{Part: &fedpb.UpdateChunk_Data{Data: []byte{7}}},
		{Part: &fedpb.UpdateChunk_Data{Data: bytes.Repeat([]byte{1, 2, 3, 4}, 1<<18)}},
		{Part: &fedpb.UpdateChunk_Data{Data: []byte{}}},
		{Part: &fedpb.UpdateChunk_Header{Header: &fedpb.UpdateHeader{ProtocolVersion: 1, Round: 8}}},
		{},
	}, func() *fedpb.UpdateChunk { return &fedpb.UpdateChunk{} })
}

// TestChunkCodecEncodesLikeProtobuf: model chunks, sent without copying
// their bytes, are on the wire exactly what protobuf encodes.
func TestChunkCodecEncodesLikeProtobuf(t *testing.T) {
	checkEncodesLikeProtobuf(t, []*fedpb.WeightsChunk{
		{Part: &fedpb.WeightsChunk_Data{Data: []byte{7}}},
		{Part: &fedpb.WeightsChunk_Data{Data: bytes.Repeat([]byte{1, 2, 3, 4}, 1<<18)}},
		{Part: &fedpb.WeightsChunk_Data{Data: []byte{}}},
		{Part: &fedpb.WeightsChunk_Header{Header: &fedpb.WeightsHeader{ProtocolVersion: 1, TotalBytes: 8}}},
		{},
	}, func() *fedpb.WeightsChunk { return &fedpb.WeightsChunk{} })
}

// scribblingPool is a gRPC buffer pool that counts the buffers handed
// back and overwrites them, as their next user would.
type scribblingPool struct{ puts int }

func (p *scribblingPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *scribblingPool) Put(b *[]byte) {
	p.puts++
	for i := range *b {
		(*b)[i] = 0xee
	}
}

// TestPayloadChunkHoldsItsFrames: the frames a payload chunk keeps are not
// handed back to gRPC's pool when gRPC frees its own reference (after
// Unmarshal), so no other message can overwrite them before SubmitUpdate
// has written them to the update's decoder; and CopyTo hands every one
// back, whether the decoder takes the bytes or refuses them.
func TestPayloadChunkHoldsItsFrames(t *testing.T) {
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1024)
	msg, err := proto.Marshal(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: payload}})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	h := &fedpb.WeightsHeader{ProtocolVersion: fedpb.ProtocolVersion, TotalBytes: uint64(len(payload)),
		Tensors: []*fedpb.TensorSpec{{Name: "w", Shape: []int64{int64(len(payload) / 4)}}}, Sha256: sum[:]}
	for _, refuse := range []bool{false, true} {
		pool := &scribblingPool{}
		var frames mem.BufferSlice
		pooled := 0 // frames below gRPC's pooling threshold are not pooled
		for b := msg; len(b) > 0; {
			n := min(2048, len(b))
			piece := pool.Get(n)
			copy(*piece, b[:n])
			frames = append(frames, mem.NewBuffer(piece, pool))
			if !mem.IsBelowBufferPoolingThreshold(n) {
				pooled++
			}
			b = b[n:]
		}
		var pc PayloadChunk
		if err := newChunkCodec().Unmarshal(frames, &pc); err != nil || pc.msg != nil {
			t.Fatalf("the chunk was not kept as its frames: %v", err)
		}
		frames.Free() // what gRPC does when Unmarshal returns
		if pool.puts != 0 {
			t.Fatalf("%d frames went back to the pool while the chunk holds them", pool.puts)
		}
		lim := Limits{MaxBytes: 1 << 20}
		if refuse {
			h2 := &fedpb.WeightsHeader{ProtocolVersion: fedpb.ProtocolVersion, TotalBytes: 16,
				Tensors: []*fedpb.TensorSpec{{Name: "w", Shape: []int64{4}}}, Sha256: sum[:]}
			dec, err := NewDecoder(h2, lim)
			if err != nil {
				t.Fatal(err)
			}
			if err := pc.CopyTo(dec); !errors.Is(err, ErrRefused) {
				t.Fatalf("an overlong chunk: %v", err)
			}
		} else {
			dec, err := NewDecoder(h, lim)
			if err != nil {
				t.Fatal(err)
			}
			if err := pc.CopyTo(dec); err != nil {
				t.Fatal(err)
			}
			if _, err := dec.Finish(); err != nil {
				t.Fatalf("the frames changed before they were written: %v", err)
			}
		}
		if pooled < 2 || pool.puts != pooled {
			t.Fatalf("refused %v: %d of %d pooled frames handed back after CopyTo", refuse, pool.puts, pooled)
		}
	}
}
