package training

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

// LedgerPath is the privacy ledger kept beside a checkpoint.
func LedgerPath(checkpointPath string) string { return checkpointPath + ".ledger" }

// maxLedgerBytes bounds what is read of a ledger file.
const maxLedgerBytes = 64 << 20

// Ledger is a dp.Ledger persisted in a file: the privacy budget of one
// principal (the training data) and every DP-SGD charge against it. It
// accounts for the weights of the checkpoint it sits beside, across
// resumed runs. Every charge is written to disk (atomically and durably)
// before the data it pays for are touched, so a crash can lose a step but
// never a charge.
type Ledger struct {
	path      string
	principal string
	l         *dp.Ledger
}

// OpenLedger reads the ledger at path; ok is false when there is none.
func OpenLedger(path, principal string) (l *Ledger, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("train: privacy ledger: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLedgerBytes+1))
	if err != nil {
		return nil, false, fmt.Errorf("train: privacy ledger %s: %w", path, err)
	}
	if len(b) > maxLedgerBytes {
		return nil, false, fmt.Errorf("train: privacy ledger %s is over %d bytes", path, maxLedgerBytes)
	}
	d, err := dp.UnmarshalLedger(b)
	if err != nil {
		return nil, false, fmt.Errorf("train: privacy ledger %s: %w", path, err)
	}
	if _, err := d.Budget(principal); err != nil {
		return nil, false, fmt.Errorf("train: privacy ledger %s has no account for the %s data (it belongs to another run)", path, principal)
	}
	return &Ledger{path: path, principal: principal, l: d}, true, nil
}

// NewLedger starts a ledger with the given budget (not yet saved).
func NewLedger(path, principal string, budget dp.Budget) (*Ledger, error) {
	d, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := d.SetBudget(principal, budget); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return &Ledger{path: path, principal: principal, l: d}, nil
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.path }

// Budget is the principal's budget.
func (l *Ledger) Budget() dp.Budget {
	b, _ := l.l.Budget(l.principal) // the principal exists by construction
	return b
}

// Spent is what has been charged so far, at the budget's δ.
func (l *Ledger) Spent() (dp.Spent, error) { return l.l.Spent(l.principal) }

// SetBudget changes the budget's ε; one below what is already spent is
// refused (dp.Ledger.SetBudget).
func (l *Ledger) SetBudget(eps float64) error {
	b := l.Budget()
	if eps == b.Epsilon {
		return nil
	}
	b.Epsilon = eps
	if err := l.l.SetBudget(l.principal, b); err != nil {
		return fmt.Errorf("train: privacy ledger %s: %w", l.path, err)
	}
	return nil
}

// Would returns the ε the ledger would have spent after ev, and whether
// that stays within the budget, without charging it.
func (l *Ledger) Would(ev dp.Event) (eps float64, within bool, err error) {
	trial, err := l.clone()
	if err != nil {
		return 0, false, fmt.Errorf("train: privacy ledger: %w", err)
	}
	s, err := trial.Charge(l.principal, ev)
	if errors.Is(err, dp.ErrBudgetExceeded) {
		return s.Epsilon, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("train: privacy ledger: %w", err)
	}
	return s.Epsilon, true, nil
}

// clone copies the dp.Ledger through its serialised form (its only public
// copy).
func (l *Ledger) clone() (*dp.Ledger, error) {
	b, err := l.l.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return dp.UnmarshalLedger(b)
}

// Charge composes ev into the account if it stays within the budget and
// saves the ledger; on refusal or a failed save the file and the ledger
// are as they were.
func (l *Ledger) Charge(ev dp.Event) (dp.Spent, error) {
	before, err := l.clone()
	if err != nil {
		return dp.Spent{}, fmt.Errorf("train: privacy ledger: %w", err)
	}
	s, err := l.l.Charge(l.principal, ev)
	if err != nil {
		return s, err
	}
	if err := l.Save(); err != nil {
		l.l = before
		return dp.Spent{}, err
	}
	return s, nil
}

// Save writes the ledger atomically and durably.
func (l *Ledger) Save() error {
	b, err := l.l.MarshalJSON()
	if err != nil {
		return fmt.Errorf("train: privacy ledger: %w", err)
	}
	err = checkpoint.WriteFileAtomic(l.path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("train: saving the privacy ledger %s: %w", l.path, err)
	}
	return nil
}

// CheckCovers refuses a ledger that does not account for what the
// checkpoint's weights have spent: another δ, or less ε than the weights'
// own accounting (a ledger from another run, or one rolled back).
func (l *Ledger) CheckCovers(p train.Privacy, ckpt string) error {
	b := l.Budget()
	if p.Delta != b.Delta {
		return fmt.Errorf("train: the privacy ledger %s is kept at δ = %g, the checkpoint %s at δ = %g: they belong to different runs", l.path, b.Delta, ckpt, p.Delta)
	}
	s, err := l.Spent()
	if err != nil {
		return fmt.Errorf("train: privacy ledger %s: %w", l.path, err)
	}
	// The ledger may hold more (a charged epoch that crashed before its
	// checkpoint), never less; a relative tolerance absorbs rounding.
	if s.Epsilon < p.Epsilon*(1-1e-9) {
		return fmt.Errorf("train: the privacy ledger %s records ε = %.4g, less than the ε = %.4g the checkpoint %s has spent: the ledger does not belong to these weights (or was rolled back)", l.path, s.Epsilon, p.Epsilon, ckpt)
	}
	return nil
}
