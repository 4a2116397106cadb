package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/atomicfile"
)

// The last model a client received is kept as "VEILMDL1", the length of
// the weights header (uint32, little-endian), the header (protobuf) and
// the payload; it is checked like a download (sizes, SHA-256) on reading.
var modelMagic = []byte("VEILMDL1")

// maxStoredModel bounds a stored model (1 GiB).
const maxStoredModel = 1 << 30

func writeModel(path string, w wire.Weights) error {
	h, err := proto.Marshal(w.Header())
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	err = atomicfile.Write(path, 0o600, func(out io.Writer) error {
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(h)))
		for _, b := range [][]byte{modelMagic, n[:], h, w.Payload()} {
			if _, err := out.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("client: saving the model: %w", err)
	}
	return nil
}

func readModel(path string) (wire.Weights, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeModel(b)
}

func decodeModel(b []byte) (wire.Weights, error) {
	if len(b) < len(modelMagic)+4 || !bytes.Equal(b[:len(modelMagic)], modelMagic) {
		return nil, errors.New("client: not a stored model")
	}
	b = b[len(modelMagic):]
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, errors.New("client: stored model truncated")
	}
	var h fedpb.WeightsHeader
	if err := proto.Unmarshal(b[:n], &h); err != nil {
		return nil, fmt.Errorf("client: stored model: %w", err)
	}
	payload := b[n:]
	d, err := wire.NewDecoder(&h, wire.Limits{MaxBytes: min(uint64(len(payload)), maxStoredModel)})
	if err != nil {
		return nil, fmt.Errorf("client: stored model: %w", err)
	}
	if err := d.Write(payload); err != nil {
		return nil, fmt.Errorf("client: stored model: %w", err)
	}
	return d.Finish()
}
