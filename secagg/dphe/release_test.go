package dphe_test

import (
	"errors"
	"math"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// releaseLedger is a ledger with budget eps at δ = 1e-5 for "data".
func releaseLedger(t *testing.T, eps float64) *dp.Ledger {
	t.Helper()
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("data", dp.Budget{Epsilon: eps, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNoiseMultiplierFor checks the calibration against a ledger charged
// independently: rounds contributions at the σ returned fit the budget,
// and at σ 0.1% smaller they do not (the ledger refuses the last one).
func TestNoiseMultiplierFor(t *testing.T) {
	const dim, lanes, rounds = 1000, 10, 4
	p := dphe.Privacy{Clip: 0.5, Select: &dphe.Selection{Epsilon: 0.5, Delta: 1e-5, Count: 20}}
	sigma, err := dphe.NoiseMultiplierFor(p, dim, lanes, rounds, dp.Budget{Epsilon: 8, Delta: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sigma float64
		fits  bool
	}{{sigma, true}, {sigma * 0.999, false}} {
		l := releaseLedger(t, 8)
		q := p
		q.NoiseMultiplier, q.Ledger, q.Principal = c.sigma, l, "data"
		evs, err := dphe.ContributionEvents(q, dim, lanes)
		if err != nil {
			t.Fatal(err)
		}
		var last error
		for range rounds {
			_, last = l.Charge("data", evs...)
		}
		if fits := last == nil; fits != c.fits {
			t.Errorf("σ = %g: %d rounds fit the budget: %v (%v), want %v", c.sigma, rounds, fits, last, c.fits)
		}
	}
	if _, err := dphe.NoiseMultiplierFor(dphe.Privacy{Clip: 1, Select: &dphe.Selection{Epsilon: 50, Delta: 1e-5, Count: 20}}, dim, lanes, 50,
		dp.Budget{Epsilon: 1, Delta: 1e-5}); err == nil {
		t.Error("a selection that alone exceeds the budget was calibrated")
	}
}

// TestReleaseChargesFirst: Release charges the contribution's events
// before it releases, refuses past the budget with the ledger unchanged,
// and releases at most Count blocks of lanes coordinates, with noise of
// standard deviation σC there.
func TestReleaseChargesFirst(t *testing.T) {
	const dim, lanes = 4000, 8
	p := dphe.Privacy{Clip: 1, NoiseMultiplier: 2, Principal: "data", Source: dp.NewSeededSource([32]byte{3}),
		Select: &dphe.Selection{Epsilon: 0.5, Delta: 1e-5, Count: 100}}
	p.Ledger = releaseLedger(t, 100)
	update := make([]float64, dim)
	out, err := dphe.Release(p, update, lanes)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := dphe.ContributionEvents(p, dim, lanes)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Ledger.(*dp.Ledger).Events("data"); len(got) != len(evs) {
		t.Fatalf("the ledger holds %d events, want the contribution's %d", len(got), len(evs))
	}
	nz, ss := 0, 0.0
	for _, x := range out {
		if x != 0 {
			nz++
			ss += x * x
		}
	}
	if nz > 100*lanes || nz < 90*lanes {
		t.Fatalf("%d coordinates released, want about %d (100 blocks of %d)", nz, 100*lanes, lanes)
	}
	if sd := math.Sqrt(ss / float64(nz)); math.Abs(sd-2) > 0.15 {
		t.Errorf("noise standard deviation %g, want σC = 2 ± 0.15", sd)
	}
	p.Ledger = releaseLedger(t, 0.5)
	before, _ := p.Ledger.(*dp.Ledger).Events("data")
	if _, err := dphe.Release(p, update, lanes); !errors.Is(err, dp.ErrBudgetExceeded) {
		t.Fatalf("a release past the budget: %v", err)
	}
	if after, _ := p.Ledger.(*dp.Ledger).Events("data"); len(after) != len(before) {
		t.Error("a refused release changed the ledger")
	}
	update[0] = math.NaN()
	if _, err := dphe.Release(p, update, lanes); err == nil {
		t.Error("a non-finite update was released")
	}
}
