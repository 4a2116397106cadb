package wire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/internal/cputime"
)

// checkWeightsLikeProtobuf decodes b, cut in frames of size bytes, as a
// model chunk with the chunk codec and with protobuf: both refuse it or
// both give the same message (the same data bytes, or the same header).
func checkWeightsLikeProtobuf(t *testing.T, b []byte, size int) {
	t.Helper()
	got, want := &fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: []byte("stale")}}, &fedpb.WeightsChunk{}
	frames := split(b, size)
	gotErr := newChunkCodec().Unmarshal(frames, got)
	frames.Free()
	wantErr := proto.Unmarshal(b, want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("% x in frames of %d: the codec says %v, protobuf %v", b, size, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	if !proto.Equal(got, want) || (got.GetData() == nil) != (want.GetData() == nil) {
		t.Fatalf("% x in frames of %d: the codec decodes %v, protobuf %v", b, size, got, want)
	}
}

// TestWeightsChunkCodecDecodesLikeProtobuf: model chunks as the
// coordinator sends them (the data field alone, in any cut of frames),
// a header, padded lengths, trailing fields, truncations and empty data
// all decode as protobuf decodes them, and a decoded chunk's data does
// not alias the frames (gRPC reuses them).
func TestWeightsChunkCodecDecodesLikeProtobuf(t *testing.T) {
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 5000)
	data, err := proto.Marshal(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: payload}})
	if err != nil {
		t.Fatal(err)
	}
	header, err := proto.Marshal(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Header{Header: sample().Header()}})
	if err != nil {
		t.Fatal(err)
	}
	cases := [][]byte{data, header, append(append([]byte{}, data...), 0x18, 0x01), data[:len(data)-1], {dataTag, 0}, {dataTag, 0x81, 0x00, 0xaa}, {}}
	for _, b := range cases {
		for _, size := range []int{1, 2, 3, 100, 16384, 1 << 20} {
			checkWeightsLikeProtobuf(t, b, size)
		}
	}
	frame := append([]byte{}, data...)
	got := &fedpb.WeightsChunk{}
	if err := newChunkCodec().Unmarshal(split(frame, 4096), got); err != nil {
		t.Fatal(err)
	}
	clear(frame)
	if !bytes.Equal(got.GetData(), payload) {
		t.Fatal("the decoded data changed with the frames it was received in")
	}
}

// FuzzWeightsChunkCodec: whatever bytes arrive, in whatever frames, the
// chunk codec decodes a model chunk exactly as protobuf does.
func FuzzWeightsChunkCodec(f *testing.F) {
	data, _ := proto.Marshal(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: []byte("model bytes")}})
	f.Add(data, 3)
	f.Add([]byte{dataTag, 0x80, 0x01}, 1)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		if size <= 0 || size > 1<<16 {
			size = 5
		}
		checkWeightsLikeProtobuf(t, b, size)
	})
}

// BenchmarkWeightsChunkUnmarshal decodes a model chunk of DefaultChunk
// bytes received in 16 KiB frames, with the chunk codec and with gRPC's
// protobuf codec.
func BenchmarkWeightsChunkUnmarshal(b *testing.B) {
	data, err := proto.Marshal(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: bytes.Repeat([]byte{9}, DefaultChunk)}})
	if err != nil {
		b.Fatal(err)
	}
	frames := split(data, 16<<10)
	cc := newChunkCodec()
	for _, bc := range []struct {
		name string
		f    func(*fedpb.WeightsChunk) error
	}{
		{"chunk-codec", func(m *fedpb.WeightsChunk) error { return cc.Unmarshal(frames, m) }},
		{"protobuf-codec", func(m *fedpb.WeightsChunk) error { return cc.base.Unmarshal(frames, m) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu0 := cputime.Process()
			for b.Loop() {
				var m fedpb.WeightsChunk
				if err := bc.f(&m); err != nil || len(m.GetData()) != DefaultChunk {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
