package dp

import "fmt"

// DataLedgerStore keeps data-set ledgers: a LedgerDir (one file per data
// set), or a store inside another container, such as the ledger a tagging
// library keeps in its encrypted database. Read returns a set's ledger
// (ErrNoLedger, wrapped, when there is none); Update applies fn to it (an
// empty ledger without a budget when there is none) and saves the result
// atomically, leaving the stored ledger as it was if fn fails; Path says
// where the ledger is, for messages.
type DataLedgerStore interface {
	Read(set DataSet) (*DataLedger, error)
	Update(set DataSet, fn func(*DataLedger) error) (*DataLedger, error)
	Path(set DataSet) string
}

// LedgerDir is a DataLedgerStore.
var _ DataLedgerStore = (*LedgerDir)(nil)

// NewDataLedger returns an empty ledger of set, without a budget, whose
// members' fingerprints and encoding's MAC are keyed by key (at least 16
// bytes), for a DataLedgerStore other than a LedgerDir.
func NewDataLedger(set DataSet, key []byte) (*DataLedger, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	if len(key) < 16 {
		return nil, fmt.Errorf("dp: a ledger key needs at least 16 bytes, got %d", len(key))
	}
	c, err := NewCurveCache(nil, 0)
	if err != nil {
		return nil, err
	}
	return newDataLedger(set, append([]byte(nil), key...), c)
}

// MarshalBinary encodes the ledger in the format of a LedgerDir's files
// (MAC'd under the ledger's key). The ledger must have a budget.
func (l *DataLedger) MarshalBinary() ([]byte, error) {
	if _, ok := l.Budget(); !ok {
		return nil, fmt.Errorf("dp: the ledger of data set %s needs a budget", l.set)
	}
	return encodeDataLedger(l)
}

// UnmarshalDataLedger decodes a ledger of set written by MarshalBinary
// under key, refusing (ErrLedgerCorrupt) one whose MAC, data set or
// contents do not check.
func UnmarshalDataLedger(b, key []byte, set DataSet) (*DataLedger, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	if len(b) > ledgerMaxBytes {
		return nil, fmt.Errorf("dp: a ledger of over %d bytes: %w", ledgerMaxBytes, ErrLedgerCorrupt)
	}
	c, err := NewCurveCache(nil, 0)
	if err != nil {
		return nil, err
	}
	l, err := decodeDataLedger(b, append([]byte(nil), key...), set, c)
	if err != nil {
		return nil, fmt.Errorf("dp: %w", err)
	}
	return l, nil
}
