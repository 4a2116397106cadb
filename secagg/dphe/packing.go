package dphe

import (
	"fmt"
	"math"
	"math/big"

	"github.com/veil-privacy/veil/secagg/paillier"
)

// Packing puts Lanes fixed-point values in one Paillier plaintext, as
// BatchCrypt (Zhang et al., USENIX ATC 2020) does, where DPHE allows it:
// the update's Coordinates are cut into blocks of Lanes consecutive
// coordinates, and the block, not the coordinate, is what DPHE permutes,
// pads and sums (the round's Dim is the number of blocks). Block b of
// every user covers the same coordinates, so the aggregator's
// multiplication adds lane to lane. A user sends a block when any of its
// coordinates is non-zero.
//
// Each value is clamped to [−Bound, Bound] (post-processing of the noisy
// release) and scaled to an integer q with |q| ≤ Q = ⌈Bound·2^f⌉. A lane is
// LaneBits = bitlen(MaxUsers·Q) + 1 bits wide, so the sum of up to
// MaxUsers users' lanes, at most MaxUsers·Q in magnitude, lies in
// [−2^(w−1), 2^(w−1)): the plaintext Σ_l q_l·2^(l·w) of signed digits then
// decodes exactly, lane by lane, with no carry lost (Check refuses a
// packing whose Lanes·LaneBits exceed the modulus' bits − 3, below the
// n/3 bound of the signed encoding). The key generator refuses rounds of
// more than MaxUsers users and decodes every lane against the bound for
// the round's users, so an overflow is an error, never a wrong sum.
type Packing struct {
	// Coordinates is the update's dimension D.
	Coordinates int
	// Lanes is the number of values per plaintext (≥ 1).
	Lanes int
	// Bound is the largest magnitude a value is sent with (> 0).
	Bound float64
	// MaxUsers is the most users whose sum a lane holds (≥ MinUsers).
	MaxUsers int
}

// maxScaled bounds Bound·2^f so that scaled values are exact in float64.
const maxScaled = 1 << 52

// NewPacking returns the packing with the most lanes a key of pk holds for
// D coordinates, values bounded by bound at fracBits fraction bits, and
// sums of up to maxUsers users.
func NewPacking(pk *paillier.PublicKey, fracBits, coordinates int, bound float64, maxUsers int) (*Packing, error) {
	p := &Packing{Coordinates: coordinates, Lanes: 1, Bound: bound, MaxUsers: maxUsers}
	w, err := p.laneBits(fracBits)
	if err != nil {
		return nil, err
	}
	if pk == nil {
		return nil, fmt.Errorf("dphe: packing: no public key")
	}
	p.Lanes = max(1, min((pk.Bits()-3)/w, coordinates))
	if err := p.Check(pk, fracBits); err != nil {
		return nil, err
	}
	return p, nil
}

// Blocks returns the number of plaintexts per update, ⌈D/Lanes⌉: the
// round's dimension.
func (p *Packing) Blocks() int { return (p.Coordinates + p.Lanes - 1) / p.Lanes }

// laneQ returns Q = ⌈Bound·2^f⌉.
func (p *Packing) laneQ(fracBits int) uint64 { return uint64(math.Ceil(math.Ldexp(p.Bound, fracBits))) }

// laneBits returns the lane width for fracBits, or an error for a bound
// or user count out of range.
func (p *Packing) laneBits(fracBits int) (int, error) {
	if !(p.Bound > 0) || math.IsInf(p.Bound, 0) || math.Ldexp(p.Bound, fracBits) > maxScaled {
		return 0, fmt.Errorf("dphe: packing: bound %g at 2^%d must be positive and at most 2^52 once scaled", p.Bound, fracBits)
	}
	if p.MaxUsers < MinUsers || p.MaxUsers > 1<<20 {
		return 0, fmt.Errorf("dphe: packing: the lanes must hold the sum of %d to %d users, not %d", MinUsers, 1<<20, p.MaxUsers)
	}
	total := new(big.Int).Mul(new(big.Int).SetUint64(p.laneQ(fracBits)), big.NewInt(int64(p.MaxUsers)))
	return total.BitLen() + 1, nil
}

// LaneBits returns the width of one lane at fracBits fraction bits.
func (p *Packing) LaneBits(fracBits int) (int, error) { return p.laneBits(fracBits) }

// Check validates the packing for a key and scale: lanes fit in the
// plaintext with the headroom for MaxUsers users' sum.
func (p *Packing) Check(pk *paillier.PublicKey, fracBits int) error {
	if p == nil {
		return nil
	}
	w, err := p.laneBits(fracBits)
	if err != nil {
		return err
	}
	if p.Coordinates < 1 || p.Coordinates > MaxDim {
		return fmt.Errorf("dphe: packing: %d coordinates outside [1, %d]", p.Coordinates, MaxDim)
	}
	if p.Lanes < 1 || p.Lanes > p.Coordinates {
		return fmt.Errorf("dphe: packing: %d lanes outside [1, %d]", p.Lanes, p.Coordinates)
	}
	if pk != nil && p.Lanes*w > pk.Bits()-3 {
		return fmt.Errorf("dphe: packing: %d lanes of %d bits exceed the %d-bit key's %d usable bits", p.Lanes, w, pk.Bits(), pk.Bits()-3)
	}
	return nil
}

// pack encodes vals (one block, len ≤ Lanes; missing lanes are zero),
// each clamped to ±Bound, into a plaintext in [0, n).
func (p *Packing) pack(pk *paillier.PublicKey, fracBits int, vals []float64) (*big.Int, error) {
	w, err := p.laneBits(fracBits)
	if err != nil {
		return nil, err
	}
	m, q := new(big.Int), new(big.Int)
	for l := len(vals) - 1; l >= 0; l-- {
		x := vals[l]
		if math.IsNaN(x) {
			return nil, fmt.Errorf("dphe: packing: lane %d is not a number", l)
		}
		m.Lsh(m, uint(w))
		m.Add(m, q.SetInt64(p.FixedPoint(x, fracBits)))
	}
	if m.Sign() < 0 {
		m.Add(m, pk.N())
	}
	return m, nil
}

// unpack decodes the plaintext m of a sum of users users' blocks into
// out (len Lanes), checking every lane against the bound users·Q and that
// nothing is left above the last lane.
func (p *Packing) unpack(pk *paillier.PublicKey, fracBits, users int, m *big.Int, out []float64) error {
	w, err := p.laneBits(fracBits)
	if err != nil {
		return err
	}
	s := new(big.Int).Set(m)
	if s.Cmp(pk.MaxPlaintext()) > 0 {
		s.Sub(s, pk.N())
	}
	limit := new(big.Int).Mul(new(big.Int).SetUint64(p.laneQ(fracBits)), big.NewInt(int64(users)))
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(w)), big.NewInt(1))
	half := new(big.Int).Lsh(big.NewInt(1), uint(w-1))
	full := new(big.Int).Lsh(big.NewInt(1), uint(w))
	lane := new(big.Int)
	for l := range out {
		lane.And(s, mask) // two's complement: s mod 2^w in [0, 2^w)
		if lane.Cmp(half) >= 0 {
			lane.Sub(lane, full)
		}
		if new(big.Int).Abs(lane).Cmp(limit) > 0 {
			return fmt.Errorf("%w: lane %d of a packed sum exceeds the bound of %d users", paillier.ErrOverflow, l, users)
		}
		s.Sub(s, lane).Rsh(s, uint(w))
		f, _ := new(big.Float).SetInt(lane).Float64() // |lane| ≤ 2^72: rounded to float64 once
		out[l] = math.Ldexp(f, -fracBits)
	}
	if s.Sign() != 0 {
		return fmt.Errorf("%w: a packed sum has bits above its last lane", paillier.ErrOverflow)
	}
	return nil
}
