package collab

import (
	"fmt"
	"math/bits"
)

// TensorShape names one tensor of a message in the federation's weights
// encoding.
type TensorShape struct {
	Name  string
	Shape []int
}

// WireBytes is the size of a weights message in the federation's
// encoding (package fed/wire, which collab may not import): the
// WeightsHeader protobuf (protocol version 1, each tensor's name and
// shape, the payload's byte count and its SHA-256) and the payload of
// 4 bytes per float32 value. It counts the plaintext encoding; neither
// the chunk and gRPC framing, TLS nor secure aggregation's masking
// (1.029× for a 557,824-value update, docs/results.md) are included. A test of cmd/veil/cli
// checks it against fed/wire's encoding.
func WireBytes(tensors []TensorShape) int64 {
	const protocolVersion = 1
	values := 0
	header := field(varintLen(protocolVersion))
	for _, t := range tensors {
		n, packed := 1, 0
		for _, d := range t.Shape {
			n *= d
			packed += varintLen(uint64(d))
		}
		values += n
		spec := 0
		if t.Name != "" {
			spec += field(len(t.Name) + varintLen(uint64(len(t.Name))))
		}
		if packed > 0 {
			spec += field(packed + varintLen(uint64(packed)))
		}
		header += field(spec + varintLen(uint64(spec)))
	}
	if values > 0 {
		header += field(varintLen(uint64(4 * values)))
	}
	header += field(32 + varintLen(32))
	return int64(header) + 4*int64(values)
}

// field is the size of a protobuf field of number < 16 (a one-byte key)
// whose value (with its length prefix, if any) takes n bytes.
func field(n int) int { return 1 + n }

// varintLen is the length of v as a protobuf varint.
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// PsiWireBytes is the wire size (WireBytes) of ψ's parameters: the model
// a client downloads, or the update it uploads, in one round.
func PsiWireBytes(ψ *Psi) int64 {
	p := ψ.Params()
	ts := make([]TensorShape, p.Len())
	for i := range ts {
		s := p.Spec(i)
		ts[i] = TensorShape{Name: s.Name, Shape: s.Shape}
	}
	return WireBytes(ts)
}

// V0Name is the tensor name V₀ would carry in W₀'s exchange.
const V0Name = "w0/v0"

// V0WireBytes is the wire size of V₀ (dim × dim, float32): one library's
// clipped gradient sent, or the stepped V₀ received, in one step of W₀'s
// exchange.
func V0WireBytes(dim int) int64 {
	return WireBytes([]TensorShape{{Name: V0Name, Shape: []int{dim, dim}}})
}

// BootstrapBytes is what one user's device sends and receives if ψ's
// bootstrapping of epochs epochs ran federated as built (tagging/fedjoin:
// FedAvg rounds of whole local epochs), one round per epoch: per round,
// ψ's download and its update's upload (PsiWireBytes each).
func BootstrapBytes(ψ *Psi, epochs int) (int64, error) {
	if epochs < 0 {
		return 0, fmt.Errorf("collab: bootstrapping epochs must not be negative, got %d", epochs)
	}
	return int64(epochs) * 2 * PsiWireBytes(ψ), nil
}

// W0Bytes is what one library sends and receives in W₀'s private
// exchange (SharedMetricDP) of steps steps on dim-value outputs of ψ: per
// step, its clipped gradient of V₀ up and the stepped V₀ down.
func W0Bytes(dim, steps int) (int64, error) {
	if dim < 1 || steps < 0 {
		return 0, fmt.Errorf("collab: W₀'s exchange needs a positive size and steps ≥ 0, got %d and %d", dim, steps)
	}
	return int64(steps) * 2 * V0WireBytes(dim), nil
}
