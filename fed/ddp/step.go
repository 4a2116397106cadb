package ddp

import (
	"fmt"
	"io"
	"math"

	"github.com/veil-privacy/veil/secagg/quant"
)

// Round encodes clients' clipped sums and decodes the unmasked sum of one
// round of a Plan.
type Round struct {
	plan Plan
	q    *quant.Quantizer
}

// NewRound checks plan (its wrap bound included) and prepares the round's
// rotation from its seed, which must be fresh per round and independent of
// the clients' data (quant.RotationSeed of the round's random id).
func NewRound(plan Plan, rotationSeed [32]byte) (*Round, error) {
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	q, err := quant.New(plan.quantConfig(), rotationSeed)
	if err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	return &Round{plan: plan, q: q}, nil
}

// Padded is the length of an encoding.
func (r *Round) Padded() int { return r.q.Padded() }

// Encode is a client's half of a round: its sum of per-unit clipped
// gradients (Dim values, the units Poisson-sampled at the plan's q and
// each clipped to C, no noise) clipped as a whole to the plan's sum clip,
// rotated, scaled to the lattice, randomly rounded, plus the client's
// noise share N_Z(0, σ²) per coordinate, modulo 2^b: what the client masks
// and sends. Every draw comes from rnd (crypto/rand in production).
func (r *Round) Encode(clippedSum []float32, rnd io.Reader) ([]uint32, error) {
	enc, err := r.q.Encode(clippedSum, rnd)
	if err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	return enc, nil
}

// Add adds src to dst coordinate-wise modulo 2^32, what the masked sum's
// unmasking yields for the clients' encodings (only the low b bits are
// read by Decode).
func Add(dst, src []uint32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("ddp: adding encodings of %d and %d values", len(dst), len(src))
	}
	for i, v := range src {
		dst[i] += v
	}
	return nil
}

// Decode is the coordinator's half: the unmasked sum of at least the
// plan's threshold of clients' encodings back to the noisy sum of their
// clipped gradients (Dim values, in gradient units), the release that
// central DP-SGD's step would compute over all their units. The optimiser
// step divides it by the plan's ExpectedBatch (post-processing).
func (r *Round) Decode(sum []uint32) ([]float32, error) {
	v, err := r.q.Decode(sum)
	if err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("ddp: decoded value %d is not finite", i)
		}
		out[i] = float32(x)
	}
	return out, nil
}
