package dphe

import (
	"errors"
	"fmt"
	"math"

	"github.com/veil-privacy/veil/dp"
)

// maxCalibratedMultiplier bounds NoiseMultiplierFor's search.
const maxCalibratedMultiplier = 1e6

// NoiseMultiplierFor returns the smallest noise multiplier σ, to a
// relative 1e-4 and on the safe side, with which rounds contributions
// under p (its NoiseMultiplier and Ledger ignored), each of a
// dim-coordinate update sent in blocks of lanes coordinates (1 without
// packing), compose to at most b.Epsilon at b.Delta: the events
// ContributionEvents charges, rounds times, on a Rényi accountant over
// dp's default orders, as a ledger composes them. It fails when no σ
// reaches the budget (the selection alone, charged every round whatever
// σ is, may already exceed it).
func NoiseMultiplierFor(p Privacy, dim, lanes, rounds int, b dp.Budget) (float64, error) {
	if err := b.Validate(); err != nil {
		return 0, fmt.Errorf("dphe: calibration: %w", err)
	}
	if rounds < 1 {
		return 0, fmt.Errorf("dphe: calibration: the rounds must be positive, got %d", rounds)
	}
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		return 0, err
	}
	const principal = "calibration"
	if err := l.SetBudget(principal, dp.Budget{Epsilon: math.MaxFloat64, Delta: b.Delta}); err != nil {
		return 0, err
	}
	p.Ledger, p.Principal = l, principal
	epsAt := func(sigma float64) (float64, error) {
		p.NoiseMultiplier = sigma
		evs, err := ContributionEvents(p, dim, lanes)
		if err != nil {
			return 0, err
		}
		a, err := dp.NewAccountant(nil)
		if err != nil {
			return 0, err
		}
		for range rounds {
			if err := a.Add(evs...); err != nil {
				return 0, err
			}
		}
		e, _, err := a.Epsilon(b.Delta)
		return e, err
	}
	lo, hi := 0.0, 1.0
	for {
		e, err := epsAt(hi)
		if err != nil {
			return 0, fmt.Errorf("dphe: calibration: %w", err)
		}
		if e <= b.Epsilon {
			break
		}
		lo, hi = hi, 2*hi
		if hi > maxCalibratedMultiplier {
			return 0, errors.New("dphe: calibration: no noise multiplier up to 1e6 keeps the rounds within the budget (the selection's own charge may exceed it: lower its ε or the rounds)")
		}
	}
	for hi-lo > 1e-4*hi {
		mid := (lo + hi) / 2
		e, err := epsAt(mid)
		if err != nil {
			return 0, fmt.Errorf("dphe: calibration: %w", err)
		}
		if e <= b.Epsilon {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}
