package dplc

import (
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/dp"
)

// Charge names the privacy ledger a release is charged to.
type Charge struct {
	// Ledgers is the privacy ledger folder (dp.OpenLedgerDir); required.
	Ledgers string
	// DataSet names the data set the centres come from; its ledger in the
	// identity unit is charged (required).
	DataSet string
	// Members names the person of each centre, one per centre (the
	// ledger keeps keyed fingerprints, not names); nil charges every
	// member of the data set, present and future.
	Members []string
	// Budget is set as the data set's budget before the charge when
	// SetBudget is true (dp.DataLedger.SetBudget: once anything is
	// charged, it can only be lowered).
	Budget    dp.Budget
	SetBudget bool
	// Label is the charge's label in the ledger's history (default "veil
	// privacy dplc").
	Label string
}

// Charged is the ledger's state after a release's charge.
type Charged struct {
	// File is the data set's ledger file.
	File    string
	DataSet string
	// SpentEpsilon is the largest ε any member of this release has spent,
	// at Budget.Delta, this release included.
	SpentEpsilon float64
	Budget       dp.Budget
}

// Release runs DPLC (Run) on centres and returns its result after
// charging its privacy cost to the data set's ledger: the charge is on
// disk, under the ledger folder's lock, before a single noisy value
// exists, and the run uses exactly the calibration charged. A charge over
// the budget refuses the release (dp.ErrBudgetExceeded, wrapped) and
// leaves the ledger as it was; so does any refusal of the input or
// parameters, which are all checked first. src supplies the noise (nil: a
// fresh crypto/rand-seeded source).
func Release(centres [][]float32, p Params, c Charge, src *dp.Source) (Result, Charged, error) {
	if err := p.Validate(); err != nil {
		return Result{}, Charged{}, err
	}
	if err := CheckCentres(centres); err != nil {
		return Result{}, Charged{}, err
	}
	if c.Members != nil && len(c.Members) != len(centres) {
		return Result{}, Charged{}, fmt.Errorf("dplc: %d members named for %d centres: one per centre", len(c.Members), len(centres))
	}
	cal, err := Calibrate(p, len(centres[0]))
	if err != nil {
		return Result{}, Charged{}, err
	}
	charged, err := c.charge(cal.Events)
	if err != nil {
		return Result{}, Charged{}, err
	}
	res, err := run(centres, p, cal, src)
	if err != nil {
		return Result{}, Charged{}, err
	}
	return res, charged, nil
}

// charge charges events to the ledger c names, setting the budget first
// if asked, and saves the ledger before returning, under the folder's
// lock. A charge over budget is refused and leaves the ledger as it was.
func (c Charge) charge(events []dp.Event) (Charged, error) {
	set := dp.DataSet{Name: c.DataSet, Unit: dp.UnitIdentity}
	if err := set.Validate(); err != nil {
		return Charged{}, fmt.Errorf("dplc: the data set: %w", err)
	}
	d, err := dp.OpenLedgerDir(c.Ledgers)
	if err != nil {
		return Charged{}, err
	}
	label := c.Label
	if label == "" {
		label = "veil privacy dplc"
	}
	var spent dp.MemberSpent
	l, err := d.Update(set, func(l *dp.DataLedger) error {
		if c.SetBudget {
			if err := l.SetBudget(c.Budget); err != nil {
				return fmt.Errorf("setting the budget of data set %q: %w", set.Name, err)
			}
		}
		b, ok := l.Budget()
		if !ok {
			return fmt.Errorf("data set %q has no budget in the ledger folder %s: set one with --budget-epsilon and --budget-delta", set.Name, c.Ledgers)
		}
		s, err := l.Charge(dp.Charge{Label: label, Members: c.Members, Events: events})
		if errors.Is(err, dp.ErrBudgetExceeded) {
			return fmt.Errorf("refusing to release: this run would bring a member of data set %q to ε = %s at δ = %g, over its budget ε = %g: %w",
				set.Name, dp.FormatEpsilon(s.Epsilon), b.Delta, b.Epsilon, dp.ErrBudgetExceeded)
		}
		spent = s
		return err
	})
	if err != nil {
		return Charged{}, err
	}
	b, _ := l.Budget()
	return Charged{File: d.Path(set), DataSet: set.Name, SpentEpsilon: spent.Epsilon, Budget: b}, nil
}

// CosineToExact is the cosine between the released centre and the
// noise-free normalised sum of its cap: a diagnostic computed from
// private data without noise, never to be released.
func (c Cluster) CosineToExact() float64 {
	var s float64
	for i := range c.Center {
		s += float64(c.Center[i]) * float64(c.Exact[i])
	}
	return s
}
