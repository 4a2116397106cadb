package training

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/train"
)

// LegacyLedgerPath is where Veil versions before the shared data-set
// ledgers kept a checkpoint's ledger. Such files are no longer read: a
// resumed checkpoint's spending must be in the data set's ledger.
func LegacyLedgerPath(checkpointPath string) string { return checkpointPath + ".ledger" }

// Ledger is the part of a data set's privacy ledger (dp.DataLedger in a
// dp.LedgerDir) a run charges: the data set, the unit, and the members the
// run trains on (people, or images under the example unit). Every method
// reads the ledger from disk, so charges of other commands on the same
// data set, made while this run goes on, count.
type Ledger struct {
	dir     *dp.LedgerDir
	set     dp.DataSet
	members []string
}

// OpenLedger opens the ledger of set in the ledger folder dir, for a run
// on members.
func OpenLedger(dir string, set dp.DataSet, members []string) (*Ledger, error) {
	if len(members) == 0 {
		return nil, errors.New("train: the run has no privacy units to charge")
	}
	d, err := dp.OpenLedgerDir(dir)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := set.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return &Ledger{dir: d, set: set, members: members}, nil
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.dir.Path(l.set) }

// read returns the ledger as it is on disk, ok false when there is none.
func (l *Ledger) read() (led *dp.DataLedger, ok bool, err error) {
	led, err = l.dir.Read(l.set)
	if errors.Is(err, dp.ErrNoLedger) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("train: privacy ledger: %w", err)
	}
	return led, true, nil
}

// Budget is the data set's budget; ok is false when it has no ledger yet.
func (l *Ledger) Budget() (b dp.Budget, ok bool, err error) {
	led, ok, err := l.read()
	if !ok || err != nil {
		return dp.Budget{}, false, err
	}
	b, ok = led.Budget()
	return b, ok, nil
}

// Spent is the worst ε of the run's members, at the budget's δ (zero
// when the data set has no ledger yet).
func (l *Ledger) Spent() (dp.MemberSpent, error) {
	led, ok, err := l.read()
	if !ok || err != nil {
		return dp.MemberSpent{}, err
	}
	return led.Spent(l.members)
}

// SetBudget sets the data set's budget when it has none, or changes it as
// dp.DataLedger.SetBudget allows (lowering; a raise after charges or
// another δ is refused: that needs veil privacy ledger reset).
func (l *Ledger) SetBudget(b dp.Budget) error {
	_, err := l.dir.Update(l.set, func(led *dp.DataLedger) error { return led.SetBudget(b) })
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// Would returns the worst ε of the run's members after ev, and whether
// that stays within the budget, without charging it.
func (l *Ledger) Would(ev dp.Event) (eps float64, within bool, err error) {
	led, ok, err := l.read()
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, errors.New("train: the data set has no privacy ledger yet")
	}
	within, s, err := led.CanCharge(dp.Charge{Members: l.members, Events: []dp.Event{ev}})
	if err != nil {
		return 0, false, fmt.Errorf("train: privacy ledger: %w", err)
	}
	return s.Epsilon, within, nil
}

// Charge composes ev for the run's members if no member goes past the
// budget, and saves the ledger, under the ledger folder's lock; a refused
// charge leaves the file as it was.
func (l *Ledger) Charge(label string, ev dp.Event) (dp.MemberSpent, error) {
	var s dp.MemberSpent
	_, err := l.dir.Update(l.set, func(led *dp.DataLedger) error {
		var err error
		s, err = led.Charge(dp.Charge{Label: label, Members: l.members, Events: []dp.Event{ev}})
		return err
	})
	if err != nil {
		return s, fmt.Errorf("train: privacy ledger %s: %w", l.Path(), err)
	}
	return s, nil
}

// checkLegacy refuses to go on when a ledger in the old format sits beside
// the checkpoint a run resumes: its charges are not in the data set's
// ledger.
func checkLegacy(ckpt string) error {
	p := LegacyLedgerPath(ckpt)
	if _, err := os.Stat(p); err == nil {
		return fmt.Errorf("train: %s is a privacy ledger in the per-checkpoint format of older Veil versions, which is no longer read (ledgers are kept per data set in the ledger folder); its charges are not in the data set's ledger, so %s cannot be resumed: train a new run", p, ckpt)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// CheckCovers refuses a ledger that does not account for what the
// checkpoint's weights have spent: none, another δ, or less ε for the
// run's members than the weights' own accounting (a ledger reset, or one
// from another ledger folder).
func (l *Ledger) CheckCovers(p train.Privacy, ckpt string) error {
	b, ok, err := l.Budget()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("train: checkpoint %s has spent ε = %.4g in %d DP-SGD steps, but data set %s has no privacy ledger at %s: without it the budget cannot be enforced (another ledger folder?)", ckpt, p.Epsilon, p.Steps, l.set, l.Path())
	}
	if p.Delta != b.Delta {
		return fmt.Errorf("train: the privacy ledger %s is kept at δ = %g, the checkpoint %s at δ = %g: they belong to different runs", l.Path(), b.Delta, ckpt, p.Delta)
	}
	s, err := l.Spent()
	if err != nil {
		return err
	}
	// The ledger may hold more (other runs, or a charged epoch that
	// crashed before its checkpoint), never less; a relative tolerance
	// absorbs rounding.
	if s.Epsilon < p.Epsilon*(1-1e-9) {
		return fmt.Errorf("train: the privacy ledger %s records ε = %.4g for the people of this run, less than the ε = %.4g the checkpoint %s has spent: the ledger does not account for these weights (reset, or another ledger folder)", l.Path(), s.Epsilon, p.Epsilon, ckpt)
	}
	return nil
}
