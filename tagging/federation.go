package tagging

// A library in a federation (issue 22 §1): the privacy ledger of the
// people in the library, and the owner's record of the federation it
// joined, both inside the encrypted library.
//
// The federation table holds two sealed rows: the ledger (row 1, a
// dp.DataLedger in its file encoding) and the membership record (row 2,
// bytes the caller defines). Each is sealed like every field, bound to its
// table, column and row. The ledger's own MAC and its members'
// fingerprints are keyed by a constant (ledgerMACKey): the seal under the
// library's key is what authenticates it and keeps it private, so a key
// rotation only re-seals the row (resealFederation). A charge is one
// transaction: the ledger is read, changed and written back, or left as
// it was (a crash, a refusal).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/dp"
)

// Rows of the federation table.
const (
	fedRowLedger     = 1
	fedRowMembership = 2
)

// ledgerMACKey keys the library ledger's fingerprints and MAC (see above:
// the seal authenticates it).
var ledgerMACKey = func() []byte { s := sha256.Sum256([]byte("veil/tagging/v3 library ledger")); return s[:] }()

// migrate8 adds the federation table (the library's privacy ledger and
// its membership record, sealed) and refreshes the integrity record's
// schema digest, in the migration's one transaction.
func migrate8(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	if err := execAll(tx, `CREATE TABLE federation (
		id INTEGER PRIMARY KEY,
		record BLOB NOT NULL)`); err != nil {
		return err
	}
	return resealSchema(ctx, tx, k)
}

// resealFederation re-seals the federation table's rows from oldK to newK
// in tx (RotateKey's last transaction, like resealModels).
func resealFederation(ctx context.Context, tx *sql.Tx, oldK, newK *subKeys) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'federation'`).Scan(&n); err != nil || n == 0 {
		return err // a library from before schema 8 has none
	}
	rs, err := readIDBlobs(ctx, tx, `SELECT id, record FROM federation ORDER BY id`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		aad := fieldAAD("federation", "record", r.id)
		plain, err := openWith(oldK.seal, r.sealed, aad)
		if err != nil {
			return fmt.Errorf("federation %d: %w", r.id, ErrTampered)
		}
		sealed, err := sealWith(newK.seal, plain, aad)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE federation SET record = ? WHERE id = ?`, sealed, r.id); err != nil {
			return err
		}
	}
	return nil
}

// fedRecord reads and unseals a row of the federation table (nil, nil
// when there is none).
func (l *Library) fedRecord(ctx context.Context, q rowQueryer, row int64) ([]byte, error) {
	var sealed []byte
	err := q.QueryRowContext(ctx, `SELECT record FROM federation WHERE id = ?`, row).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l.Unseal("federation", "record", row, sealed)
}

// setFedRecord seals and writes a row of the federation table in tx.
func (l *Library) setFedRecord(ctx context.Context, tx *sql.Tx, row int64, plain []byte) error {
	sealed, err := l.Seal("federation", "record", row, plain)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO federation (id, record) VALUES (?, ?)
		ON CONFLICT(id) DO UPDATE SET record = excluded.record`, row, sealed)
	return err
}

// Membership returns the owner's record of the federation the library
// joined (nil when it has none).
func (l *Library) Membership(ctx context.Context) ([]byte, error) {
	b, err := l.fedRecord(ctx, l.db, fedRowMembership)
	if err != nil {
		return nil, fmt.Errorf("tagging: the federation record: %w", err)
	}
	return b, nil
}

// SetMembership replaces the record of the federation the library joined
// (nil or empty deletes it).
func (l *Library) SetMembership(ctx context.Context, record []byte) error {
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if len(record) == 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM federation WHERE id = ?`, fedRowMembership)
			return err
		}
		return l.setFedRecord(ctx, tx, fedRowMembership, record)
	})
	if err != nil {
		return fmt.Errorf("tagging: saving the federation record: %w", err)
	}
	return nil
}

// Ledger is the privacy ledger of the library's people, kept inside the
// library (a dp.DataLedgerStore for one data set: a federated client
// charges it before it touches the people's faces).
func (l *Library) Ledger() dp.DataLedgerStore { return libraryLedger{l} }

type libraryLedger struct{ l *Library }

func (s libraryLedger) Path(dp.DataSet) string { return "the ledger inside the library " + s.l.dir }

// read returns the stored ledger of set (nil when there is none) and its
// encoding.
func (s libraryLedger) read(ctx context.Context, q rowQueryer, set dp.DataSet) (*dp.DataLedger, []byte, error) {
	b, err := s.l.fedRecord(ctx, q, fedRowLedger)
	if err != nil || b == nil {
		return nil, nil, err
	}
	led, err := dp.UnmarshalDataLedger(b, ledgerMACKey, set)
	if err != nil {
		return nil, nil, err
	}
	return led, b, nil
}

func (s libraryLedger) Read(set dp.DataSet) (*dp.DataLedger, error) {
	led, _, err := s.read(context.Background(), s.l.db, set)
	if err != nil {
		return nil, fmt.Errorf("tagging: the library's ledger: %w", err)
	}
	if led == nil {
		return nil, fmt.Errorf("tagging: %s in %s: %w", set, s.Path(set), dp.ErrNoLedger)
	}
	return led, nil
}

func (s libraryLedger) Update(set dp.DataSet, fn func(*dp.DataLedger) error) (*dp.DataLedger, error) {
	ctx := context.Background()
	var out *dp.DataLedger
	err := s.l.inTx(ctx, func(tx *sql.Tx) error {
		led, old, err := s.read(ctx, tx, set)
		if err != nil {
			return err
		}
		if led == nil {
			if led, err = dp.NewDataLedger(set, ledgerMACKey); err != nil {
				return err
			}
		}
		if err := fn(led); err != nil {
			return err
		}
		b, err := led.MarshalBinary()
		if err != nil {
			return err
		}
		out = led
		if bytes.Equal(b, old) {
			return nil
		}
		return s.l.setFedRecord(ctx, tx, fedRowLedger, b)
	})
	if err != nil {
		return nil, fmt.Errorf("tagging: the library's ledger: %w", err)
	}
	return out, nil
}
