package wire

import (
	"encoding/binary"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// ServerOptions returns the options a gRPC server serving the federation
// (the coordinator) should be created with (besides its credentials):
//
//   - a codec that sends model chunks without copying them (see
//     chunkCodec.Marshal) and hands the payload chunks of submitted
//     updates over as the received HTTP/2 frames themselves (see
//     chunkCodec.Unmarshal). gRPC's protobuf codec first copies a
//     message's frames into one (cleared) buffer, and protobuf then copies
//     the chunk's bytes out of it into a new slice: two copies and two
//     megabyte-sized allocations per chunk, where the coordinator copies the
//     bytes once, from the frames into the update's buffer, hashing and
//     squaring them while they are in the cache (Decoder).
//   - no read buffer of gRPC's own (ReadBufferSize 0): the coordinator
//     serves over TLS, whose connection already buffers what it has read
//     and decrypted, so gRPC's buffer would only add one more copy of
//     every byte received.
//   - keepalives for the clients' long-lived Subscribe streams: the
//     server pings a connection idle for KeepaliveTime and drops it if no
//     answer comes within KeepaliveTimeout, and lets clients ping as
//     often as every KeepaliveTime/6.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(chunkCodec{base: encoding.GetCodecV2(proto.Name)}), grpc.ReadBufferSize(0),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 6, PermitWithoutStream: true})}
}

// Keepalives of the connection between a client and its coordinator: a
// side pings a connection idle for KeepaliveTime and considers it broken
// if the ping is not answered within KeepaliveTimeout, so a client whose
// Subscribe stream died silently (a NAT forgot it, a coordinator host
// vanished) notices and reconnects.
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
)

// chunkCodec is the protobuf codec with fast paths for chunks holding
// payload bytes.
type chunkCodec struct {
	base encoding.CodecV2
}

func (cc chunkCodec) Name() string { return cc.base.Name() }

// DialOptions returns the options a client of the coordinator should
// dial with (besides its credentials): a codec that sends the payload
// chunks of an update without copying them into a new message buffer
// first (see chunkCodec.Marshal), which saves a copy and a cleared
// megabyte-sized allocation per chunk. A chunk's bytes must not change
// until its Send has returned and the stream is done with it, which
// holds for payloads that are made once per update and only read.
//
// It also sets the keepalives (KeepaliveTime, KeepaliveTimeout) that
// keep a client's Subscribe stream checked while it waits.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(chunkCodec{base: encoding.GetCodecV2(proto.Name)})),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout})}
}

// Marshal encodes v. A chunk holding payload bytes (a model chunk that
// DownloadModel sends, or an update chunk that a client sends) is encoded
// without copying them: its key and length, then the bytes themselves,
// which are the coordinator's encoded model or the client's encoded
// update, never changed once made (a new model version is a new slice).
// The bytes on the wire are exactly protobuf's.
func (cc chunkCodec) Marshal(v any) (mem.BufferSlice, error) {
	var b []byte
	switch m := v.(type) {
	case *fedpb.WeightsChunk:
		if len(m.ProtoReflect().GetUnknown()) == 0 {
			b = m.GetData()
		}
	case *fedpb.UpdateChunk:
		if len(m.ProtoReflect().GetUnknown()) == 0 {
			b = m.GetData()
		}
	}
	if len(b) > 0 {
		head := binary.AppendUvarint([]byte{dataTag}, uint64(len(b)))
		return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(b)}, nil
	}
	return cc.base.Marshal(v)
}

// dataTag is the key of field 2 (data), length-delimited, in both
// UpdateChunk and WeightsChunk.
const dataTag = 2<<3 | 2

// Unmarshal decodes data into v. A PayloadChunk whose encoding is exactly
// one non-empty data field (what every client sends) keeps the received
// frames themselves, with a reference of its own, so that SubmitUpdate
// copies the bytes once, from the frames into the update's buffer;
// anything else is decoded by protobuf, so the result is always what
// protobuf would decode (FuzzChunkCodec checks that).
func (cc chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*PayloadChunk)
	if !ok {
		return cc.base.Unmarshal(data, v)
	}
	*m = PayloadChunk{}
	if skip, ok := dataField(data); ok {
		data.Ref()
		m.frames, m.skip = data, skip
		return nil
	}
	m.msg = &fedpb.UpdateChunk{}
	return cc.base.Unmarshal(data, m.msg)
}

// PayloadChunk is an UpdateChunk as the coordinator receives the chunks
// after the header (with stream.RecvMsg, on a server made with
// ServerOptions): either the received frames of a chunk that is one
// non-empty data field (frames, whose first skip bytes are the field's
// key and length), or the message as protobuf decodes it (msg).
type PayloadChunk struct {
	frames mem.BufferSlice
	skip   int
	msg    *fedpb.UpdateChunk
}

// ErrSecondHeader is returned by PayloadChunk.CopyTo for a chunk that
// holds no payload bytes: a second header in an update stream, which is
// malformed.
var ErrSecondHeader = errors.New("a second header in the update stream")

// CopyTo writes the chunk's payload bytes to dec, piece by piece as the
// frames hold them, and releases the frames. A chunk decoded by protobuf
// that holds no data (a second header) gives ErrSecondHeader; an error of
// dec.Write (more bytes than announced, an empty chunk) is returned as
// it is.
func (m *PayloadChunk) CopyTo(dec *Decoder) error {
	if m.msg != nil {
		data := m.msg.GetData()
		if data == nil {
			return ErrSecondHeader
		}
		return dec.Write(data)
	}
	defer m.frames.Free()
	skip := m.skip
	for _, f := range m.frames {
		b := f.ReadOnlyData()
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		b, skip = b[skip:], 0
		if err := dec.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Free releases the frames of a chunk that is not copied anywhere.
func (m *PayloadChunk) Free() {
	if m.frames != nil {
		m.frames.Free()
	}
}

// dataField reports whether data is exactly one non-empty data field
// with a minimally encoded length, and how many bytes its key and length
// take. It reads only those bytes.
func dataField(data mem.BufferSlice) (int, bool) {
	total := data.Len()
	if total < 3 {
		return 0, false
	}
	r := data.Reader()
	defer r.Close()
	if tag, err := r.ReadByte(); err != nil || tag != dataTag {
		return 0, false
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n == 0 || n != uint64(r.Remaining()) {
		return 0, false
	}
	// Only the varint's minimal encoding is read here (protobuf also
	// accepts padded ones, which the fallback handles).
	skip := 1 + uvarintLen(n)
	if uint64(total) != uint64(skip)+n {
		return 0, false
	}
	return skip, true
}

func uvarintLen(n uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], n)
}

var _ encoding.CodecV2 = chunkCodec{}
