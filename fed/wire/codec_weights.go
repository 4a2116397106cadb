package wire

import (
	"bytes"

	"google.golang.org/grpc/mem"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// unmarshalWeights decodes a model chunk (what a client receives from
// DownloadModel). A chunk that is exactly one non-empty data field is
// copied once, from the received frames into its own slice; gRPC's
// protobuf codec would first copy the frames into one pooled (cleared)
// buffer and protobuf then copy the bytes out of it, two copies of each
// megabyte-sized chunk. Anything else is decoded by protobuf, so the
// result is always what protobuf decodes (FuzzWeightsChunkCodec).
func (cc chunkCodec) unmarshalWeights(data mem.BufferSlice, m *fedpb.WeightsChunk) error {
	skip, ok := dataField(data)
	if !ok {
		return cc.base.Unmarshal(data, m)
	}
	pieces := make([][]byte, 0, len(data))
	for _, f := range data {
		p := f.ReadOnlyData()
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		pieces = append(pieces, p[skip:])
		skip = 0
	}
	m.Reset()
	// bytes.Join allocates without clearing what it then overwrites
	// (make would clear the megabyte first).
	m.Part = &fedpb.WeightsChunk_Data{Data: bytes.Join(pieces, nil)}
	return nil
}
