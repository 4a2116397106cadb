package coord

import (
	"encoding/binary"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// ServerOptions returns the options a gRPC server serving this
// coordinator should be created with (besides its credentials): a codec
// that sends model chunks without copying them (see chunkCodec.Marshal)
// and reads the payload chunks of submitted updates straight from the
// received HTTP/2 frames into recycled buffers. gRPC's protobuf codec
// first copies a message's frames into one (cleared) buffer, and protobuf
// then copies the chunk's bytes out of it into a new slice: two copies
// and two megabyte-sized allocations per chunk, where this codec makes
// one copy into a buffer that SubmitUpdate hands back once the chunk is
// in the update's payload. Every other message, and any chunk not in the
// one encoding this codec reads itself, goes to the protobuf codec.
func (c *Coordinator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(chunkCodec{base: encoding.GetCodecV2(proto.Name), chunks: &c.chunks})}
}

// chunkCodec is the protobuf codec with a fast path for UpdateChunk
// messages holding payload bytes.
type chunkCodec struct {
	base   encoding.CodecV2
	chunks *bufferPool
}

func (cc chunkCodec) Name() string { return cc.base.Name() }

// Marshal encodes v. A model chunk holding payload bytes (what
// DownloadModel sends) is encoded without copying them: its key and
// length, then the bytes themselves, which are the coordinator's encoded
// model, never changed once made (a new model version is a new slice).
// The bytes on the wire are exactly protobuf's.
func (cc chunkCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*fedpb.WeightsChunk); ok {
		if b := m.GetData(); len(b) > 0 && len(m.ProtoReflect().GetUnknown()) == 0 {
			head := binary.AppendUvarint([]byte{dataTag}, uint64(len(b)))
			return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(b)}, nil
		}
	}
	return cc.base.Marshal(v)
}

// dataTag is the key of field 2 (data), length-delimited, in both
// UpdateChunk and WeightsChunk.
const dataTag = 2<<3 | 2

// Unmarshal decodes data into v. An UpdateChunk whose encoding is exactly
// one non-empty data field (what every client sends) is read here: its
// bytes are copied from the frames into a buffer from the coordinator's
// pool; anything else is left to the protobuf codec, so the result is
// always what protobuf would decode (FuzzChunkCodec checks that).
func (cc chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*fedpb.UpdateChunk)
	if !ok {
		return cc.base.Unmarshal(data, v)
	}
	if b, ok := cc.readData(data); ok {
		protov2.Reset(m)
		m.Part = &fedpb.UpdateChunk_Data{Data: b}
		return nil
	}
	return cc.base.Unmarshal(data, v)
}

// readData returns the payload bytes of a chunk encoded as one non-empty
// data field, or false.
func (cc chunkCodec) readData(data mem.BufferSlice) ([]byte, bool) {
	total := data.Len()
	if total < 3 {
		return nil, false
	}
	r := data.Reader()
	defer r.Close()
	if tag, err := r.ReadByte(); err != nil || tag != dataTag {
		return nil, false
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n == 0 || n != uint64(r.Remaining()) {
		return nil, false
	}
	// Only the varint's minimal encoding is read here (protobuf also
	// accepts padded ones, which the fallback handles).
	if uint64(total) != 1+uint64(uvarintLen(n))+n {
		return nil, false
	}
	buf := cc.chunks.get(int(n))
	b := (*buf)[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		cc.chunks.put(buf)
		return nil, false
	}
	return b, true
}

func uvarintLen(n uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], n)
}

// recycleChunk hands a chunk's bytes back to the pool once they have been
// copied into the update's payload. Chunks decoded by protobuf (without
// the codec) are recycled too: nothing else refers to them either.
func (c *Coordinator) recycleChunk(b []byte) {
	if cap(b) < 1<<16 {
		return
	}
	b = b[:0]
	c.chunks.put(&b)
}

var _ encoding.CodecV2 = chunkCodec{}
