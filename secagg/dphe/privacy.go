package dphe

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
)

// Privacy is the differential privacy every contribution of a User
// carries. It is required: secure aggregation alone protects an update
// from the aggregator, not from the key generator, which decrypts the sum
// and so learns a user's update whenever it knows the others' (users who
// send zeros or the same update twice, or collude with it). With
// Privacy, a contribution is a Gaussian mechanism on its own, whatever the
// other users send.
//
// Before encryption, User clips the update to L2 norm Clip, releases it
// with exact discrete Gaussian noise of standard deviation
// NoiseMultiplier·Clip on every one of the round's D coordinates
// (dp.Source.AddGaussian64: snapped to a power-of-two grid, integer noise
// from a CSPRNG), then sets to zero every coordinate whose noisy value is
// at most Threshold·NoiseMultiplier·Clip in magnitude (post-processing of
// the release, so it costs nothing, and it keeps the update sparse for
// DPHE: a coordinate of pure noise survives with probability 2Φ(−Threshold),
// 0.27% at 3). The release is charged to Ledger under Principal before the
// noise is drawn, and refused, with nothing encrypted, if it would exceed
// the budget.
//
// The unit of privacy is the user's whole update: the contribution is
// (ε, δ)-DP, ε as the ledger computes it, between the update being present
// and absent (L2 sensitivity Clip; user-level DP as in DP-FedAvg). Two
// arbitrary updates of norm at most Clip differ by up to 2·Clip, which is
// the guarantee at half the multiplier.
type Privacy struct {
	// Clip is the L2 norm C the update is clipped to (> 0).
	Clip float64
	// NoiseMultiplier σ: the noise standard deviation is σ·C (> 0).
	NoiseMultiplier float64
	// Threshold τ ≥ 0: noisy coordinates of magnitude at most τ·σ·C are
	// sent as zeros. 0 sends every non-zero coordinate (dense).
	Threshold float64
	// Ledger is charged for every contribution (required): a *dp.Ledger,
	// or any Charger (a federation client's own per-data-set ledger).
	Ledger Charger
	// Principal is the ledger entry charged: the data whose update is
	// contributed. It must have a budget in Ledger.
	Principal string
	// Select, if not nil, makes the update sparse by a DP selection
	// instead of Threshold (which must then be 0): see Selection.
	Select *Selection
	// Source draws the noise; nil means a fresh crypto/rand-seeded
	// dp.Source per user (dp.NewSeededSource is for tests only). A Source
	// is not safe for concurrent use: do not share one between users that
	// encrypt at the same time.
	Source *dp.Source
}

// Charger is what a contribution is charged to: *dp.Ledger implements
// it. Charge must record events under principal, or refuse (past the
// budget: an error wrapping dp.ErrBudgetExceeded) leaving the ledger
// unchanged; Budget must fail for a principal the charger does not know.
type Charger interface {
	Budget(principal string) (dp.Budget, error)
	Charge(principal string, events ...dp.Event) (dp.Spent, error)
}

// validate checks the options and that the ledger knows the principal.
func (p *Privacy) validate() error {
	if p == nil {
		return errors.New("dphe: a user needs Privacy (clip, noise multiplier, ledger): the key generator decrypts sums, and without each contribution's own noise a sum with known other contributions reveals the update")
	}
	if !(p.Clip > 0) || math.IsInf(p.Clip, 0) {
		return fmt.Errorf("dphe: privacy: the clip norm must be positive and finite, got %g", p.Clip)
	}
	if !(p.NoiseMultiplier > 0) || math.IsInf(p.NoiseMultiplier, 0) {
		return fmt.Errorf("dphe: privacy: the noise multiplier must be positive and finite, got %g", p.NoiseMultiplier)
	}
	if !(p.Threshold >= 0) || math.IsInf(p.Threshold, 0) {
		return fmt.Errorf("dphe: privacy: the threshold must be ≥ 0 and finite, got %g", p.Threshold)
	}
	if p.Ledger == nil {
		return errors.New("dphe: privacy: every contribution is charged to a ledger; none given")
	}
	if p.Select != nil {
		if p.Threshold != 0 {
			return errors.New("dphe: privacy: a selection and a threshold both sparsify the update; set one")
		}
		if err := p.Select.irene(p.Clip).Validate(); err != nil {
			return fmt.Errorf("dphe: privacy: selection: %w", err)
		}
	}
	if _, err := p.Ledger.Budget(p.Principal); err != nil {
		return fmt.Errorf("dphe: privacy: %w", err)
	}
	return nil
}

// ContributionEvent returns the privacy event of one contribution of a
// D-coordinate update under p: the Gaussian mechanism with the multiplier
// of dp's exact release on its grid (dp.Grid.GaussianMultiplier, at most
// a relative 2^−20 below σ for D ≤ 2^20), what User charges.
func ContributionEvent(p Privacy, dim int) (dp.Event, error) {
	if err := p.validate(); err != nil {
		return dp.Event{}, err
	}
	g, err := dp.GaussianGrid(p.NoiseMultiplier*p.Clip, dim)
	if err != nil {
		return dp.Event{}, fmt.Errorf("dphe: privacy: %w", err)
	}
	mu, err := g.GaussianMultiplier(p.Clip)
	if err != nil {
		return dp.Event{}, fmt.Errorf("dphe: privacy: %w", err)
	}
	ev, err := dp.GaussianEvent(mu, 1)
	if err != nil {
		return dp.Event{}, fmt.Errorf("dphe: privacy: %w", err)
	}
	ev.Label = "dphe contribution"
	return ev, nil
}

// release clips a copy of update to L2 norm p.Clip, then either adds the
// exact noise to every coordinate and applies the threshold, or (Select)
// selects blocks of lanes coordinates and adds the noise to those only.
// The caller has charged the ledger.
func (p *Privacy) release(update []float64, lanes int, src *dp.Source) ([]float64, error) {
	w := p.clip(update)
	if p.Select != nil {
		return p.Select.release(w, lanes, p.NoiseMultiplier*p.Clip, p.Clip, src)
	}
	sd := p.NoiseMultiplier * p.Clip
	src.AddGaussian64(w, sd)
	if t := p.Threshold * sd; t > 0 {
		for i, x := range w {
			if math.Abs(x) <= t {
				w[i] = 0
			}
		}
	}
	return w, nil
}

// clip returns a copy of update scaled to L2 norm at most p.Clip.
func (p *Privacy) clip(update []float64) []float64 {
	w := make([]float64, len(update))
	var ss float64
	for _, x := range update {
		ss += x * x
	}
	scale := 1.0
	if n := math.Sqrt(ss); n > p.Clip {
		scale = p.Clip / n
	}
	for i, x := range update {
		w[i] = x * scale
	}
	return w
}

// ContributionEvents returns the privacy events of one contribution of a
// D-coordinate update under p, sent in blocks of lanes coordinates (1
// without packing): ContributionEvent's Gaussian release alone, or, with
// a selection, the selection's event and the Gaussian release of the
// Count·lanes selected coordinates.
func ContributionEvents(p Privacy, dim, lanes int) ([]dp.Event, error) {
	if p.Select == nil {
		ev, err := ContributionEvent(p, dim)
		if err != nil {
			return nil, err
		}
		return []dp.Event{ev}, nil
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	if lanes < 1 || p.Select.Count > (dim+lanes-1)/lanes {
		return nil, fmt.Errorf("dphe: privacy: selecting %d blocks of %d coordinates from %d coordinates", p.Select.Count, lanes, dim)
	}
	return p.Select.events(p.Clip, p.NoiseMultiplier, lanes)
}
