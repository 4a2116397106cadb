package coord

import (
	"errors"

	"google.golang.org/grpc"

	"github.com/veil-privacy/veil/fed/wire"
)

// ServerOptions returns the options a gRPC server serving this
// coordinator should be created with (besides its credentials): the
// federation's chunk codec, no read buffer of gRPC's own and the
// keepalives of the clients' Subscribe streams (see wire.ServerOptions).
func (c *Coordinator) ServerOptions() []grpc.ServerOption {
	return wire.ServerOptions()
}

// copyChunk writes a payload chunk of an update stream to the update's
// decoder, and says why it refuses one: a second header is malformed, a
// chunk the decoder does not take (empty, or past the declared size) is
// refused for its size.
func copyChunk(m *wire.PayloadChunk, dec *wire.Decoder) error {
	err := m.CopyTo(dec)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wire.ErrSecondHeader):
		return refuse("malformed", "%v", err)
	default:
		return refuse("size", "%v", err)
	}
}
