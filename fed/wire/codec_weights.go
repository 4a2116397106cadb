package wire

import (
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
	b := make([]byte, 0, data.Len()-skip)
	for _, f := range data {
		p := f.ReadOnlyData()
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		b = append(b, p[skip:]...)
		skip = 0
	}
	m.Reset()
	m.Part = &fedpb.WeightsChunk_Data{Data: b}
	return nil
}
