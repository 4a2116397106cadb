package tagging

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"math/bits"
	"strings"
)

// The integrity of the plaintext structure (issue 19 item 7.2).
//
// SQLite needs some columns in the clear: which face is in which photo and
// belongs to which person, boxes, rejections, clusters, flags. Each row of
// the tables below carries mac = HMAC-SHA256 under the row-mac sub-key of
// "veil/tagging/v2 row|", the table's name and the row's authenticated
// columns (its key columns among them), each value typed and
// length-prefixed. A row edited outside Veil, or a MAC moved to another
// row, no longer matches.
//
// Deleting or adding a whole row, or putting back an older version of one
// (with its then valid MAC), is caught by the table sums: for each table
// the library keeps the number of rows and the sum modulo 2^256 of
// HMAC-SHA256 under another sub-key ("table-sum") of each row's MAC, sealed
// in meta "integrity" together with a digest of the schema (so a trigger or
// table added outside Veil is refused too). The row MACs are in the file,
// but their contributions to the sums are not, so an adversary without the
// key can neither recompute a sum nor find another set of rows with the
// same sum.
//
// Every write goes through (*Library).inTx, which, before committing,
// re-MACs the rows the transaction touched and updates the sums. Triggers
// (installed by migrate5, part of the authenticated schema) record each
// touched row, with its MAC before the change, in integrity_dirty; that
// table is empty between transactions. Open verifies everything (every
// row's MAC, the sums and counts, the schema, an empty integrity_dirty)
// and refuses the library with ErrModified on the first mismatch; the
// reads that suggestions depend on (Faces, Rejections, the clusters)
// check each row's MAC again as they read it.
//
// What this does not catch: replacing the whole library with an older copy
// of itself (there is nothing outside the file to compare with), and a
// sealed field put back from an older copy of the same row and column (the
// seal binds it to its row, not to a version).

// ErrModified: the library's authenticated rows do not match their MACs
// or the table sums: it was changed outside Veil.
var ErrModified = errors.New("the library was changed outside veil (its authenticated data does not match): refusing to use it; restore it from a backup")

// authTable is a table whose plaintext columns are authenticated.
type authTable struct {
	name string
	// cols are the columns each row's MAC covers: every column but the
	// sealed ones (which their seal authenticates) and mac itself.
	cols []string
}

// authTables are the authenticated tables, in the order of the sums in
// the sealed state. Read only. A migration that adds a column to one of
// these tables must add it here, recreate the table's update trigger and
// re-MAC the table (see migrate5).
var authTables = []authTable{
	{"photos", []string{"id", "path", "content_mac", "size", "taken", "width", "height", "added_at", "missing", "mtime", "inode"}},
	{"faces", []string{"id", "photo_id", "x", "y", "w", "h", "score", "fit", "source", "person_id", "assigned_by", "removed"}},
	{"people", []string{"id", "name_mac", "hidden", "cover_face"}},
	{"rejections", []string{"face_id", "person_id"}},
	{"clusters", []string{"face_id", "cluster"}},
	{"metric", []string{"id", "names", "trained_at"}},
	{"scan_errors", []string{"path", "error", "at"}},
}

// authTableIndex returns the index in authTables of the named table.
func authTableIndex(name string) (int, bool) {
	for i, t := range authTables {
		if t.name == name {
			return i, true
		}
	}
	return 0, false
}

const metaIntegrity = "integrity"

// integritySchemaVersion is the schema version that introduced the row
// MACs (migrate5).
const integritySchemaVersion = 5

// migrate5 adds a mac column to every authenticated table, the
// integrity_dirty table and its triggers, MACs every row as it is (a
// library made before had nothing to check its rows against) and stores
// the sealed sums.
func migrate5(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	stmts := []string{`CREATE TABLE integrity_dirty (
		tbl TEXT NOT NULL,
		rid INTEGER NOT NULL,
		old_mac BLOB NULL,
		PRIMARY KEY (tbl, rid))`}
	for _, t := range authTables {
		stmts = append(stmts, `ALTER TABLE `+t.name+` ADD COLUMN mac BLOB NULL`)
		stmts = append(stmts, authTriggers(t)...)
	}
	// The statement that reassigned a face's cluster was INSERT OR
	// REPLACE; recursive_triggers (openDB) makes its implied delete fire
	// the trigger too.
	if err := execAll(tx, stmts...); err != nil {
		return err
	}
	var st integrityState
	for i, t := range authTables {
		if err := forEachRow(ctx, tx, t, false, func(rid int64, vals []any, _ []byte) error {
			mac := k.rowMACOf(nil, t.name, vals)
			if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET mac = ? WHERE rowid = ?`, mac, rid); err != nil {
				return err
			}
			st.add(i, k.setValue(nil, mac))
			return nil
		}); err != nil {
			return err
		}
	}
	// The metric setting moves into the sealed state (it decides whether
	// suggestions use the learned metric), and the rotation seed is kept
	// there as it was derived, so that a new data key keeps it.
	switch b, err := getMeta(ctx, tx, metaUseMetric); {
	case errors.Is(err, errNoMeta):
	case err != nil:
		return err
	case string(b) == "1":
		st.useMetric = 2
	default:
		st.useMetric = 1
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = ?`, metaUseMetric); err != nil {
		return err
	}
	st.seed = k.rotation
	var err error
	if st.schema, err = schemaDigest(ctx, tx); err != nil {
		return err
	}
	return writeIntegrityState(ctx, tx, k, &st)
}

// authTriggers are the triggers that record in integrity_dirty each row of
// t an insert, an update of an authenticated column or a delete touches,
// with its MAC before the first change of the transaction.
func authTriggers(t authTable) []string {
	rec := func(row, mac string) string {
		return `INSERT OR IGNORE INTO integrity_dirty (tbl, rid, old_mac) VALUES ('` + t.name + `', ` + row + `, ` + mac + `)`
	}
	return []string{
		`CREATE TRIGGER veil_` + t.name + `_insert AFTER INSERT ON ` + t.name + ` BEGIN ` + rec("NEW.rowid", "NULL") + `; END`,
		`CREATE TRIGGER veil_` + t.name + `_update AFTER UPDATE OF ` + strings.Join(t.cols, ", ") + ` ON ` + t.name +
			` BEGIN ` + rec("OLD.rowid", "OLD.mac") + `; END`,
		`CREATE TRIGGER veil_` + t.name + `_delete AFTER DELETE ON ` + t.name + ` BEGIN ` + rec("OLD.rowid", "OLD.mac") + `; END`,
	}
}

// rowQuerier is what both *sql.DB and *sql.Tx offer for reading rows.
type rowQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// forEachRow calls f with the rowid, the authenticated values and (when
// withMAC) the stored MAC of every row of t, in rowid order.
func forEachRow(ctx context.Context, q rowQuerier, t authTable, withMAC bool, f func(rid int64, vals []any, mac []byte) error) error {
	cols := "rowid, " + strings.Join(t.cols, ", ")
	if withMAC {
		cols += ", mac"
	}
	rows, err := q.QueryContext(ctx, `SELECT `+cols+` FROM `+t.name+` ORDER BY rowid`)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]any, len(t.cols))
	dest := make([]any, 0, len(t.cols)+2)
	var rid int64
	var mac []byte
	dest = append(dest, &rid)
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if withMAC {
		dest = append(dest, &mac)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := f(rid, vals, mac); err != nil {
			return err
		}
	}
	return rows.Err()
}

// rowMACOf appends to dst HMAC-SHA256 under the row-mac key of the table's
// name and the row's authenticated values.
func (k *subKeys) rowMACOf(dst []byte, table string, vals []any) []byte {
	m := hmac.New(sha256.New, k.rowMAC)
	writeRow(m, table, vals)
	return m.Sum(dst)
}

// writeRow writes the MAC's input: a domain prefix, the table's name and
// each value with its type and, for text and blobs, its length.
func writeRow(h hash.Hash, table string, vals []any) {
	var stack [256]byte
	h.Write(appendRow(stack[:0], table, vals))
}

// appendRow appends the MAC's input to b (see writeRow).
func appendRow(b []byte, table string, vals []any) []byte {
	b = append(b, "veil/tagging/v2 row|"...)
	b = append(b, table...)
	b = append(b, 0)
	for _, v := range vals {
		switch v := v.(type) {
		case nil:
			b = append(b, 0)
		case int64:
			b = binary.LittleEndian.AppendUint64(append(b, 1), uint64(v))
		case float64:
			b = binary.LittleEndian.AppendUint64(append(b, 2), math.Float64bits(v))
		case string:
			b = binary.LittleEndian.AppendUint64(append(b, 3), uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = binary.LittleEndian.AppendUint64(append(b, 4), uint64(len(v)))
			b = append(b, v...)
		case bool:
			// The driver gives integers as int64; a bool is written as one.
			var n uint64
			if v {
				n = 1
			}
			b = binary.LittleEndian.AppendUint64(append(b, 1), n)
		default:
			// Other types do not come out of these columns; tag them apart
			// so they never collide with the kinds above.
			b = fmt.Appendf(append(b, 5), "%T:%v", v, v)
		}
	}
	return b
}

// setValue is a row's contribution to its table's sum: HMAC-SHA256 of its
// MAC under the table-sum key.
func (k *subKeys) setValue(dst, mac []byte) []byte {
	m := hmac.New(sha256.New, k.setMAC)
	m.Write(mac)
	return m.Sum(dst)
}

// integrityState is the sealed summary of the authenticated tables: for
// each, its number of rows and the sum of the rows' contributions, and
// the digest of the schema.
//
// It also holds what the library keeps about itself that is not a row:
// the metric setting (SetUseMetric) and the seed of the library's secret
// metric rotation, which must survive a change of the data key (the
// learned metric is stored in the rotated space).
type integrityState struct {
	counts [7]int64
	sums   [7][4]uint64
	schema [32]byte
	// useMetric is 0 when never set, 1 for off, 2 for on.
	useMetric byte
	seed      [32]byte
}

const integrityStateVersion = 1

// add adds a 32-byte contribution to table i's sum and counts the row.
func (s *integrityState) add(i int, v []byte) {
	var c uint64
	for j := range 4 {
		s.sums[i][j], c = bits.Add64(s.sums[i][j], binary.LittleEndian.Uint64(v[8*j:]), c)
	}
	s.counts[i]++
}

// sub removes a row's contribution from table i's sum.
func (s *integrityState) sub(i int, v []byte) {
	var c uint64
	for j := range 4 {
		s.sums[i][j], c = bits.Sub64(s.sums[i][j], binary.LittleEndian.Uint64(v[8*j:]), c)
	}
	s.counts[i]--
}

func (s *integrityState) encode() []byte {
	b := []byte{integrityStateVersion}
	for i := range s.counts {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.counts[i]))
		for _, w := range s.sums[i] {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
	}
	b = append(b, s.schema[:]...)
	b = append(b, s.useMetric)
	return append(b, s.seed[:]...)
}

func decodeIntegrityState(b []byte) (integrityState, error) {
	var s integrityState
	if len(b) != 1+len(s.counts)*40+32+1+32 || b[0] != integrityStateVersion || b[len(b)-33] > 2 {
		return s, errors.New("malformed integrity state")
	}
	b = b[1:]
	for i := range s.counts {
		s.counts[i] = int64(binary.LittleEndian.Uint64(b))
		for j := range 4 {
			s.sums[i][j] = binary.LittleEndian.Uint64(b[8+8*j:])
		}
		b = b[40:]
	}
	copy(s.schema[:], b)
	s.useMetric = b[32]
	copy(s.seed[:], b[33:])
	return s, nil
}

var integrityAAD = fieldAAD("meta", metaIntegrity, 0)

func readIntegrityState(ctx context.Context, q querier, k *subKeys) (integrityState, error) {
	sealed, err := getMeta(ctx, q, metaIntegrity)
	if errors.Is(err, errNoMeta) {
		return integrityState{}, fmt.Errorf("%w: its integrity record is missing", ErrModified)
	}
	if err != nil {
		return integrityState{}, err
	}
	plain, err := openWith(k.seal, sealed, integrityAAD)
	if err != nil {
		return integrityState{}, fmt.Errorf("%w: its integrity record fails authentication", ErrModified)
	}
	st, err := decodeIntegrityState(plain)
	if err != nil {
		return integrityState{}, fmt.Errorf("%w: %v", ErrModified, err)
	}
	return st, nil
}

func writeIntegrityState(ctx context.Context, e execer, k *subKeys, st *integrityState) error {
	sealed, err := sealWith(k.seal, st.encode(), integrityAAD)
	if err != nil {
		return err
	}
	return setMeta(ctx, e, metaIntegrity, sealed)
}

// schemaDigest is SHA-256 of the schema: every table, index, trigger and
// view with its SQL.
func schemaDigest(ctx context.Context, q rowQuerier) ([32]byte, error) {
	var out [32]byte
	rows, err := q.QueryContext(ctx, `SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	h := sha256.New()
	for rows.Next() {
		var v [4]string
		if err := rows.Scan(&v[0], &v[1], &v[2], &v[3]); err != nil {
			return out, err
		}
		for _, s := range v {
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	h.Sum(out[:0])
	return out, nil
}

// sealDirty re-MACs the rows the transaction touched (listed by the
// triggers in integrity_dirty), updates the sealed sums and empties
// integrity_dirty. inTx calls it before every commit.
func (l *Library) sealDirty(ctx context.Context, tx *sql.Tx) error {
	type dirty struct {
		table  int
		rid    int64
		oldMAC []byte
	}
	rows, err := tx.QueryContext(ctx, `SELECT tbl, rid, old_mac FROM integrity_dirty`)
	if err != nil {
		return err
	}
	var ds []dirty
	for rows.Next() {
		var name string
		var d dirty
		if err := rows.Scan(&name, &d.rid, &d.oldMAC); err != nil {
			rows.Close()
			return err
		}
		var ok bool
		if d.table, ok = authTableIndex(name); !ok {
			rows.Close()
			return fmt.Errorf("%w: integrity_dirty names the table %q", ErrModified, name)
		}
		ds = append(ds, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	// A program that unlocked the library before a key rotation began
	// must not write rows under the old key into a half-converted file.
	if pending, err := rotationPending(ctx, tx); err != nil || pending {
		if err == nil {
			err = ErrRotationPending
		}
		return err
	}
	st, err := readIntegrityState(ctx, tx, &l.keys)
	if err != nil {
		return err
	}
	var buf []byte
	for _, d := range ds {
		t := authTables[d.table]
		if d.oldMAC != nil {
			st.sub(d.table, l.keys.setValue(buf[:0], d.oldMAC))
		}
		err := forEachRowID(ctx, tx, t, d.rid, func(vals []any) error {
			mac := l.keys.rowMACOf(nil, t.name, vals)
			if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET mac = ? WHERE rowid = ?`, mac, d.rid); err != nil {
				return err
			}
			st.add(d.table, l.keys.setValue(buf[:0], mac))
			return nil
		})
		if err != nil {
			return fmt.Errorf("authenticating %s row %d: %w", t.name, d.rid, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM integrity_dirty`); err != nil {
		return err
	}
	return writeIntegrityState(ctx, tx, &l.keys, &st)
}

// forEachRowID calls f with the authenticated values of row rid of t, if
// it exists.
func forEachRowID(ctx context.Context, tx *sql.Tx, t authTable, rid int64, f func(vals []any) error) error {
	vals := make([]any, len(t.cols))
	dest := make([]any, len(t.cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	err := tx.QueryRowContext(ctx, `SELECT `+strings.Join(t.cols, ", ")+` FROM `+t.name+` WHERE rowid = ?`, rid).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return f(vals)
}

// verifyIntegrity checks the whole library: integrity_dirty is empty, the
// schema is the one Veil made, every row of every authenticated table
// matches its MAC, and the tables' counts and sums match the sealed state.
// The first mismatch gives ErrModified, naming the table and row.
func verifyIntegrity(ctx context.Context, db *sql.DB, k *subKeys) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM integrity_dirty`).Scan(&n); err != nil {
		return fmt.Errorf("checking the library: %w", err)
	}
	if n != 0 {
		return fmt.Errorf("%w: %d rows were written by another program", ErrModified, n)
	}
	st, err := readIntegrityState(ctx, db, k)
	if err != nil {
		return err
	}
	schema, err := schemaDigest(ctx, db)
	if err != nil {
		return fmt.Errorf("checking the library: %w", err)
	}
	if schema != st.schema {
		return fmt.Errorf("%w: its schema (tables, indexes or triggers) was changed", ErrModified)
	}
	rowMAC := hmac.New(sha256.New, k.rowMAC)
	setMAC := hmac.New(sha256.New, k.setMAC)
	var got integrityState
	var mac, val [sha256.Size]byte
	for i, t := range authTables {
		err := forEachRow(ctx, db, t, true, func(rid int64, vals []any, stored []byte) error {
			rowMAC.Reset()
			writeRow(rowMAC, t.name, vals)
			rowMAC.Sum(mac[:0])
			if !hmac.Equal(mac[:], stored) {
				return fmt.Errorf("%w: %s row %d does not match its MAC", ErrModified, t.name, rid)
			}
			setMAC.Reset()
			setMAC.Write(stored)
			got.add(i, setMAC.Sum(val[:0]))
			return nil
		})
		if err != nil {
			if errors.Is(err, ErrModified) {
				return err
			}
			return fmt.Errorf("checking the library: %w", err)
		}
		if got.counts[i] != st.counts[i] {
			return fmt.Errorf("%w: %s has %d rows, %d were written by veil", ErrModified, t.name, got.counts[i], st.counts[i])
		}
		if got.sums[i] != st.sums[i] {
			return fmt.Errorf("%w: rows of %s were replaced or removed", ErrModified, t.name)
		}
	}
	return nil
}

// checkRowMAC verifies one row read for use (Faces, Rejections, the
// clusters): vals are its authenticated values in authTables' order.
func (l *Library) checkRowMAC(table string, vals []any, stored []byte) error {
	if !hmac.Equal(l.keys.rowMACOf(nil, table, vals), stored) {
		return fmt.Errorf("%w: a row of %s does not match its MAC", ErrModified, table)
	}
	return nil
}

// macColumn is the column to select for table's MAC: NULL in a library
// older than the row MACs (tests make them).
func (l *Library) macColumn(table string) string {
	if !l.authenticated {
		return "NULL"
	}
	return table + ".mac"
}

// nullable is v, or nil (SQL NULL) when not valid: a nullable column's
// value as the driver gives it.
func nullable[T any](v T, valid bool) any {
	if !valid {
		return nil
	}
	return v
}

func addWithCarry(a, b, c uint64) (uint64, uint64) { return bits.Add64(a, b, c) }
