package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/veil-privacy/veil/dp"
)

// legacyLedgerFile is where clients of older Veil versions kept their
// ledger, in Options.Dir.
const legacyLedgerFile = "ledger.json"

// openLedger opens the ledger of the client's data set (in o.Ledger, else
// in o.LedgerDir) and
// sets or checks its budget (dp.DataLedger.SetBudget: the first budget is
// o.Policy.Budget; afterwards it may be lowered, but a raise after charges or
// another δ is refused).
func openLedger(o *Options) (dp.DataLedgerStore, dp.DataSet, error) {
	set := dp.DataSet{Name: o.DataSet, Unit: o.Policy.Unit}
	if err := set.Validate(); err != nil {
		return nil, set, fmt.Errorf("client: %w", err)
	}
	if o.Ledger != nil {
		if _, err := o.Ledger.Update(set, func(l *dp.DataLedger) error { return l.SetBudget(o.Policy.Budget) }); err != nil {
			return nil, set, fmt.Errorf("client: %w", err)
		}
		return o.Ledger, set, nil
	}
	legacy := filepath.Join(o.Dir, legacyLedgerFile)
	if _, err := os.Stat(legacy); err == nil {
		return nil, set, fmt.Errorf("client: %s is a ledger in the per-folder format of older Veil versions, which is no longer read: ledgers are kept per data set in the ledger folder (%s); its charges are not in the data set's ledger, so this client refuses to run from %s: use a new folder, after accounting for them",
			legacy, o.LedgerDir, o.Dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, set, fmt.Errorf("client: %w", err)
	}
	d, err := dp.OpenLedgerDir(o.LedgerDir)
	if err != nil {
		return nil, set, fmt.Errorf("client: %w", err)
	}
	if _, err := d.Update(set, func(l *dp.DataLedger) error { return l.SetBudget(o.Policy.Budget) }); err != nil {
		return nil, set, fmt.Errorf("client: %w", err)
	}
	return d, set, nil
}

// LedgerPath is the file of the client's ledger.
func (c *Client) LedgerPath() string { return c.ledger.Path(c.set) }

// Spent returns what the client's members have spent (the worst of them)
// at the budget's δ, by every command charging their data set.
func (c *Client) Spent() (dp.Spent, error) {
	l, err := c.ledger.Read(c.set)
	if err != nil {
		return dp.Spent{}, fmt.Errorf("client: %w", err)
	}
	s, err := l.Spent(c.o.Members)
	if err != nil {
		return dp.Spent{}, fmt.Errorf("client: %w", err)
	}
	return dp.Spent{Epsilon: s.Epsilon, RDPEpsilon: s.Epsilon, Delta: s.Delta}, nil
}

// canCharge reports whether ev can be charged for the client's members
// without taking one past the budget.
func (c *Client) canCharge(ev dp.Event) (bool, error) {
	l, err := c.ledger.Read(c.set)
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	ok, _, err := l.CanCharge(dp.Charge{Members: c.o.Members, Events: []dp.Event{ev}})
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	return ok, nil
}

// charge charges ev for the client's members and saves the ledger, under
// the ledger folder's lock.
func (c *Client) charge(label string, ev dp.Event) error {
	_, err := c.ledger.Update(c.set, func(l *dp.DataLedger) error {
		_, err := l.Charge(dp.Charge{Label: label, Members: c.o.Members, Events: []dp.Event{ev}})
		return err
	})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}
