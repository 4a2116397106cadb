package dphe

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
)

// Release charges p's ledger with one contribution of a D-coordinate
// update sent in blocks of lanes coordinates (ContributionEvents; a
// refused charge releases nothing) and returns update released under p
// exactly as a User releases it before encrypting: clipped, selected
// (Privacy.Select) or thresholded, with its noise. It is the plaintext of
// a contribution; the key generator reveals the sum of such releases, each
// value clamped to the packing's bound and rounded to its fixed point.
// Simulations that add releases in one process call it; a federation's
// client encrypts its release (User).
func Release(p Privacy, update []float64, lanes int) ([]float64, error) {
	for i, x := range update {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("dphe: release: non-finite value at coordinate %d", i)
		}
	}
	evs, err := ContributionEvents(p, len(update), lanes)
	if err != nil {
		return nil, err
	}
	src := p.Source
	if src == nil {
		if src, err = dp.NewSource(); err != nil {
			return nil, fmt.Errorf("dphe: release: %w", err)
		}
	}
	if _, err := p.Ledger.Charge(p.Principal, evs...); err != nil {
		return nil, fmt.Errorf("dphe: refusing to release: %w", err)
	}
	return p.release(update, lanes, src)
}

// FixedPoint returns x as the key generator decodes it from a packed sum:
// clamped to ±Bound and rounded to a multiple of 2^−fracBits, in units of
// 2^−fracBits (so that sums of such values are exact integers, as the
// plaintexts' lanes are).
func (p *Packing) FixedPoint(x float64, fracBits int) int64 {
	x = max(-p.Bound, min(p.Bound, x))
	return int64(math.Round(math.Ldexp(x, fracBits)))
}
